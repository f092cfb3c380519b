"""One import package, layers pointing one way.

`builder/` installs as `dgr` and `verify/` as `dgr.verify` (nothing else is importable); imports go
commands (dgr.commands.*, reached from dgr.cli) -> the series manager modules and the harness (dgr.verify)
-> the core. Read from the source with `ast`, so a new import that breaks the direction fails here.
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

CORE = {"dgr.errors", "dgr.log", "dgr.proc", "dgr.paths", "dgr.fs", "dgr.digest", "dgr.contracts"}
"""Errors, logging, the subprocess wrapper, paths, file-system helpers, digests, the typed contracts."""
TOP = {"dgr": ROOT / "builder", "dgr.verify": ROOT / "verify"}


def module_files() -> dict[str, Path]:
    """Module name -> file, for every module of the package (as the package-dir mapping installs it)."""
    found: dict[str, Path] = {}
    for package, root in TOP.items():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            if "worker" in rel.parts or (package == "dgr" and rel.parts[:1] == ("verify",)):
                continue
            parts = [p for p in rel.parts if p != "__init__"]
            found[".".join([package, *parts])] = path
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


def layer(name: str) -> str:
    if name in CORE:
        return "core"
    if name == "dgr.verify" or name.startswith("dgr.verify."):
        return "harness"
    if name.startswith("dgr.commands"):
        return "commands"
    if name in ("dgr.cli", "dgr.__main__"):
        return "entry"
    return "manager"


def test_the_module_list_is_the_package() -> None:
    assert {"dgr.cli", "dgr.commands.verify", "dgr.verify.pipeline", "dgr.verify.checks.kv"} <= set(MODULES)
    assert set(CORE) <= set(MODULES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_one_way(name: str) -> None:
    allowed = {
        "core": {"core"},
        "harness": {"core", "harness"},
        "manager": {"core", "manager"},
        "commands": {"core", "manager", "harness"},
        "entry": {"core", "commands", "entry"},
    }[layer(name)]
    wrong = sorted(f"{dep} ({layer(dep)})" for dep in imports_of(name) if layer(dep) not in allowed)
    assert not wrong, f"{name} ({layer(name)}) may import only {sorted(allowed)}: {wrong}"


def test_only_the_cli_reaches_the_commands() -> None:
    importers = {n for n in MODULES if any(d.startswith("dgr.commands") for d in imports_of(n))}
    # dgr.cli imports each command by name when it runs (importlib); nothing else may import one
    assert importers <= {"dgr.cli"}
    text = MODULES["dgr.cli"].read_text()
    assert 'importlib.import_module(f"dgr.commands.{args.module}")' in text


def test_pyproject_installs_exactly_the_two_directories() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {"dgr": "builder", "dgr.verify": "verify"}
    packages = sorted(n for n, p in MODULES.items() if p.name == "__init__.py")
    assert sorted(config["packages"]) == packages


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
    assert Path(dgr_file) == ROOT / "builder" / "__init__.py"
    assert Path(verify_file) == ROOT / "verify" / "__init__.py"
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
