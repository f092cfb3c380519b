"""Published builds: `builds/<inputs-digest>/` with bin/, the test files and manifest.toml.

A build is assembled in `tmp/<digest>.<pid>/` and renamed into place, so a
published directory is always complete. Looking one up re-hashes every
artifact; a mismatch is reported and the broken build removed.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from dgr.contracts.buildmanifest import BuildManifest
from dgr.contracts.locks import write_toml
from dgr.core import log
from dgr.core.digest import sha256_file
from dgr.core.fs import publish_dir, remove_dir
from dgr.core.paths import Cache
from dgr.errors import ConfigError

MANIFEST = "manifest.toml"


def scan(root: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(files: relative path -> sha256, links: relative path -> link target) under `root`."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == MANIFEST:
            continue
        if path.is_symlink():
            links[rel] = str(path.readlink())
        elif path.is_file():
            files[rel] = sha256_file(path)
    return files, links


def problems(root: Path, manifest: BuildManifest) -> list[str]:
    """Every artifact of `manifest` that is missing or differs on disk."""
    found: list[str] = []
    for rel, expected in manifest.artifacts.items():
        path = root / rel
        actual = sha256_file(path) if path.is_file() and not path.is_symlink() else "missing"
        if actual != expected:
            found.append(f"{path}: expected sha256 {expected}, actual {actual}")
    for rel, target in manifest.links.items():
        path = root / rel
        actual = str(path.readlink()) if path.is_symlink() else "missing"
        if actual != target:
            found.append(f"{path}: expected a link to {target}, actual {actual}")
    return found


class BuildStore:
    def __init__(self, cache: Cache) -> None:
        self.cache = cache

    def path(self, digest: str) -> Path:
        return self.cache.builds / digest

    def lookup(self, digest: str) -> BuildManifest | None:
        """The manifest of the published build `digest` if it is intact; a broken one is removed."""
        root = self.path(digest)
        try:
            manifest = BuildManifest.from_json(tomllib.loads((root / MANIFEST).read_text()), MANIFEST)
        except FileNotFoundError:
            return None
        except (OSError, tomllib.TOMLDecodeError, ConfigError) as exc:
            log.warn(
                f"published build {root} has an unreadable {MANIFEST} ({exc}); removing it and rebuilding"
            )
            self.remove(digest)
            return None
        broken = problems(root, manifest)
        if broken:
            log.warn(
                f"published build {root} is broken; removing it and rebuilding:\n    " + "\n    ".join(broken)
            )
            self.remove(digest)
            return None
        return manifest

    def remove(self, digest: str) -> None:
        remove_dir(self.path(digest))

    def publish(self, digest: str, fill: Callable[[Path], BuildManifest]) -> BuildManifest:
        """Let `fill` populate a temporary directory and return the manifest; then rename into place."""
        with self.cache.tmpdir(digest) as staging:
            filled = fill(staging)
            files, links = scan(staging)
            manifest = dataclasses.replace(filled, artifacts=files, links=links)
            write_toml(staging / MANIFEST, manifest.to_json())
            publish_dir(staging, self.path(digest), replace=True)
        return manifest

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The cache-wide build lock; says so when it has to wait for another build."""
        lock = FileLock(self.cache.lock_file("build"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            log.info(f"waiting for another dgr build to finish (lock {lock.lock_file}) ...")
            lock.acquire()
            log.info("lock acquired")
        try:
            yield
        finally:
            lock.release()
