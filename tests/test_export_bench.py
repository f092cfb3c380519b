"""`dgr bench --rpc`'s measurements beside upstream's tools, as far as they run without a build: the output
of upstream's tools parsed (fake tools print what the real ones print), the result read back by the export
(dgr.export.measured) exactly as the bench writes it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from dgr.errors import BenchError
from dgr.export import measured
from dgr.verify.bench import quality, rpc

PERPLEXITY_OUT = (
    "0.02.263.729 I perplexity: calculating perplexity over 2 chunks, n_ctx=512, batch_size=2048, n_seq=4\n"
    "[1]13.4425,[2]20.0833,\n"
    "0.41.136.747 I Final estimate: PPL = {final} +/- 0.48251\n"
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


def fake_tools(where: Path, final: str, pp: float, tg: float) -> Path:
    """A bin/ with llama-perplexity and llama-bench that print what upstream's print."""
    where.mkdir(parents=True)
    scripts = {
        "llama-perplexity": f"cat <<'OUT' >&2\n{PERPLEXITY_OUT.format(final=final)}OUT\n",
        "llama-bench": f"cat <<'OUT'\n{bench_out(pp, tg)}\nOUT\n",
    }
    for name, body in scripts.items():
        path = where / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return where


def test_perplexity_and_bench_before_and_after_round_trip_into_the_export(tmp_path: Path) -> None:
    baseline = fake_tools(tmp_path / "baseline", "13.1108", 290.0, 70.0)
    patched = fake_tools(tmp_path / "patched", "13.1108", 286.0, 70.7)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    text = tmp_path / "build.md"
    text.write_text("# build\n")
    result = quality.compare(baseline, patched, model, text, "docs/build.md", threads=2, rounds=2)
    assert result["perplexity"]["identical"] is True
    assert result["perplexity"]["baseline"] == {
        "final": 13.1108,
        "error": 0.48251,
        "chunks": [13.4425, 20.0833],
    }
    assert [r["test"] for r in result["bench"]["results"]] == ["pp512", "tg128"]
    assert result["bench"]["results"][0]["ratio"] == pytest.approx(286.0 / 290.0)
    assert result["bench"]["met"] is False  # pp512 is below 0.99, tg128 above
    comparison = measured.Comparison.from_json(result)
    assert comparison.identical
    assert comparison.min_ratio == pytest.approx(286.0 / 290.0)
    assert comparison.perplexity_args == ("-c", "512", "--chunks", "8", "-t", "2")


def test_a_different_perplexity_is_reported_as_such(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    text = tmp_path / "build.md"
    text.write_text("# build\n")
    result = quality.compare(
        fake_tools(tmp_path / "a", "13.1108", 1.0, 1.0),
        fake_tools(tmp_path / "b", "13.1109", 1.0, 1.0),
        model,
        text,
        "docs/build.md",
        threads=2,
        rounds=1,
    )
    assert result["perplexity"]["identical"] is False


def test_output_without_a_final_estimate_is_an_error() -> None:
    with pytest.raises(BenchError, match="printed no final estimate"):
        quality.perplexity_of("perplexity: tokenizing the input ..\n")
    with pytest.raises(BenchError, match="printed no JSON"):
        quality.bench_of("error: failed to load model\n")


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
