"""The command facts of README.md and docs/*.md agree with `--help`: every `dgr COMMAND --option` they name
is an option of that command, and every command of the commands table is a dgr command. Their figures are
held by the files the code wrote (a run's record, a bench's bench.json and figures.md), by those files' data,
not by the sentences written around it; an evidence file quotes the files of its own runs; no workflow
comment quotes a time."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Set as AbstractSet
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

# A figure of README.md and docs/ is held by the file the code wrote that its block (a paragraph, a list item,
# a table) cites, and by that file's data only:
# - a run's record (docs/records/*.md): the fenced blocks of command output of the run the block names (a
#   `## <commit> ...` section naming a commit the block names in a code span; the whole record when it has no
#   such section, or none of them is named), never the sentences around them;
# - a bench result (bench.json): the value of the key the figure claims, by the words just before it
#   (BENCH_CLAIMS);
# - the figures `dgr bench` rendered beside a bench.json (figures.md): every number of it.
SOURCE = re.compile(r"\]\(((?:[\w.-]+/)*(?:records/[\w.-]+\.md|bench\.json|figures\.md))\)")
COUNTED = (
    r"passed|failed|failing on upstream too|device failures?|not compared|skipped|deselected|xfailed|xpassed"
    r"|errors?|warnings?|executions|crashes|checks"
)
"""What a count counts, as pytest, `dgr verify`, the fuzzing and the records write it."""
# a time (`19 min 32 s`, `15.5 min`, `0.75 s`) or a count (`793 passed`, `473 checks passed`, `6 failing on
# upstream too`, `931656 executions`; `419/419 checks`: 419 passed of 419, as a record's `419 passed, 0
# failed`)
FIGURE = re.compile(
    r"(?<![\w.:/=-])(?:(?P<min>\d+(?:\.\d+)?) min(?: (?P<min_s>\d+(?:\.\d+)?) s)?|(?P<s>\d+(?:\.\d+)?) s"
    r"|(?P<of>\d+)/(?P<total>\d+) checks|(?P<count>\d+) (?:checks |tests )?(?P<what>" + COUNTED + r"))"
    r"(?![\w/])"
)
NUMBER = re.compile(r"(?<![\w.])\d+\.\d+(?![\w]|\.\d)")
"""A number with decimals (`1.039`, `7.55 ms`; not `3.11.2`), held by a figures.md."""
RATIO = re.compile(r"(?<![\w.])(\d+\.\d+) \((\d+\.\d+)-(\d+\.\d+)[,)]")
"""A median and the spread of its rounds, `1.039 (0.944-1.123)`: one figure, held by the same three numbers
of a figures.md (`1.039 (0.944-1.123, best 1.054)`)."""
DATA_NUMBER = re.compile(r"(?<![\d.])\d+\.\d+(?!\.?\d)")
# a record's `419 passed, 0 failed` (the README's `419/419 checks`)
PASSED_OF = re.compile(r"(\d+) passed, (\d+) failed")
# the other ways a record's data writes a time: `(0:27:15)`, `elapsed=1172s`, `in 1635.74s`, `real 2m41.501s`,
# pytest's `--durations` (`1200.25s call tests/...`)
SOURCE_TIME = re.compile(
    r"\((?P<h>\d+):(?P<m>\d\d):(?P<hs>\d\d)\)|(?<![^=\s])(?:(?P<rm>\d+)m)?(?P<rs>\d+(?:\.\d+)?)s\b"
)
COMMIT = re.compile(r"`([0-9a-f]{7,40})`")
BENCH_CLAIMS = {
    # `dgr bench`'s build timing (dgr.builds.buildtime): the unpatched tree, cold, and the series, no-op and
    # after one edited line
    "a cold `dgr build --upstream-only`": "build.cold_dgr_s",
    "a plain cmake + ninja of the same source and options": "build.cold_plain_s",
    "a no-op `dgr build`": "build.noop_dgr_s",
    "ninja's own no-op": "build.noop_ninja_s",
    "the rebuild by `dgr build`": "build.edit_dgr_s",
    "by ninja alone": "build.edit_ninja_s",
}
"""The words that come just before a figure of bench.json, and the key of bench.json it is: a figure of a
block citing bench.json is that key's value, not any value of the file."""


