"""The harness of the repository as it is now: every file `dgr verify` and `dgr bench` run beyond the build
(whose inputs the inputs digest covers), the model lock, series/verify.toml and the parts lock, with their
SHA-256 (dgr.contracts.harness).

- every file under `verify/` (the C++ worker, `layer-bench`, `layer-graphs`, the fuzz harness, CMake);
- the Python of the harness, `builder/dgr/verify/` (checks, wire, models, bench), and every module of `dgr`
  it imports, followed through the imports (read with `ast`: the core, the contracts, the errors), with the
  `__init__.py` of each package on the way;
- the two commands that run it and write what it found, `commands/verify.py` and `commands/bench.py` (what
  they import beyond the harness builds or fetches: the build is the inputs digest's, the models the
  lock's);
- `locks/model.toml`, the models the checks ran against;
- `series/verify.toml`, what the checks hold the series to (the upstream tests that may fail on both builds,
  the floor of certified architectures);
- `locks/parts.toml`, the parts of the models the checks ran from (the boundary group's `parts-split-<k>`).

The files are read from the repository (as the worker's are), never from where the running `dgr` lies."""

from __future__ import annotations

import ast
from pathlib import Path

from dgr.contracts import expectations
from dgr.contracts.harness import Harness
from dgr.core.digest import sha256_file
from dgr.core.paths import Repo

SOURCE_ROOT = "builder"
HARNESS_PACKAGE = "dgr.verify"
RUNNERS = ("dgr.commands.verify", "dgr.commands.bench")
MODEL_LOCK = "locks/model.toml"
PARTS_LOCK = "locks/parts.toml"
EXPECTATIONS = expectations.PATH
NATIVE_DIR = "verify"


def _module_file(source: Path, name: str) -> Path | None:
    base = source.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path) -> set[str]:
    """The `dgr` modules the file imports (`from dgr.x import y`: dgr.x and dgr.x.y, whichever exist)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "dgr"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dgr":
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def _packages(name: str) -> list[str]:
    """`dgr.verify.checks.kv` -> dgr, dgr.verify, dgr.verify.checks (their `__init__` runs first)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _dotted(source: Path, path: Path) -> str:
    rel = path.relative_to(source).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def python_files(source: Path) -> list[Path]:
    """The modules of the harness under the source root `source`, their imports followed, sorted."""
    package = source.joinpath(*HARNESS_PACKAGE.split("."))
    todo = [p for p in sorted(package.rglob("*.py")) if "__pycache__" not in p.parts]
    # the runners' own imports are not followed (beyond the harness they build and fetch), their packages are
    runners = [f for name in RUNNERS if (f := _module_file(source, name)) is not None]
    todo += [f for n in RUNNERS for p in _packages(n) if (f := _module_file(source, p)) is not None]
    seen: set[Path] = set(runners)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        names = _imports(path) | set(_packages(_dotted(source, path)))
        names |= {p for n in set(names) for p in _packages(n)}
        todo += [f for n in sorted(names) if (f := _module_file(source, n)) is not None and f not in seen]
    return sorted(seen)


def files(repo: Repo) -> list[Path]:
    """Every file of the harness in `repo`, the model lock, series/verify.toml and the parts lock last."""
    native = repo.root / NATIVE_DIR
    found = sorted(
        p
        for p in (native.rglob("*") if native.is_dir() else [])
        if p.is_file()
        and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(native).parts)
    )
    source = repo.root / SOURCE_ROOT
    if source.is_dir():
        found += python_files(source)
    declared = [repo.root / MODEL_LOCK, repo.root / EXPECTATIONS, repo.root / PARTS_LOCK]
    return found + [p for p in declared if p.is_file()]


def current(repo: Repo) -> Harness:
    """The harness of `repo` now."""
    return Harness.of({p.relative_to(repo.root).as_posix(): sha256_file(p) for p in files(repo)})
