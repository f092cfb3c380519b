"""dgr export-upstream with generated patches (series/rules/rules.toml): the package holds the rules, and the
pull request of a generated commit says how to check it, with upstream's git and python only."""

from __future__ import annotations

import shutil
from pathlib import Path

from dgr.series import generated

from tests.export_upstream.support import PATCHES, export, fetch
from tests.helpers import ROOT, FakeUpstream, git


def test_the_package_holds_the_rules_and_names_the_generated_commit(
    packaged: Path,
    pr_upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    rules_dir = packaged / "series" / "rules"
    shutil.copytree(ROOT / "series" / "rules", rules_dir)
    (rules_dir / "rules.toml").write_text(f'[[generated]]\npatch = "{PATCHES[0]}"\nrule = "layer-inputs"\n')
    out = tmp_path / "out"
    assert export(out) == 0

    # the program, its README and its lists, byte for byte, under the manifest
    manifest = (out / "MANIFEST.sha256").read_text()
    for name in generated.PACKAGED:
        assert (out / "rules" / name).read_bytes() == (ROOT / "series" / "rules" / name).read_bytes()
        assert f"  rules/{name}\n" in manifest
    assert not (out / "rules" / "rules.toml").exists()  # ours: which patches are generated
    assert (
        "| `rules/` | the program that generates the changes to `src/models/` of"
        in (out / "README.md").read_text()
    )

    # the pull request names the generated commit and its parent, as the bundle has them
    work = fetch(pr_upstream, out / "PR-1.bundle", "fixture", tmp_path / "clone")
    first = git(work, "rev-list", "--reverse", f"{pr_upstream.base}..fixture").split()[0]
    body = (out / "PR-1.md").read_text()
    section = body.split("### Generated changes", 1)[1].split("###", 1)[0]
    assert "commit 1 (docs : add a fixture page) are the output of the rule `layer-inputs`" in section
    assert f"git -C llama.cpp worktree add ../generated {pr_upstream.base}\n" in section
    assert "python3 rules/rewrite.py layer-inputs generated\n" in section
    assert f"git -C generated diff {first} -- src/models\n" in section
    assert body.count("### Generated changes") == 1


def test_without_rules_the_package_has_none(packaged: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert export(out) == 0
    assert not (out / "rules").exists()
    assert "### Generated changes" not in (out / "PR-1.md").read_text()
