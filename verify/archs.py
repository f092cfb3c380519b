"""The `archs` group: every architecture and variant of upstream's random-model generator, split into ranges
of layers and evaluated as a chain (`test-llama-archs --layer-ranges`, added by the series); one check per
model, parsed from the table the test prints."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from dgr.contracts import SYNTHETIC, Check

# the arguments of the test's CTest entry (tests/CMakeLists.txt of the series): a fixed seed, so that the
# table is the same in every run
ARGS = ("--layer-ranges", "-s", "42")
TEST_NAME = "test-llama-archs-layer-ranges"
CERTIFIED_SHARE_MIN = 0.90

Status = Literal["certified", "refused", "failed"]
_STATUS: dict[str, Status] = {"OK": "certified", "REFUSED": "refused", "FAIL": "failed"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ROW = re.compile(
    r"^\|\s*(?P<arch>[^|]+?)\s*\|\s*(?P<config>Dense|MoE)\s*\|\s*(?P<layers>\d+)\s*\|(?P<rest>.*)$"
)


@dataclass(frozen=True, kw_only=True)
class Row:
    arch: str
    config: str
    n_layer: int
    ranges: tuple[str, ...]
    status: Status | None
    """None: the test stopped while it ran this model (a crash)."""
    detail: str

    @property
    def name(self) -> str:
        return f"{self.arch}/{self.config.lower()}"


def parse(output: str) -> list[Row]:
    """The rows of the table in the output of the test, in order."""
    rows: list[Row] = []
    for line in _ANSI.sub("", output).splitlines():
        m = _ROW.match(line.strip())
        if not m:
            continue
        ranges, _, result = m.group("rest").partition("|")
        word, _, detail = result.strip().partition(" ")
        rows.append(
            Row(
                arch=m.group("arch"),
                config=m.group("config"),
                n_layer=int(m.group("layers")),
                ranges=tuple(r for r in ranges.strip().split(",") if r),
                status=_STATUS.get(word),
                detail=detail.strip(),
            )
        )
    return rows


def checks(output: str, exit_code: int) -> list[Check]:
    """One check per model (certified or refused with a reason passes, a mismatch or a crash fails), and one
    for the share of certified models."""
    rows = parse(output)
    out: list[Check] = []
    for row in rows:
        if row.status is None:
            detail = f"the test stopped at this model (exit code {exit_code}): {output.strip()[-1500:]}"
        elif row.status == "refused" and not row.detail:
            detail = "refused without a reason"
        else:
            detail = "" if row.status != "failed" else row.detail
        out.append(
            Check(
                group="archs",
                name=row.name,
                evidence=SYNTHETIC,
                passed=row.status in ("certified", "refused") and not detail,
                figures={
                    "status": row.status or "crashed",
                    "n_layer": row.n_layer,
                    "ranges": list(row.ranges),
                    **({"reason": row.detail} if row.status == "refused" else {}),
                },
                detail=detail,
            )
        )
    counts = {s: sum(1 for r in rows if r.status == s) for s in ("certified", "refused", "failed")}
    share = counts["certified"] / len(rows) if rows else 0.0
    problems = []
    if not rows:
        problems.append(f"the test printed no table (exit code {exit_code}): {output.strip()[-1500:]}")
    if share < CERTIFIED_SHARE_MIN:
        problems.append(f"{share:.1%} of the models are certified, the target is {CERTIFIED_SHARE_MIN:.0%}")
    if exit_code != 0 and all(r.status is not None for r in rows):
        problems.append(f"the test exited with {exit_code}")
    out.append(
        Check(
            group="archs",
            name="certified-share",
            evidence=SYNTHETIC,
            passed=not problems,
            figures={
                "models": len(rows),
                **counts,
                "certified_share": round(share, 4),
                "target": CERTIFIED_SHARE_MIN,
                "refusals": {r.name: r.detail for r in rows if r.status == "refused"},
            },
            detail="\n".join(problems),
        )
    )
    return out
