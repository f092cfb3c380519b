"""The evidence of the verify report as the documents show it: the architecture table (the `archs` group),
the comparison of the compute graphs with upstream's (the `graph` group), the real-model checks."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from dgr.contracts.report import REAL_MODEL, Check
from dgr.export.branches import AppliedSeries
from dgr.export.figures import fmt

ARCHS = "archs"
"""The verify group of the per-architecture table (`test-llama-archs --layer-ranges`)."""
ARCHS_SUMMARY = "every-architecture"

ARCH_STATUSES = ("certified", "refused", "no-model", "failed", "crashed")
"""The result of a row of the architecture table (`crashed`: the test stopped at it)."""
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
    archs_checks = [c for c in checks if str(c.group) == ARCHS]
    rows = [c for c in archs_checks if c.name != ARCHS_SUMMARY and c.figures.get("status") in ARCH_STATUSES]
    summary = next((c for c in archs_checks if c.name == ARCHS_SUMMARY), None)
    if not rows:
        return None
    table = [
        {
            "name": c.name,
            "arch": _arch_of(c.name),
            "status": str(c.figures["status"]),
            "n_layer": "-" if c.figures.get("n_layer") is None else str(c.figures["n_layer"]),
            "ranges": ", ".join(str(r) for r in c.figures.get("ranges", [])) or "-",
            "reason": str(c.figures.get("reason", "")) or c.detail.split("\n", 1)[0],
        }
        for c in rows
    ]
    in_rows = {s: sum(1 for r in table if r["status"] == s) for s in ARCH_STATUSES}
    computed = {s: len({r["arch"] for r in table if r["status"] == s}) for s in ARCH_STATUSES}
    figures = summary.figures if summary is not None else {}

    def in_archs(status: str) -> int:
        value = figures.get(status)
        return value if isinstance(value, int) and not isinstance(value, bool) else computed[status]

    architectures = figures.get("architectures")
    no_model = figures.get("no_model")
    if not isinstance(no_model, dict):
        no_model = {r["arch"]: r["reason"] for r in table if r["status"] == "no-model"}
    certified = figures.get("certified_archs")
    if not isinstance(certified, list):
        certified = sorted({r["arch"] for r in table if r["status"] == "certified"})
    refused = [r for r in table if r["status"] == "refused"]
    example = refused[0]["arch"] if refused else None
    return {
        "rows": table,
        "n_rows": len(table),
        "architectures": architectures
        if isinstance(architectures, int) and not isinstance(architectures, bool)
        else len({r["arch"] for r in table}),
        "archs": {s: in_archs(s) for s in ARCH_STATUSES},
        "in_rows": in_rows,
        "certified_archs": [str(a) for a in certified],
        "no_model": {str(a): str(why) for a, why in no_model.items()},
        "failed": [r for r in table if r["status"] in ("failed", "crashed")],
        "refusal": refusal.replace("%s", example) if refusal is not None and example is not None else None,
        "passed": summary.passed if summary is not None else None,
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
