"""The `archs` group: every architecture of llama.cpp's arch list in `test-llama-archs --layer-ranges`
(added by the series): an architecture that supports layer ranges is split and its chains compared with
the whole model, bit for bit; any other is refused at load with the standard message; one that upstream's
random-model generator cannot build says why (listed, not compared: no pass). One check per row, parsed
from the table the test prints, and one for the whole table, which fails below the floor of certified
architectures the series declares (series/verify.toml)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Literal

from dgr.contracts import expectations
from dgr.contracts.archtable import ARCHS, ARCHS_SUMMARY, ArchRow, ArchsSummary
from dgr.contracts.report import SYNTHETIC, Check
from dgr.core import proc
from dgr.errors import VerifyError
from dgr.verify.checks.session import GroupSpec, Session

# the arguments of the test's CTest entry (tests/CMakeLists.txt of the series): a fixed seed, so that the
# table is the same in every run
ARGS = ("--layer-ranges", "-s", "42")
TEST_NAME = "test-llama-archs-layer-ranges"
PROGRAM = "test-llama-archs"
GENERATE_MODELS = "test-generate-models"
"""Upstream's test that runs PROGRAM (the unpatched build of PROGRAM is the executable of this test)."""
SUMMARY = ARCHS_SUMMARY

Status = Literal["certified", "refused", "no-model", "failed", "device-failure"]
_STATUS: dict[str, Status] = {
    "CERTIFIED": "certified",
    "REFUSED": "refused",
    "NO MODEL": "no-model",
    "FAIL": "failed",
}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ROW = re.compile(
    r"^\|\s*(?P<arch>[^|]+?)\s*\|\s*(?P<config>Dense|MoE|-)\s*\|\s*(?P<layers>\d+|-)\s*\|(?P<rest>.*)$"
)
_RESULT = re.compile(r"^(?P<word>CERTIFIED|REFUSED|NO MODEL|FAIL)\b\s*(?P<detail>.*)$")
_SUMMARY = re.compile(r"^Summary: (?P<archs>\d+) architectures,")
# the message of a range refused by an architecture that has not opted in (llm_arch_supports_layer_range())
REFUSAL = "not opted in, refused at load"


@dataclass(frozen=True, kw_only=True)
class Row:
    arch: str
    config: str
    """Dense, MoE, or "-" when the generator cannot build the architecture."""
    n_layer: int | None
    ranges: tuple[str, ...]
    status: Status | None
    """None: the test stopped while it ran this model (a crash)."""
    detail: str

    @property
    def name(self) -> str:
        return self.arch if self.config == "-" else f"{self.arch}/{self.config.lower()}"


@dataclass(frozen=True, kw_only=True)
class Table:
    rows: list[Row]
    n_archs: int | None
    """The architectures of the arch list, from the test's summary line (None: no summary printed)."""


def parse(output: str) -> Table:
    """The rows of the table in the output of the test, in order, and its summary."""
    rows: list[Row] = []
    n_archs = None
    for line in _ANSI.sub("", output).splitlines():
        line = line.strip()
        s = _SUMMARY.match(line)
        if s:
            n_archs = int(s.group("archs"))
            continue
        m = _ROW.match(line)
        if not m or m.group("arch") == "Model arch.":
            continue
        ranges, _, result = m.group("rest").partition("|")
        r = _RESULT.match(result.strip())
        layers = m.group("layers")
        rows.append(
            Row(
                arch=m.group("arch"),
                config=m.group("config"),
                n_layer=int(layers) if layers.isdigit() else None,
                ranges=tuple(x.strip() for x in ranges.strip().split(",") if x.strip()),
                status=_STATUS[r.group("word")] if r else None,
                detail=r.group("detail").strip() if r else "",
            )
        )
    return Table(rows=rows, n_archs=n_archs)


MULTI_SEQUENCE = ("3seq", "3seq-split")
"""The ranges column of a certified row names these: three sequences in one batch through a split, in
ubatches of several sequences and in equal splits, gave the whole model's logits."""
NO_SPLIT_EQUAL = "split_equal not run: "
"""What a certified row says when the whole model itself aborts with one KV stream per sequence."""


def _row_problem(row: Row, exit_code: int, output: str) -> str:
    if row.status is None:
        return f"the test stopped at this model (exit code {exit_code}): {output.strip()[-1500:]}"
    if row.status == "failed":
        return row.detail or "failed without a reason"
    # the split_equal case is left out only where the test names upstream's reason (the whole model aborts)
    missing = [
        r
        for r in MULTI_SEQUENCE
        if r not in row.ranges and not (r == "3seq-split" and NO_SPLIT_EQUAL in row.detail)
    ]
    if row.status == "certified" and missing:
        return f"certified without the multi-sequence case(s) {', '.join(missing)}"
    if row.status == "refused" and row.detail != REFUSAL:
        return f"refused with {row.detail!r}, not with the standard refusal at load"
    if row.status == "no-model" and not row.detail:
        return "no model, without a reason"
    return ""


