"""A range run from its parts against from the whole model file (`dgr bench`, beside the memory table; the
`parts` key of bench.json, per model), for the splits into 2, 3 and 5 (nearly) equal ranges
(dgr.verify.models.parts.STORAGE_SPLITS):

- storage: the bytes of the part files a range needs (`dgr parts`), what a machine that runs it stores,
  against the whole file, which every machine stores without the parts (from the manifest);
- load: worker start to model loaded (mmap on, no context), from the range's own directory of parts (only
  its files: dgr.verify.models.parts.ModelParts) and from the whole file, in paired rounds in alternating
  order (dgr.verify.bench.paired); the ratio is loads per second from the parts / from the whole file;
- peak RSS (VmHWM) of the range's worker, with mmap on and off, from the parts and from the whole file, each a
  fresh process after the memory table's prefill (dgr.verify.bench.memory). The ranges of a split run in
  order, and a range after layer 0 is fed the hidden state the previous range of the same side handed on (a
  bundle carries the identity of the model's metadata, and the first file of the parts adds its split and
  part keys to the model's: a range from its parts takes the hidden state of a range from its parts).

Both sides must hold the same tensors (the load replies' `tensors`), else the bench fails (BenchError): a
figure of a range that loads other tensors from its parts would compare nothing.

Time: `ROUNDS` paired rounds of the two loads per range (`QUICK_ROUNDS` with --quick), and four prefill runs
(two sides, mmap on and off). 10 ranges per model (2 + 3 + 5): on 2 cores, SmolLM2-135M took 33 s and
Gemma 3 270M 107 s (a load of Gemma 3 takes about 0.5 s, of SmolLM2 0.1 s), some 2.3 minutes for both."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from dgr.contracts.bench import PartsFigures, PartsRow, PartsSplit
from dgr.errors import BenchError
from dgr.verify.bench import memory, paired
from dgr.verify.models.parts import STORAGE_SPLITS, ModelParts, storage
from dgr.verify.wire.client import ContextParams, Worker

ROUNDS = 7
QUICK_ROUNDS = 1
SIDES = ("whole", "parts")
"""A (the whole file) and B (the parts) of every paired round."""


def _load(worker: Path, model: Path, layers: tuple[int, int], name: str) -> tuple[float, list[list[object]]]:
    """Seconds from starting a worker to its reply to loading `layers` of `model` (mmap on, no context), and
    the tensors the loaded model holds."""
    start = time.perf_counter()
    with Worker(worker, name) as w:
        reply = w.load(model, layers, mmap=True)
        seconds = time.perf_counter() - start
    return seconds, sorted(reply["tensors"])


def _paired_loads(
    worker: Path, models: Sequence[Path], layers: tuple[int, int], rounds: int
) -> tuple[list[tuple[float, float]], list[list[list[object]]]]:
    """The load seconds of each side (`SIDES`: `models[0]` the whole file, `models[1]` the range's first
    part) in each of `rounds` paired rounds, and the tensors each side's model held."""
    held: dict[int, list[list[object]]] = {}

    def side(i: int) -> Callable[[int], float]:
        def load(r: int) -> float:
            seconds, tensors = _load(worker, models[i], layers, f"load {SIDES[i]}[{layers[0]}, {layers[1]})")
            held.setdefault(i, tensors)
            return seconds

        return load

    return paired.alternate(rounds, side(0), side(1)), [held[0], held[1]]


def _peak_rss(
    worker: Path,
    model: Path,
    layers: tuple[int, int],
    mmap: bool,
    context: ContextParams,
    tokens: Sequence[int],
    hidden: bytes,
    name: str,
) -> tuple[int, bytes]:
    """Peak RSS of a fresh worker of `layers` of `model` after the prefill of `tokens` (`hidden`: their
    hidden state entering the range, for a range after layer 0), and the hidden state it hands on."""
    with Worker(worker, name) as w:
        w.load(model, layers, mmap=mmap, context=context)
        out = memory.prefill(w, layers[0], tokens, hidden)
        return int(w.request("memory").header["peak_rss"]), out


def measure(worker: Path, model_path: Path, parts: ModelParts, quick: bool, ctx: int = 1024) -> PartsFigures:
    """The figures of `parts.manifest`'s model (the file `model_path`): per range of every split of
    `STORAGE_SPLITS`, its stored bytes, its loads from its parts and from the whole file in paired rounds,
    and the peak RSS of its worker, mmap on and off, from each."""
    manifest = parts.manifest
    rounds = QUICK_ROUNDS if quick else ROUNDS
    context = ContextParams(n_ctx=ctx, max_sessions=1)
    tokens = memory.prefill_tokens(worker, model_path)
    files: dict[str, Callable[[int, int], Path]] = {
        "whole": lambda b, e: model_path,
        "parts": parts.model_for,
    }
    splits = []
    for k in STORAGE_SPLITS:
        if k > manifest.n_layer:
            continue
        rows = []
        # the ranges in order: each side's hidden state entering a range is what the previous range of the
        # same side handed on
        hidden = dict.fromkeys(SIDES, b"")
        for stored in storage(manifest, k):
            layers = (stored.begin, stored.end)
            where = f"[{stored.begin}, {stored.end})"
            models = [files[side](*layers) for side in SIDES]  # the range's directory, checked
            seconds, held = _paired_loads(worker, models, layers, rounds)
            if held[0] != held[1]:
                names = {str(t[0]) for t in held[0]} ^ {str(t[0]) for t in held[1]}
                raise BenchError(
                    f"{manifest.source.file} {where}: from its parts the range holds other tensors than "
                    f"from the whole file ({', '.join(sorted(names)[:5]) or 'the same names, other sizes'})",
                    hint="the figures would compare nothing: check the parts (`dgr parts`) and the build",
                )
            rss: dict[tuple[str, bool], int] = {}
            handed = dict(hidden)
            for mmap in (True, False):
                for i, side in enumerate(SIDES):
                    name = f"rss {side}{where} mmap {'on' if mmap else 'off'}"
                    got = _peak_rss(worker, models[i], layers, mmap, context, tokens, hidden[side], name)
                    rss[side, mmap], handed[side] = got
            hidden = handed
            rows.append(
                PartsRow(
                    layers=layers,
                    files=stored.files,
                    part_bytes=stored.part_bytes,
                    load_whole_s=min(s[0] for s in seconds),
                    load_parts_s=min(s[1] for s in seconds),
                    load=paired.of_seconds(1.0, seconds)[2],
                    peak_rss_whole_mmap=rss["whole", True],
                    peak_rss_parts_mmap=rss["parts", True],
                    peak_rss_whole_no_mmap=rss["whole", False],
                    peak_rss_parts_no_mmap=rss["parts", False],
                )
            )
        splits.append(PartsSplit(shards=k, ranges=tuple(rows)))
    return PartsFigures(
        files=len(manifest.files),
        whole_bytes=manifest.source.size,
        rounds=rounds,
        prefill_tokens=len(tokens),
        n_ctx=ctx,
        splits=tuple(splits),
    )
