"""The `graph` group (dgr.verify.checks.graph): the lines of layer-graphs are parsed, and the graphs of the
patched build compared with the baseline's; a difference, or a variant built in one tree only, fails."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from dgr.contracts.report import Counts, Report
from dgr.errors import VerifyError
from dgr.verify.checks import graph

PP_OPS = ["GET_ROWS", "RMS_NORM", "MUL", "MUL_MAT", "ADD", "SOFT_MAX", "MUL_MAT"]
TG_OPS = ["GET_ROWS", "RMS_NORM", "MUL", "MUL_MAT", "ADD", "MUL_MAT"]


def line(arch: str, config: str, shape: str, ops: list[str] | None = None, **extra: Any) -> str:
    record: dict[str, Any] = {"arch": arch, "config": config, "shape": shape, "gguf": "0123456789abcdef"}
    if ops is not None:
        record |= {"n_nodes": len(ops), "ops": ops, "shapes": [f"f32 {i}x16x1x1" for i in range(len(ops))]}
    return json.dumps(record | extra)


def begin(arch: str, config: str) -> str:
    return json.dumps({"arch": arch, "config": config, "begin": True})


def state(arch: str, config: str, value: str = "1234:00000000deadbeef") -> str:
    return json.dumps({"arch": arch, "config": config, "state": value})


def variant(arch: str, config: str, pp: list[str] = PP_OPS, tg: list[str] = TG_OPS) -> list[str]:
    graphs_ = [
        line(arch, config, "pp", pp),
        line(arch, config, "pp-last", TG_OPS),
        line(arch, config, "tg", tg),
    ]
    return [begin(arch, config), *graphs_, state(arch, config)]


def failing(arch: str, config: str, error: str) -> list[str]:
    return [
        begin(arch, config),
        *(line(arch, config, s, error=error) for s in graph.SHAPES),
        json.dumps({"arch": arch, "config": config, "state_error": error}),
    ]


GPTJ_ERROR = "failed to create llama model: unknown model architecture: 'gptj'"
OUTPUT = "\n".join(
    [
        *variant("llama", "dense"),
        *variant("llama", "moe"),
        "llama_model_load: a message of llama.cpp on stdout",
        *failing("gptj", "dense", GPTJ_ERROR),
    ]
)
LISTED = ("llama/dense", "llama/moe", "gptj/dense")


def run_of(output: str, listed: tuple[str, ...] = LISTED) -> graph.Run:
    return graph.Run(listed=listed, variants=graph.parse(output).variants)


def by_name(patched: str, baseline: str = OUTPUT) -> dict[str, Any]:
    return {c.name: c for c in graph.checks(run_of(patched), run_of(baseline))}


def test_lines_are_parsed_into_variants_and_other_lines_skipped() -> None:
    out = graph.parse(OUTPUT)
    assert out.begun == LISTED
    assert list(out.variants) == list(LISTED)
    llama = out.variants["llama/dense"]
    assert (
        llama.built and llama.graphs["pp"].ops == tuple(PP_OPS) and llama.graphs["tg"].n_nodes == len(TG_OPS)
    )
    gptj = out.variants["gptj/dense"]
    assert not gptj.built and gptj.error == GPTJ_ERROR and not gptj.graphs


def test_a_variant_without_its_second_shape_is_unfinished() -> None:
    out = graph.parse(
        "\n".join([*variant("llama", "dense"), begin("qwen2", "dense"), line("qwen2", "dense", "pp", PP_OPS)])
    )
    assert list(out.variants) == ["llama/dense"] and out.begun[-1] == "qwen2/dense"


def test_a_line_whose_ops_do_not_match_n_nodes_is_an_error() -> None:
    bad = OUTPUT.replace(f'"n_nodes": {len(PP_OPS)}', '"n_nodes": 99', 1)
    assert "malformed" in graph.parse(bad).variants["llama/dense"].error


def test_the_list_is_parsed() -> None:
    text = '{"arch":"llama","config":"dense"}\n{"arch":"llama","config":"moe"}\n'
    assert graph.parse_list(text) == ("llama/dense", "llama/moe")


def test_equal_graphs_pass_and_an_architecture_built_by_neither_tree_is_listed() -> None:
    checks = by_name(OUTPUT)
    # built in neither tree, with the same error: compared nothing, so it is listed, neither passed nor failed
    gptj = checks.pop("gptj/dense")
    assert gptj.not_compared and not gptj.passed and not gptj.failed and gptj.outcome == "LISTED"
    assert gptj.detail == f"built in neither tree, with the same error: {GPTJ_ERROR}"
    assert Counts.of([gptj, *checks.values()]).text() == "3 passed, 1 not compared (listed), 0 failed"
    assert all(c.passed for c in checks.values()), [c.detail for c in checks.values() if not c.passed]
    assert checks["llama/dense"].figures["equal"] is True
    assert checks["llama/dense"].figures["n_nodes"]["pp"] == {"patched": len(PP_OPS), "baseline": len(PP_OPS)}
    summary = checks[graph.SUMMARY].figures
    assert summary["variants"] == 3 and summary["compared"] == 2 and summary["equal"] == 2
    assert summary["not_built"] == {"gptj/dense": GPTJ_ERROR} and summary["failed"] == []


def test_one_op_changed_fails_with_the_first_differing_index() -> None:
    changed = PP_OPS.copy()
    changed[5] = "SOFT_MAX_EXT"
    patched = OUTPUT.replace(json.dumps(PP_OPS), json.dumps(changed), 1)
    checks = by_name(patched)
    llama = checks["llama/dense"]
    assert not llama.passed and "pp: op 5 is SOFT_MAX_EXT, upstream SOFT_MAX" in llama.detail
    assert llama.figures["equal"] is False
    assert llama.figures["first_difference"] == {
        "pp": {"what": "op", "index": 5, "patched": "SOFT_MAX_EXT", "baseline": "SOFT_MAX"}
    }
    assert checks["llama/moe"].passed
    summary = checks[graph.SUMMARY]
    assert (
        not summary.passed and summary.figures["equal"] == 1 and summary.figures["failed"] == ["llama/dense"]
    )


def test_an_extra_node_fails_on_the_count_and_the_index() -> None:
    patched = "\n".join([*variant("llama", "dense", tg=[*TG_OPS, "CPY"]), *variant("llama", "moe")])
    patched += "\n" + "\n".join(failing("gptj", "dense", GPTJ_ERROR))
    llama = by_name(patched)["llama/dense"]
    assert not llama.passed
    assert f"tg: {len(TG_OPS) + 1} nodes, upstream {len(TG_OPS)}" in llama.detail
    assert f"tg: op {len(TG_OPS)} is CPY, upstream (end)" in llama.detail


def test_a_changed_shape_fails() -> None:
    patched = OUTPUT.replace('"f32 3x16x1x1"', '"f32 3x17x1x1"', 1)
    llama = by_name(patched)["llama/dense"]
    assert not llama.passed and "pp: node 3 (MUL_MAT) is f32 3x17x1x1, upstream f32 3x16x1x1" in llama.detail


def test_a_variant_built_in_one_tree_only_fails() -> None:
    patched = OUTPUT.replace("\n".join(variant("llama", "moe")), "\n".join(failing("llama", "moe", "boom")))
    checks = by_name(patched)
    assert (
        not checks["llama/moe"].passed and "baseline tree only (patched: boom)" in checks["llama/moe"].detail
    )
    baseline_fails = by_name(OUTPUT, baseline=patched)["llama/moe"]
    assert not baseline_fails.passed and "patched tree only" in baseline_fails.detail


def test_the_same_failure_at_another_line_is_the_same_and_another_failure_is_not() -> None:
    upstream = OUTPUT.replace(
        GPTJ_ERROR, "crashed (exit code -6): /src/src/llama-model-loader.cpp:1377: GGML_ASSERT(x) failed"
    )
    moved = upstream.replace(".cpp:1377:", ".cpp:1391:")
    assert by_name(moved, baseline=upstream)["gptj/dense"].not_compared
    other = upstream.replace("GGML_ASSERT(x)", "GGML_ASSERT(y)")
    gptj = by_name(other, baseline=upstream)["gptj/dense"]
    assert gptj.failed and not gptj.not_compared and "fails differently" in gptj.detail


def test_a_graph_group_that_compared_nothing_is_no_pass() -> None:
    # every variant built in neither tree: listed only, and the check of the whole group fails
    only_gptj = "\n".join(failing("gptj", "dense", GPTJ_ERROR))
    checks = graph.checks(run_of(only_gptj, ("gptj/dense",)), run_of(only_gptj, ("gptj/dense",)))
    assert [c.outcome for c in checks] == ["LISTED", "FAIL"]
    assert "no architecture variant was built in both trees" in checks[-1].detail
    report = Report(inputs_digest="d" * 64, baseline_digest=None, groups=("graph",), checks=tuple(checks[:1]))
    assert not report.passed


def test_different_models_are_not_compared() -> None:
    patched = OUTPUT.replace('"gguf": "0123456789abcdef"', '"gguf": "fedcba9876543210"', 2)
    llama = by_name(patched)["llama/dense"]
    assert not llama.passed and "different models" in llama.detail


def test_a_variant_only_one_generator_has_fails() -> None:
    extra = OUTPUT + "\n" + "\n".join(variant("qwen3", "dense"))
    checks = {c.name: c for c in graph.checks(run_of(extra, (*LISTED, "qwen3/dense")), run_of(OUTPUT))}
    assert not checks["qwen3/dense"].passed and "only the patched generator" in checks["qwen3/dense"].detail


def test_nothing_compared_fails_the_summary() -> None:
    only_gptj = "\n".join(failing("gptj", "dense", GPTJ_ERROR))
    checks = graph.checks(run_of(only_gptj, ("gptj/dense",)), run_of(only_gptj, ("gptj/dense",)))
    assert not checks[-1].passed and "no architecture variant was built in both trees" in checks[-1].detail


# --------------------------------------------------------------------------- running the program


def fake_program(tmp_path: Path, crash_on: str | None) -> Path:
    """A stand-in for layer-graphs: --list prints the variants; a run prints each variant asked for (all by
    default) and aborts in `crash_on` after its begin line."""
    script = tmp_path / "layer-graphs"
    script.write_text(
        f"""#!{sys.executable}
