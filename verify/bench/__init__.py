"""What a layer split costs, measured side by side in one run (`dgr bench`, dgr/commands/bench.py):

- split: prefill (64 and 512 tokens) and decode tokens/s of the whole model vs 2, 3 and 5 ranges, (a) all
  ranges in one process (`layer-bench split`), (b) one worker process per range over pipes; ratios to whole;
- memory: model bytes, KV bytes and peak RSS per range vs its owned fraction, and a PNG chart;
- codec: bundle encode + decode GB/s vs memcpy of the same bytes (C++ worker codec and Python codec);
- build (dgr/buildtime.py, it drives `dgr build`): cold `dgr build`, no-op and a rebuild after editing one
  patch, each beside a plain cmake + ninja build of the same targets (skipped by --quick);
- fuzz (--fuzz): the worker's decoders under libFuzzer for at least 1,000,000 executions.

Every ratio is taken from measurements interleaved in the same run (whole, split, whole, split, ...), best of
the repetitions, so a noisy machine affects both sides alike. The JSON keys are documented in README.md.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
from pathlib import Path
from typing import Any

BENCH_FORMAT = 1
TARGETS = {"in_process_prefill": 0.97, "in_process_decode": 0.97, "workers_decode": 0.90, "codec": 0.5}


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    ip = result.get("in_process", [])
    wk = result.get("workers", [])
    cc = result.get("codec", {}).get("cpp", {})
    s: dict[str, Any] = {}
    if ip:
        s["in_process_prefill_min_ratio"] = min(p["ratio"] for r in ip for p in r["prefill"])
        s["in_process_decode_min_ratio"] = min(r["decode"]["ratio"] for r in ip)
    if wk:
        s["workers_prefill_min_ratio"] = min(p["ratio"] for r in wk for p in r["prefill"])
        s["workers_decode_min_ratio"] = min(r["decode"]["ratio"] for r in wk)
    if cc:
        s["codec_ratio_to_memcpy"] = cc["ratio_to_memcpy"]
    s["targets"] = TARGETS
    s["met"] = {
        "in_process_prefill": s.get("in_process_prefill_min_ratio", 0) >= TARGETS["in_process_prefill"],
        "in_process_decode": s.get("in_process_decode_min_ratio", 0) >= TARGETS["in_process_decode"],
        "workers_decode": s.get("workers_decode_min_ratio", 0) >= TARGETS["workers_decode"],
        "codec": s.get("codec_ratio_to_memcpy", 0) >= TARGETS["codec"],
    }
    return s
