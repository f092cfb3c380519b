"""Shared test helpers: run dgr, make small real git repositories, copy the repository layout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from dgr.builds import harness, reportstore
from dgr.builds.cmake import Compiler, Toolchain
from dgr.contracts.report import GROUPS, REPORT_FORMAT, Group
from dgr.core.paths import Repo, find_repo_root

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
FORMAT_FLAGS = [
    "--stdout",
    "--zero-commit",
    "--no-numbered",
    "--no-stat",
    "--no-signature",
    "--full-index",
    "--encoding=UTF-8",
]
GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Fixture Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Fixture Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.invalid",
}
WHY = (
    "This change exists because the fixture needs a realistic message: it says why the change is "
    "needed, which problem it solves, and what a reviewer should look at first."
)


def git(cwd: Path, *args: str, date: str = "1700000000 +0000") -> str:
    env = {**os.environ, **GIT_ENV, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def commit_all(repo: Path, message: str, date: str = "1700000000 +0000") -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message, date=date)
    return git(repo, "rev-parse", "HEAD")


def message(subject: str, status: str = "Pending") -> str:
    return f"{subject}\n\n{WHY}\n\nUpstream-Status: {status}\n"


def format_patch(repo: Path, commit: str) -> str:
    return git(repo, "format-patch", "-1", *FORMAT_FLAGS, commit) + "\n"


def run_dgr(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 1800
) -> subprocess.CompletedProcess[str]:
    """dgr in a subprocess, as users run it (the installed package: `pip install -e .`)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "dgr", *args],
        env=full_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass(frozen=True)
class FakeUpstream:
    """A small llama.cpp-like git repository: `base` is the pin, `later` a newer upstream commit."""

    path: Path
    base: str
    base_tree: str
    later: str
    later_tree: str


README = """# fake upstream

| backend | hardware |
| --- | --- |
| BLAS | All |
| CANN | Ascend NPU |
| CUDA | Nvidia GPU |
| HIP | AMD GPU |
| Hexagon [In Progress] | Snapdragon |
| Metal | Apple Silicon |
"""


def checked_out_base(path: Path, base: str, later: str) -> FakeUpstream:
    """The fake upstream at `path` with `base` checked out, and the trees of `base` and `later`."""
    git(path, "checkout", "-q", base)
    return FakeUpstream(
        path,
        base,
        git(path, "rev-parse", f"{base}^{{tree}}"),
        later,
        git(path, "rev-parse", f"{later}^{{tree}}"),
    )


def make_fake_upstream(path: Path) -> FakeUpstream:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "master")
    (path / "README.md").write_text(README)
    (path / "docs").mkdir()
    (path / "docs" / "build.md").write_text("# build\n\nRun cmake.\n")
    (path / "tests").mkdir()
    (path / "tests" / "CMakeLists.txt").write_text("llama_build_and_test(test-sampling.cpp)\n")
    base = commit_all(path, "upstream: base", date="1786884793 +0200")
    (path / "README.md").write_text(README.replace("Hexagon [In Progress]", "Hexagon"))
    (path / "docs" / "build.md").write_text("# build\n\nRun cmake, then ninja.\n")
    later = commit_all(path, "upstream: later", date="1790820708 +0900")
    return checked_out_base(path, base, later)


# the fixture page of the series' first patch, as a later upstream could merge it
FIXTURE_PAGE = ("docs/fixture.md", "# fixture\n\nA page added by a patch.\n")


def later_upstream(upstream: FakeUpstream, where: Path, file: tuple[str, str], date: str) -> Path:
    """A clone of the fake upstream at `later` with one more commit, adding `file` (path, text) at `date`."""
    git(where.parent, "clone", "-q", str(upstream.path), str(where))
    git(where, "checkout", "-q", "-B", "later-plus", upstream.later)
    (where / file[0]).write_text(file[1])
    commit_all(where, f"upstream: add {file[0]}", date=date)
    return where


