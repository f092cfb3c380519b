"""End-to-end (marker e2e): the upstream package of the real series, as a maintainer would use it.

The repository's series, locks and upstream-package/ are copied; the upstream is fetched into a private
cache (from the verified upstream of $DGR_TEST_CACHE when it has the pin, else from the sources of
locks/upstream.toml). The verify report and the bench result are fakes for the real inputs digest: what
is tested is the package, not the figures. Two renders must be byte-identical; no file may carry a word of
ours or a placeholder outside the submitter's marks; the bundle's branch, fetched into a fresh clone of the
pinned upstream, must hold exactly the tree of the series applied with git am (the tree `dgr build` compiles
and `dgr verify` tests), and the package's own commands must work on it: plain cmake (no host CPU detection:
-march=native enables AMX, which dies with SIGILL on some machines) builds the targets it names, and its
`ctest -R` selects exactly the series' tests and passes.

The series is sent as stacked pull requests, one per patch: every pull request has its bundle and its
description, each bundle's branch holds the series up to its patch, and the files and the hand-written core,
hand-written test and mechanical lines each description and the README show are those of the branch's own
diff.

$DGR_E2E_REPO names another repository to take the series from (a checkout where the pin has moved).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from dgr.builds import buildplan
from dgr.contracts import locks
from dgr.contracts.bench import BENCH_FORMAT
from dgr.core.paths import Context, Repo
from dgr.export import measured, upstream_package
from dgr.git import gitops
from dgr.series import generated

from tests import helpers
from tests.export_upstream.support import parts_figures
from tests.helpers import ROOT, git, run_dgr

pytestmark = pytest.mark.e2e

COPIED = ("pyproject.toml", "locks", "series", "patches", "upstream-package", "verify/worker")
PULLS = 6
"""The stacked pull requests of the series: one per patch."""


def copy_repository(source: Path, target: Path) -> Path:
    for name in COPIED:
        src = source / name
        if src.is_dir():
            shutil.copytree(src, target / name, ignore=shutil.ignore_patterns("out", "__pycache__"))
        elif src.is_file():
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, target / name)
    return target


KL = {"mean": 0.0, "mean_error": 0.0, "max": 0.0, "same_top_percent": 100.0}
RATIO = {"median": 1.0, "low": 1.0, "high": 1.0, "best": 1.0, "rounds": [1.0]}


def fake_bench(digest: str, text: str, model_sha256: str) -> dict[str, Any]:
    row = {
        "wire_bytes_before_first_token": 1 << 20,
        "wire_bytes_per_token": 1 << 17,
        "ttft_s": 1.0,
        "prefill_tps": 100.0,
        "decode_tps": 50.0,
        "same_output": True,
        "same_output_reps": 3,
        "procs": [{"role": "range", "what": "layers [0, 30)", "peak_rss": 100 << 20}],
    }
    return {
        "format": BENCH_FORMAT,
        "machine": {"date": "2026-12-01T00:00:00Z", "cpu": "e2e", "cores": 2},
        "quick": True,
        "inputs_digest": digest,
        # the measurements of every bench: bench.json is read whole (the export renders `parts` only)
        "model": {"file": "model.gguf", "n_layer": 30, "bytes": 1 << 27},
        "hop_bytes_per_token": 2304,
        "in_process": [],
        "workers": [],
        "memory": [],
        "parts": parts_figures(),
        "codec": {},
        "build": {},
        "harness": helpers.harness_json(),
        "upstream_comparison": {
            "model": {"file": "model.gguf", "sha256": model_sha256},
            "threads": 2,
            "perplexity": {
                "text": "docs/build.md",
                "text_sha256": hashlib.sha256(text.encode(errors="surrogateescape")).hexdigest(),
                "args": ["-c", "512", "--chunks", "8", "-t", "2"],
                "baseline": {"final": 13.0, "error": 0.5, "chunks": [13.0]},
                "patched": {"final": 13.0, "error": 0.5, "chunks": [13.0]},
                "kl": {
                    "base_args": ["--kl-divergence-base", "FILE"],
                    "args": ["--kl-divergence", "--kl-divergence-base", "FILE"],
                    "reference": KL,
                    "patched": KL,
                },
            },
            "bench": {
                "args": ["-p", "512", "-n", "128", "-r", "3", "-t", "2"],
                "rounds": 1,
                "results": [{"test": "pp512", "baseline_tps": 1.0, "patched_tps": 1.0, "ratio": RATIO}],
                "target": 0.99,
            },
        },
        "rpc": {
            "model": {"file": "model.gguf", "n_layer": 30},
            "threads": 2,
            "prompt_tokens": 64,
            "decode_tokens": 32,
            "head_args": ["-m", "model.gguf", "--rpc", "127.0.0.1:50152,127.0.0.1:50153"],
            "server_args": ["-c"],
            "wire_method": "e2e",
            "rows": [{"engine": "whole", "processes": 1, "start": "cold", **row}],
        },
    }


def tool(name: str) -> str:
    venv = Path(sys.executable).parent / name
    found = str(venv) if venv.is_file() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed")
    return found


def run(cmd: list[str], cwd: Path, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"$ {' '.join(cmd)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def test_the_package_of_the_series_builds_and_passes_its_tests_on_a_clean_upstream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = copy_repository(Path(os.environ.get("DGR_E2E_REPO") or ROOT), tmp_path / "repo")
    cache = tmp_path / "cache"
    env = {"DGR_REPO": str(repo), "DGR_CACHE_DIR": str(cache)}
    monkeypatch.setenv("DGR_REPO", str(repo))
    monkeypatch.setenv("DGR_CACHE_DIR", str(cache))
    plan = buildplan.plan(Context.discover(), buildplan.Request())
    test_cache = os.environ.get("DGR_TEST_CACHE")
    verified = Path(test_cache) / "upstream" / f"{plan.pin.commit}.git" if test_cache else None
    mirror = ["--mirror", str(verified)] if verified is not None and verified.is_dir() else []
    fetched = run_dgr("fetch", *mirror, env=env)
    assert fetched.returncode == 0, fetched.stderr
    upstream_git = Path(fetched.stdout.strip().splitlines()[-1])

    # a passing report and a bench result for the real inputs (fakes: the figures are not under test)
    helpers.write_report(plan.digest, native=plan.native_tests)
    text = gitops.file_at(upstream_git, plan.pin.commit, "docs/build.md")
    bench = measured.full_result(Context.discover().cache, plan.digest)
    bench.parent.mkdir(parents=True)
    model_sha = locks.load_model(repo / "locks").sha256
    bench.write_text(json.dumps(fake_bench(plan.digest, text, model_sha)))

    start = time.monotonic()
    one, two = tmp_path / "one", tmp_path / "two"
    for out in (one, two):
        rendered = run_dgr("export-upstream", "--out", str(out), *mirror, env=env)
        assert rendered.returncode == 0, rendered.stderr
    render_s = time.monotonic() - start
    files = {p.relative_to(one).as_posix(): p.read_bytes() for p in sorted(one.rglob("*")) if p.is_file()}
    assert files == {
        p.relative_to(two).as_posix(): p.read_bytes() for p in sorted(two.rglob("*")) if p.is_file()
    }
    config = upstream_package.load_config(
        repo / "upstream-package" / "package.toml", [p.name for p in plan.patches]
    )
    for name, data in files.items():
        if name.endswith(".md"):
            assert (
                upstream_package.scan_package(
                    name, data.decode(), config.deny_words, config.upstream_identifiers
                )
                == []
            )
            assert str(tmp_path) not in data.decode()
    # one stacked pull request per patch, each with its bundle and its description; the manifest covers all
    assert [p.patches for p in config.pulls] == [(p.name,) for p in plan.patches]
    assert len(config.pulls) == PULLS
    numbers = range(1, len(config.pulls) + 1)
    assert sorted(files) == sorted(
        ["DISCUSSION.md", "MANIFEST.sha256", "README.md", "REPRODUCE.md", "range-diff.txt"]
        + [f"PR-{n}.{ext}" for n in numbers for ext in ("bundle", "md")]
        + [f"rules/{name}" for name in generated.PACKAGED]
    )
    assert files["range-diff.txt"].decode().startswith("# The series against the previous pin\n")
    assert (
        upstream_package.scan_range_diff(
            "range-diff.txt", files["range-diff.txt"].decode(), config.deny_words
        )
        == []
    )
    assert files["MANIFEST.sha256"].decode().splitlines() == [
        f"{hashlib.sha256(files[p]).hexdigest()}  {p}" for p in sorted(files) if p != "MANIFEST.sha256"
    ]

    # a fresh clone of the pinned upstream, the bundle's branch fetched and checked out
    branch = config.pulls[-1].branch
    clone = tmp_path / "llama.cpp"
    gitops.init(clone)
    git(clone, "fetch", "-q", "--depth", "1", f"file://{upstream_git}", plan.pin.commit)
    git(clone, "checkout", "-q", "--detach", "FETCH_HEAD")
    for pull in config.pulls:
        git(clone, "fetch", "-q", str(one / f"PR-{pull.number}.bundle"), f"{pull.branch}:{pull.branch}")
    git(clone, "checkout", "-q", branch)
    commits = git(clone, "log", "--format=%an%n%ae%n%B", f"{plan.pin.commit}..{branch}")
    added = [
        line for line in git(clone, "diff", plan.pin.commit, branch).splitlines() if line.startswith("+")
    ]
    deny = upstream_package.deny_pattern(config.deny_words)
    assert not deny.search(commits)
    assert [line for line in added if deny.search(line)] == []
    assert "Upstream-Status" not in commits

    # the bundle's tree is the tree of the series applied with git am onto the pin: the tree `dgr build`
    # compiles and `dgr verify` tests (its native group runs this same ctest on it)
    series = [line.strip() for line in (repo / "series" / "series").read_text().splitlines()]
    ordered = [repo / "patches" / name for name in series if name and not name.startswith("#")]
    assert [p.name for p in plan.patches] == [p.name for p in ordered]
    git(clone, "checkout", "-q", "--detach", plan.pin.commit)
    parent = plan.pin.commit
    readme = files["README.md"].decode()
    for pull in config.pulls:
        # pull request n: the series up to its patches, on top of pull request n - 1
        mails = [str(repo / "patches" / name) for name in pull.patches]
        git(clone, "-c", "user.name=e2e", "-c", "user.email=e2e@localhost", "am", "-q", *mails)
        assert git(clone, "rev-parse", "HEAD^{tree}") == git(clone, "rev-parse", f"{pull.branch}^{{tree}}")
        assert git(clone, "rev-parse", f"{pull.branch}~{len(pull.patches)}") == parent
        # its figures, from its own diff
        counts = {"core": 0, "tests": 0, "mechanical": 0}
        stat = git(clone, "diff", "--numstat", parent, pull.branch).splitlines()
        for line in stat:
            plus, minus, path = line.split("\t", 2)
            counts[config.line_kind(path)] += (int(plus) + int(minus)) if plus.isdigit() else 0
        figures = f"| {len(stat)} | {counts['core']} | {counts['tests']} | {counts['mechanical']} |"
        row = f"| {pull.number} | `{pull.title}` | `{pull.branch}`"
        assert next(line for line in readme.splitlines() if line.startswith(row)).endswith(figures), figures
        body = files[f"PR-{pull.number}.md"].decode()
        assert body.startswith(f"<!-- Title: {pull.title} -->\n")
        assert f" | {counts['core']} | {counts['tests']} | {counts['mechanical']} |" in body
        parent = git(clone, "rev-parse", pull.branch)
    assert "stacked" in readme
    git(clone, "checkout", "-q", branch)

    # each generated commit is its rule's output, checked with the pull request's own commands and the
    # packaged rule (its dependencies are dgr's)
    checks = [
        check
        for pull in config.pulls
        for check in re.findall(
            r"^git -C llama\.cpp worktree add \.\./generated (\w+)\n"
            r"python3 rules/rewrite\.py ([\w-]+) generated\n"
            r"git -C generated diff (\w+) -- src/models\n",
            files[f"PR-{pull.number}.md"].decode(),
            flags=re.M,
        )
    ]
    named = {g.rule for g in generated.load(Repo(repo))}
    assert sorted(rule for _, rule, _ in checks) == sorted(named) and len(checks) == 2
    for n, (parent_commit, rule, commit) in enumerate(checks):
        where = tmp_path / f"generated-{n}"
        git(clone, "worktree", "add", "-q", "--detach", str(where), parent_commit)
        run([sys.executable, str(one / "rules" / "rewrite.py"), rule, str(where)], clone)
        assert git(where, "diff", "--stat", commit, "--", "src/models") == ""
        assert git(where, "diff", "--stat", parent_commit, "--", "src/models") != ""

    # the package's own commands, run as a maintainer would: plain cmake configure and build of the targets it
    # names, then its ctest -R, which must select exactly the series' tests and pass
    reproduce = (one / "REPRODUCE.md").read_text()
    targets = re.search(r"^cmake --build build .*--target (.+)$", reproduce, flags=re.M)
    regex = re.search(r"^ctest --test-dir build -R '([^']+)'", reproduce, flags=re.M)
    assert targets is not None and regex is not None
    start = time.monotonic()
    run(
        [
            tool("cmake"),
            "-S",
            str(clone),
            "-B",
            str(clone / "build"),
            "-G",
            "Ninja",
            f"-DCMAKE_MAKE_PROGRAM={tool('ninja')}",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DGGML_NATIVE=OFF",
        ],
        clone,
    )
    run([tool("cmake"), "--build", str(clone / "build"), "--target", *targets.group(1).split()], clone)
    build_s = time.monotonic() - start
    names = regex.group(1).strip("^$()").split("|")
    assert sorted(names) == sorted(plan.native_tests)
    listed = run([tool("ctest"), "--test-dir", str(clone / "build"), "-N", "-R", regex.group(1)], clone)
    selected = sorted(re.findall(r"Test\s+#\d+: (\S+)", listed.stdout))
    # ctest adds the test that sets up a fixture a selected test requires (upstream's test-generate-models,
    # which writes the model directory that the series' file checks read)
    shown = json.loads(
        run([tool("ctest"), "--test-dir", str(clone / "build"), "--show-only=json-v1"], clone).stdout
    )
    props = {t["name"]: {p["name"]: p["value"] for p in t.get("properties", [])} for t in shown["tests"]}
    required = {f for n in names for f in props[n].get("FIXTURES_REQUIRED", [])}
    setups = [n for n, p in props.items() if n not in names and set(p.get("FIXTURES_SETUP", [])) & required]
    assert setups == ["test-generate-models"] and selected == sorted([*names, *setups]), listed.stdout
    tested = run(
        [tool("ctest"), "--test-dir", str(clone / "build"), "-R", regex.group(1), "--output-on-failure"],
        clone,
    )
    # ctest 4 says "100% tests passed out of N", earlier ones "100% tests passed, 0 tests failed out of N"
    assert re.search(rf"100% tests passed(, 0 tests failed)? out of {len(selected)}\b", tested.stdout), (
        tested.stdout
    )
    print(
        f"\n[e2e] export-upstream twice {render_s:.0f} s; cmake + build of {targets.group(1)} "
        f"{build_s:.0f} s; ctest {time.monotonic() - start - build_s:.0f} s"
    )
