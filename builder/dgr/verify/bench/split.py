"""Split cost: tokens/s of the whole model vs a chain of ranges, (a) in one process (`layer-bench split`),
(b) one worker process per range over pipes; measured interleaved, best of the repetitions."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from dgr.contracts.bench import Speed, SplitCost
from dgr.core import proc
from dgr.errors import BenchError
from dgr.verify.models import inventory, prompts
from dgr.verify.wire.client import OMP_ENV
from dgr.verify.wire.pipeline import Pipeline

SPLITS = (2, 3, 5)


DECODE_PROMPT = 16
"""The prompt length the decode measurements start from."""


def _plan(quick: bool) -> tuple[tuple[int, ...], int, int]:
    """Prefill lengths, greedy decode tokens and interleaved repetitions, the same for (a) and (b)."""
    return ((64,), 8, 1) if quick else ((64, 512), 64, 9)


def context_needed(quick: bool) -> int:
    """The positions one session of the worker measurements needs: the longest prefill, or the decode
    prompt and every decoded token."""
    prefills, n_decode, _ = _plan(quick)
    return max(*prefills, DECODE_PROMPT + n_decode)


def run_json(cmd: list[str | Path], env: dict[str, str]) -> Any:
    result = proc.run(cmd, env=env, error=BenchError, what=f"{Path(str(cmd[0])).name} failed")
    return json.loads(result.stdout)


def in_process(
    bin_dir: Path, model_path: Path, n_layer: int, quick: bool, threads: int
) -> tuple[SplitCost, ...]:
    """(a) all ranges in one process."""
    prefills, n_decode, reps = _plan(quick)
    out = []
    env = {**OMP_ENV, **os.environ}
    for k in SPLITS:
        split = ",".join(f"{b}:{e}" for b, e in inventory.split(n_layer, k))
        res = run_json(
            [
                bin_dir / "layer-bench",
                "split",
                "--model",
                model_path,
                "--split",
                split,
                "--threads",
                str(threads),
                "--prefill",
                ",".join(map(str, prefills)),
                "--decode",
                str(n_decode),
                "--reps",
                str(reps),
            ],
            env,
        )
        out.append(SplitCost.from_json({**res, "shards": k}, f"layer-bench split --split {split}"))
    return tuple(out)


def _prefill_s(pipe: Pipeline, tokens: list[int], session: str) -> float:
    start = time.perf_counter()
    pipe.prefill(session, 1, tokens)
    return time.perf_counter() - start


def _decode_s(
    pipe: Pipeline, prompt: list[int], n: int, session: str
) -> tuple[float, list[int], list[float]]:
    """Seconds for n greedy single-token steps after the prompt, the tokens, and each shard's seconds."""
    tokens = [pipe.step(session, 1, 0, prompt).argmax[-1]]
    per_shard = [0.0] * len(pipe.workers)
    start = time.perf_counter()
    for j in range(n):
        res = pipe.step(session, 1, len(prompt) + j, [tokens[-1]])
        tokens.append(res.argmax[-1])
        per_shard = [a + b for a, b in zip(per_shard, res.seconds, strict=True)]
    return time.perf_counter() - start, tokens, per_shard


def _round_trip_ms(pipe: Pipeline, n: int) -> float:
    """Median milliseconds of a request that does no work (`sessions`), supervisor to worker and back."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        pipe.workers[-1].request("sessions")
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def workers(
    worker: Path, model_path: Path, n_layer: int, quick: bool, threads: int, ctx: int = 1024
) -> tuple[SplitCost, ...]:
    """(b) one worker process per range, bundles over pipes, one session at a time with the whole `ctx`."""
    prefills, n_decode, reps = _plan(quick)
    out = []

    # one session at a time, with the whole context: room for the 512-token prefill
    def chain(split: list[tuple[int, int]]) -> Pipeline:
        return Pipeline(worker, model_path, split, threads=threads, n_ctx=ctx, max_sessions=1)

    with chain([(0, n_layer)]) as whole:
        text_tokens = whole.tokenize(prompts.LONG * 8)
        for k in SPLITS:
            with chain(inventory.split(n_layer, k)) as split:
                speeds: list[Speed] = []
                for n in prefills:
                    tokens = (text_tokens * (n // len(text_tokens) + 1))[:n]
                    best = [float("inf"), float("inf")]
                    for r in range(reps):
                        for i, pipe in enumerate((whole, split)):
                            best[i] = min(best[i], _prefill_s(pipe, tokens, f"p{n}-{r}"))
                    speeds.append(
                        Speed(tokens=n, whole_tps=n / best[0], split_tps=n / best[1], ratio=best[0] / best[1])
                    )
                best = [float("inf"), float("inf")]
                step_ms: list[list[float]] = [[], []]
                same = True
                for r in range(reps):
                    runs = [
                        _decode_s(pipe, text_tokens[:DECODE_PROMPT], n_decode, f"d{r}")
                        for pipe in (whole, split)
                    ]
                    for i, (t, _, shards) in enumerate(runs):
                        if t < best[i]:
                            best[i], step_ms[i] = t, [s * 1e3 / n_decode for s in shards]
                    same = same and runs[0][1] == runs[1][1]
                decode = Speed(
                    tokens=n_decode,
                    whole_tps=n_decode / best[0],
                    split_tps=n_decode / best[1],
                    ratio=best[0] / best[1],
                    same_tokens=same,
                    # where a decode step's time goes: each worker's request (sent to reply read), and a
                    # request that does no work (the transport and the supervisor alone)
                    whole_step_ms=step_ms[0][0],
                    shard_step_ms=tuple(step_ms[1]),
                    round_trip_ms=_round_trip_ms(split, 20 if quick else 200),
                )
                out.append(SplitCost(shards=k, prefill=tuple(speeds), decode=decode))
    return tuple(out)
