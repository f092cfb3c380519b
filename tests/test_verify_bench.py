"""The bench result contract, its summary and the text report of `dgr bench`, from fixed results (no
measurement here)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from dgr.builds import buildtime
from dgr.commands import bench as bench_command
from dgr.contracts.bench import BenchResult
from dgr.errors import ConfigError

from tests.helpers import ROOT


def speed(ratio: float, tokens: int = 64, **extra: Any) -> dict[str, Any]:
    return {"tokens": tokens, "whole_tps": 100.0, "split_tps": 100.0 * ratio, "ratio": ratio, **extra}


def memory_row(begin: int, end: int, fraction: float) -> dict[str, Any]:
    return {
        "layers": [begin, end],
        "owned_layers": end - begin,
        "owned_fraction": fraction,
        "owned_tensor_bytes": 2**20,
        "model_bytes": 2**20,
        "model_fraction": fraction,
        "kv_bytes": 2**20,
        "peak_rss": 2**21,
        "kv_fraction": fraction,
        "peak_rss_fraction": fraction,
    }


def codec(gbps: float, ratio: float) -> dict[str, Any]:
    return {
        "bytes": 1179648,
        "reps": 20,
        "codec_gbps": gbps,
        "memcpy_gbps": 8.0,
        "ratio_to_memcpy": ratio,
        "zero_copy_decode": True,
    }


RESULT: dict[str, Any] = {
    "format": 1,
    "machine": {"date": "2026-11-30T00:00:00Z", "cpu": "test cpu", "cores": 2, "platform": "", "python": ""},
    "quick": False,
    "inputs_digest": "d" * 64,
    "model": {"file": "m.gguf", "n_layer": 30, "bytes": 2**27},
    "hop_bytes_per_token": 2304,
    "in_process": [
        {
            "prefill": [speed(0.99), speed(0.98, 512)],
            "decode": speed(0.975, same_tokens=True),
            "split": "0:15,15:30",
            "threads": 2,
            "reps": 9,
            "shards": k,
        }
        for k in (2, 3, 5)
    ],
    "workers": [
        {
            "prefill": [speed(0.9)],
            "decode": speed(
                0.88 if k == 5 else 0.95,
                same_tokens=True,
                whole_step_ms=7.5,
                shard_step_ms=[8.0 / k] * k,
                round_trip_ms=0.02,
            ),
            "shards": k,
        }
        for k in (2, 3, 5)
    ],
    "memory": [memory_row(0, 30, 1.0), memory_row(10, 20, 0.38)],
    "codec": {"cpp": codec(5.0, 0.625), "python": codec(2.0, 0.25)},
    "build": {"noop_dgr_s": 0.2, "noop_ninja_s": 0.05, "noop_ratio": 4.0},
}


def test_summary_takes_the_worst_ratio_and_checks_every_target() -> None:
    s = BenchResult.from_json(RESULT).summary()
    assert s["in_process_prefill_min_ratio"] == 0.98
    assert s["workers_decode_min_ratio"] == 0.88
    assert s["met"] == {
        "in_process_prefill": True,
        "in_process_decode": True,
        "workers_decode": False,
        "codec": True,
    }


def test_report_lists_every_measurement() -> None:
    text = bench_command.report_text(BenchResult.from_json(RESULT))
    assert "| 5 | 64: 0.990, 512: 0.980 | 0.975 | 64: 0.900 | 0.880 |" in text
    assert "codec: C++ 5.00 GB/s vs memcpy 8.00 (0.62x)" in text
    assert "workers_decode MISSED" in text
    assert "- 5: 7.50 | 1.60 + 1.60 + 1.60 + 1.60 + 1.60 | 0.020" in text
    assert "| [10, 20) | 0.38 | 1.0 MiB | 1.0 MiB | 2.0 MiB | 0.38 |" in text


def test_the_committed_bench_json_reads_back_to_the_same_document() -> None:
    """docs/bench/bench.json (a real run) is a BenchResult: the same keys, in the same order, and the
    summary it stored is the one derived from its measurements."""
    data = json.loads((ROOT / "docs" / "bench" / "bench.json").read_text())
    again = BenchResult.from_json(data).to_json()
    assert again == data
    assert list(again) == list(data)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("format",), 2, "format 2 is not 1"),
        (("workers", 0, "decode", "ratio"), "fast", "`ratio` is str"),
        (("memory", 0, "layers"), [0], "`layers` must be [begin, end]"),
        (("codec", "cpp", "zero_copy_decode"), 1, "`zero_copy_decode` is int"),
        (("build", "noop_dgr_s"), [1], "is not a number, a string or a flag"),
    ],
)
def test_a_malformed_result_is_refused_naming_the_field(
    path: tuple[Any, ...], value: Any, message: str
) -> None:
    data = json.loads(json.dumps(RESULT))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        BenchResult.from_json(data)


GEMMA: dict[str, Any] = {
    "model": {"file": "g.gguf", "n_layer": 18, "bytes": 2**28, "name": "gemma3"},
    "hop_bytes_per_token": 2560,
    "in_process": RESULT["in_process"],
    "workers": RESULT["workers"],
    "memory": [memory_row(0, 18, 1.0), memory_row(6, 12, 0.27)],
    "chart": "/tmp/memory-gemma3.png",
}


def with_models(**models: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(RESULT))
    data["model"]["name"] = "smollm2"
    data["models"] = json.loads(json.dumps(models))
    return data


def test_the_other_models_are_nested_by_name_and_read_back() -> None:
    data = with_models(gemma3=GEMMA)
    result = BenchResult.from_json(data)
    assert result.model.name == "smollm2" and [m.name for m in result.models] == ["gemma3"]
    assert result.models[0].memory[1].layers == (6, 12)
    again = result.to_json()
    assert again["models"] == data["models"] and again["model"] == data["model"]
    # the default model's keys stay where they were
    assert again["memory"] == RESULT["memory"] and again["hop_bytes_per_token"] == 2304


def test_report_has_the_tables_of_every_model() -> None:
    text = bench_command.report_text(BenchResult.from_json(with_models(gemma3=GEMMA)))
    assert "## gemma3: g.gguf, 18 layers" in text
    assert text.count("split cost (ratio = split tokens/s / whole tokens/s)") == 2
    assert "| [6, 12) | 0.27 | 1.0 MiB | 1.0 MiB | 2.0 MiB | 0.27 |" in text
    assert text.index("## gemma3") < text.index("codec: C++")


def test_a_malformed_model_entry_is_refused_naming_it() -> None:
    broken = {**GEMMA, "workers": "none"}
    with pytest.raises(ConfigError, match=r"bench result\.models\.gemma3: `workers` is str"):
        BenchResult.from_json(with_models(gemma3=broken))


def test_the_edit_benchmark_edits_a_line_the_series_adds() -> None:
    """`dgr bench`'s edited-patch rebuild changes one added comment line of a patch of the series: the
    line must still be there (else the measurement is skipped with a note)."""
    text = (ROOT / "patches" / buildtime.EDIT_PATCH).read_text()
    assert text.count(buildtime.EDIT_FROM + "\n") == 1
    assert buildtime.EDIT_TO.split("//")[0] == buildtime.EDIT_FROM.split("//")[0] != buildtime.EDIT_TO
    assert buildtime.EDIT_WARM.split("//")[0] == buildtime.EDIT_FROM.split("//")[0]
    assert len({buildtime.EDIT_FROM, buildtime.EDIT_WARM, buildtime.EDIT_TO}) == 3
