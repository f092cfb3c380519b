"""`dgr rebase-check --onto SOURCE`: per patch clean / 3-way / conflict; exit 5 on a conflict.

`dgr rebase-check --onto TARGET --proof`: the proof of TARGET's port (dgr.maintain.proof): the range-diff
of the series on the pin against the port on TARGET, and the check that the port adds no drift of its own
(exit 9 on drift).

`dgr rebase-check --matrix`: the same for every reachable upstream (the pin, then each locked rebase
target), and for each port of the series on its own target, as a patch x upstream table. Drift onto a newer
upstream is reported; only a series that does not apply cleanly on the pin (or a port that does not apply
cleanly on its target) fails (exit 5).

Output: plain text for a terminal (an aligned table, long file lists summarised, digests shortened),
`--markdown` (`--format markdown`) Markdown tables, `--json` (`--format json`) the whole report."""

from __future__ import annotations

import argparse
import json
import re
import textwrap

from dgr.contracts import locks
from dgr.core import log
from dgr.core.paths import Context, Repo
from dgr.errors import EXIT_OK, ApplyError, UsageError
from dgr.git import apply, gitops
from dgr.maintain import proof, rebase
from dgr.sources import upstream


def run(args: argparse.Namespace) -> int:
    if args.matrix:
        if args.proof:
            raise UsageError("--proof needs --onto TARGET (a locked target with a port), not --matrix")
        return run_matrix(args)
    if args.proof:
        return run_proof(args)
    ctx = Context.discover()
    lock = locks.load_upstream(ctx.repo.locks_dir)
    patches = apply.verified_series(ctx.repo)
    pin = upstream.obtain_pin(ctx.cache, lock, args.mirror)
    identity = gitops.Identity.from_locks(locks.load_toolchain(ctx.repo.locks_dir), lock.pin)
    with ctx.cache.tmpdir("rebase-check") as tmp:
        onto = rebase.resolve(ctx.cache, lock, args.onto, args.mirror, tmp)
        scratch = rebase.scratch_repo(tmp, [pin.repo, onto.repo])
        with log.step(f"apply {len(patches)} patch(es) onto {onto.commit[:12]} ({onto.source})"):
            report = rebase.check(scratch, onto, lock.pin, patches, identity, tmp, ctx.repo)
    if args.format == "json":
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(onto_report(report, markdown=args.format == "markdown"))
    return EXIT_OK if report.ok else ApplyError.exit_code


