"""The evidence of the verify report as the documents show it: the architecture table (the `archs` group),
the comparison of the compute graphs with upstream's (the `graph` group), the real-model checks."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from dgr.contracts.archtable import ARCH_STATUSES, ARCHS, ARCHS_SUMMARY, ArchRow, ArchsSummary
from dgr.contracts.report import REAL_MODEL, Check
from dgr.export.branches import AppliedSeries
from dgr.export.figures import fmt

_REFUSAL_LITERAL = re.compile(r'"[^"\\]*?(the architecture %s does not support layer ranges)[^"\\]*"')


def refusal_message(series: AppliedSeries) -> str | None:
    """The message a range is refused with at load by an architecture that has not opted in, as a C string
    literal the series adds holds it (`%s`: the architecture's name), or None when no patch adds one."""
    for patch in series.patches.values():
        for diff in patch.files:
            for line in diff.added:
                if match := _REFUSAL_LITERAL.search(line):
                    return match.group(1)
    return None


def _arch_of(row: str) -> str:
    """`llama/dense` -> `llama`; a row without a model is named by its architecture alone."""
    return row.split("/", 1)[0]


def archs_table(checks: Sequence[Check], refusal: str | None = None) -> dict[str, Any] | None:
    """The architecture table of the `archs` group (one row per architecture and variant, `every-architecture`
    over the whole table), or None when the report has none. Counted in architectures (the summary's figures,
    else the rows') and in rows."""
    archs_checks = [c for c in checks if c.group == ARCHS]
    rows = [
        (c, ArchRow.from_json(c.figures, f"check {c.id}"))
        for c in archs_checks
        if c.name != ARCHS_SUMMARY and "status" in c.figures
    ]
    if not rows:
        return None
    summary_check = next((c for c in archs_checks if c.name == ARCHS_SUMMARY), None)
    summary = (
        ArchsSummary.from_json(summary_check.figures, f"check {summary_check.id}") if summary_check else None
    )
    table = [
        {
            "name": c.name,
            "arch": _arch_of(c.name),
            "status": row.status,
            "n_layer": "-" if row.n_layer is None else str(row.n_layer),
            "ranges": ", ".join(row.ranges) or "-",
            "reason": row.reason or c.detail.split("\n", 1)[0],
        }
        for c, row in rows
    ]
    in_rows = {s: sum(1 for r in table if r["status"] == s) for s in ARCH_STATUSES}
    computed = {s: len({r["arch"] for r in table if r["status"] == s}) for s in ARCH_STATUSES}
    counted = summary.in_archs() if summary is not None else {}
    refused = [r for r in table if r["status"] == "refused"]
    example = refused[0]["arch"] if refused else None
    return {
        "rows": table,
        "n_rows": len(table),
        "architectures": summary.architectures
        if summary is not None and summary.architectures is not None
        else len({r["arch"] for r in table}),
        "archs": {s: counted.get(s, computed[s]) for s in ARCH_STATUSES},
        "in_rows": in_rows,
        "certified_archs": list(summary.certified_archs)
        if summary is not None
        else sorted({r["arch"] for r in table if r["status"] == "certified"}),
        "no_model": dict(summary.no_model)
        if summary is not None
        else {r["arch"]: r["reason"] for r in table if r["status"] == "no-model"},
        "failed": [r for r in table if r["status"] in ("failed", "crashed")],
        "refusal": refusal.replace("%s", example) if refusal is not None and example is not None else None,
        "passed": summary_check.passed if summary_check is not None else None,
    }


GRAPH = "graph"
"""The verify group that compares the compute graph of every architecture with upstream's, no range set."""
GRAPH_SUMMARY = "every-architecture"


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def graphs_table(checks: Sequence[Check]) -> dict[str, Any] | None:
    """The comparison of the compute graphs with upstream's (the `graph` group's check of every variant), or
    None when the report has none."""
    summary = next((c for c in checks if str(c.group) == GRAPH and c.name == GRAPH_SUMMARY), None)
    if summary is None:
        return None
    figures = summary.figures
    compared, equal = _count(figures.get("compared")), _count(figures.get("equal"))
    if compared is None or equal is None:
        return None
    not_built = figures.get("not_built")
    failed = figures.get("failed")
    return {
        "compared": compared,
        "equal": equal,
        "not_built": {str(k): str(v) for k, v in not_built.items()} if isinstance(not_built, dict) else {},
        "failed": [str(f) for f in failed] if isinstance(failed, list) else [],
    }


REAL_MODEL_FIGURES = 8
"""The scalar figures shown per real-model check (lists and tables stay in the report)."""


def real_model_rows(checks: Sequence[Check]) -> list[dict[str, str]]:
    def scalars(c: Check) -> str:
        shown = [
            f"{k}={fmt(v)}"
            for k, v in c.figures.items()
            if isinstance(v, (int, float, bool)) or (isinstance(v, str) and len(v) <= 40)
        ]
        return "; ".join(shown[:REAL_MODEL_FIGURES])

    return [
        {"group": c.group, "name": c.name, "figures": scalars(c)} for c in checks if c.evidence == REAL_MODEL
    ]
