"""Upstream's own checks of a change that can touch results or speed (CONTRIBUTING.md of llama.cpp): the
perplexity and the speed of the unpatched and the patched upstream, no layer range set, with upstream's
tools (`llama-perplexity`, `llama-bench`) on the same model and text, side by side in one run.

- perplexity: the final estimate and every per-chunk value as printed must be identical (a patched build
  without a range computes the same graph);
- llama-bench: prompt processing and generation tokens/s, the two builds run in turn (unpatched, patched,
  unpatched, ...) for a number of rounds, the best round of each side, ratio = patched / unpatched.

The result is the `upstream_comparison` key of bench.json (read back by dgr.export.measured).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from dgr.core import log, proc
from dgr.errors import BenchError

PERPLEXITY_ARGS = ("-c", "512", "--chunks", "8")
BENCH_ARGS = ("-p", "512", "-n", "128", "-r", "3")
BENCH_TARGET = 0.99
_CHUNK = re.compile(r"\[(\d+)\](\d+(?:\.\d+)?)")
_FINAL = re.compile(r"Final estimate: PPL = (\d+(?:\.\d+)?) \+/- (\d+(?:\.\d+)?)")


@functools.cache
def tool_env(bin_dir: Path, tool: str, build_dir: Path | None) -> dict[str, str]:
    """The environment a published tool runs in (found once per tool and build). Upstream's tools link a
    `lib<tool>-impl.so` of their own; a published build without it is run against the libraries of its
    build tree (warned)."""
    impl = f"lib{tool}-impl.so"
    binary = bin_dir / tool
    if not binary.is_file():
        raise BenchError(f"{binary} is missing", hint="build it with `dgr build --tools`")
    needs = impl.encode() in binary.read_bytes()
    if not needs or (bin_dir / impl).is_file():
        return {}
    if build_dir is not None and (build_dir / "bin" / impl).is_file():
        log.warn(f"{bin_dir} lacks {impl}: running {tool} with the libraries of {build_dir / 'bin'}")
        return {"LD_LIBRARY_PATH": str(build_dir / "bin")}
    raise BenchError(f"{bin_dir} lacks {impl}, which {tool} needs", hint="rebuild with `dgr build --tools`")


def perplexity_of(output: str) -> dict[str, Any]:
    """The per-chunk values and the final estimate llama-perplexity printed, as numbers and as text."""
    final = _FINAL.search(output)
    lines = [line for line in output.splitlines() if re.match(r"\s*\[\d+\]\d", line)]
    chunks = _CHUNK.findall(lines[-1]) if lines else []
    if final is None or not chunks:
        what = "no final estimate" if final is None else "no per-chunk values"
        raise BenchError(f"llama-perplexity printed {what}", detail=output[-2000:])
    return {
        "final": float(final.group(1)),
        "error": float(final.group(2)),
        "chunks": [float(v) for _, v in chunks],
        "printed": [final.group(0), *(f"[{n}]{v}" for n, v in chunks)],
    }


def _run(cmd: list[str | Path], env: dict[str, str], what: str) -> str:
    result = proc.run(cmd, env=env, error=BenchError, what=what)
    return result.stdout + result.stderr


def bench_of(output: str) -> dict[str, float]:
    """llama-bench -o json: test name (pp512, tg128) -> average tokens/s."""
    try:
        rows = json.loads(output[output.index("[") :])
    except ValueError as exc:
        raise BenchError("llama-bench printed no JSON", detail=output[-2000:]) from exc
    out: dict[str, float] = {}
    for row in rows:
        n_prompt, n_gen = int(row["n_prompt"]), int(row["n_gen"])
        name = f"pp{n_prompt}" if n_gen == 0 else f"tg{n_gen}" if n_prompt == 0 else f"pp{n_prompt}+tg{n_gen}"
        out[name] = float(row["avg_ts"])
    return out


def compare(
    baseline_bin: Path,
    patched_bin: Path,
    model: Path,
    text: Path,
    text_name: str,
    threads: int,
    rounds: int,
    build_dirs: tuple[Path | None, Path | None] = (None, None),
) -> dict[str, Any]:
    """Perplexity (each build once: it is deterministic) and llama-bench (`rounds` interleaved rounds)."""
    sides = {"baseline": baseline_bin, "patched": patched_bin}
    dirs = dict(zip(sides, build_dirs, strict=True))
    threads_args = ("-t", str(threads))
    ppl: dict[str, dict[str, Any]] = {}
    for side, bin_dir in sides.items():
        env = tool_env(bin_dir, "llama-perplexity", dirs[side])
        out = _run(
            [bin_dir / "llama-perplexity", "-m", model, "-f", text, *PERPLEXITY_ARGS, *threads_args],
            env,
            f"llama-perplexity ({side}) failed",
        )
        ppl[side] = perplexity_of(out)
    best: dict[str, dict[str, float]] = {side: {} for side in sides}
    for _ in range(rounds):
        for side, bin_dir in sides.items():
            env = tool_env(bin_dir, "llama-bench", dirs[side])
            out = _run(
                [bin_dir / "llama-bench", "-m", model, *BENCH_ARGS, *threads_args, "-o", "json"],
                env,
                f"llama-bench ({side}) failed",
            )
            for test, tps in bench_of(out).items():
                best[side][test] = max(best[side].get(test, 0.0), tps)
    results: list[dict[str, Any]] = [
        {
            "test": test,
            "baseline_tps": best["baseline"][test],
            "patched_tps": best["patched"].get(test, 0.0),
            "ratio": best["patched"].get(test, 0.0) / best["baseline"][test],
        }
        for test in best["baseline"]
    ]
    return {
        "model": {"file": model.name, "sha256": hashlib.sha256(model.read_bytes()).hexdigest()},
        "threads": threads,
        "perplexity": {
            "text": text_name,
            "text_sha256": hashlib.sha256(text.read_bytes()).hexdigest(),
            "args": [*PERPLEXITY_ARGS, *threads_args],
            "baseline": {k: ppl["baseline"][k] for k in ("final", "error", "chunks")},
            "patched": {k: ppl["patched"][k] for k in ("final", "error", "chunks")},
            "identical": ppl["baseline"]["printed"] == ppl["patched"]["printed"],
        },
        "bench": {
            "args": [*BENCH_ARGS, *threads_args],
            "rounds": rounds,
            "results": results,
            "target": BENCH_TARGET,
            "met": all(r["ratio"] >= BENCH_TARGET for r in results),
        },
    }
