"""The native group and the verify session do not import each other: the native group uses the session's
types, and the session names no group, neither by import (eager, under TYPE_CHECKING or lazy) nor by
importlib (a group is loaded by `dgr.verify.checks.registry`); the run the native group leaves for the next
groups is `dgr.verify.checks.testrun`."""

from __future__ import annotations

import ast
from pathlib import Path

CHECKS = Path(__file__).resolve().parents[1] / "builder" / "dgr" / "verify" / "checks"


def _named(module: str) -> set[str]:
    """Every module the file imports, eagerly, under TYPE_CHECKING or lazily, and every string it holds."""
    tree = ast.parse((CHECKS / f"{module}.py").read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names


def test_the_session_does_not_import_native_nor_load_a_group() -> None:
    named = _named("session")
    assert not {n for n in named if "checks.native" in n}
    assert not {n for n in named if n.startswith("importlib")}


def test_native_imports_only_the_session_types() -> None:
    assert {n for n in _named("native") if n.startswith("dgr.verify.checks.")} <= {
        "dgr.verify.checks.session",
        "dgr.verify.checks.session.Built",
        "dgr.verify.checks.session.GroupSpec",
        "dgr.verify.checks.session.Session",
        "dgr.verify.checks.testrun",
        "dgr.verify.checks.testrun.TestRun",
    }
