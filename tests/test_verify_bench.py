"""The summary and the text report of `dgr bench`, from a fixed result (no measurement here)."""

from __future__ import annotations

from dgr.commands import bench as bench_command
from dgr.verify import bench

RESULT = {
    "machine": {"date": "2026-11-30T00:00:00Z", "cpu": "test cpu", "cores": 2},
    "quick": False,
    "in_process": [
        {
            "shards": k,
            "prefill": [{"tokens": 64, "ratio": 0.99}, {"tokens": 512, "ratio": 0.98}],
            "decode": {"ratio": 0.975},
        }
        for k in (2, 3, 5)
    ],
    "workers": [
        {
            "shards": k,
            "prefill": [{"tokens": 64, "ratio": 0.9}],
            "decode": {
                "ratio": 0.88 if k == 5 else 0.95,
                "whole_step_ms": 7.5,
                "shard_step_ms": [8.0 / k] * k,
                "round_trip_ms": 0.02,
            },
        }
        for k in (2, 3, 5)
    ],
    "memory": [
        {
            "layers": [0, 30],
            "owned_fraction": 1.0,
            "model_bytes": 2**20,
            "kv_bytes": 2**20,
            "peak_rss": 2**21,
            "peak_rss_fraction": 1.0,
        }
    ],
    "codec": {
        "cpp": {"codec_gbps": 5.0, "memcpy_gbps": 8.0, "ratio_to_memcpy": 0.625},
        "python": {"codec_gbps": 2.0, "memcpy_gbps": 8.0, "ratio_to_memcpy": 0.25},
    },
    "build": {"noop_dgr_s": 0.2, "noop_ninja_s": 0.05},
}


def test_summary_takes_the_worst_ratio_and_checks_every_target() -> None:
    s = bench.summarize(RESULT)
    assert s["in_process_prefill_min_ratio"] == 0.98
    assert s["workers_decode_min_ratio"] == 0.88
    assert s["met"] == {
        "in_process_prefill": True,
        "in_process_decode": True,
        "workers_decode": False,
        "codec": True,
    }


def test_report_lists_every_measurement() -> None:
    text = bench_command.report_text({**RESULT, "summary": bench.summarize(RESULT)})
    assert "| 5 | 64: 0.990, 512: 0.980 | 0.975 | 64: 0.900 | 0.880 |" in text
    assert "codec: C++ 5.00 GB/s vs memcpy 8.00 (0.62x)" in text
    assert "workers_decode MISSED" in text
    assert "- 5: 7.50 | 1.60 + 1.60 + 1.60 + 1.60 + 1.60 | 0.020" in text
