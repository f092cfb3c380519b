"""series/rules/rewrite.py: the rewrite rules of the layer loop in src/models/*.cpp."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "series" / "rules" / "rewrite.py"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "rules"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rules_rewrite", PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["rules_rewrite"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


rw = load()


def make_tree(root: Path, files: dict[str, str], skip: str = "", archs: str = "") -> Path:
    """A llama.cpp tree with the given src/models/ files, and list files in root/lists."""
    models = root / "tree" / "src" / "models"
    models.mkdir(parents=True)
    for name, content in files.items():
        (models / name).write_text(content)
    lists = root / "lists"
    lists.mkdir()
    (lists / "layer-inputs.skip").write_text(skip)
    (lists / "layer-range-archs.txt").write_text(archs)
    return root / "tree"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def run(
    tree: Path, rule: str, *flags: str, capsys: pytest.CaptureFixture[str] | None = None
) -> tuple[int, str, str]:
    code = rw.main([*flags, "--lists", str(tree.parent / "lists"), rule, str(tree)])
    out, err = capsys.readouterr() if capsys is not None else ("", "")
    return code, out, err


def models(tree: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((tree / "src" / "models").glob("*.cpp"))}


def rewrite(rule: str, source: str) -> str:
    outcome = rw.rewrite_source(rw.RULES[rule], source.encode(), "src/models/x.cpp")
    assert outcome.status in ("changed", "done"), outcome
    return str(outcome.new.decode()) if outcome.status == "changed" else source


# --- layer-inputs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["standard", "store"])
def test_layer_inputs_fixture(name: str) -> None:
    assert rewrite("layer-inputs", fixture(f"{name}.cpp")) == fixture(f"{name}.layer-inputs.cpp")


@pytest.mark.parametrize("name", ["standard", "store"])
def test_layer_range_fixture(name: str) -> None:
    source = fixture(f"{name}.layer-inputs.cpp")
    assert rewrite("layer-range-archs", source) == fixture(f"{name}.layer-range-archs.cpp")


@pytest.mark.parametrize(
    ("rule", "name"),
    [("layer-inputs", "standard"), ("layer-inputs", "store"), ("layer-range-archs", "standard")],
)
def test_idempotent(rule: str, name: str) -> None:
    once = rewrite(rule, fixture(f"{name}.layer-inputs.cpp" if rule != "layer-inputs" else f"{name}.cpp"))
    outcome = rw.rewrite_source(rw.RULES[rule], once.encode(), "src/models/x.cpp")
    assert outcome.status == "done"
    # layer-inputs leaves the output of layer-range-archs alone too
    final = fixture(f"{name}.layer-range-archs.cpp")
    assert rw.rewrite_source(rw.RULES["layer-inputs"], final.encode(), "x").status == "done"


LOOP = "    for (int il = 0; il < n_layer; ++il) {\n"
GRAPH = (
    "llama_model_t::graph::graph(const llama_model & model, const llm_graph_params & params) :"
    " llm_graph_context(params) {\n"
    "    ggml_tensor * cur;\n"
    "    ggml_tensor * inpL = build_inp_embd(model.tok_embd);\n"
    "\n"
    "{loop}"
    "    cur = inpL;\n"
    "}\n"
)


def graph(loop: str) -> str:
    return GRAPH.replace("{loop}", loop)


def test_blank_first_line_gets_no_second_blank() -> None:
    source = graph(LOOP + "\n        // comment\n        inpL = ggml_scale(ctx0, inpL, 2.0f);\n    }\n\n")
    expected = graph(
        LOOP + "        inpL = build_layer_inp(il, inpL);\n\n        // comment\n"
        "        inpL = ggml_scale(ctx0, inpL, 2.0f);\n    }\n\n"
    )
    assert rewrite("layer-inputs", source) == expected


def test_store_is_left_to_the_graph_and_becomes_the_call_for_a_range() -> None:
    source = graph(LOOP + "        res->t_layer_inp[il] = inpL;\n\n        inpL = f(inpL);\n    }\n")
    assert rewrite("layer-inputs", source) == source
    assert "        inpL = build_layer_inp(il, inpL);\n\n        inpL = f(inpL);\n" in rewrite(
        "layer-range-archs", source
    )


def test_later_store_of_the_layer_input_is_kept() -> None:
    body = (
        "        const int n = hparams.n_head(il);\n\n"
        "        res->t_layer_inp[il] = inpL;\n"
        "        inpL = f(inpL);\n"
        "    }\n"
    )
    assert rewrite("layer-inputs", graph(LOOP + body)) == graph(LOOP + body)


CVEC_END = (
    "        cur = f(inpL);\n"
    "        cur = build_cvec(cur, il);\n"
    '        cb(cur, "l_out", il);\n'
    "        inpL = cur;\n"
    "    }\n"
)


def test_a_graph_that_llama_cpp_records_by_itself_is_left_alone() -> None:
    source = graph(LOOP + CVEC_END)
    assert rw.rewrite_source(rw.RULES["layer-inputs"], source.encode(), "x").status == "done"


@pytest.mark.parametrize(
    ("before", "end"),
    [
        pytest.param("    inpL = ggml_scale(ctx0, inpL, 2.0f);\n", CVEC_END, id="input-code-before-the-loop"),
        pytest.param(
            "",
            CVEC_END.replace("        inpL = cur;", "        inpL = ggml_add(ctx0, cur, x);"),
            id="not-cur",
        ),
        pytest.param("", CVEC_END.replace("build_cvec(cur, il)", "g(cur)"), id="no-cvec"),
        pytest.param(
            "", CVEC_END.replace("        cb(cur", "        cur = h(cur);\n        cb(cur"), id="after-cvec"
        ),
    ],
)
def test_a_graph_that_changes_the_hidden_state_elsewhere_gets_the_call(before: str, end: str) -> None:
    source = graph(LOOP + end).replace("\n\n" + LOOP, "\n" + before + "\n" + LOOP)
    assert "inpL = build_layer_inp(il, inpL);" in rewrite("layer-inputs", source)


def test_file_without_a_layer_loop_is_left_alone() -> None:
    source = fixture("noloop.cpp")
    for rule in ("layer-inputs", "layer-range-archs"):
        outcome = rw.rewrite_source(rw.RULES[rule], source.encode(), "src/models/noloop.cpp")
        assert outcome.status == "no-loop"
    plain = (
        "static int f(int n_layer) {\n"
        "    int s = 0;\n"
        "    for (int il = 0; il < n_layer; ++il) {\n"
        "        s += il;\n"
        "    }\n"
        "    return s;\n"
        "}\n"
    )
    assert rw.rewrite_source(rw.RULES["layer-inputs"], plain.encode(), "x").status == "no-loop"


REFUSED = [
    pytest.param(
        graph("    for (int il = 0; il < n_layer; il++) {\n        inpL = f(inpL);\n    }\n"),
        5,
        "unknown shape",
        id="il++",
    ),
    pytest.param(
        graph("    for (int il = 0; il < n_layer - 1; ++il) {\n        inpL = f(inpL);\n    }\n"),
        5,
        "unknown shape",
        id="bound",
    ),
    pytest.param(
        graph(
            LOOP + "        if (capture) {\n            res->t_layer_inp[il] = g(inpL);\n        }\n"
            "        inpL = f(inpL);\n    }\n"
        ),
        7,
        "records its input",
        id="own-capture",
    ),
    pytest.param(
        graph(LOOP + "        inpL = f(inpL);\n    }\n" + LOOP + "        inpL = f(inpL);\n    }\n"),
        8,
        "more than one layer loop",
        id="two-loops",
    ),
    pytest.param(
        graph(LOOP.replace("{\n", "{ inpL = f(inpL);\n") + "    }\n"),
        5,
        "last thing on its line",
        id="same-line",
    ),
    pytest.param(
        graph(LOOP + "        inpL = f(inpL);\n    }\n").replace("ggml_tensor * inpL", "ggml_tensor * x"),
        5,
        "declares no inpL",
        id="no-inpL",
    ),
    pytest.param(graph(LOOP + "        inpL = f(inpL;\n    }\n"), 6, "cannot read", id="parse-error"),
]


@pytest.mark.parametrize(("source", "line", "reason"), REFUSED)
def test_unknown_shape_refused(source: str, line: int, reason: str) -> None:
    outcome = rw.rewrite_source(rw.RULES["layer-inputs"], source.encode(), "src/models/odd.cpp")
    assert (outcome.status, outcome.line) == ("refused", line), outcome
    assert reason in outcome.reason


def test_refusal_names_file_and_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = graph("    for (int il = 0; il < n_layer; il++) {\n        inpL = f(inpL);\n    }\n")
    tree = make_tree(tmp_path, {"a-good.cpp": fixture("standard.cpp"), "b-odd.cpp": bad})
    before = models(tree)
    code, _, err = run(tree, "layer-inputs", capsys=capsys)
    assert code == rw.EXIT_REFUSED
    assert "src/models/b-odd.cpp:5: layer-inputs: a loop over the layers in an unknown shape" in err
    assert models(tree) == before


# --- the program ----------------------------------------------------------------------------------


def test_tree_in_place_check_and_second_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = make_tree(
        tmp_path,
        {
            "standard.cpp": fixture("standard.cpp"),
            "store.cpp": fixture("store.cpp"),
            "noloop.cpp": fixture("noloop.cpp"),
        },
        skip="# skipped\nstore.cpp  keeps its own capture\n",
        archs="standard.cpp\n",
    )
    assert run(tree, "layer-inputs", "--check", capsys=capsys)[0] == rw.EXIT_DIFFERS
    assert models(tree)["standard.cpp"] == fixture("standard.cpp")
    assert run(tree, "layer-inputs", capsys=capsys)[0] == rw.EXIT_OK
    after = models(tree)
    assert after == {
        "noloop.cpp": fixture("noloop.cpp"),
        "standard.cpp": fixture("standard.layer-inputs.cpp"),
        "store.cpp": fixture("store.cpp"),  # skipped
    }
    code, _, err = run(tree, "layer-inputs", capsys=capsys)
    assert code == rw.EXIT_OK and "0 changed, 1 done, 1 without a layer loop, 1 not for this rule" in err
    assert models(tree) == after
    assert run(tree, "layer-inputs", "--check", capsys=capsys)[0] == rw.EXIT_OK

    assert run(tree, "layer-range-archs", capsys=capsys)[0] == rw.EXIT_OK
    assert models(tree)["standard.cpp"] == fixture("standard.layer-range-archs.cpp")
    assert models(tree)["store.cpp"] == fixture("store.cpp")  # not listed
    assert run(tree, "layer-range-archs", "--check", capsys=capsys)[0] == rw.EXIT_OK


def test_diff_writes_nothing_and_applies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = make_tree(tmp_path, {"standard.cpp": fixture("standard.cpp")})
    code = rw.main(["--diff", "--lists", str(tmp_path / "lists"), "layer-inputs", str(tree)])
    diff = capsys.readouterr().out
    assert code == rw.EXIT_DIFFERS
    assert models(tree)["standard.cpp"] == fixture("standard.cpp")
    assert diff.startswith("--- a/src/models/standard.cpp\n+++ b/src/models/standard.cpp\n")
    assert "+        inpL = build_layer_inp(il, inpL);\n+\n" in diff
    patch = tmp_path / "x.diff"
    patch.write_text(diff)
    subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True)
    assert models(tree)["standard.cpp"] == fixture("standard.layer-inputs.cpp")


def test_listed_file_missing_or_without_loop_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = make_tree(
        tmp_path,
        {"noloop.cpp": fixture("noloop.cpp"), "standard.cpp": fixture("standard.layer-inputs.cpp")},
        archs="# list\nstandard.cpp\ngone.cpp\nnoloop.cpp\n",
    )
    code, _, err = run(tree, "layer-range-archs", capsys=capsys)
    assert code == rw.EXIT_REFUSED
    assert (
        f"{tmp_path / 'lists' / 'layer-range-archs.txt'}:3: layer-range-archs: "
        "src/models/gone.cpp is not in the tree" in err
    )
    assert "src/models/noloop.cpp:1: layer-range-archs: listed, but no graph" in err
    assert models(tree)["standard.cpp"] == fixture("standard.layer-inputs.cpp")


def test_layer_range_adds_the_call_where_layer_inputs_did_not() -> None:
    source = graph(LOOP + CVEC_END)
    ranged = rewrite("layer-range-archs", source)
    assert (
        "for (int il = il_begin; il < il_end; ++il) {\n        inpL = build_layer_inp(il, inpL);\n\n"
        in ranged
    )
    assert "    if (build_layer_out(inpL)) {\n" in ranged


def test_bad_list_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = make_tree(tmp_path, {}, skip="src/models/x.cpp\n")
    code, _, err = run(tree, "layer-inputs", capsys=capsys)
    assert code == rw.EXIT_REFUSED and "layer-inputs.skip:1: expected the name of a file" in err


def test_shipped_lists_are_well_formed() -> None:
    skip = rw.read_list(PROGRAM.parent / "layer-inputs.skip")
    archs = rw.read_list(PROGRAM.parent / "layer-range-archs.txt")
    assert set(skip) == {"deepseek4.cpp", "dflash.cpp", "gemma3n.cpp", "glm5-next.cpp", "hy-v4.cpp"}
    assert all(reason for _, reason in skip.values())
    assert len(archs) == 107 and not set(archs) & set(skip)


def test_runs_as_a_script(tmp_path: Path) -> None:
    tree = make_tree(tmp_path, {"standard.cpp": fixture("standard.cpp")})
    result = subprocess.run(
        [
            sys.executable,
            str(PROGRAM),
            "--check",
            "--lists",
            str(tmp_path / "lists"),
            "layer-inputs",
            str(tree),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (
        "layer-inputs: 1 to change, 0 done, 0 without a layer loop, 0 not for this rule, 0 refused\n"
        "src/models/standard.cpp: layer-inputs: differs from the rule's output\n"
    )
