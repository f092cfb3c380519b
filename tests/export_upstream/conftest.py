"""The fixtures of the export-upstream tests: the fake upstream and its series (once a session), a repository
on them (in place of tests/conftest.py's), and one with a package, a report and a bench result."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.export_upstream.support import config, make_pr_upstream, write_bench, write_package, write_report
from tests.helpers import FakeUpstream, make_repo, make_series


@pytest.fixture(scope="session")
def pr_upstream(tmp_path_factory: pytest.TempPathFactory) -> FakeUpstream:
    return make_pr_upstream(tmp_path_factory.mktemp("pr-upstream") / "llama.cpp")


@pytest.fixture(scope="session")
def pr_patches(pr_upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_series(pr_upstream, tmp_path_factory.mktemp("pr-series") / "work")


@pytest.fixture
def repo(
    tmp_path: Path, pr_upstream: FakeUpstream, pr_patches: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Path:
    root = make_repo(tmp_path / "repo", pr_upstream, pr_patches)
    monkeypatch.setenv("DGR_REPO", str(root))
    monkeypatch.setenv("DGR_UPSTREAM_MIRROR", str(pr_upstream.path))
    return root


@pytest.fixture
def packaged(repo: Path) -> Path:
    write_package(repo, config())
    write_report()
    write_bench()
    return repo