def run_proof(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    lock = locks.load_upstream(ctx.repo.locks_dir)
    target = lock.rebase_targets.get(args.onto)
    if target is None or target.port is None:
        ported = [name for name, t in lock.rebase_targets.items() if t.port]
        raise UsageError(
            f"--proof needs a locked rebase target with a port; {args.onto} "
            + ("is not a locked rebase target" if target is None else "has no port"),
            hint="the targets with a port in locks/upstream.toml: "
            + (", ".join(ported) or "(none)")
            + '; a port is series/ports/<port> and `port = "<port>"` in its target\'s table',
        )
    pin = upstream.obtain_pin(ctx.cache, lock, args.mirror)
    identity = gitops.Identity.from_locks(locks.load_toolchain(ctx.repo.locks_dir), lock.pin)
    with ctx.cache.tmpdir("rebase-proof") as tmp:
        onto = rebase.resolve(ctx.cache, lock, args.onto, args.mirror, tmp)
        scratch = rebase.scratch_repo(tmp, [pin.repo, onto.repo])
        found = proof.prove(scratch, lock.pin, onto, ctx.repo, target.port, identity, tmp)
    if args.format == "json":
        print(json.dumps(found.to_json(), indent=2))
    else:
        print(proof.render(found))
    if not found.ok:
        raise found.error()
    return EXIT_OK


def run_matrix(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    lock = locks.load_upstream(ctx.repo.locks_dir)
    identity = gitops.Identity.from_locks(locks.load_toolchain(ctx.repo.locks_dir), lock.pin)
    pin_repo = upstream.obtain_pin(ctx.cache, lock, args.mirror)
    pin_onto = rebase.Onto(
        lock.pin.commit[:12], pin_repo.repo, lock.pin.commit, lock.pin.tree, pin_repo.source, True
    )
    columns: list[tuple[str, rebase.RebaseReport]] = []
    required: list[rebase.RebaseReport] = []
    with ctx.cache.tmpdir("rebase-matrix") as tmp:
        series_patches = apply.verified_series(ctx.repo)
        runs: list[tuple[str, Repo, str | None]] = [("pin " + lock.pin.commit[:7], ctx.repo, None)]
        runs += [(name, ctx.repo, name) for name in lock.rebase_targets]
        runs += [
            (f"{t.port} (port) on {name}", ctx.repo.for_port(t.port), name)
            for name, t in lock.rebase_targets.items()
            if t.port
        ]
        for i, (label, repo, spec) in enumerate(runs):
            patches = series_patches if repo.port is None else apply.verified_series(repo)
            work = tmp / str(i)
            work.mkdir()
            onto = pin_onto if spec is None else rebase.resolve(ctx.cache, lock, spec, args.mirror, work)
            scratch = rebase.scratch_repo(work, [pin_repo.repo, onto.repo])
            with log.step(f"{label}: apply {len(patches)} patch(es) onto {onto.commit[:12]}"):
                report = rebase.check(scratch, onto, lock.pin, patches, identity, work, repo)
            columns.append((label, report))
            if spec is None or repo.port is not None:
                required.append(report)
    failed = [r for r in required if not all(p.status == "clean" for p in r.patches)]
    if args.format == "json":
        print(
            json.dumps(
                {"ok": not failed, "columns": [{"label": label, **r.to_json()} for label, r in columns]},
                indent=2,
            )
        )
    elif args.format == "markdown":
        print(matrix_table(columns))
    else:
        print(matrix_text(columns))
    return EXIT_OK if not failed else ApplyError.exit_code


WIDTH = 100
"""Where plain text wraps (a terminal's 100 columns; the tables' rows do not wrap)."""
FILES_SHOWN = 3
"""How many files of a conflict plain text names before `and N more`."""


def short_source(source: str) -> str:
    """A source label with its sha256 shortened to 12 hex digits (the lock holds the whole digest)."""
    return re.sub(r"\b([0-9a-f]{12})[0-9a-f]{52}\b", r"\1", source)


def summarised(files: list[str], shown: int = FILES_SHOWN) -> str:
    """`a, b, c and 4 more`: the first `shown` files, then how many others."""
    if len(files) <= shown:
        return ", ".join(files)
    return ", ".join(files[:shown]) + f" and {len(files) - shown} more"


def _wrapped(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _conflict_files(patch: rebase.PatchReport) -> list[str]:
    """The rejected files, or (a generated patch) where its hand-written part or its rule stopped."""
    return sorted({r.file for r in patch.rejections} or {f.split(":", 1)[0] for f in patch.files})


def onto_report(report: rebase.RebaseReport, *, markdown: bool = False) -> str:
    """One upstream, per patch: a table (plain or Markdown), each conflict's hunks, the next step."""
    onto = report.onto
    verified = "verified" if onto.verified else "UNVERIFIED"
    head = f"onto {onto.spec}: {onto.commit} ({verified}, {short_source(onto.source)})"
    rows = [["patch", "status", "files"]]
    for p in report.patches:
        status = p.status + (" (after an earlier conflict)" if p.after_failure else "")
        files = summarised(_conflict_files(p)) if p.status == "conflict" else ""
        rows.append([p.name, status, _rule(p) if p.rule and not files else files])
    if markdown:
        lines = [head, "", *(f"| {' | '.join(row)} |" for row in rows[:1])]
        lines += ["| --- | --- | --- |", *(f"| {' | '.join(row)} |" for row in rows[1:])]
    else:
        lines = [head, "", *_aligned(rows)]
    details = [p for p in report.patches if p.rejections or (p.status == "conflict" and p.files)]
    for p in details:
        found = [line for r in p.rejections for line in r.describe().splitlines()] or p.files
        body = [f"  {line}" for line in found]
        # Markdown: the hunks as they are (a fenced block keeps one per line)
        lines += ["", f"{p.name}:", *(["```", *body, "```"] if markdown else body)]
    lines += ["", *_wrapped(f"next: {report.next_step()}", "")]
    return "\n".join(lines)


def _rule(found: rebase.PatchReport) -> str:
    """What the rule of a generated patch did there: `rule: 12 changed, 3 without a layer loop, 0 refused`."""
    return f"rule: {found.rule.describe()}" if found.rule else ""


def _cell(found: rebase.PatchReport | None) -> str:
    if found is None:
        return "-"
    rule = f" ({_rule(found)})" if found.rule and found.status != "conflict" else ""
    return found.status + rule + (" (after a conflict)" if found.after_failure else "")


def _next(i: int, report: rebase.RebaseReport) -> str:
    on_pin = i == 0 and all(p.status == "clean" for p in report.patches)
    return "nothing: the series is current on the pin" if on_pin else report.next_step()


def matrix_text(columns: list[tuple[str, rebase.RebaseReport]]) -> str:
    """The patch x upstream table as aligned plain text; then each upstream's commit, source and next step,
    and the files of each conflict (summarised)."""
    names = list(dict.fromkeys(p.name for _, r in columns for p in r.patches))
    rows = [["patch", *(label for label, _ in columns)]]
    for name in names:
        rows.append([name, *(_cell(_find(r, name)) for _, r in columns)])
    lines = _aligned(rows)
    for i, (label, report) in enumerate(columns):
        source = short_source(report.onto.source)
        if source.startswith(f"{label} ("):  # a locked target's sdist: its spec is the label already
            source = "its sdist " + source[len(label) + 1 :]
        lines += ["", f"{label}: {report.onto.commit[:12]} from {source}"]
        for p in report.patches:
            if p.status == "conflict":
                lines += _wrapped(f"conflict in {p.name}: {summarised(_conflict_files(p))}", "  ")
        lines += _wrapped(f"next: {_next(i, report)}", "  ")
    return "\n".join(lines)


def _find(report: rebase.RebaseReport, name: str) -> rebase.PatchReport | None:
    return next((p for p in report.patches if p.name == name), None)


def matrix_table(columns: list[tuple[str, rebase.RebaseReport]]) -> str:
    """A Markdown table: one row per patch name, one column per upstream (or port)."""
    names = list(dict.fromkeys(p.name for _, r in columns for p in r.patches))
    header = "| patch | " + " | ".join(label for label, _ in columns) + " |"
    lines = [header, "|" + " --- |" * (len(columns) + 1)]
    for name in names:
        cells = []
        for _, report in columns:
            found = _find(report, name)
            cell = _cell(found)
            if found is not None and found.status == "conflict":
                cell += ": " + ", ".join(_conflict_files(found))
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    for i, (label, report) in enumerate(columns):
        source = short_source(report.onto.source)
        lines.append(f"- {label}: {report.onto.commit[:12]} ({source}); next: {_next(i, report)}")
    return "\n".join(lines)
