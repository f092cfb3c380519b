"""Split cost: tokens/s of the whole model vs a chain of ranges, (a) in one process (`layer-bench split`),
(b) one worker process per range over pipes; measured interleaved, best of the repetitions."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from builder import proc
from builder.errors import BuildError
from verify import inventory, prompts
from verify.client import OMP_ENV
from verify.pipeline import Pipeline

SPLITS = (2, 3, 5)


def run_json(cmd: list[str | Path], env: dict[str, str]) -> Any:
    result = proc.run(cmd, env=env, error=BuildError, what=f"{Path(str(cmd[0])).name} failed")
    return json.loads(result.stdout)


def in_process(
    bin_dir: Path, model_path: Path, n_layer: int, quick: bool, threads: int
) -> list[dict[str, Any]]:
    """(a) all ranges in one process."""
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
                "64" if quick else "64,512",
                "--decode",
                "8" if quick else "32",
                "--reps",
                "1" if quick else "5",
            ],
            env,
        )
        res["shards"] = k
        out.append(res)
    return out


def _prefill_s(pipe: Pipeline, tokens: list[int], session: str) -> float:
    start = time.perf_counter()
    pipe.step(session, 1, 0, tokens)
    return time.perf_counter() - start


def _decode_s(pipe: Pipeline, prompt: list[int], n: int, session: str) -> tuple[float, list[int]]:
    """Seconds for n greedy single-token steps after the prompt, and the tokens."""
    tokens = [pipe.step(session, 1, 0, prompt).argmax[-1]]
    start = time.perf_counter()
    for j in range(n):
        tokens.append(pipe.step(session, 1, len(prompt) + j, [tokens[-1]]).argmax[-1])
    return time.perf_counter() - start, tokens


def workers(worker: Path, model_path: Path, n_layer: int, quick: bool, threads: int) -> list[dict[str, Any]]:
    """(b) one worker process per range, bundles over pipes."""
    reps = 1 if quick else 5
    n_decode = 8 if quick else 32
    prefills = (64,) if quick else (64, 512)
    out = []
    # one session at a time, with the whole context: room for the 512-token prefill
    opts = {"threads": threads, "n_ctx": 1024, "max_sessions": 1}
    with Pipeline(worker, model_path, [(0, n_layer)], **opts) as whole:
        text_tokens = whole.tokenize(prompts.LONG * 8)
        for k in SPLITS:
            with Pipeline(worker, model_path, inventory.split(n_layer, k), **opts) as split:
                row: dict[str, Any] = {"shards": k, "prefill": []}
                for n in prefills:
                    tokens = (text_tokens * (n // len(text_tokens) + 1))[:n]
                    best = [float("inf"), float("inf")]
                    for r in range(reps):
                        for i, pipe in enumerate((whole, split)):
                            best[i] = min(best[i], _prefill_s(pipe, tokens, f"p{n}-{r}"))
                    row["prefill"].append(
                        {
                            "tokens": n,
                            "whole_tps": n / best[0],
                            "split_tps": n / best[1],
                            "ratio": best[0] / best[1],
                        }
                    )
                best = [float("inf"), float("inf")]
                same = True
                for r in range(reps):
                    runs = [_decode_s(pipe, text_tokens[:16], n_decode, f"d{r}") for pipe in (whole, split)]
                    best = [min(b, t) for b, (t, _) in zip(best, runs, strict=True)]
                    same = same and runs[0][1] == runs[1][1]
                row["decode"] = {
                    "tokens": n_decode,
                    "whole_tps": n_decode / best[0],
                    "split_tps": n_decode / best[1],
                    "ratio": best[0] / best[1],
                    "same_tokens": same,
                }
                out.append(row)
    return out
