"""Where things live: the repository (patches, series, locks) and the cache outside it."""

from __future__ import annotations

import os
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from dgr.errors import ConfigError

REPO_ENV = "DGR_REPO"
CACHE_ENV = "DGR_CACHE_DIR"


def _is_dgr_root(path: Path) -> bool:
    pyproject = path / "pyproject.toml"
    if not pyproject.is_file():
        return False
    try:
        data = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return False
    project = data.get("project")
    return isinstance(project, dict) and project.get("name") == "dgr"


def find_repo_root(start: Path | None = None) -> Path:
    """`$DGR_REPO`, else the nearest directory upwards holding the dgr pyproject.toml."""
    if env := os.environ.get(REPO_ENV):
        root = Path(env).resolve()
        if not _is_dgr_root(root):
            raise ConfigError(
                f"${REPO_ENV} points at {root}, which has no pyproject.toml for the dgr project",
                hint=f"unset {REPO_ENV} or point it at the repository root",
            )
        return root
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if _is_dgr_root(candidate):
            return candidate
    raise ConfigError(
        f"not inside the dgr repository (no pyproject.toml with name 'dgr' above {here})",
        hint=f"cd into the repository or set ${REPO_ENV}",
    )


@dataclass(frozen=True)
class Repo:
    """The files of the repository that dgr reads and writes.

    With `port` set, the view of a port of the series to another upstream: its own order file
    `series/ports/<port>`, patches `patches/ports/<port>/` and manifest `locks/ports/<port>.toml`.
    """

    root: Path
    port: str | None = None

    @property
    def series_file(self) -> Path:
        return self.root / "series" / ("series" if self.port is None else f"ports/{self.port}")

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches" if self.port is None else self.root / "patches" / "ports" / self.port

    @property
    def locks_dir(self) -> Path:
        return self.root / "locks"

    @property
    def manifest_file(self) -> Path:
        return self.locks_dir / ("patches.toml" if self.port is None else f"ports/{self.port}.toml")

    def ports(self) -> list[str]:
        """The ports of the series (files in series/ports/)."""
        directory = self.root / "series" / "ports"
        return sorted(p.name for p in directory.iterdir() if p.is_file()) if directory.is_dir() else []

    def for_port(self, port: str | None) -> Repo:
        return Repo(self.root, port)

    @property
    def worker_dir(self) -> Path:
        return self.root / "verify" / "worker"

    def rel(self, path: Path) -> str:
        """`path` relative to the repository root when inside it (for messages)."""
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)


def find_cache_root(repo_root: Path | None = None) -> Path:
    """`$DGR_CACHE_DIR`, else the platform's user cache dir; never inside the repository."""
    raw = os.environ.get(CACHE_ENV) or platformdirs.user_cache_dir("dgr")
    what = f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) else "the user cache dir"
    root = Path(raw).expanduser().resolve()
    if repo_root is not None and root.is_relative_to(repo_root):
        raise ConfigError(
            f"the cache dir {root} is inside the repository {repo_root}",
            hint=f"set ${CACHE_ENV} to a directory outside the repository",
        )
    _check_usable(root, what)
    return root


def _check_usable(root: Path, what: str) -> None:
    """The cache dir is a writable directory, or can be created as one (nothing is left behind here: a
    directory that does not exist yet is probed with a temporary directory in its nearest ancestor, since
    permissions alone do not tell, e.g. under /proc)."""
    existing = next(p for p in (root, *root.parents) if p.exists())
    problem = None
    if not existing.is_dir():
        problem = "it is a file" if existing == root else f"{existing} is a file"
    elif not os.access(existing, os.W_OK | os.X_OK):
        problem = "permission denied" if existing == root else f"{existing} is not writable"
    elif existing != root:
        try:
            tempfile.TemporaryDirectory(dir=existing).cleanup()
        except OSError as exc:
            problem = f"a directory cannot be created in {existing} ({exc.strerror or exc})"
    if problem:
        raise ConfigError(
            f"{what} {root} cannot be the cache dir: {problem}",
            hint=f"set ${CACHE_ENV} to a directory you can write to (it is created when missing)",
        )


class _Below:
    """A directory of the cache, named as the attribute: `Cache.builds` is `<root>/builds`."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, cache: Cache, owner: type | None = None) -> Path:
        return cache.root / self.name


@dataclass(frozen=True)
class Cache:
    """The cache layout (see README.md, "Cache layout")."""

    root: Path

    downloads = _Below()
    upstream = _Below()
    models = _Below()
    work = _Below()
    builds = _Below()
    edit = _Below()
    tmp = _Below()
    locks = _Below()
    state = _Below()
    bench = _Below()

    def bench_entry(self, digest: str, quick: bool) -> Path:
        """Where `dgr bench` keeps its result of the inputs `digest`: `bench/<digest>/full/`, or `quick/` for
        `--quick`, each kind an entry of its own (a quick run never replaces the full one that `dgr status`
        and `export-upstream` read)."""
        return self.bench / digest / ("quick" if quick else "full")

    def upstream_repo(self, commit: str) -> Path:
        return self.upstream / f"{commit}.git"

    def lock_file(self, name: str) -> Path:
        self.locks.mkdir(parents=True, exist_ok=True)
        return self.locks / f"{name}.lock"

    @contextmanager
    def tmpdir(self, name: str) -> Iterator[Path]:
        """A fresh `tmp/<name>.<pid>` directory, removed on exit whatever happens."""
        path = self.tmp / f"{name}.{os.getpid()}"
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def clean_stale_tmp(self) -> None:
        """Remove `tmp/*.<pid>` left by processes that no longer exist (killed hard)."""
        if not self.tmp.is_dir():
            return
        for entry in self.tmp.iterdir():
            pid = entry.name.rsplit(".", 1)[-1]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Context:
    """What every command needs: the repository and the cache."""

    repo: Repo
    cache: Cache

    @classmethod
    def discover(cls) -> Context:
        root = find_repo_root()
        return cls(Repo(root), Cache(find_cache_root(root)))
