"""One import package, its subsystems pointing one way.

builder/ is the source root of `dgr` (the src layout, with builder/ for src/): the import path is the file
path, `dgr.core.log` is builder/dgr/core/log.py, so mypy and any path-based tool follow the imports as they
are. verify/ holds the layer worker's C++ sources (a CMake project the build locates by path), no Python.
The subsystems, and which it may import, are SUBSYSTEMS below; read from the source with `ast`, so a new
import that breaks the direction fails here.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers import ROOT

SOURCE = ROOT / "builder"

CORE = {"core"}
MANAGER_BASE = CORE | {"contracts"}
SUBSYSTEMS: dict[str, set[str]] = {
    # errors, logging, the subprocess wrapper, paths, file-system helpers, digests
    "core": set(),
    # the records that cross subsystems: verify report, build manifest, bench result, the lock files
    "contracts": CORE,
    # the files of the series: order file, mails, the patch manifest
    "series": MANAGER_BASE,
    # gitpython and `git am`
    "git": MANAGER_BASE | {"series"},
    # verified downloads, the upstream repository, the model
    "sources": MANAGER_BASE | {"git"},
    # plan, apply + configure + ninja, artifacts, the cache of builds and reports
    "builds": MANAGER_BASE | {"series", "git", "sources"},
    # dgr check, edit / export-patches, rebase-check, pin --to
    "maintain": MANAGER_BASE | {"series", "git", "sources", "builds"},
    # export-upstream
    "export": MANAGER_BASE | {"series", "git", "sources", "builds"},
    # the harness: the protocol, what checks run against, the checks, the measurements
    "verify": CORE,
    "verify.wire": CORE,
    "verify.models": MANAGER_BASE,
    "verify.checks": MANAGER_BASE | {"verify.wire", "verify.models"},
    "verify.bench": MANAGER_BASE | {"verify.wire", "verify.models"},
    # one module per command: anything but the entry
    "commands": set(),
    # argparse and dispatch
    "entry": MANAGER_BASE | {"commands", "verify.checks"},
}
SUBSYSTEMS["commands"] = set(SUBSYSTEMS) - {"entry"}


def module_files() -> dict[str, Path]:
    """Module name -> file, for every module below builder/ (the name is the path)."""
    found: dict[str, Path] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = [p for p in path.relative_to(SOURCE).with_suffix("").parts if p != "__init__"]
        found[".".join(parts)] = path
    return found


MODULES = module_files()


def imports_of(name: str) -> set[str]:
    """The dgr modules `name` imports (`from dgr.x import y` is dgr.x.y when that is a module)."""
    tree = ast.parse(MODULES[name].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "dgr"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dgr":
            assert node.level == 0, f"{name}: relative import"
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in MODULES else node.module)
    return found - {name}


def subsystem(name: str) -> str:
    parts = name.split(".")
    if name in ("dgr", "dgr.cli", "dgr.__main__", "dgr.commandref"):  # commandref: what --help says
        return "entry"
    if name == "dgr.errors":
        return "core"
    if parts[1] == "verify" and len(parts) > 2:
        return f"verify.{parts[2]}"
    return parts[1]


def test_the_module_list_is_the_package() -> None:
    named = {"dgr.cli", "dgr.commands.verify", "dgr.verify.wire.pipeline", "dgr.verify.checks.kv"}
    assert named <= MODULES.keys()
    assert {subsystem(n) for n in MODULES} == set(SUBSYSTEMS)
    assert not list((ROOT / "verify").rglob("*.py")), "verify/ holds the worker's C++ sources only"


def test_the_top_of_the_package_is_small() -> None:
    top = sorted(p.name for p in (SOURCE / "dgr").glob("*.py"))
    assert len(top) <= 10, top


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_one_way(name: str) -> None:
    mine = subsystem(name)
    allowed = SUBSYSTEMS[mine] | {mine}
    wrong = sorted(f"{dep} ({subsystem(dep)})" for dep in imports_of(name) if subsystem(dep) not in allowed)
    assert not wrong, f"{name} ({mine}) may import only {sorted(allowed)}: {wrong}"


def test_the_directions_have_no_cycle() -> None:
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"cycle: {' -> '.join((*path, name))}"
        if name not in done:
            for dep in SUBSYSTEMS[name] - {name}:
                visit(dep, (*path, name))
            done.add(name)

    for name in SUBSYSTEMS:
        visit(name, ())


def test_only_the_cli_reaches_the_commands() -> None:
    importers = {n for n in MODULES if any(d.startswith("dgr.commands") for d in imports_of(n))}
    # dgr.cli imports each command by name when it runs (importlib); nothing else may import one
    assert importers <= {"dgr.cli"}
    text = MODULES["dgr.cli"].read_text()
    assert 'importlib.import_module(f"dgr.commands.{args.module}")' in text


def test_pyproject_installs_the_source_root() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert config["setuptools"]["package-dir"] == {"": "builder"}
    assert config["setuptools"]["packages"]["find"]["where"] == ["builder"]
    # mypy reads the package where it lies: no link tree
    assert config["mypy"]["mypy_path"] == "builder" and config["mypy"]["packages"] == ["dgr"]


def test_installed_distribution_has_one_top_level_name(tmp_path: Path) -> None:
    """Outside the checkout (no cwd on sys.path, no PYTHONPATH): `dgr` imports, `builder`/`verify` do not."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = (
        "import importlib.util, importlib.metadata, dgr, dgr.verify\n"
        "print(dgr.__file__)\n"
        "print(dgr.verify.__file__)\n"
        "print(importlib.util.find_spec('builder'), importlib.util.find_spec('verify'))\n"
        "print(importlib.metadata.distribution('dgr').read_text('top_level.txt').split())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    dgr_file, verify_file, specs, top_level = result.stdout.splitlines()
    assert Path(dgr_file) == SOURCE / "dgr" / "__init__.py"
    assert Path(verify_file) == SOURCE / "dgr" / "verify" / "__init__.py"
    assert specs == "None None"
    assert top_level == "['dgr']"
    for name in ("builder", "verify"):
        failed = subprocess.run(
            [sys.executable, "-c", f"import {name}"], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert failed.returncode == 1 and f"No module named '{name}'" in failed.stderr
    helped = subprocess.run(
        [sys.executable, "-m", "dgr", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert helped.returncode == 0 and helped.stdout.startswith("usage: dgr ")


def test_every_class_name_is_unique() -> None:
    """One name, one class: no two `Context`s, no bare `Result`."""
    seen: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                seen.setdefault(node.name, []).append(name)
    assert {k: v for k, v in seen.items() if len(v) > 1} == {}
    assert "Result" not in seen and seen["Context"] == ["dgr.core.paths"]


RULES_DIR = ROOT / "series" / "rules"
RULES_DEPENDENCIES = {"tree_sitter", "tree_sitter_cpp"}  # series/rules/requirements.txt


def test_the_rules_program_stands_alone() -> None:
    """series/rules/rewrite.py and its modules are shipped in the upstream package, where dgr is not
    installed: they import the standard library, tree-sitter and each other only, and the package carries
    every one of them."""
    from dgr.series import generated

    programs = {p.stem: p for p in RULES_DIR.glob("*.py")}
    assert {"rewrite", "cppsyntax", "layerloop"} <= set(programs)
    for name, path in programs.items():
        tops: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                tops.add(node.module.split(".")[0])
        foreign = tops - set(sys.stdlib_module_names) - RULES_DEPENDENCIES - set(programs)
        assert foreign == set(), f"{name}.py imports {sorted(foreign)}"
        assert path.name in generated.PACKAGED, f"{path.name} is not in generated.PACKAGED"
