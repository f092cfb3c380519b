"""Upstream's own checks of a change that can touch results or speed (CONTRIBUTING.md of llama.cpp): the
perplexity and the speed of the unpatched and the patched upstream, no layer range set, with upstream's
tools (`llama-perplexity`, `llama-bench`) on the same model and text, side by side in one run.

- perplexity, in upstream's comparison mode: the unpatched build writes its logits
  (`llama-perplexity --kl-divergence-base FILE`), then both builds compare theirs with them
  (`--kl-divergence --kl-divergence-base FILE`): the KL divergence and "Same top p" it prints, and the
  perplexity of each build (`Mean PPL(Q)` and its chunk table: both read by one parser, kl_of). The file
  holds 16-bit log-probabilities, so the unpatched build against its own file prints the rounding of
  that storage (a small KL divergence, not 0): met when the patched build prints the same statistics
  (a patched build without a range computes the same logits) and the same top token everywhere;
- llama-bench: prompt processing and generation tokens/s, paired rounds in alternating order (round i:
  unpatched then patched for even i, patched then unpatched for odd i; dgr.verify.bench.paired): the
  median of the per-round ratios patched / unpatched, their spread and the best-of.

The result is the `upstream_comparison` key of bench.json (read back by dgr.export.measured).
"""

from __future__ import annotations

import functools
import hashlib
import re
import tempfile
from pathlib import Path

from dgr.contracts.paired import Paired
from dgr.contracts.upstreambench import (
    BenchRow,
    Comparison,
    KlDivergence,
    KlStats,
    LlamaBench,
    ModelFile,
    Perplexity,
    PerplexityComparison,
)
from dgr.core import jsonio, log, proc
from dgr.errors import BenchError
from dgr.verify.bench import paired

PERPLEXITY_ARGS = ("-c", "512", "--chunks", "8")
BENCH_ARGS = ("-p", "512", "-n", "128", "-r", "3")
BENCH_TARGET = 0.99
_NUM = r"(-?\d+(?:\.\d+)?)"
_KL_STATS = {
    "ppl": re.compile(rf"Mean PPL\(Q\)\s*:\s*{_NUM}\s*±\s*{_NUM}"),
    "mean": re.compile(rf"Mean\s+KLD:\s*{_NUM}\s*±\s*{_NUM}"),
    "max": re.compile(rf"Maximum KLD:\s*{_NUM}"),
    "same_top": re.compile(rf"Same top p:\s*{_NUM}\s*±\s*{_NUM}\s*%"),
}
_KL_CHUNK = re.compile(rf"^\s*(\d+)\s+{_NUM}\s*±\s*{_NUM}\s", re.MULTILINE)
"""A row of the chunk table of `--kl-divergence`: the chunk and the PPL so far (then ln ratio, KLD, ...)."""


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


def kl_of(output: str) -> tuple[KlStats, Perplexity]:
    """What `llama-perplexity --kl-divergence` printed: its KL divergence statistics (the mean and its error,
    the maximum, "Same top p" in percent) and its perplexity (`Mean PPL(Q)`, the PPL column per chunk)."""
    found = {key: pattern.search(output) for key, pattern in _KL_STATS.items()}
    chunks = _KL_CHUNK.findall(output)

    def value(key: str, group: int = 1) -> float:
        match = found[key]
        if match is None or not chunks:
            what = ", ".join(k for k, m in found.items() if m is None) or "no chunk table"
            raise BenchError(
                f"llama-perplexity --kl-divergence printed no statistics ({what}; it prints them from 100 "
                "tokens on)",
                detail=output[-2000:],
            )
        return float(match.group(group))

    stats = KlStats(
        mean=value("mean"), mean_error=value("mean", 2), max=value("max"), same_top_percent=value("same_top")
    )
    perplexity = Perplexity(
        final=value("ppl"), error=value("ppl", 2), chunks=tuple(float(c[1]) for c in chunks)
    )
    return stats, perplexity


def _run(cmd: list[str | Path], env: dict[str, str], what: str) -> str:
    result = proc.run(cmd, env=env, error=BenchError, what=what)
    return result.stdout + result.stderr


def bench_of(output: str) -> dict[str, float]:
    """llama-bench -o json: test name (pp512, tg128) -> average tokens/s."""
    try:
        rows = jsonio.loads(output[output.index("[") :], "llama-bench -o json", ValueError)
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
) -> Comparison:
    """Perplexity in upstream's KL divergence mode (each run once: it is deterministic) and llama-bench
    (`rounds` paired rounds in alternating order, the baseline first in even rounds)."""
    sides = {"baseline": baseline_bin, "patched": patched_bin}
    dirs = dict(zip(sides, build_dirs, strict=True))
    threads_args = ("-t", str(threads))
    common = ("-m", str(model), "-f", str(text), *PERPLEXITY_ARGS, *threads_args)

    def perplexity(side: str, *extra: str) -> str:
        env = tool_env(sides[side], "llama-perplexity", dirs[side])
        cmd: list[str | Path] = [sides[side] / "llama-perplexity", *common, *extra]
        return _run(cmd, env, f"llama-perplexity ({side}) failed")

    with tempfile.TemporaryDirectory(prefix="dgr-kld-") as tmp:
        base = Path(tmp) / "baseline.kld"
        perplexity("baseline", "--kl-divergence-base", str(base))  # writes the base file, nothing to read
        compare_args = ("--kl-divergence", "--kl-divergence-base", str(base))
        # both perplexities from the same mode and parser: the baseline's against its own logits, the
        # patched build's against the baseline's (`Mean PPL(Q)`, printed with 6 decimals by both)
        reference, baseline_ppl = kl_of(perplexity("baseline", *compare_args))
        patched_kl, patched_ppl = kl_of(perplexity("patched", *compare_args))

    def bench(side: str) -> dict[str, float]:
        env = tool_env(sides[side], "llama-bench", dirs[side])
        cmd: list[str | Path] = [sides[side] / "llama-bench", "-m", model, *BENCH_ARGS, *threads_args]
        return bench_of(_run([*cmd, "-o", "json"], env, f"llama-bench ({side}) failed"))

    runs = paired.alternate(rounds, lambda _: bench("baseline"), lambda _: bench("patched"))
    results = []
    for test in runs[0][0]:
        pairs = [(b[test], p.get(test, 0.0)) for b, p in runs]
        results.append(
            BenchRow(
                test=test,
                baseline_tps=max(a for a, _ in pairs),
                patched_tps=max(b for _, b in pairs),
                paired=Paired.of(pairs),
            )
        )
    base_name = "FILE"  # the temporary file, by a name that does not change from run to run
    return Comparison(
        model=ModelFile(file=model.name, sha256=hashlib.sha256(model.read_bytes()).hexdigest()),
        threads=threads,
        perplexity=PerplexityComparison(
            text=text_name,
            text_sha256=hashlib.sha256(text.read_bytes()).hexdigest(),
            args=(*PERPLEXITY_ARGS, *threads_args),
            baseline=baseline_ppl,
            patched=patched_ppl,
            kl=KlDivergence(
                base_args=("--kl-divergence-base", base_name),
                args=("--kl-divergence", "--kl-divergence-base", base_name),
                reference=reference,
                patched=patched_kl,
            ),
        ),
        llama_bench=LlamaBench(
            args=(*BENCH_ARGS, *threads_args), rounds=rounds, results=tuple(results), target=BENCH_TARGET
        ),
    )