@dataclass(frozen=True)
class Figure:
    quoted: str
    kind: str
    """`s` (a time, in seconds), `n` (a number of a figures.md), `ratio LOW-HIGH` (a median and its spread of
    a figures.md), or what a count counts: `passed`, `failed`, `failing on upstream too`, `executions`, ...,
    `passed of 419`."""
    value: float
    precision: float
    """The unit of its last digit (`19 min 32 s`: 1 s, `15.5 min`: 6 s, `1.039`: 0.001, a count: 0)."""
    start: int = 0
    """Where it starts in the text it was read from."""

    def held_by(self, kind: str, value: float) -> bool:
        return kind == self.kind and abs(value - self.value) <= self.precision / 2 + 1e-9


def _decimals(number: str) -> int:
    return len(number.partition(".")[2])


def _count_kind(what: str) -> str:
    """`device failure` and `device failures` are one kind, `error` and `errors` another."""
    return {"device failure": "device failures", "error": "errors", "warning": "warnings"}.get(what, what)


def _ratio_kind(low: str, high: str) -> str:
    """The kind of a median with the spread `low`-`high`: the spread is part of what it claims."""
    return f"ratio {float(low):g}-{float(high):g}"


def _without_code(text: str) -> str:
    """`text` with each inline code span blanked (same length: positions are kept)."""
    return re.sub(r"`[^`\n]+`", lambda m: "`" + " " * (len(m[0]) - 2) + "`", text)


def figures_of(text: str, *, numbers: bool = False, code: bool = False) -> list[Figure]:
    """Every figure of `text`, as it is quoted, in order: times and counts, and with `numbers` every other
    number with decimals; inline code is not read unless `code` (a record's data is all code)."""
    read = text if code else _without_code(text)
    found = []
    for m in FIGURE.finditer(read):
        if m["count"]:
            found.append(Figure(m[0], _count_kind(m["what"]), float(m["count"]), 0.0, m.start()))
        elif m["of"]:
            found.append(Figure(m[0], f"passed of {m['total']}", float(m["of"]), 0.0, m.start()))
        elif m["min_s"]:
            seconds = 60 * float(m["min"]) + float(m["min_s"])
            found.append(Figure(m[0], "s", seconds, 10.0 ** -_decimals(m["min_s"]), m.start()))
        elif m["min"]:
            found.append(
                Figure(m[0], "s", 60 * float(m["min"]), 60 * 10.0 ** -_decimals(m["min"]), m.start())
            )
        else:
            found.append(Figure(m[0], "s", float(m["s"]), 10.0 ** -_decimals(m["s"]), m.start()))
    if numbers:
        for m in RATIO.finditer(read):
            kind = _ratio_kind(m[2], m[3])
            found.append(Figure(m[0][:-1], kind, float(m[1]), 10.0 ** -_decimals(m[1]), m.start()))
        spans = [(f.start, f.start + len(f.quoted)) for f in found]
        found += [
            Figure(m[0], "n", float(m[0]), 10.0 ** -_decimals(m[0]), m.start())
            for m in NUMBER.finditer(read)
            if not any(a <= m.start() < b for a, b in spans)
        ]
    return sorted(found, key=lambda f: f.start)


def data_of(markdown: str) -> str:
    """The data of a record: its fenced blocks, verbatim; the prose around them is not data."""
    return "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", markdown, flags=re.M | re.S))


def runs_of(record: Path) -> list[tuple[str, str]]:
    """(heading, data) of each run of a record: each `## ` section, or the whole record without one."""
    text = record.read_text()
    sections = [p for p in re.split(r"^(?=## )", text, flags=re.M) if p.startswith("## ")] or [text]
    return [(section.split("\n", 1)[0], data_of(section)) for section in sections]


