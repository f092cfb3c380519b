"""`dgr export-upstream`: every refusal, and that a refusal leaves no half-written package."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from dgr.cli import main
from dgr.contracts.report import GROUPS
from dgr.export import branches, upstream_package

from tests.export_upstream.support import (
    FIXTURE_CONCERNS,
    PATCHES,
    UPSTREAM_ERROR,
    UPSTREAM_IDENTIFIER,
    bench_data,
    config,
    digest,
    edit_patch,
    export,
    refused,
    set_not_built,
    tree,
    write_bench,
    write_package,
    write_report,
)
from tests.helpers import FakeUpstream


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


def test_a_word_of_ours_in_upstreams_output_is_refused_unless_its_identifier_is_upstreams(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The export of main exited 7 on `word of ours 'routing'` in PR-1.md to PR-5.md and DISCUSSION.md: the
    graph table quotes the error of upstream's loader for clef, which names upstream's GGUF key
    `clef.decision.routing_block_count`. Listed in upstream_identifiers (and in the pinned tree), the key is
    upstream's; the word itself stays refused everywhere else."""
    write_package(repo, config())
    set_not_built(write_report(), {"clef/dense": UPSTREAM_ERROR})
    write_bench()
    err = refused(tmp_path / "out", 7, capsys, "the rendered package is not fit to send upstream")
    assert re.findall(r"^  (PR-1\.md|DISCUSSION\.md):\d+: word of ours 'routing'$", err, re.M) == [
        "PR-1.md",
        "DISCUSSION.md",
    ]
    assert "upstream_identifiers" in err  # the hint names the way out

    write_package(repo, config(upstream_identifiers=[UPSTREAM_IDENTIFIER]))
    out = tmp_path / "out"
    assert export(out) == 0, capsys.readouterr().err
    for name in ("PR-1.md", "DISCUSSION.md"):
        assert f"| `clef/dense` | {UPSTREAM_ERROR} |" in (out / name).read_text()

    # the identifier is masked as a whole token only: the word beside it, or inside another key, is ours
    set_not_built(write_report(), {"clef/dense": f"{UPSTREAM_ERROR} (routing of the decision head)"})
    err = refused(tmp_path / "out2", 7, capsys, "PR-1.md:")
    assert err.count("word of ours 'routing'") == 2  # PR-1.md and DISCUSSION.md, once each
    set_not_built(write_report(), {"clef/dense": UPSTREAM_ERROR.replace("routing_block", "routing_blocks")})
    refused(tmp_path / "out3", 7, capsys, "word of ours 'routing'")


@pytest.mark.parametrize(
    ("identifiers", "code", "expected"),
    [
        (["relay_state"], 8, "upstream_identifiers: 'relay_state' is not in llama.cpp "),
        (["routing"], 8, "upstream_identifiers[0]: 'routing' is a word of ours itself"),
        (["block_count"], 8, "upstream_identifiers[0]: 'block_count' holds no word of ours: remove it"),
        (
            ["decision.routing_block_count"],
            8,
            "upstream_identifiers[0]: 'decision.routing_block_count' is not an",
        ),
    ],
)
def test_refuses_an_upstream_identifier_that_is_not_upstreams(
    repo: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    identifiers: list[str],
    code: int,
    expected: str,
) -> None:
    """An identifier listed as upstream's must be one: a token of the pinned tree that holds a word of ours
    and more than the word, so that the list cannot let a word of ours through."""
    write_package(repo, config(upstream_identifiers=identifiers))
    write_report()
    write_bench()
    refused(tmp_path / "out", code, capsys, expected)


def test_an_upstream_identifier_is_masked_as_a_whole_token() -> None:
    words, ids = ("routing", "dgr"), ("routing_block_count",)
    assert upstream_package.scan_package("x.md", "key clef.decision.routing_block_count\n", words, ids) == []
    assert upstream_package.scan_package("x.md", "key routing_block_count_v2 and dgr\n", words, ids) == [
        "x.md:1: word of ours 'routing'",
        "x.md:1: word of ours 'dgr'",
    ]
    assert upstream_package.scan_package("x.md", "key clef.decision.routing_block_count\n", words) == [
        "x.md:1: word of ours 'routing'"
    ]


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


def test_dgr_check_finds_files_outside_the_declared_paths_before_an_export(
    packaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`dgr check` runs the export's lint of the concerns' paths: a patch touching a file its concern does not
    declare is a finding there (exit 7), not only when the package is rendered."""
    assert main(["check", "--no-style"]) == 0
    capsys.readouterr()
    concerns = {**FIXTURE_CONCERNS, "docs-add-a-fixture-page.patch": ("ownership", ["docs/*/*.md"])}
    write_package(packaged, config(concerns))
    assert main(["check", "--no-style"]) == 7
    out = capsys.readouterr().out
    assert (
        "patches/docs-add-a-fixture-page.patch: package: touches docs/fixture.md, outside the paths of its "
        "concern" in out
    )
    assert "hint: add the path to the patch's [[concerns]] paths in upstream-package/package.toml" in out
