"""The command facts of README.md and docs/*.md agree with `--help`: every `dgr COMMAND --option` they name
is an option of that command, and every command of the commands table is a dgr command."""

from __future__ import annotations

import argparse
import re

import pytest
from dgr.cli import build_parser

from tests.helpers import ROOT, git

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# `dgr [-v|-q|-C DIR] COMMAND[/COMMAND] rest-of-the-invocation`: up to a backtick, a comment or a table cell
INVOCATION = re.compile(r"\bdgr((?:\s+-[vq]\b|\s+-C\s+\S+)*)\s+([a-z][a-z-]*(?:/[a-z][a-z-]*)*)([^`\n#|]*)")
OPTION = re.compile(r"(?<![\w/.:=-])(--?[A-Za-z][\w-]*)")
NOT_COMMANDS = {"biuld"}  # the README's example of a mistyped command


def commands() -> dict[str, argparse.ArgumentParser]:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("dgr has no subcommands")


def code_of(markdown: str) -> list[str]:
    """The code of a Markdown text: every line of its fenced blocks, every inline code span."""
    fenced = re.findall(r"^```[a-z]*\n(.*?)^```", markdown, flags=re.M | re.S)
    prose = re.sub(r"^```[a-z]*\n.*?^```", "", markdown, flags=re.M | re.S)
    return [line for block in fenced for line in block.splitlines()] + re.findall(r"`([^`\n]+)`", prose)


def invocations(text: str) -> list[tuple[str, list[str]]]:
    """(command, options) of every `dgr COMMAND ...` in the code of the Markdown `text`."""
    found = []
    for m in (m for code in code_of(text) for m in INVOCATION.finditer(code)):
        for name in m.group(2).split("/"):
            found.append((name, OPTION.findall(m.group(3))))
    return found


def test_the_pattern_reads_invocations() -> None:
    assert invocations("run `dgr -C x build -j 2 --json` or `dgr build/verify --upstream SPEC`") == [
        ("build", ["-j", "--json"]),
        ("build", ["--upstream"]),
        ("verify", ["--upstream"]),
    ]
    assert invocations("`dgr pin --to pypi:llama-cpp-python==0.3.35 # comment --no`") == [("pin", ["--to"])]
    assert invocations("```sh\ndgr status\n```\ndgr works in prose") == [("status", [])]
    # the documents name many invocations: the check has something to check
    assert len([i for doc in DOCS for i in invocations(doc.read_text())]) > 60


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_named_option_is_in_its_commands_help(doc: object) -> None:
    known = commands()
    problems = []
    for name, options in invocations(doc.read_text()):  # type: ignore[attr-defined]
        if name in NOT_COMMANDS:
            continue
        if name not in known:
            problems.append(f"`dgr {name}` is not a dgr command")
            continue
        problems += [
            f"`dgr {name} {o}`: {name} has no option {o}"
            for o in options
            if o not in known[name]._option_string_actions
        ]
    assert not problems, "\n".join(dict.fromkeys(problems))


def test_every_command_of_the_commands_table_exists() -> None:
    text = (ROOT / "docs" / "reference.md").read_text()
    rows = re.findall(r"^\| `dgr ([a-z-]+)", text, flags=re.M)
    assert len(set(rows)) >= 12
    assert set(rows) <= set(commands())
    assert set(commands()) <= set(rows)  # and the table has a row for every command


# a row of docs/series.md's patch table: `NAME.patch` ... | N files, +A \u2212D (core / tests / mechanical) |
PATCH_ROW = re.compile(
    r"^\| `([\w.-]+\.patch)`.*\| (\d+) files?, \+(\d+) \u2212(\d+) \((\d+) / (\d+) / (\d+)\) \|$", re.M
)


def test_the_patch_table_of_series_md_is_the_series() -> None:
    """docs/series.md gives, per patch, its files, added and removed lines and its changed lines by kind
    (hand-written core, tests, mechanical: upstream-package/package.toml's globs); they are the patches'."""
    from dgr.export import render, upstream_package
    from dgr.export.branches import FileStat, Stat
    from dgr.series import order

    order_file = ROOT / "series" / "series"
    names = order.parse(order_file.read_text(), order_file).names
    config = upstream_package.load_config(ROOT / "upstream-package" / "package.toml", names)
    rows = {
        m.group(1): tuple(int(g) for g in m.groups()[1:])
        for m in PATCH_ROW.finditer((ROOT / "docs" / "series.md").read_text())
    }
    assert list(rows) == names
    for name in names:
        numstat = git(ROOT, "apply", "--numstat", str(ROOT / "patches" / name)).splitlines()
        files = tuple(
            FileStat(path, int(plus), int(minus))
            for plus, minus, path in (line.split("\t") for line in numstat)
        )
        stat = Stat(len(files), sum(f.added for f in files), sum(f.deleted for f in files), files)
        # the package's own count of a pull request's lines by kind (its description's figures)
        counts = render.line_counts(stat, config)
        assert rows[name] == (
            stat.files,
            stat.added,
            stat.deleted,
            counts.core,
            counts.tests,
            counts.mechanical,
        ), name
