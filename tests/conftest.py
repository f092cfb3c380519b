"""Fixtures: every test gets its own cache dir; unit tests must never start a real build."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from dgr.core import log

from tests.helpers import FakeUpstream, make_fake_upstream, make_repo, make_series


@pytest.fixture(autouse=True)
def isolated(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A private cache dir and no user mirror; outside e2e tests, ninja may not run (fail loudly)."""
    monkeypatch.setenv("DGR_CACHE_DIR", str(tmp_path / "cache"))
    # main() sets the log's mode for each command; a test that calls the library directly gets the default
    log.set_verbose(False)
    log.set_quiet(False)
    monkeypatch.delenv("DGR_UPSTREAM_MIRROR", raising=False)
    monkeypatch.delenv("DGR_REPO", raising=False)
    if request.node.get_closest_marker("e2e") is None:

        def no_build(*args: object, **kwargs: object) -> list[str]:
            raise AssertionError(f"unit test tried to run a real build: {args}")

        monkeypatch.setattr("dgr.core.proc.stream", no_build)


@pytest.fixture(scope="session")
def fake_upstream(tmp_path_factory: pytest.TempPathFactory) -> FakeUpstream:
    return make_fake_upstream(tmp_path_factory.mktemp("upstream") / "llama.cpp")


@pytest.fixture(scope="session")
def fake_patches(fake_upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_series(fake_upstream, tmp_path_factory.mktemp("series") / "work")


@pytest.fixture
def repo(
    tmp_path: Path, fake_upstream: FakeUpstream, fake_patches: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A dgr repository for the fake upstream, found through $DGR_REPO, with the mirror configured."""
    root = make_repo(tmp_path / "repo", fake_upstream, fake_patches)
    monkeypatch.setenv("DGR_REPO", str(root))
    monkeypatch.setenv("DGR_UPSTREAM_MIRROR", str(fake_upstream.path))
    yield root


@pytest.fixture(scope="session")
def series_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one dgr cache of the real series for every end-to-end test of a session ($DGR_TEST_CACHE/series
    when set, to keep it between runs): the first test that needs the patched build builds it there, and the
    others find it built (a cold build of the series is minutes on 2 cores)."""
    shared = os.environ.get("DGR_TEST_CACHE")
    return Path(shared) / "series" if shared else tmp_path_factory.mktemp("series-cache")
