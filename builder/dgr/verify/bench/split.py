"""Split cost: tokens/s of the whole model vs a chain of ranges, (a) in one process (`layer-bench split`),
(b) one worker process per range over pipes; measured in paired rounds in alternating order
(dgr.verify.bench.paired): the median ratio of the rounds, their spread and the best-of."""

from __future__ import annotations

import functools
import os
import statistics
import time
from pathlib import Path
from typing import Any

from dgr.contracts.bench import BatchedCost, BenchResult, Speed, SplitCost, StageParts
from dgr.contracts.paired import Paired
from dgr.core import jsonio, proc
from dgr.errors import BenchError
from dgr.verify.bench import paired
from dgr.verify.models import inventory, prompts
from dgr.verify.wire.client import OMP_ENV
from dgr.verify.wire.pipeline import BatchStep, Pipeline

SPLITS = (2, 3, 5)
BATCHED_SPLITS = (2, 3)
SESSIONS = 4
"""Sessions decoding together in `batched`."""


DECODE_PROMPT = 16
"""The prompt length the decode measurements start from."""


def _plan(quick: bool) -> tuple[tuple[int, ...], int, int]:
    """Prefill lengths, greedy decode tokens and paired rounds, the same for (a) and (b)."""
    return ((64,), 8, 1) if quick else ((64, 512), 64, 9)


def context_needed(quick: bool) -> int:
    """The positions one session of the worker measurements needs: the longest prefill, or the decode
    prompt and every decoded token."""
    prefills, n_decode, _ = _plan(quick)
    return max(*prefills, DECODE_PROMPT + n_decode)


def run_json(cmd: list[str | Path], env: dict[str, str]) -> Any:
    result = proc.run(cmd, env=env, error=BenchError, what=f"{Path(str(cmd[0])).name} failed")
    return jsonio.loads(result.stdout, f"the output of {Path(str(cmd[0])).name}", BenchError)


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
        where = f"layer-bench split --split {split}"
        out.append(
            SplitCost(
                prefill=tuple(_timed(p, f"{where}: prefill") for p in res["prefill"]),
                decode=_timed(res["decode"], f"{where}: decode"),
                split=res["split"],
                threads=res["threads"],
                reps=res["reps"],
                shards=k,
            )
        )
    return tuple(out)


def token_problems(
    label: str, in_process: tuple[SplitCost, ...], workers: tuple[SplitCost, ...]
) -> list[str]:
    """Why the splits of the model `label` are no measurement of the same computation: a split whose greedy
    decode did not give the whole model's tokens, or that did not say (`same_tokens` is None)."""
    problems = []
    checked = [("in one process", row, row.decode) for row in in_process]
    checked += [("one worker per range", row, row.decode) for row in workers]
    checked += [("workers forwarding", row, row.forwarded) for row in workers if row.forwarded is not None]
    for where, row, speed in checked:
        same = speed.same_tokens
        if same is not True:
            what = "generated other tokens than" if same is False else "did not compare its tokens with"
            problems.append(f"{label}: the split into {row.shards} ({where}) {what} the whole model")
    return problems


def diverged(result: BenchResult) -> None:
    """BenchError (exit 1) when a split of a model decoded other tokens than the whole model (or did not
    say): its speed is not that of the same computation. Raised after bench.json is written."""
    problems = [
        p for label, m in result.all_models().items() for p in token_problems(label, m.in_process, m.workers)
    ]
    problems += [
        f"{label}: {b.sessions} sessions in one batch through {b.shards} ranges decoded other tokens "
        "than the whole model with the same sessions"
        for label, m in result.all_models().items()
        for b in m.batched
        for speed in (b.speed, b.forwarded)
        if speed is not None and speed.same_tokens is not True
    ]
    if problems:
        raise BenchError(
            f"{len(problems)} split(s) decoded other tokens than the whole model: {problems[0]}",
            detail="\n".join(problems),
            hint="run `dgr verify --only boundary,kv`: a split that changes the tokens is a bug",
        )