def checks(output: str, exit_code: int, table: Table | None = None, *, floor: int) -> list[Check]:
    """One check per row (certified, or refused at load with the standard message, passes; no model with a
    reason compared nothing: it is listed, neither passed nor failed; a device failure with its evidence is
    a device failure, neither passed nor failed; a mismatch, another error or a crash fails), and one for the
    whole table: every architecture of the arch list has a row, at least `floor` architectures are certified,
    and the test exited with 0."""
    table = table or parse(output)
    out: list[Check] = []
    for row in table.rows:
        problem = _row_problem(row, exit_code, output)
        # the driver failed where the unpatched build's own test fails too: the row did not run, so it is not
        # passed; it is a device failure, counted apart from the passed and the failed rows
        device_failure = row.status == "device-failure" and not problem
        # upstream's generator builds no model of the architecture: nothing was compared
        not_compared = row.status == "no-model" and not problem
        out.append(
            Check(
                group=ARCHS,
                name=row.name,
                evidence=SYNTHETIC,
                passed=not problem and not device_failure and not not_compared,
                device_failure=device_failure,
                not_compared=not_compared,
                figures=ArchRow(
                    status=row.status or "crashed",
                    n_layer=row.n_layer,
                    ranges=row.ranges,
                    reason=row.detail if row.status in ("refused", "no-model", "device-failure") else None,
                ).to_json(),
                detail=problem or (row.detail if device_failure or not_compared else ""),
            )
        )
    statuses: tuple[Status, ...] = ("certified", "refused", "no-model", "failed", "device-failure")
    archs: dict[Status, list[str]] = {
        s: sorted({r.arch for r in table.rows if r.status == s}) for s in statuses
    }
    n_archs_rows = len({r.arch for r in table.rows})
    problems = []
    if not table.rows:
        problems.append(f"the test printed no table (exit code {exit_code}): {output.strip()[-1500:]}")
    if table.n_archs is None:
        problems.append("the test printed no summary line: it stopped before the end of the table")
    elif n_archs_rows != table.n_archs:
        problems.append(f"{n_archs_rows} architectures have a row, the arch list has {table.n_archs}")
    if len(archs["certified"]) < floor:
        problems.append(
            f"{len(archs['certified'])} architectures are certified, fewer than the {floor} that "
            f"{expectations.PATH} declares ([archs] certified_at_least)"
        )
    if exit_code != 0:
        problems.append(f"the test exited with {exit_code}")
    out.append(
        Check(
            group=ARCHS,
            name=SUMMARY,
            evidence=SYNTHETIC,
            passed=not problems,
            figures=ArchsSummary(
                architectures=table.n_archs,
                rows=len(table.rows),
                certified=len(archs["certified"]),
                refused=len(archs["refused"]),
                no_model_count=len(archs["no-model"]),
                failed=len(archs["failed"]),
                certified_archs=tuple(archs["certified"]),
                no_model={r.arch: r.detail for r in table.rows if r.status == "no-model"},
                device_failure={r.arch: r.detail for r in table.rows if r.status == "device-failure"},
                certified_floor=floor,
            ).to_json(),
            detail="\n".join(problems),
        )
    )
    return out


def _verify(session: Session) -> list[Check]:
    """The table of the layer-range test of every architecture: from the native group's run of it (its
    exit status as CTest judged it), else its own run; on the GPU device of the session when it has one
    (`-b DEVICE`: logits within an NMSE tolerance, and the offload of n_gpu_layers over a range)."""
    build_dir = session.patched.path
    device = session.env.device
    floor = session.expectations().archs.certified_at_least
    native_ran = session.native_ran
    ran = next((c for c in native_ran.checks if c.name == TEST_NAME), None) if native_ran else None
    if native_ran is not None and ran is not None and device is None:
        return checks(native_ran.outputs[TEST_NAME], 0 if ran.passed else 1, floor=floor)
    exe = build_dir / "bin" / PROGRAM
    if not exe.is_file():
        raise VerifyError(f"the build at {build_dir} has no {PROGRAM}", hint="run `dgr build`")
    if device is not None:
        return _on_device(exe, device, build_dir, cache(partial(baseline_test, session)), floor=floor)
    result = proc.run([exe, *ARGS], check=False, error=VerifyError, what=PROGRAM, cwd=build_dir)
    return checks(result.stdout, result.returncode, floor=floor)


def baseline_test(session: Session) -> Path:
    """The unpatched build's test-llama-archs (upstream's own test, built with upstream's test executables in
    the baseline's work build dir, for the backend of the run); VerifyError when there is none."""
    if session.work_build is None:
        raise VerifyError("this dgr verify has no work build dirs: no unpatched test-llama-archs to judge by")
    exe = session.work_build(True, (GENERATE_MODELS,)) / "bin" / PROGRAM
    if not exe.is_file():
        raise VerifyError(
            f"the unpatched build at {exe.parent.parent} has no {PROGRAM}",
            hint="upstream's tests/CMakeLists.txt registers it (test-generate-models); rebuild the baseline",
        )
    return exe


