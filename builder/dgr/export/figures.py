"""Figures of the verify report as text and as JSON, the same for the same value: floats with 6
significant digits (`dgr export-upstream` renders them into EVIDENCE.md and evidence.json)."""

from __future__ import annotations

import json
from typing import Any


def fmt(value: Any, nested: bool = False) -> str:
    """A figure as text, the same for the same value: floats with 6 significant digits."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, ".6g")
    if isinstance(value, int):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(fmt(v, True) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {fmt(v, True)}" for k, v in value.items()) + "}"
    return json.dumps(str(value), ensure_ascii=False) if nested else str(value)


def normalized(value: Any) -> Any:
    """The figures for evidence.json: floats rounded to 6 significant digits, the rest unchanged."""
    if isinstance(value, float):
        return float(format(value, ".6g"))
    if isinstance(value, list):
        return [normalized(v) for v in value]
    if isinstance(value, dict):
        return {str(k): normalized(v) for k, v in value.items()}
    return value


_EVIDENCE_PHRASES = {
    "native test": ("native test", "native tests"),
    "real model": ("with a real model", "with a real model"),
    "synthetic fixture": ("with a synthetic model", "with synthetic models"),
}


def counts_text(counts: dict[str, int]) -> str:
    """`{"native test": 3, "real model": 22}` -> "3 native tests, 22 with a real model"."""
    phrases = []
    for kind, count in counts.items():
        one, many = _EVIDENCE_PHRASES.get(kind, (kind, kind))
        phrases.append(f"{count} {one if count == 1 else many}")
    return ", ".join(phrases)


def cell(text: Any) -> str:
    """Text for a Markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
