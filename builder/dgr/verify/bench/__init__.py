"""What a layer split costs, measured side by side in one run (`dgr bench`, dgr/commands/bench.py):

- split: prefill (64 and 512 tokens) and decode tokens/s of the whole model vs 2, 3 and 5 ranges, (a) all
  ranges in one process (`layer-bench split`), (b) one worker process per range over pipes; ratios to whole;
- memory: model bytes, KV bytes and peak RSS per range vs its owned fraction, and a PNG chart;
- parts (dgr.verify.bench.fromparts): per range of 2, 3 and 5 ranges, the bytes of its part files against the
  whole file, its load from its parts against from the whole file, and its peak RSS from each, mmap on and
  off;
- both for every locked model (`model_bench`; the default model's at the top of bench.json, the others'
  under `models.<name>`);
- codec: bundle encode + decode GB/s vs memcpy of the same bytes (C++ worker codec and Python codec);
- build (dgr/buildtime.py, it drives `dgr build`): cold `dgr build`, no-op and a rebuild after editing one
  patch, each beside a plain cmake + ninja build of the same targets (skipped by --quick);
- fuzz (--fuzz): the worker's decoders under libFuzzer for at least 1,000,000 executions;
- report: what is written and printed of a result (bench.json, the text report, figures.md).

Every ratio is taken from paired rounds in the same run, in alternating order (round i: whole then split
for even i, split then whole for odd i; dgr.verify.bench.paired): the median of the per-round ratios, their
spread (min-max) and the best-of, so a noisy machine affects both sides alike. The JSON keys are documented
in README.md.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
from collections.abc import Callable
from pathlib import Path

from dgr.contracts.bench import BenchModel, Machine, ModelBench
from dgr.core import log
from dgr.verify.bench import fromparts, memory, split
from dgr.verify.models import inventory
from dgr.verify.models.parts import ModelParts


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


def model_bench(
    bin_dir: Path,
    name: str,
    model_path: Path,
    quick: bool,
    threads: int,
    ctx: int,
    chart: Path,
    parts: Callable[[], ModelParts],
) -> ModelBench:
    """The split cost (in one process and one worker per range), the memory table and the figures from the
    parts (`parts`: the model's parts, checked, or written into the cache, when first asked) of one model
    (the default one and every other locked model alike), with its memory chart at `chart`."""
    inv = inventory.read(model_path)
    worker = bin_dir / "layer-worker"
    with log.step(f"{name}: split cost, all ranges in one process"):
        in_process = split.in_process(bin_dir, model_path, inv.n_layer, quick, threads)
    with log.step(f"{name}: split cost, one worker process per range"):
        workers = split.workers(worker, model_path, inv.n_layer, quick, threads, ctx)
    with log.step(f"{name}: {split.SESSIONS} sessions in one batch, one worker process per range"):
        batched = split.batched(worker, model_path, inv.n_layer, quick, threads, ctx)
    with log.step(f"{name}: memory per range"):
        rows = memory.measure(worker, model_path, inv, quick, ctx)
    png = memory.chart(rows, chart, model_path.stem, ctx)
    with log.step(f"{name}: each range from its parts against from the whole file"):
        from_parts = fromparts.measure(worker, model_path, parts(), quick, ctx)
    return ModelBench(
        model=BenchModel(file=model_path.name, n_layer=inv.n_layer, bytes=inv.n_bytes, name=name),
        hop_bytes_per_token=inv.n_embd * 4,
        in_process=in_process,
        workers=workers,
        batched=batched,
        memory=rows,
        parts=from_parts,
        chart=str(png) if png else None,
    )