IDLE_TIMEOUT = 480.0
"""The longest the test may print nothing on a device (a row takes seconds on lavapipe, the slowest about a
minute): past it, the driver hung at the row printed last."""
ARCH_TIMEOUT = 1800.0
"""How long one architecture may print nothing when it runs alone, after upstream's own test passed on it:
a row that was only slow finishes then."""


def _run(exe: Path, args: list[str], cwd: Path, idle_s: float) -> proc.Watched:
    """test-llama-archs, stopped when it prints nothing for `idle_s` (exit code -9), with what it printed
    until then: its last row, printed before the model runs, is where it stopped."""
    return proc.watch([exe, *args], idle_s=idle_s, cwd=cwd, error=VerifyError)


UNKNOWN_DEVICE = "unknown backend device"
"""What test-llama-archs says of a `-b DEVICE` its build has no backend for (and exits with 1)."""


def _on_device(exe: Path, device: str, cwd: Path, baseline: Callable[[], Path], *, floor: int) -> list[Check]:
    """The table on a GPU device. A driver can crash or hang in the middle of it (Mesa 22's lavapipe crashes
    on qwen3next's MoE and hangs on qwen35 in upstream's own test): the architecture it stopped at is run in
    upstream's own test, the unpatched build's test-llama-archs (`baseline()`, built on first use), on the
    same device, without a range (`test-llama-archs -a ARCH -b DEVICE`); when that fails too, the row is a
    `device-failure` with that evidence (a crash the series causes is not: upstream's test passes there).
    When upstream's test passes, a row that hung runs alone with a longer limit (it may have been slow); a
    crash, or a row that does not finish alone, fails. An unpatched test that does not know the device judges
    nothing: the row fails. The table then goes on without the architectures already done."""
    rows: list[Row] = []
    n_archs: int | None = None
    exit_code = 0
    outputs: list[str] = []
    while True:
        done = sorted({r.arch for r in rows})
        args = [*ARGS, "-b", device]
        if done:
            args += ["-a", f"^(?!({'|'.join(re.escape(a) for a in done)})$)"]
        run = _run(exe, args, cwd, IDLE_TIMEOUT)
        outputs.append(run.output)
        segment = parse(run.output)
        stopped = next((r for r in segment.rows if r.status is None), None)
        if stopped is None:
            rows += segment.rows
            n_archs = None if segment.n_archs is None else len(done) + segment.n_archs
            exit_code = run.returncode
            if segment.n_archs is None and not segment.rows:
                exit_code = run.returncode or 1
            break
        rows += [r for r in segment.rows if r.status is not None and r.arch != stopped.arch]
        kept = [r for r in segment.rows if r.arch == stopped.arch and r.status is not None]
        only = f"^{re.escape(stopped.arch)}$"
        unpatched = baseline()
        upstream = _run(unpatched, ["-s", "42", "-b", device, "-a", only], unpatched.parent, IDLE_TIMEOUT)
        how = (
            f"prints nothing for {IDLE_TIMEOUT:.0f} s"
            if upstream.stalled
            else f"exits with {upstream.returncode}"
        )
        stop = (
            f"the test printed nothing for {IDLE_TIMEOUT:.0f} s here"
            if run.stalled
            else f"the test stopped here (exit {run.returncode})"
        )
        own = f"upstream's own test of {stopped.arch} on {device}, without a range (the unpatched build),"
        if UNKNOWN_DEVICE in upstream.output:
            why = f"{stop}; {own} does not know the device ({UNKNOWN_DEVICE}): it judges nothing"
            rows += [*kept, dataclasses.replace(stopped, status="failed", detail=why)]
            continue
        if upstream.returncode != 0:
            rows += [
                *kept,
                dataclasses.replace(stopped, status="device-failure", detail=f"{stop}; {own} {how} too"),
            ]
            continue
        if run.stalled:
            # upstream's test of the architecture passes on the device: the row may only have been slow
            alone = _run(exe, [*ARGS, "-b", device, "-a", only], cwd, ARCH_TIMEOUT)
            outputs.append(alone.output)
            table = parse(alone.output)
            if table.rows and all(r.status is not None for r in table.rows):
                rows += table.rows
                continue
            stop += (
                f", and alone it printed nothing for {ARCH_TIMEOUT:.0f} s"
                if alone.stalled
                else ", and alone it stopped"
            )
        rows += [*kept, dataclasses.replace(stopped, status="failed", detail=f"{stop}, and {own} passes")]
    return checks("\n".join(outputs), exit_code, Table(rows=rows, n_archs=n_archs), floor=floor)


GROUP = GroupSpec(_verify)