def make_series(upstream: FakeUpstream, work: Path) -> dict[str, str]:
    """Three patches on the fake pin: onto `later` one applies, one needs 3-way, one conflicts."""
    shutil.copytree(upstream.path, work)
    git(work, "checkout", "-q", "-B", "series", upstream.base)
    (work / "docs" / "fixture.md").write_text("# fixture\n\nA page added by a patch.\n")
    first = commit_all(work, message("docs : add a fixture page"))
    (work / "README.md").write_text(
        (work / "README.md").read_text().replace("| Ascend NPU", "| Huawei Ascend NPU")
    )
    second = commit_all(work, message("readme : name the CANN vendor"))
    (work / "README.md").write_text(
        (work / "README.md").read_text().replace("[In Progress]", "[Experimental]")
    )
    third = commit_all(work, message("readme : mark Hexagon experimental"))
    return {
        "docs-add-a-fixture-page.patch": format_patch(work, first),
        "readme-name-the-cann-vendor.patch": format_patch(work, second),
        "readme-mark-hexagon-experimental.patch": format_patch(work, third),
    }


def upstream_lock(upstream: FakeUpstream, remote: str = "http://127.0.0.1:9/llama.cpp.git") -> str:
    return f"""[upstream]
repo = "https://github.com/ggml-org/llama.cpp"
commit = "{upstream.base}"
tree = "{upstream.base_tree}"
commit_date = 2026-08-16T14:53:13+02:00

[[upstream.sources]]
kind = "mirror"

[[upstream.sources]]
kind = "git"
url = "{remote}"
"""


def make_repo(path: Path, upstream: FakeUpstream, patches: dict[str, str]) -> Path:
    """A dgr repository layout (pyproject, locks, series, patches) for the fake upstream."""
    (path / "locks").mkdir(parents=True)
    (path / "series").mkdir()
    (path / "patches").mkdir()
    shutil.copy(ROOT / "pyproject.toml", path / "pyproject.toml")
    for name in ("toolchain.toml", "model.toml"):
        shutil.copy(ROOT / "locks" / name, path / "locks" / name)
    (path / "locks" / "upstream.toml").write_text(upstream_lock(upstream))
    for name, text in patches.items():
        (path / "patches" / name).write_text(text)
    (path / "series" / "series").write_text("# fixture series\n" + "".join(f"{n}\n" for n in patches))
    write_manifest(path)
    return path


def write_manifest(repo: Path) -> None:
    from dgr.core.paths import Repo
    from dgr.series import patchmanifest

    patchmanifest.write(Repo(repo), patchmanifest.compute(Repo(repo)))


def flip_byte(path: Path, offset: int = -2) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def harness_json() -> dict[str, Any]:
    """The harness of the repository of the test ($DGR_REPO, else this one) as reports and bench results
    record it: a fake report or bench carries it to be current."""
    return harness.current(Repo(find_repo_root())).to_json()


def write_report(
    digest: str,
    passed: bool = True,
    groups: tuple[str, ...] = GROUPS,
    native: tuple[str, ...] = (),
    kept_as: tuple[str, ...] = GROUPS,
) -> Path:
    """A well-formed verify report for the inputs `digest`, where `dgr verify` keeps it in the test's cache:
    one check per group (failing unless `passed`), and a passing native check per name of `native`. It is
    kept where `dgr verify` keeps a report of the groups `kept_as` (reportstore.name; default: all)."""
    checks = [
        {
            "group": group,
            "name": f"{group}-check/fixture",
            "evidence": "native test" if group == "native" else "synthetic fixture",
            "passed": passed,
            "figures": {"max_abs_diff": 0.0, "ratio": 1 / 3, "shape": [8, 576], "bit_exact": True},
            "detail": "" if passed else "it failed",
        }
        for group in groups
    ]
    checks += [
        {"group": "native", "name": t, "evidence": "native test", "passed": True, "figures": {"time_s": 0.25}}
        for t in native
    ]
    report = {
        "format": REPORT_FORMAT,
        "inputs_digest": digest,
        "baseline_digest": None,
        "groups": list(groups),
        "passed": passed,
        "durations_s": {},
        "checks": checks,
        "harness": harness_json(),
    }
    path = Path(os.environ["DGR_CACHE_DIR"]) / reportstore.name(digest, cast("tuple[Group, ...]", kept_as))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    return path


def fake_toolchain(cc: str = "gcc 12.2", cxx: str = "g++ 12.2") -> Toolchain:
    """The pinned tools by their bare names (no process is started with them), with the given compilers."""
    return Toolchain(
        Path("cmake"),
        Path("ctest"),
        Path("ninja"),
        "4.4.5",
        "1.13.2",
        Compiler("/usr/bin/gcc", cc),
        Compiler("/usr/bin/g++", cxx),
        Path("ccache"),
        "4.14.2",
    )