def quantities_of_data(data: str) -> set[tuple[str, float]]:
    """(kind, value) of every time and count of a record's data."""
    found = {(f.kind, f.value) for f in figures_of(data, code=True)}
    found |= {(f"passed of {int(p) + int(f)}", float(p)) for p, f in PASSED_OF.findall(data)}
    for m in SOURCE_TIME.finditer(data):
        if m["h"]:
            found.add(("s", 3600 * float(m["h"]) + 60 * float(m["m"]) + float(m["hs"])))
        else:
            found.add(("s", 60 * float(m["rm"] or 0) + float(m["rs"])))
    return found


def quantities_of(path: Path, commits: AbstractSet[str] = frozenset()) -> set[tuple[str, float]]:
    """(kind, value) of every figure a record or a figures.md holds: of a record, the data of the runs named
    by `commits` (every run when none is named); of a figures.md (written by `dgr bench`), its times, counts
    and numbers."""
    if path.name == "figures.md":
        text = path.read_text()
        found = {(f.kind, f.value) for f in figures_of(text, code=True)}
        found |= {(_ratio_kind(m[2], m[3]), float(m[1])) for m in RATIO.finditer(text)}
        return found | {("n", float(m[0])) for m in DATA_NUMBER.finditer(text)}
    runs = runs_of(path)
    named = [data for heading, data in runs if any(re.search(rf"\b{c}", heading) for c in commits)]
    return set().union(*(quantities_of_data(data) for data in named or [d for _, d in runs]))


def bench_value(path: Path, key: str) -> float | None:
    """The number at the dotted `key` of a bench.json (None: no such number)."""
    node: object = json.loads(path.read_text())
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def claim_of(block: str, figure: Figure) -> str | None:
    """The key of bench.json that `figure` claims: the one whose words come just before it."""
    before = " ".join(block[: figure.start].split())
    return next((key for words, key in BENCH_CLAIMS.items() if before.endswith(words)), None)


def blocks_of(markdown: str) -> list[str]:
    """The prose of a Markdown text (no fenced code) cut into paragraphs and list items; inline code kept."""
    prose = re.sub(r"^```[a-z]*\n.*?^```", "", markdown, flags=re.M | re.S)
    return [b for b in re.split(r"\n\s*\n|\n(?=- )", prose) if b.strip()]


def block_problems(doc: Path, block: str, *, every_block: bool) -> tuple[list[str], int]:
    """The figures of one block that the files it cites do not hold, and how many figures it checked."""
    block = " ".join(block.split())  # a figure may be wrapped over two lines
    sources = [(doc.parent / link).resolve() for link in SOURCE.findall(block)]
    found = figures_of(block, numbers=any(s.name == "figures.md" for s in sources))
    if not found or not (sources or every_block):
        return [], 0
    if not sources:
        return [f"{doc.name}: {f.quoted!r} cites no record: {block[:80]!r}" for f in found], 0
    missing = [s for s in sources if not s.is_file()]
    if missing:
        return [f"{doc.name}: cites {s}, which does not exist" for s in missing], 0
    benches = [s for s in sources if s.suffix == ".json"]
    commits = set(COMMIT.findall(block))
    held = set().union(*(quantities_of(s, commits) for s in sources if s.suffix != ".json"))
    names = ", ".join(s.name for s in sources)
    problems = []
    for f in found:
        key = claim_of(block, f) if benches and f.kind == "s" else None
        if key is not None:
            values = [v for v in (bench_value(b, key) for b in benches) if v is not None]
            if not any(f.held_by("s", v) for v in values):
                problems.append(
                    f"{doc.name}: {f.quoted!r} is not {key} of {names} ({values or 'no such key'})"
                )
        elif not any(f.held_by(k, v) for k, v in held):
            claims = " (a time of bench.json claims its key: see BENCH_CLAIMS)" if benches else ""
            problems.append(f"{doc.name}: {f.quoted!r} is not in the data of {names}{claims}")
    return problems, len(found)


