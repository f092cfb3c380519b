"""`dgr bench --rpc`'s measurements beside upstream's tools, as far as they run without a build: the output
of upstream's tools parsed (fake tools print what the real ones print), the result read back by the export
(dgr.export.measured) exactly as the bench writes it."""

# ruff: noqa: UP031 (the fixture is printed with upstream's own printf formats, as C prints them)

from __future__ import annotations

import dataclasses
import json
import stat
from pathlib import Path

import pytest
from dgr.contracts.upstreambench import KlStats, Perplexity
from dgr.errors import BenchError
from dgr.export import measured
from dgr.verify.bench import quality, rpc

from tests.helpers import FIXTURES

PERPLEXITY_OUT = (
    "0.02.263.729 I perplexity: calculating perplexity over 2 chunks, n_ctx=512, batch_size=2048, n_seq=4\n"
    "[1]13.4425,[2]20.0833,\n"
    "0.41.136.747 I Final estimate: PPL = {final} +/- 0.48251\n"
)


def kl_out(mean: float, high: float, same_top: float, ppl_q: float = 20.0833) -> str:
    """What `llama-perplexity --kl-divergence` prints, by the format strings of upstream's
    tools/perplexity/perplexity.cpp at the pin (kl_divergence(): the chunk table, then the statistics);
    `ppl_q`: the build's own perplexity (`Mean PPL(Q)`)."""
    header = (
        "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
        "Δp RMS            Same top p\n"
    )
    rows = "".join(
        "%4d" % (i + 1)
        + "    %9.4lf ± %9.4lf" % (ppl, 0.5)
        + "    %10.5lf ± %10.5lf" % (0.0, 0.0)
        + "    %10.5lf ± %10.5lf" % (mean, 0.0)
        + "    %6.3lf ± %6.3lf %%" % (0.012, 0.003)
        + "    %6.3lf ± %6.3lf %%" % (same_top, 0.0)
        + "\n"
        for i, ppl in enumerate((13.4425, 20.0833))
    )
    return (
        "kl_divergence: computing over 2 chunks, n_ctx=512, batch_size=2048, n_seq=4\n"
        + header
        + rows
        + "\n====== Perplexity statistics ======\n"
        + "Mean PPL(Q)                   : %10.6lf ± %10.6lf\n" % (ppl_q, 0.48251)
        + "Mean PPL(base)                : %10.6lf ± %10.6lf\n" % (20.0833, 0.48251)
        + "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2lf%%\n" % 100.0
        + "\n====== KL divergence statistics ======\n"
        + "Mean    KLD: %10.6lf ± %10.6lf\n" % (mean, 0.000001)
        + "Maximum KLD: %10.6f\n" % high
        + "99.9%%   KLD: %10.6f\n" % high
        + "Median  KLD: %10.6f\n" % mean
        + "Minimum KLD: %10.6f\n" % -0.00001
        + "\n====== Token probability statistics ======\n"
        + "Mean    Δp: %6.3lf ± %5.3lf %%\n" % (0.0, 0.001)
        + "RMS Δp    : %6.3lf ± %5.3lf %%\n" % (0.012, 0.003)
        + "Same top p: %6.3lf ± %5.3lf %%\n" % (same_top, 0.0)
    )


def bench_out(pp: float, tg: float) -> str:
    return json.dumps(
        [
            {"n_prompt": 512, "n_gen": 0, "avg_ts": pp, "samples_ts": [pp]},
            {"n_prompt": 0, "n_gen": 128, "avg_ts": tg, "samples_ts": [tg]},
        ]
    )


PERF = (
    "0.01.408.962 I common_perf_print:        load time =     866.74 ms\n"
    "0.01.408.963 I common_perf_print: prompt eval time =      42.96 ms /     5 tokens "
    "(    8.59 ms per token,   116.40 tokens per second)\n"
    "0.01.408.964 I common_perf_print:        eval time =     203.31 ms /    15 runs   "
    "(   13.55 ms per token,    73.78 tokens per second)\n"
)


def fake_tools(where: Path, final: str, pp: float, tg: float, kl: str | None = None) -> Path:
    """A bin/ with llama-perplexity and llama-bench that print what upstream's print: llama-perplexity
    writes the base file with `--kl-divergence-base` alone, compares (prints `kl`) with `--kl-divergence`."""
    where.mkdir(parents=True)
    kl = kl if kl is not None else kl_out(0.000002, 0.00012, 100.0)
    perplexity = (
        'for a in "$@"; do [ "$a" = --kl-divergence ] && { cat <<\'OUT\'\n' + kl + "OUT\nexit 0; }; done\n"
        'while [ $# -gt 0 ]; do [ "$1" = --kl-divergence-base ] && : > "$2"; shift; done\n'
        f"cat <<'OUT' >&2\n{PERPLEXITY_OUT.format(final=final)}OUT\n"
    )
    scripts = {"llama-perplexity": perplexity, "llama-bench": f"cat <<'OUT'\n{bench_out(pp, tg)}\nOUT\n"}
    for name, body in scripts.items():
        path = where / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return where


def inputs(tmp_path: Path) -> tuple[Path, Path]:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    text = tmp_path / "build.md"
    text.write_text("# build\n")
    return model, text


