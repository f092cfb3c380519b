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

from dgr.contracts import Machine


def machine() -> Machine:
    """Where the measurements ran: date (UTC), CPU model, cores, platform, Python."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return Machine(
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        cpu=cpu,
        cores=os.cpu_count(),
        platform=platform.platform(),
        python=platform.python_version(),
    )