def unsourced_figures(doc: Path, *, every_block: bool) -> tuple[list[str], int]:
    """The figures of `doc` that no file the code wrote holds, and how many figures it checked: in each block
    that cites a source (with `every_block`, in every block), each figure must be in the data of one of the
    sources the block cites, to the precision it is quoted with."""
    problems, checked = [], 0
    for block in blocks_of(doc.read_text()):
        found, n = block_problems(doc, block, every_block=every_block)
        problems += found
        checked += n
    return problems, checked


RECORD = """# .ci/run on a clean clone (2 cores)

## 1234abc (.ci/run)

```
====== 1 failed, 19 passed, 4 deselected in 1263.35s (0:21:03) ======
fuzz: 931656 executions in 121.3 s (7699/s), 0 crashes
473 passed, 6 failing on upstream too, 0 failed
CI rc=0 elapsed=1172s
real	2m41.5s
1200.25s call     tests/test_x.py::test_slowest
```

The whole run took 1172 s (19 min 32 s), and 999 passed in the author's words.

## 5678def (.ci/run)

```
====== 7 passed in 10.00s ======
```
"""


def test_the_figure_pattern_reads_times_counts_and_numbers() -> None:
    quoted = (
        "took 19 min 32 s, 419/420 checks, 7 failed, 473 checks passed, 6 failing on upstream too, 1 device "
        "failure, 931656 executions (ninja 194 s, no-op 0.75 s; 15.5 min) on 2 cores, `dgr -j 2` 1.039 "
        "(0.944-1.123), Python 3.11.2, 7.55 ms"
    )
    assert [(f.quoted, f.kind, f.value, f.precision) for f in figures_of(quoted, numbers=True)] == [
        ("19 min 32 s", "s", 1172.0, 1.0),
        ("419/420 checks", "passed of 420", 419.0, 0.0),
        ("7 failed", "failed", 7.0, 0.0),
        ("473 checks passed", "passed", 473.0, 0.0),
        ("6 failing on upstream too", "failing on upstream too", 6.0, 0.0),
        ("1 device failure", "device failures", 1.0, 0.0),
        ("931656 executions", "executions", 931656.0, 0.0),
        ("194 s", "s", 194.0, 1.0),
        ("0.75 s", "s", 0.75, 0.01),
        ("15.5 min", "s", 930.0, 6.0),
        ("1.039 (0.944-1.123", "ratio 0.944-1.123", 1.039, 0.001),
        ("7.55", "n", 7.55, 0.01),
    ]


def test_a_record_holds_the_figures_of_its_data_only(tmp_path: Path) -> None:
    record = tmp_path / "records" / "ci.md"
    record.parent.mkdir()
    record.write_text(RECORD)
    assert quantities_of(record, {"1234abc"}) == {
        ("failed", 1.0),
        ("passed", 19.0),
        ("deselected", 4.0),
        ("s", 1263.35),
        ("s", 1263.0),
        ("executions", 931656.0),
        ("s", 121.3),
        ("crashes", 0.0),
        ("passed", 473.0),
        ("failing on upstream too", 6.0),
        ("failed", 0.0),
        ("s", 1172.0),
        ("s", 161.5),
        ("s", 1200.25),
    }
    # the prose (999 passed) is no data; another run's data is not this run's; no run named: every run
    assert ("passed", 999.0) not in quantities_of(record)
    assert ("passed", 7.0) in quantities_of(record) and ("passed", 7.0) not in quantities_of(
        record, {"1234abc"}
    )
    doc = tmp_path / "README.md"

    def problems(text: str) -> list[str]:
        return block_problems(doc, text, every_block=True)[0]

    link = "([records/ci.md](records/ci.md))"
    assert problems(f"At `1234abc`: 19 min 32 s, 19 passed, 6 failing on upstream too {link}") == []
    for wrong in ("999 passed", "0 failing on upstream too", "7 passed", "19 min 33 s", "2 device failures"):
        assert problems(f"At `1234abc`: {wrong} {link}") == [
            f"README.md: {wrong!r} is not in the data of ci.md"
        ], wrong
    assert problems("took 19 min 32 s") == ["README.md: '19 min 32 s' cites no record: 'took 19 min 32 s'"]