def test_perplexity_and_bench_before_and_after_round_trip_into_the_export(tmp_path: Path) -> None:
    """Both perplexities come from each build's own `--kl-divergence` run (`Mean PPL(Q)`, 6 decimals), read
    by one parser: the `Final estimate` (4 decimals) the baseline prints while writing the base file is not
    read."""
    baseline = fake_tools(
        tmp_path / "baseline", "13.1108", 290.0, 70.0, kl_out(2e-6, 1.2e-4, 100.0, 13.110812)
    )
    patched = fake_tools(tmp_path / "patched", "13.1108", 286.0, 70.7, kl_out(2e-6, 1.2e-4, 100.0, 13.110845))
    model, text = inputs(tmp_path)
    result = quality.compare(baseline, patched, model, text, "docs/build.md", threads=2, rounds=2)
    ppl = result.perplexity
    assert ppl.baseline == Perplexity(final=13.110812, error=0.48251, chunks=(13.4425, 20.0833))
    assert ppl.patched == Perplexity(final=13.110845, error=0.48251, chunks=(13.4425, 20.0833))
    assert ppl.kl.patched == KlStats(mean=0.000002, mean_error=0.000001, max=0.00012, same_top_percent=100.0)
    assert ppl.kl.reference == ppl.kl.patched and ppl.kl.met
    assert ppl.kl.args == ("--kl-divergence", "--kl-divergence-base", "FILE")
    assert [r.test for r in result.bench] == ["pp512", "tg128"]
    assert result.bench[0].ratio == pytest.approx(286.0 / 290.0)
    assert result.bench[0].paired.rounds == pytest.approx((286.0 / 290.0,) * 2)
    assert not result.met  # pp512 is below 0.99, tg128 above
    comparison = measured.Comparison.from_json(json.loads(json.dumps(result.to_json())))
    assert comparison == result
    assert comparison.min_ratio == pytest.approx(286.0 / 290.0)
    assert comparison.perplexity_args == ("-c", "512", "--chunks", "8", "-t", "2")


def test_a_patched_build_with_other_logits_misses_the_kl_target(tmp_path: Path) -> None:
    model, text = inputs(tmp_path)
    result = quality.compare(
        fake_tools(tmp_path / "a", "13.1108", 1.0, 1.0),
        fake_tools(tmp_path / "b", "13.1109", 1.0, 1.0, kl=kl_out(0.000301, 0.0123, 99.51)),
        model,
        text,
        "docs/build.md",
        threads=2,
        rounds=1,
    )
    kl = result.kl
    assert kl.patched.mean == 0.000301 and kl.patched.max == 0.0123 and kl.patched.same_top_percent == 99.51
    assert not kl.met
    # the same statistics but a different top token somewhere: missed too
    assert not dataclasses.replace(kl, reference=kl.patched, patched=kl.patched).met


def test_the_perplexity_of_a_kl_divergence_run_is_its_mean_ppl_q() -> None:
    """The whole output of `llama-perplexity --kl-divergence` (the baseline against its own logits, laid out
    as the pinned upstream's tools/perplexity/perplexity.cpp prints it, every statistic included): the
    perplexity is `Mean PPL(Q)` with its 6 decimals, not `Mean PPL(base)` nor a `Mean PPL(Q)/...` line, the
    chunks the PPL column of its table."""
    text = (FIXTURES / "llama-perplexity" / "kl-divergence-baseline.txt").read_text()
    stats, ppl = quality.kl_of(text)
    chunks = (13.4425, 20.0833, 18.9312, 17.0646, 15.6843, 16.0469, 14.2855, 10.8851)
    assert ppl == Perplexity(final=10.885149, error=0.70974, chunks=chunks)
    assert stats == KlStats(mean=0.0, mean_error=0.0, max=0.00005, same_top_percent=100.0)


def test_output_without_statistics_is_an_error() -> None:
    with pytest.raises(BenchError, match="printed no JSON"):
        quality.bench_of("error: failed to load model\n")
    # fewer than 100 tokens: upstream prints the chunk table but no statistics
    table = kl_out(0.0, 0.0, 100.0).split("\n====== Perplexity")[0]
    with pytest.raises(BenchError, match=r"--kl-divergence printed no statistics \(ppl, mean, max, same_top"):
        quality.kl_of(table)


def test_the_speeds_llama_completion_prints_are_parsed() -> None:
    assert rpc._perf(PERF, "prompt eval") == 116.40
    assert rpc._perf(PERF, "eval") == 73.78
    with pytest.raises(BenchError, match="printed no `eval time` line"):
        rpc._perf("load time = 1 ms\n", "eval")


def test_a_tool_without_its_impl_library_runs_against_its_build_tree(tmp_path: Path) -> None:
    bin_dir, build = tmp_path / "bin", tmp_path / "build"
    bin_dir.mkdir()
    (build / "bin").mkdir(parents=True)
    (bin_dir / "llama-bench").write_bytes(b"\x7fELF ... libllama-bench-impl.so ...")
    quality.tool_env.cache_clear()
    with pytest.raises(BenchError, match=r"lacks libllama-bench-impl\.so"):
        quality.tool_env(bin_dir, "llama-bench", None)
    (build / "bin" / "libllama-bench-impl.so").write_bytes(b"")
    quality.tool_env.cache_clear()
    assert quality.tool_env(bin_dir, "llama-bench", build) == {"LD_LIBRARY_PATH": str(build / "bin")}
    (bin_dir / "libllama-bench-impl.so").write_bytes(b"")
    quality.tool_env.cache_clear()
    assert quality.tool_env(bin_dir, "llama-bench", build) == {}


def test_the_loopback_counter_is_read() -> None:
    if not Path("/proc/net/dev").is_file():
        pytest.skip("no /proc/net/dev")
    before = rpc.loopback_bytes()
    assert before >= 0
    assert rpc.peak_rss(__import__("os").getpid()) > 0
