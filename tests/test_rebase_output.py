"""`dgr rebase-check` output: plain text by default (aligned table, long file lists summarised, digests
shortened), Markdown with --markdown / --format markdown, JSON with --json."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from dgr.cli import main
from dgr.commands.rebase_check import matrix_table, matrix_text, onto_report, short_source, summarised
from dgr.contracts.locks import Pin
from dgr.git.apply import Rejection
from dgr.maintain.rebase import Onto, PatchReport, RebaseReport

from tests.helpers import FakeUpstream

SHA = "1139dbb54509074b70893fab8554e3b079aa9f4d312058ce4018ef0019e3de12"
DATE = dt.datetime(2026, 8, 16, tzinfo=dt.UTC)
FILES = [f"src/file-{i}.cpp" for i in range(9)]


def report(
    label: str, statuses: list[str], commit: str = "4df29be4f4c3673f428170fda944a5b19f743bb8"
) -> RebaseReport:
    onto = Onto(label, Path("/x"), commit, "t" * 40, f"{label} (sha256 {SHA})", True, None, DATE)
    patches = [
        PatchReport(
            f"p{i}.patch",
            f"subject {i}",
            status,  # type: ignore[arg-type]
            after_failure=i > 0 and statuses[i - 1] == "conflict",
            files=FILES if status == "conflict" else [],
            rejections=[Rejection(f, ((1, "@@ -1 +1 @@"),), "") for f in FILES]
            if status == "conflict"
            else [],
        )
        for i, status in enumerate(statuses)
    ]
    return RebaseReport(onto, Pin("0" * 40, "1" * 40, DATE), patches)


def columns() -> list[tuple[str, RebaseReport]]:
    return [
        ("pin 0c1e570", report("pin", ["clean", "clean"], "0c1e57098bba43ac29e6e3b677cdceebdd22334f")),
        ("pypi:llama-cpp-python==0.3.35", report("pypi:llama-cpp-python==0.3.35", ["conflict", "3-way"])),
    ]


def test_summarised_names_three_files_then_a_count() -> None:
    assert summarised(["a", "b"]) == "a, b"
    assert summarised(["a", "b", "c", "d", "e"]) == "a, b, c and 2 more"


def test_short_source_keeps_12_hex_digits_of_a_digest() -> None:
    assert short_source(f"x (sha256 {SHA})") == "x (sha256 1139dbb54509)"
    assert short_source("mirror /srv/llama.cpp") == "mirror /srv/llama.cpp"


def test_matrix_text_is_an_aligned_plain_table() -> None:
    text = matrix_text(columns())
    lines = text.splitlines()
    assert lines[0].split() == ["patch", "pin", "0c1e570", "pypi:llama-cpp-python==0.3.35"]
    # the columns line up: each status starts where its header does
    at = lines[0].index("pypi:")
    assert lines[1].index("conflict") == at
    assert lines[2].index("3-way") == at
    assert "|" not in text
    assert "conflict in p0.patch: src/file-0.cpp, src/file-1.cpp, src/file-2.cpp and 6 more" in text
    assert "pypi:llama-cpp-python==0.3.35: 4df29be4f4c3 from its sdist (sha256 1139dbb54509)" in text
    for line in lines:
        assert SHA not in line
        assert line.count("sha256") <= 1
        assert line.count("pypi:llama-cpp-python==0.3.35") <= 1
        assert len(line) <= 110


def test_matrix_markdown_keeps_every_file() -> None:
    text = matrix_table(columns())
    assert text.startswith("| patch | pin 0c1e570 | pypi:llama-cpp-python==0.3.35 |\n| --- | --- | --- |")
    assert "conflict: " + ", ".join(FILES) in text


def test_onto_report_plain_and_markdown() -> None:
    r = report("pypi:llama-cpp-python==0.3.35", ["conflict", "3-way"])
    plain = onto_report(r)
    assert "| " not in plain
    assert "p0.patch  conflict" in plain
    assert "src/file-0.cpp: hunk #1 @@ -1 +1 @@ does not apply" in plain
    markdown = onto_report(r, markdown=True)
    assert "| p1.patch | 3-way (after an earlier conflict) |  |" in markdown


def test_the_command_prints_text_markdown_or_json(
    repo: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rebase-check", "--matrix"]) == 0
    plain = capsys.readouterr().out
    assert plain.startswith("patch ") and "|" not in plain
    assert main(["rebase-check", "--matrix", "--markdown"]) == 0
    assert capsys.readouterr().out.startswith("| patch | pin ")
    assert main(["rebase-check", "--matrix", "--format", "markdown"]) == 0
    assert capsys.readouterr().out.startswith("| patch | pin ")
    assert main(["rebase-check", "--matrix", "--format", "json"]) == 0
    assert capsys.readouterr().out.startswith("{")
    assert main(["rebase-check", "--matrix", "--markdown", "--json"]) == 2
