"""`dgr status`: the state of the work and the next command, read without changing anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dgr.builds import buildplan
from dgr.cli import main
from dgr.core.paths import Context

from tests.helpers import commit_all, message, write_report


def status(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["status", "--json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_fresh_checkout_needs_a_build_first(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(repo)
    data = status(capsys)
    assert data["series"] == [
        "docs-add-a-fixture-page.patch",
        "readme-name-the-cann-vendor.patch",
        "readme-mark-hexagon-experimental.patch",
    ]
    assert data["edit_tree"] is None and data["build"] is None
    assert data["verify"].startswith("missing: there is no verify report for the current inputs")
    assert data["bench"].startswith("missing: there is no bench result")
    assert data["export_needs"] == [
        "a build of the current inputs (`dgr build`)",
        "a passing verify report (`dgr verify`)",
        "a bench with the upstream comparisons (`dgr bench --rpc`)",
    ]
    assert data["next"] == "dgr build"
    assert snapshot(repo) == before


def test_a_passing_report_and_an_unexported_commit(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    digest = buildplan.plan(Context.discover(), buildplan.Request()).digest
    assert data_verify(capsys, digest).startswith("passed: ")
    assert main(["edit"]) == 0
    tree = Path(capsys.readouterr().out.strip())
    data = status(capsys)
    assert data["edit_tree"] == str(tree) and data["unexported"] == []
    (tree / "docs" / "fixture.md").write_text("# fixture\n\nEdited in the edit tree.\n")
    commit_all(tree, message("docs : reword the fixture page"))
    data = status(capsys)
    assert data["unexported"] and all(
        p.startswith(("patches/", "series/", "locks/")) for p in data["unexported"]
    )
    assert data["next"] == f"dgr export-patches --dir {tree}"
    assert main(["status"]) == 0
    text = capsys.readouterr().out
    assert f"edit tree:  {tree}: not exported: " in text
    assert text.splitlines()[-1] == f"next:       dgr export-patches --dir {tree}"


def data_verify(capsys: pytest.CaptureFixture[str], digest: str) -> str:
    write_report(digest)
    verify: str = status(capsys)["verify"]
    return verify


def test_a_gpu_backend_has_its_own_build_and_report(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    digest = buildplan.plan(Context.discover(), buildplan.Request(backend="vulkan")).digest
    assert digest != buildplan.plan(Context.discover(), buildplan.Request()).digest
    assert main(["status", "--backend", "vulkan", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["backend"] == "vulkan" and data["inputs_digest"] == digest and data["build"] is None
    assert data["next"] == "dgr build --backend vulkan" and data["export_needs"] == []
    # the CPU build's report (every CPU group) does not count for the backend; the report of its groups does
    write_report(digest)
    assert main(["status", "--backend", "vulkan", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verify"].startswith("missing: ")
    write_report(digest, groups=("archs", "offload"), kept_as=("archs", "offload"))
    assert main(["status", "--backend", "vulkan"]) == 0
    text = capsys.readouterr().out
    assert "backend:    vulkan\n" in text and "verify:     passed: 2 checks" in text
    assert "export-upstream:" not in text