def _timed(row: dict[str, Any], where: str, **extra: Any) -> Speed:
    """The Speed of layer-bench's seconds per round of the whole model and the split (`whole_s`, `split_s`,
    in round order: even rounds ran the whole model first)."""
    try:
        seconds = list(zip(row["whole_s"], row["split_s"], strict=True))
        tokens = int(row["tokens"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BenchError(f"{where}: no seconds per round of both sides ({exc})", detail=str(row)) from exc
    return _speed(tokens, seconds, same_tokens=row.get("same_tokens"), **extra)


def _gain(tokens: int, seconds: list[tuple[float, float]]) -> Paired:
    """Tokens/s of the forwarding chain / the relayed chain per round, of (relayed, forwarded) seconds."""
    return Paired.of(paired.rates(tokens, seconds))


def _speed(tokens: int, seconds: list[tuple[float, float]], **extra: Any) -> Speed:
    whole, split, ratio = paired.of_seconds(tokens, seconds)
    return Speed(tokens=tokens, whole_tps=whole, split_tps=split, ratio=ratio, **extra)


def _prefill_s(pipe: Pipeline, tokens: list[int], session: str, r: int) -> float:
    """Seconds of one prefill in a new session (`session`-`r`: round r)."""
    start = time.perf_counter()
    pipe.prefill(f"{session}-{r}", 1, tokens)
    return time.perf_counter() - start


def _timings(pipe: Pipeline) -> list[dict[str, Any]]:
    """Each worker's `timing` (docs/protocol.md): its decode requests since the last one, then reset."""
    return [dict(w.request("timing").header) for w in pipe.workers]


def _parts(timing: dict[str, Any], step_s: float, n: int) -> StageParts:
    """A worker's `timing` after n decode requests and their seconds as the supervisor saw them, per token."""
    try:
        if int(timing["n_requests"]) != n:
            raise ValueError(f"{timing['n_requests']} decode requests timed, {n} sent")
        parts = {
            k: float(timing[f"{k}_us"]) / 1e3 / n
            for k in ("wait", "read", "parse", "process", "output", "write")
        }
        reused = int(timing["graphs_reused"]) / n
    except (KeyError, TypeError, ValueError) as exc:
        raise BenchError(f"the worker's timing of its decode requests: {exc}", detail=str(timing)) from exc
    return StageParts(
        step_ms=step_s * 1e3 / n,
        wait_ms=parts["wait"],
        read_ms=parts["read"],
        parse_ms=parts["parse"],
        process_ms=parts["process"],
        output_ms=parts["output"],
        write_ms=parts["write"],
        graphs_reused=reused,
    )


def _decode_s(
    pipe: Pipeline, prompt: list[int], n: int, session: str, r: int
) -> tuple[float, list[int], list[float], list[StageParts]]:
    """Seconds for n greedy single-token steps after the prompt, the tokens, each shard's seconds and where
    each shard's time went (in a new session, `session`-`r`: round r). A step asks for the argmax only, as
    greedy decoding needs: the logits stay in the worker."""
    session = f"{session}-{r}"
    tokens = [pipe.step(session, 1, 0, prompt).argmax[-1]]
    _timings(pipe)
    # a forwarded step is one request through the chain: its seconds are the chain's, and no worker's parts
    per_shard = [0.0] * (1 if pipe.forward else len(pipe.workers))
    start = time.perf_counter()
    for j in range(n):
        res = pipe.step(session, 1, len(prompt) + j, [tokens[-1]], logits="argmax")
        tokens.append(res.argmax[-1])
        per_shard = [a + b for a, b in zip(per_shard, res.seconds, strict=True)]
    elapsed = time.perf_counter() - start
    timings = _timings(pipe)
    parts = [] if pipe.forward else [_parts(t, s, n) for t, s in zip(timings, per_shard, strict=True)]
    return elapsed, tokens, per_shard, parts


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
    def chain(split: list[tuple[int, int]], forward: bool = False) -> Pipeline:
        return Pipeline(
            worker, model_path, split, threads=threads, n_ctx=ctx, max_sessions=1, forward=forward
        )

    with chain([(0, n_layer)]) as whole:
        text_tokens = whole.tokenize(prompts.LONG * 8)
        for k in SPLITS:
            ranges = inventory.split(n_layer, k)
            with chain(ranges) as split, chain(ranges, forward=True) as forwarded:
                speeds: list[Speed] = []
                for n in prefills:
                    tokens = (text_tokens * (n // len(text_tokens) + 1))[:n]
                    seconds = paired.alternate(
                        reps,
                        functools.partial(_prefill_s, whole, tokens, f"p{n}"),
                        functools.partial(_prefill_s, split, tokens, f"p{n}"),
                    )
                    speeds.append(_speed(n, seconds))
                prompt = text_tokens[:DECODE_PROMPT]
                # the whole model, the ranges relayed by the supervisor, the ranges forwarding: one round
                runs = paired.rotate(
                    reps,
                    [
                        functools.partial(_decode_s, pipe, prompt, n_decode, "d")
                        for pipe in (whole, split, forwarded)
                    ],
                )
                # where a decode step's time goes, in each side's fastest round
                fastest = [min((run[side] for run in runs), key=lambda x: x[0]) for side in (0, 1)]
                step_ms = [[s * 1e3 / n_decode for s in best[2]] for best in fastest]
                decode = _speed(
                    n_decode,
                    [(a[0], b[0]) for a, b, _ in runs],
                    same_tokens=all(a[1] == b[1] for a, b, _ in runs),
                    # where a decode step's time goes: each worker's request (sent to reply read), and a
                    # request that does no work (the transport and the supervisor alone)
                    whole_step_ms=step_ms[0][0],
                    shard_step_ms=tuple(step_ms[1]),
                    round_trip_ms=_round_trip_ms(split, 20 if quick else 200),
                    whole_parts=fastest[0][3][0],
                    shard_parts=tuple(fastest[1][3]),
                )
                out.append(
                    SplitCost(
                        shards=k,
                        prefill=tuple(speeds),
                        decode=decode,
                        forwarded=_speed(
                            n_decode,
                            [(a[0], c[0]) for a, _, c in runs],
                            same_tokens=all(a[1] == c[1] for a, _, c in runs),
                        ),
                        forwarded_gain=_gain(n_decode, [(b[0], c[0]) for _, b, c in runs]),
                    )
                )
    return tuple(out)


def _batched_s(
    pipe: Pipeline, session_prompts: list[list[int]], n: int, r: int
) -> tuple[float, list[list[int]]]:
    """Seconds for n steps of every session together (one `decode_batch` per step) after each session's
    prompt, and each session's tokens (new sessions `b<i>-<r>`: round r)."""
    names = [f"b{i}-{r}" for i in range(len(session_prompts))]
    tokens = [
        [pipe.step(name, 1, 0, prompt).argmax[-1]]
        for name, prompt in zip(names, session_prompts, strict=True)
    ]
    start = time.perf_counter()
    for j in range(n):
        steps = [
            BatchStep(name, 1, len(p) + j, [t[-1]])
            for name, p, t in zip(names, session_prompts, tokens, strict=True)
        ]
        for t, token in zip(tokens, pipe.step_batch(steps).argmax, strict=True):
            t.append(token)
    return time.perf_counter() - start, tokens


def batched(
    worker: Path, model_path: Path, n_layer: int, quick: bool, threads: int, ctx: int = 1024
) -> tuple[BatchedCost, ...]:
    """SESSIONS sessions decoding together through one worker per range, against the whole model's worker
    with the same sessions, in paired rounds; each session's tokens compared with the whole model's, and the
    whole model's with each session decoded alone."""
    _, n_decode, reps = _plan(quick)
    out = []

    def chain(split: list[tuple[int, int]], forward: bool = False) -> Pipeline:
        return Pipeline(
            worker, model_path, split, threads=threads, n_ctx=ctx, max_sessions=SESSIONS, forward=forward
        )

    with chain([(0, n_layer)]) as whole:
        text = whole.tokenize(prompts.LONG * 8)
        # a prompt of its own for each session
        starts = [i * DECODE_PROMPT for i in range(SESSIONS)]
        session_prompts = [text[s : s + DECODE_PROMPT] for s in starts]
        alone = [whole.generate(f"alone{i}", 1, p, n_decode + 1) for i, p in enumerate(session_prompts)]
        for k in BATCHED_SPLITS:
            ranges = inventory.split(n_layer, k)
            with chain(ranges) as split, chain(ranges, forward=True) as forwarded:
                runs = paired.rotate(
                    reps,
                    [
                        functools.partial(_batched_s, pipe, session_prompts, n_decode)
                        for pipe in (whole, split, forwarded)
                    ],
                )
            n = SESSIONS * n_decode
            out.append(
                BatchedCost(
                    shards=k,
                    sessions=SESSIONS,
                    speed=_speed(
                        n,
                        [(a[0], b[0]) for a, b, _ in runs],
                        same_tokens=all(a[1] == b[1] for a, b, _ in runs),
                    ),
                    same_as_alone=all(a[1] == alone for a, _, _ in runs),
                    forwarded=_speed(
                        n,
                        [(a[0], c[0]) for a, _, c in runs],
                        same_tokens=all(a[1] == c[1] for a, _, c in runs),
                    ),
                    forwarded_gain=_gain(n, [(b[0], c[0]) for _, b, c in runs]),
                )
            )
    return tuple(out)
