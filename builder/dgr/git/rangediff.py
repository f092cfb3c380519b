"""`git range-diff` of a series as commits on two bases, and `git diff -U0` read as changed lines.

Both serve the proof of a port (dgr.maintain.proof) and the package's range-diff against the previous pin
(dgr.export.previous): git's own output is what a reviewer reads."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dgr.git import gitops

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
"""A hunk's header: the old start and count, the new start and count (a count of 1 left out)."""


CREATION_FACTOR = 100
"""`git range-diff --creation-factor`: git's default (60) shows a one-line patch whose line a resolution
rewrote as one commit removed and another added; at 100 git pairs it as one commit changed (`!`)."""


def range_diff(git_dir: Path, old: tuple[str, str], new: tuple[str, str]) -> str:
    """`git range-diff OLD_BASE..OLD_TIP NEW_BASE..NEW_TIP` (no colour), as git prints it."""
    spans = [f"{old[0]}..{old[1]}", f"{new[0]}..{new[1]}"]
    args = ["range-diff", "--no-color", f"--creation-factor={CREATION_FACTOR}", *spans]
    return gitops.git(args, cwd=git_dir).stdout


@dataclass(frozen=True)
class Line:
    """One changed line of a diff: removed (`-`) or added (`+`), where it is on the old side."""

    file: str
    sign: str
    text: str
    span: tuple[int, int]
    """Old-side lines it concerns: the removed line itself; for an added line the lines it replaces, or
    (a pure insertion after line n) n and n + 1, the lines it goes between."""
    hunk: str
    """The `@@ -a,b +c,d @@` header of its hunk (`git diff -U0`)."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.file, self.sign, self.text)


@dataclass(frozen=True)
class Region:
    """One hunk of `git diff -U0`: the lines it changes on each side (a pure insertion or deletion is the
    two lines around it on the side where nothing is)."""

    file: str
    old: tuple[int, int]
    new: tuple[int, int]


def _span(start: int, count: int) -> tuple[int, int]:
    return (start, start + count - 1) if count else (start, start + 1)


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def changes(git_dir: Path, old: str, new: str) -> tuple[list[Line], list[Region]]:
    """`git diff -U0 OLD NEW` (no renames): every changed line, and every hunk's regions."""
    text = gitops.git(
        [
            "-c",
            "core.quotePath=false",
            "diff",
            "-U0",
            "--no-color",
            "--no-renames",
            "--no-ext-diff",
            old,
            new,
        ],
        cwd=git_dir,
    ).stdout
    lines: list[Line] = []
    regions: list[Region] = []
    file, minus, plus, header = "", "", "", ""
    at_old, old_span = 0, (0, 0)
    for raw in text.split("\n"):
        if raw.startswith("diff --git "):
            file, header = "", ""
        elif raw.startswith("--- ") and not header:
            minus = raw[4:].removeprefix("a/")
        elif raw.startswith("+++ ") and not header:
            plus = raw[4:].removeprefix("b/")
            file = minus if plus == "/dev/null" else plus
        elif raw.startswith("Binary files "):
            name = raw.rsplit(" and ", 1)[-1].removesuffix(" differ").removeprefix("b/")
            lines.append(Line(name, "+", "<binary>", (1, 1 << 30), raw))
            regions.append(Region(name, (1, 1 << 30), (1, 1 << 30)))
        elif match := HUNK.match(raw):
            a, b, c, d = (int(g) if g is not None else 1 for g in match.groups())
            header = raw[: match.end()]
            at_old, old_span = a, _span(a, b)
            regions.append(Region(file, old_span, _span(c, d)))
        elif header and raw.startswith("-"):
            lines.append(Line(file, "-", raw[1:], (at_old, at_old), header))
            at_old += 1
        elif header and raw.startswith("+"):
            lines.append(Line(file, "+", raw[1:], old_span, header))
    return lines, regions
