"""dgr.maintain.rules: the generated patches of series/rules/rules.toml, checked against their rule's output
(the real program, real git trees)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from dgr.contracts.locks import Pin
from dgr.core.paths import Repo
from dgr.errors import ConfigError
from dgr.git import apply, gitops
from dgr.maintain import rebase, rules
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
    assert finding == (
        "src/models/demo.cpp is not the output of the rule layer-inputs (1 file(s) of src/models/ differ)"
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
    assert finding.startswith("the rule layer-inputs refuses the tree: src/models/demo.cpp:")


def test_the_repository_names_its_generated_patches() -> None:
    named = generated.load(Repo(ROOT))
    assert named == [
        generated.Generated("layer-inputs.patch", "layer-inputs"),
        generated.Generated("layer-range-archs.patch", "layer-range-archs"),
    ]
    series = (ROOT / "series" / "series").read_text().split()
    assert generated.missing(named, series) == []
    assert generated.missing(named, ["layer-inputs.patch"]) == [
        generated.Generated("layer-range-archs.patch", "layer-range-archs")
    ]
    assert generated.MISSING == "series/rules/rules.toml names it, the series does not"


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


# --- regeneration on another upstream --------------------------------------------------------------------

IDENTITY = gitops.Identity("test", "test@localhost", "1700000000 +0000")


def upstream_with_a_generated_patch(tmp_path: Path) -> tuple[Path, str, str, Path]:
    """An upstream (base: one model file; later: a second model file) and `layer-inputs.patch` on base: the
    rule's output plus a hand-written README line."""
    up = tmp_path / "upstream"
    (up / "src" / "models").mkdir(parents=True)
    git(up, "init", "-q")
    standard = (FIXTURES / "standard.cpp").read_text()
    (up / "src" / "models" / "a.cpp").write_text(standard)
    (up / "README.md").write_text("llama.cpp\n")
    base = commit_all(up, "base")
    (up / "src" / "models" / "b.cpp").write_text(standard.replace("llama_model_demo", "llama_model_other"))
    later = commit_all(up, "later: a new model")
    git(up, "checkout", "-q", "-B", "series", base)
    (up / "src" / "models" / "a.cpp").write_text((FIXTURES / "standard.layer-inputs.cpp").read_text())
    (up / "README.md").write_text("llama.cpp\n\nThe layer inputs are recorded.\n")
    commit_all(up, "llama : record the input of every layer\n\nWhy it is there.")
    patch = tmp_path / "layer-inputs.patch"
    patch.write_text(git(up, "format-patch", "-1", "--stdout", "HEAD") + "\n")
    git(up, "checkout", "-q", "--detach", base)
    return up, base, later, patch


def test_regenerate_gives_a_new_model_file_the_edit(tmp_path: Path) -> None:
    up, _, later, patch = upstream_with_a_generated_patch(tmp_path)
    work = parent_tree(up, later, tmp_path / "work")
    done, stopped, counts = rules.regenerate(Repo(ROOT), "layer-inputs", work, patch, IDENTITY)
    assert (done, stopped) == (True, [])
    assert counts is not None and (counts.changed, counts.refused) == (2, [])  # a.cpp, and b.cpp new there
    assert git(work, "log", "-1", "--format=%s") == "llama : record the input of every layer"
    assert git(work, "status", "--porcelain") == ""
    for name in ("a.cpp", "b.cpp"):  # b.cpp is new in `later`: the rule gave it the edit too
        assert "inpL = build_layer_inp(il, inpL);" in (work / "src" / "models" / name).read_text()
    assert "recorded" in (work / "README.md").read_text()


def test_regenerate_names_the_line_the_rule_refuses(tmp_path: Path) -> None:
    up, base, _, patch = upstream_with_a_generated_patch(tmp_path)
    work = parent_tree(up, base, tmp_path / "work")
    model = work / "src" / "models" / "a.cpp"
    model.write_text(
        model.read_text().replace(
            "il < n_layer; ++il) {\n        ggml", "il < n_layer; il++) {\n        ggml"
        )
    )
    commit_all(work, "an unknown loop")
    head = git(work, "rev-parse", "HEAD")
    done, stopped, counts = rules.regenerate(Repo(ROOT), "layer-inputs", work, patch, IDENTITY)
    assert not done and len(stopped) == 1 and stopped[0].startswith("src/models/a.cpp:")
    assert counts is not None and counts.refused == stopped
    assert git(work, "rev-parse", "HEAD") == head and git(work, "status", "--porcelain") == ""


def test_rebase_check_regenerates_the_generated_patch(tmp_path: Path) -> None:
    up, base, later, patch = upstream_with_a_generated_patch(tmp_path)
    ref = apply.PatchRef(patch.name, patch, "")
    pin = Pin(base, git(up, "rev-parse", f"{base}^{{tree}}"), dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    statuses = {}
    for name, commit in (("pin", base), ("later", later)):
        onto = rebase.Onto(name, up, commit, git(up, "rev-parse", f"{commit}^{{tree}}"), "test", True)
        where = tmp_path / name
        where.mkdir()
        report = rebase.check(up, onto, pin, [ref], IDENTITY, where, Repo(ROOT))
        statuses[name] = [p.status for p in report.patches]
    # on its own upstream the rule gives the committed patch; on `later`, plain `git am` would miss b.cpp
    assert statuses == {"pin": ["clean"], "later": ["regenerated"]}
    assert "dgr edit --onto later" in report.next_step()


def test_the_counts_of_a_rule_keep_their_json_keys() -> None:
    """`dgr check --json` and rebase-check name a rule's counts by these keys (encoded by
    dgr.contracts.convert, the one encoder of the records)."""
    counts = rules.RuleCounts(changed=1, done=2, no_loop=3, skipped=4, refused=["a.cpp:1: why"])
    assert counts.to_json() == {
        "changed": 1,
        "done": 2,
        "without_layer_loop": 3,
        "not_for_rule": 4,
        "refused": ["a.cpp:1: why"],
    }
