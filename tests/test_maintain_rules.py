"""dgr.maintain.rules: the generated patches of series/rules/rules.toml, checked against their rule's output
(the real program, real git trees)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dgr.core.paths import Repo
from dgr.errors import ConfigError
from dgr.maintain import rules
from dgr.series import generated

from tests.helpers import ROOT, commit_all, git

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "rules"


def history(tmp_path: Path, *versions: str) -> tuple[Path, list[str]]:
    """A git tree whose commits hold src/models/demo.cpp in each version, in order."""
    tree = tmp_path / "tree"
    (tree / "src" / "models").mkdir(parents=True)
    git(tree, "init", "-q")
    commits = []
    for i, text in enumerate(versions):
        (tree / "src" / "models" / "demo.cpp").write_text(text)
        commits.append(commit_all(tree, f"version {i}"))
    return tree, commits


def parent_tree(tree: Path, commit: str, where: Path) -> Path:
    git(tree, "worktree", "add", "-q", "--detach", str(where), commit)
    return where


GENERATED = generated.Generated("layer-inputs.patch", "layer-inputs")


def test_the_rule_output_passes_and_a_hand_edit_is_named(tmp_path: Path) -> None:
    before = (FIXTURES / "standard.cpp").read_text()
    after = (FIXTURES / "standard.layer-inputs.cpp").read_text()
    by_hand = after.replace(
        "inpL = build_layer_inp(il, inpL);", "inpL = build_layer_inp(il, ggml_cont(ctx0, inpL));"
    )
    assert by_hand != after
    tree, (parent, by_rule, edited) = history(tmp_path, before, after, by_hand)
    repo = Repo(ROOT)

    assert rules.check_commit(repo, GENERATED, parent_tree(tree, parent, tmp_path / "a"), by_rule) is None
    finding = rules.check_commit(repo, GENERATED, parent_tree(tree, parent, tmp_path / "b"), edited)
    assert finding == generated.RuleFinding(
        "layer-inputs.patch",
        "src/models/demo.cpp is not the output of the rule layer-inputs (1 file(s) of src/models/ differ)",
    )


def test_a_tree_the_rule_refuses_is_a_finding_with_file_and_line(tmp_path: Path) -> None:
    unknown = (
        (FIXTURES / "standard.cpp")
        .read_text()
        .replace("il < n_layer; ++il) {\n        ggml", "il < n_layer; il++) {\n        ggml")
    )
    assert "il++" in unknown
    tree, (parent, child) = history(tmp_path, unknown, unknown + "// another commit\n")
    finding = rules.check_commit(Repo(ROOT), GENERATED, parent_tree(tree, parent, tmp_path / "a"), child)
    assert finding is not None
    assert finding.problem.startswith("the rule layer-inputs refuses the tree: src/models/demo.cpp:")


def test_the_repository_names_its_generated_patches() -> None:
    named = generated.load(Repo(ROOT))
    assert named == [
        generated.Generated("layer-inputs.patch", "layer-inputs"),
        generated.Generated("layer-range-archs.patch", "layer-range-archs"),
    ]
    series = (ROOT / "series" / "series").read_text().split()
    assert generated.missing(named, series) == []
    assert generated.missing(named, ["layer-inputs.patch"]) == [
        generated.RuleFinding(
            "layer-range-archs.patch", "series/rules/rules.toml names it, the series does not"
        )
    ]


@pytest.mark.parametrize(
    "text",
    [
        "[[generated]]\npatch = 1\nrule = 'x'\n",
        "[[generated]]\npatch = 'a'\n",
        "generated = 'a'\n",
        "[[generated]\n",
    ],
)
def test_a_bad_rules_file_is_a_config_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "series" / "rules").mkdir(parents=True)
    (tmp_path / "series" / "rules" / "rules.toml").write_text(text)
    with pytest.raises(ConfigError, match=r"series/rules/rules\.toml"):
        generated.load(Repo(tmp_path))


def test_no_rules_file_no_generated_patches(tmp_path: Path) -> None:
    assert generated.load(Repo(tmp_path)) == []
