#!/usr/bin/env python3
"""Rewrite rules for the layer loop of the graphs in src/models/*.cpp of llama.cpp.

Usage: python3 rewrite.py [--check | --diff] [--list] [--lists DIR] RULE LLAMA_CPP_TREE

Rules:
  layer-inputs       record the input of every layer through build_layer_inp()
  layer-range-archs  run the layer loop over [il_begin, il_end) and stop after the last
                     layer of a range, in the files named in layer-range-archs.txt

The tree is edited in place. --check and --diff write nothing and exit 1 when the tree
differs from the rule's output. A shape the rule does not know is refused with its file
and line (exit 2); every file is checked first, so a refusal writes nothing.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # its modules lie beside it, also when it is loaded by its path (the tests)
    sys.path.insert(0, str(HERE))

from cppsyntax import Edit, Node, Refused, parse  # noqa: E402 (beside this program, found through HERE)
from layerloop import layer_inputs, layer_range  # noqa: E402

MODELS = Path("src") / "models"

EXIT_OK = 0
EXIT_DIFFERS = 1
EXIT_REFUSED = 2


class BadList(Exception):
    """A list file of a rule that cannot be read."""


@dataclass(frozen=True)
class Outcome:
    """What a rule does to one file: status is changed, done, no-loop, skipped or refused."""

    path: str
    status: str
    new: bytes = b""
    line: int = 0
    reason: str = ""


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    def with_status(self, status: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == status]


# --- driver ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    name: str
    apply: Callable[[bytes, Node], list[Edit] | None]
    list_file: str  # beside this program: the files the rule edits (only_listed) or leaves alone
    only_listed: bool


RULES = {
    "layer-inputs": Rule("layer-inputs", layer_inputs, "layer-inputs.skip", only_listed=False),
    "layer-range-archs": Rule("layer-range-archs", layer_range, "layer-range-archs.txt", only_listed=True),
}


def read_list(path: Path) -> dict[str, tuple[int, str]]:
    """Lines `file.cpp  [reason]`, `#` comments: {file: (line, reason)}."""
    entries: dict[str, tuple[int, str]] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise BadList(f"{path}: {e.strerror}") from e
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        if not name.endswith(".cpp") or "/" in name:
            raise BadList(f"{path}:{number}: expected the name of a file of {MODELS}, got {name!r}")
        if name in entries:
            raise BadList(f"{path}:{number}: {name} is listed twice")
        entries[name] = (number, reason.strip())
    return entries


def apply_edits(source: bytes, edits: Sequence[Edit]) -> bytes:
    ordered = sorted(edits, key=lambda e: (e.start, e.end))
    for a, b in itertools.pairwise(ordered):
        if b.start < a.end:
            raise AssertionError(f"overlapping edits at bytes {a.start} and {b.start}")
    for edit in reversed(ordered):
        source = source[: edit.start] + edit.text + source[edit.end :]
    return source


def rewrite_source(rule: Rule, source: bytes, path: str) -> Outcome:
    try:
        edits = rule.apply(source, parse(source))
    except Refused as refused:
        return Outcome(path, "refused", line=refused.line, reason=refused.reason)
    if edits is None:
        return Outcome(path, "no-loop")
    new = apply_edits(source, edits)
    return Outcome(path, "changed", new=new) if new != source else Outcome(path, "done")


def run_rule(rule: Rule, tree: Path, list_dir: Path = HERE) -> Report:
    """The outcome of the rule on every file of src/models/ (nothing is written)."""
    models = tree / MODELS
    if not models.is_dir():
        raise BadList(f"{models}: no such directory (expected a llama.cpp source tree)")
    list_path = list_dir / rule.list_file
    listed = read_list(list_path)
    present = sorted(p.name for p in models.glob("*.cpp"))
    report = Report()
    if rule.only_listed:
        for name, (number, _) in sorted(listed.items()):
            if name not in present:
                reason = f"{MODELS / name} is not in the tree"
                report.outcomes.append(Outcome(str(list_path), "refused", line=number, reason=reason))
    for name in present:
        path = str(MODELS / name)
        if (name in listed) != rule.only_listed:
            report.outcomes.append(Outcome(path, "skipped", reason=listed.get(name, (0, ""))[1]))
            continue
        outcome = rewrite_source(rule, (models / name).read_bytes(), path)
        if rule.only_listed and outcome.status == "no-loop":
            outcome = Outcome(
                path, "refused", line=1, reason="listed, but no graph of the file has a layer loop"
            )
        report.outcomes.append(outcome)
    return report


def unified_diff(tree: Path, outcome: Outcome) -> bytes:
    old = (tree / outcome.path).read_bytes().decode("latin-1").splitlines(keepends=True)
    new = outcome.new.decode("latin-1").splitlines(keepends=True)
    lines = difflib.unified_diff(old, new, f"a/{outcome.path}", f"b/{outcome.path}")
    eof = "\n\\ No newline at end of file\n"
    return "".join(line if line.endswith("\n") else line + eof for line in lines).encode("latin-1")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Apply a rewrite rule to the graphs in src/models/*.cpp of a llama.cpp source tree."
    )
    parser.add_argument("rule", choices=sorted(RULES))
    parser.add_argument("tree", type=Path, help="the root of the llama.cpp source tree")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the rule would change files"
    )
    mode.add_argument("--diff", action="store_true", help="write nothing; print the changes; exit 1 if any")
    parser.add_argument("--list", action="store_true", help="print the outcome for every file")
    parser.add_argument(
        "--lists",
        type=Path,
        default=HERE,
        metavar="DIR",
        help="where the list files are (default: beside %(prog)s)",
    )
    args = parser.parse_args(argv)
    rule = RULES[args.rule]
    try:
        report = run_rule(rule, args.tree, args.lists)
    except BadList as e:
        print(f"{rule.name}: {e}", file=sys.stderr)
        return EXIT_REFUSED

    if args.list:
        for o in report.outcomes:
            print(
                f"{o.status:8} {o.path}"
                + (f":{o.line}" if o.line else "")
                + (f": {o.reason}" if o.reason else "")
            )
    refused = report.with_status("refused")
    for o in refused:
        print(f"{o.path}:{o.line}: {rule.name}: {o.reason}", file=sys.stderr)
    changed = report.with_status("changed")
    writes = not (refused or args.check or args.diff)
    print(
        f"{rule.name}: {len(changed)} {'changed' if writes else 'to change'}, {report.count('done')} done, "
        f"{report.count('no-loop')} without a layer loop, {report.count('skipped')} not for this rule, "
        f"{len(refused)} refused",
        file=sys.stderr,
    )
    if refused:
        print(f"{rule.name}: nothing written", file=sys.stderr)
        return EXIT_REFUSED
    if args.diff:
        sys.stdout.flush()
        sys.stdout.buffer.write(b"".join(unified_diff(args.tree, o) for o in changed))
        sys.stdout.buffer.flush()
    if args.check:
        for o in changed:
            print(f"{o.path}: {rule.name}: differs from the rule's output", file=sys.stderr)
    if args.check or args.diff:
        return EXIT_DIFFERS if changed else EXIT_OK
    for o in changed:
        (args.tree / o.path).write_bytes(o.new)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