def test_a_figure_of_bench_json_is_the_key_it_claims(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(
        json.dumps({"build": {"noop_dgr_s": 0.419, "cold_dgr_s": 115.04}, "rpc": {"ttft_s": 0.304}})
    )
    doc = tmp_path / "README.md"

    def problems(text: str) -> list[str]:
        return block_problems(doc, f"{text} ([bench.json](bench.json))", every_block=True)[0]

    assert problems("a no-op `dgr build` 0.42 s, a cold `dgr build --upstream-only` 115 s") == []
    # 0.30 s is a value of the file (an RPC time to the first token), not the no-op build's
    assert problems("a no-op `dgr build` 0.30 s") == [
        "README.md: '0.30 s' is not build.noop_dgr_s of bench.json ([0.419])"
    ]
    assert problems("a warm build 0.42 s") == [
        "README.md: '0.42 s' is not in the data of bench.json (a time of bench.json claims its key: see "
        "BENCH_CLAIMS)"
    ]
    assert problems("ninja's own no-op 0.01 s") == [
        "README.md: '0.01 s' is not build.noop_ninja_s of bench.json (no such key)"
    ]


def test_every_figure_of_the_readme_is_in_the_record_it_cites() -> None:
    """README.md types no figure by hand: each time and count it quotes stands in the block that cites the
    file the code wrote it in (a record of docs/records/, docs/bench/bench.json), and is in that file's
    data."""
    problems, checked = unsourced_figures(ROOT / "README.md", every_block=True)
    assert not problems, "\n".join(problems)
    assert checked >= 12  # the README quotes its figures (13 on 2026-12-06): the check has something to check


def test_every_figure_of_a_measured_entry_citing_a_record_is_in_it() -> None:
    """docs/measured.md's entries that cite a record quote only what the record's data holds (the older
    entries, from runs that kept no record, are the history the README no longer quotes)."""
    problems, checked = unsourced_figures(ROOT / "docs" / "measured.md", every_block=False)
    assert not problems, "\n".join(problems)
    assert checked >= 20


EVIDENCE = sorted((ROOT / "docs" / "evidence").glob("*.md"))


@pytest.mark.parametrize("doc", EVIDENCE, ids=lambda p: p.name)
def test_an_evidence_file_quotes_the_files_of_its_own_runs(doc: Path) -> None:
    """An evidence file cites the bench files of its own runs, kept beside it in docs/evidence/ (the current
    docs/bench/ is replaced by the next bench), and each figure of a block citing one is in it."""
    links = [(doc.parent / link).resolve() for link in SOURCE.findall(doc.read_text())]
    evidence = (ROOT / "docs" / "evidence").resolve()
    assert [
        p for p in links if (p.name != "figures.md" and p.suffix != ".json") or evidence in p.parents
    ] == links
    problems, _ = unsourced_figures(doc, every_block=False)
    assert not problems, "\n".join(problems)


def test_the_evidence_of_the_bench_runs_is_held() -> None:
    """The evidence files that quote a bench quote it from its own files: the check has figures to check."""
    checked = {doc.name: unsourced_figures(doc, every_block=False)[1] for doc in EVIDENCE}
    assert checked["forward-2026-12-06.md"] >= 40
    assert checked["stage-cost-2026-12-06.md"] >= 6


def test_no_workflow_comment_quotes_a_time() -> None:
    """A time in a workflow's comments is held by no file; the records of docs/records/ have them."""
    problems = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted((ROOT / ".github" / "workflows").glob("*.yml"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if line.lstrip().startswith("#") and any(f.kind == "s" for f in figures_of(line))
    ]
    assert not problems, "\n".join(problems)
