"""The command facts of README.md and docs/*.md agree with `--help`: every `dgr COMMAND --option` they name
is an option of that command, and every command of the commands table is a dgr command."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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


# ------------------------------------------------------------------ every figure from a file the code wrote

# a file the code wrote: a run's record (docs/records/), the last bench (docs/bench/bench.json, and the
# figures `dgr bench` wrote beside it), linked from README.md (`docs/...`) or docs/*.md (`records/...`)
SOURCE = re.compile(r"\]\(((?:docs/)?(?:records/[\w.-]+\.md|bench/bench\.json|bench/figures\.md))\)")
# a measured figure of the prose: a time (`19 min 32 s`, `15.5 min`, `0.75 s`) or a count of tests or checks
# (`793 passed`, `1 failed`; `419/419 checks`: 419 passed of 419, as a record's `419 passed, 0 failed`)
FIGURE = re.compile(
    r"(?<![\w.:/=-])(?:(?P<min>\d+(?:\.\d+)?) min(?: (?P<min_s>\d+(?:\.\d+)?) s)?|(?P<s>\d+(?:\.\d+)?) s"
    r"|(?P<count>\d+) (?P<what>passed|failed|checks)|(?P<of>\d+)/(?P<total>\d+) checks)(?![\w/])"
)
# a record's `419 passed, 0 failed` (the README's `419/419 checks`)
PASSED_OF = re.compile(r"(\d+) passed, (\d+) failed")
# the other ways a record writes a time: `(0:27:15)`, `elapsed=1172s`, `in 1635.74s`, `real 2m41.501s`
SOURCE_TIME = re.compile(
    r"\((?P<h>\d+):(?P<m>\d\d):(?P<hs>\d\d)\)|(?<=[=\s])(?:(?P<rm>\d+)m)?(?P<rs>\d+(?:\.\d+)?)s\b"
)


@dataclass(frozen=True)
class Figure:
    quoted: str
    kind: str
    """`s` (a time, in seconds), or what a count counts: `passed`, `failed`, `checks`, `passed of 419`."""
    value: float
    precision: float
    """The unit of its last digit (`19 min 32 s`: 1 s, `15.5 min`: 6 s, a count: 0)."""


def _decimals(number: str) -> int:
    return len(number.partition(".")[2])


def figures_of(text: str) -> list[Figure]:
    """Every figure of the prose `text`, as it is quoted."""
    found = []
    for m in FIGURE.finditer(text):
        if m["count"]:
            found.append(Figure(m[0], m["what"], float(m["count"]), 0.0))
        elif m["of"]:
            found.append(Figure(m[0], f"passed of {m['total']}", float(m["of"]), 0.0))
        elif m["min_s"]:
            seconds = 60 * float(m["min"]) + float(m["min_s"])
            found.append(Figure(m[0], "s", seconds, 10.0 ** -_decimals(m["min_s"])))
        elif m["min"]:
            found.append(Figure(m[0], "s", 60 * float(m["min"]), 60 * 10.0 ** -_decimals(m["min"])))
        else:
            found.append(Figure(m[0], "s", float(m["s"]), 10.0 ** -_decimals(m["s"])))
    return found


def quantities_of(path: Path) -> set[tuple[str, float]]:
    """(kind, value) of every figure a source holds: its prose figures and record times, or, of a JSON
    result, every number of a key `*_s` as a time."""
    if path.suffix == ".json":

        def leaves(node: object, key: str = "") -> Iterator[tuple[str, float]]:
            if isinstance(node, dict):
                for k, v in node.items():
                    yield from leaves(v, k)
            elif isinstance(node, list):
                for v in node:
                    yield from leaves(v, key)
            elif isinstance(node, (int, float)) and not isinstance(node, bool) and key.endswith("_s"):
                yield "s", float(node)

        return set(leaves(json.loads(path.read_text())))
    text = path.read_text()
    found = {(f.kind, f.value) for f in figures_of(text)}
    found |= {(f"passed of {int(p) + int(f)}", float(p)) for p, f in PASSED_OF.findall(text)}
    for m in SOURCE_TIME.finditer(text):
        if m["h"]:
            found.add(("s", 3600 * float(m["h"]) + 60 * float(m["m"]) + float(m["hs"])))
        else:
            found.add(("s", 60 * float(m["rm"] or 0) + float(m["rs"])))
    return found


def blocks_of(markdown: str) -> list[str]:
    """The prose of a Markdown text (no code) cut into paragraphs and list items."""
    prose = re.sub(r"^```[a-z]*\n.*?^```", "", markdown, flags=re.M | re.S)
    prose = re.sub(r"`[^`]+`", "`code`", prose)
    return [b for b in re.split(r"\n\s*\n|\n(?=- )", prose) if b.strip()]


def unsourced_figures(doc: Path, *, every_block: bool) -> tuple[list[str], int]:
    """The figures of `doc` that no file the code wrote holds, and how many figures it checked: in each block
    that cites a source (with `every_block`, in every block), each figure must be in one of the sources the
    block cites, to the precision it is quoted with."""
    problems, checked = [], 0
    for block in blocks_of(doc.read_text()):
        found = figures_of(block)
        sources = [(doc.parent / link).resolve() for link in SOURCE.findall(block)]
        if not found or not (sources or every_block):
            continue
        if not sources:
            problems += [f"{doc.name}: {f.quoted!r} cites no record: {block[:80]!r}" for f in found]
            continue
        held = set().union(*(quantities_of(s) for s in sources))
        for f in found:
            checked += 1
            if not any(k == f.kind and abs(v - f.value) <= f.precision / 2 + 1e-9 for k, v in held):
                names = ", ".join(s.name for s in sources)
                problems.append(f"{doc.name}: {f.quoted!r} is not in {names}")
    return problems, checked


def test_the_figure_pattern_reads_times_and_counts(tmp_path: Path) -> None:
    quoted = "took 19 min 32 s, 419/420 checks, 7 failed (ninja 194 s, no-op 0.75 s; 15.5 min) on 2 cores"
    assert [(f.quoted, f.kind, f.value, f.precision) for f in figures_of(quoted)] == [
        ("19 min 32 s", "s", 1172.0, 1.0),
        ("419/420 checks", "passed of 420", 419.0, 0.0),
        ("7 failed", "failed", 7.0, 0.0),
        ("194 s", "s", 194.0, 1.0),
        ("0.75 s", "s", 0.75, 0.01),
        ("15.5 min", "s", 930.0, 6.0),
    ]
    record = tmp_path / "record.md"
    record.write_text("19 passed in 1263.35s (0:21:03)\n419 passed, 0 failed\nelapsed=1172s\nreal 2m41.5s\n")
    assert quantities_of(record) == {
        ("passed", 19.0),
        ("passed", 419.0),
        ("failed", 0.0),
        ("passed of 419", 419.0),
        ("s", 1263.35),
        ("s", 1263.0),
        ("s", 1172.0),
        ("s", 161.5),
    }


def test_every_figure_of_the_readme_is_in_the_record_it_cites() -> None:
    """README.md types no figure by hand: each time and count it quotes stands in the block that cites the
    file the code wrote it in (a record of docs/records/, docs/bench/bench.json), and is in that file."""
    problems, checked = unsourced_figures(ROOT / "README.md", every_block=True)
    assert not problems, "\n".join(problems)
    assert checked >= 12  # the README quotes its figures (13 on 2026-12-06): the check has something to check


def test_every_figure_of_a_measured_entry_citing_a_record_is_in_it() -> None:
    """docs/measured.md's entries that cite a record quote only what the record holds (the older entries,
    from runs that kept no record, are the history the README no longer quotes)."""
    problems, checked = unsourced_figures(ROOT / "docs" / "measured.md", every_block=False)
    assert not problems, "\n".join(problems)
    assert checked >= 2