import json, os, sys
LISTED = {list(LISTED)!r}
if sys.argv[1:] == ["--list"]:
    for n in LISTED:
        a, c = n.split("/")
        print(json.dumps({{"arch": a, "config": c}}))
    sys.exit(0)
assert os.environ.get("GGML_NO_BACKTRACE") == "1"
for n in sys.argv[1:] or LISTED:
    a, c = n.split("/")
    print(json.dumps({{"arch": a, "config": c, "begin": True}}), flush=True)
    if n == {crash_on!r}:
        print("/src/src/llama-model.cpp:42: GGML_ASSERT(n_embd > 0) failed", file=sys.stderr)
        os.abort()
    for s in ("pp", "pp-last", "tg"):
        print(json.dumps({{"arch": a, "config": c, "shape": s, "gguf": "00", "n_nodes": 1, "ops": ["ADD"],
                          "shapes": ["f32 1x1x1x1"]}}))
    print(json.dumps({{"arch": a, "config": c, "state": "8:0000000000000001"}}))
"""
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_a_crash_is_recorded_and_the_variants_after_it_run_again(tmp_path: Path) -> None:
    ran = graph.run(fake_program(tmp_path, crash_on="llama/moe"))
    assert ran.listed == LISTED and not ran.problems
    assert ran.variants["llama/dense"].built and ran.variants["gptj/dense"].built
    crashed = ran.variants["llama/moe"]
    assert not crashed.built and crashed.error.startswith("crashed (exit code -6)")
    assert "llama-model.cpp:42: GGML_ASSERT(n_embd > 0) failed" in crashed.error


def test_a_clean_run_has_every_variant(tmp_path: Path) -> None:
    ran = graph.run(fake_program(tmp_path, crash_on=None))
    assert [n for n, v in ran.variants.items() if v.built] == list(LISTED) and not ran.problems


def test_a_build_without_the_program_is_a_verify_error(tmp_path: Path) -> None:
    with pytest.raises(VerifyError, match="has no layer-graphs"):
        graph.run(tmp_path / "bin" / "layer-graphs")


def test_a_difference_in_the_prompt_with_its_last_output_only_fails() -> None:
    selected = [*TG_OPS[:-1], "GET_ROWS", TG_OPS[-1]]
    patched = OUTPUT.replace(
        line("llama", "moe", "pp-last", TG_OPS), line("llama", "moe", "pp-last", selected)
    )
    llama = by_name(patched)["llama/moe"]
    assert not llama.passed and f"pp-last: op {len(TG_OPS) - 1} is GET_ROWS, upstream MUL_MAT" in llama.detail
    assert list(llama.figures["first_difference"]) == ["pp-last"]


def test_a_variant_without_its_state_line_is_unfinished() -> None:
    out = graph.parse("\n".join(variant("llama", "dense")[:-1]))
    assert "llama/dense" not in out.variants


def test_another_sequence_state_with_the_same_graphs_fails_naming_both() -> None:
    patched = OUTPUT.replace(state("llama", "moe"), state("llama", "moe", "1246:00000000deadbeef"))
    llama = by_name(patched)["llama/moe"]
    assert not llama.passed
    assert "the sequence state after a prompt is 1246:00000000deadbeef, upstream 1234:00000000deadbeef" in (
        llama.detail
    )
    assert by_name(OUTPUT)["llama/moe"].passed


def test_a_state_that_could_not_be_taken_is_an_error_of_the_variant() -> None:
    failed = json.dumps({"arch": "llama", "config": "dense", "state_error": "llama_decode failed"})
    broken = OUTPUT.replace(state("llama", "dense"), failed)
    llama = graph.parse(broken).variants["llama/dense"]
    assert not llama.built and llama.error == "state: llama_decode failed"
