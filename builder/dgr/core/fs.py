"""File-system helpers of the core: files and directories are published by rename, so that readers never
see half of them, and cached files are re-hashed before use."""

from __future__ import annotations

import os
import shutil
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from dgr.core import log
from dgr.core.digest import sha256_file
from dgr.errors import ConfigError, DgrError, IntegrityError


def write_atomic(path: Path, data: bytes) -> None:
    write_all_atomic({path: data})


def write_all_atomic(files: Mapping[Path, bytes], removes: Iterable[Path] = ()) -> None:
    """Write every file of `files` and remove every file of `removes`, all or nothing.

    Every new file is written to a temporary sibling first; then the files replaced or removed are renamed
    aside, the new ones renamed into place, and only then the old ones deleted. On any failure (Ctrl-C
    included) what was renamed is put back: the files are as they were."""
    pid = os.getpid()
    staged: list[tuple[Path, Path]] = []
    aside: list[tuple[Path, Path]] = []
    placed: list[Path] = []
    try:
        for path, data in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{pid}.tmp")
            staged.append((tmp, path))
            tmp.write_bytes(data)
        for path in dict.fromkeys([*files, *removes]):
            if path.is_file() or path.is_symlink():
                old = path.with_name(f".{path.name}.{pid}.old")
                path.rename(old)
                aside.append((old, path))
        for tmp, path in staged:
            tmp.rename(path)
            placed.append(path)
    except BaseException:
        for path in placed:
            path.unlink(missing_ok=True)
        for old, path in reversed(aside):
            old.rename(path)
        raise
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    for old, _ in aside:
        old.unlink(missing_ok=True)


def prune_empty_dirs(paths: Iterable[Path], stop: Path) -> None:
    """Remove the directories of `paths` that are empty, and their empty parents, up to `stop`."""
    for path in paths:
        for directory in [path, *path.parents]:
            if directory == stop or not directory.is_relative_to(stop):
                break
            if directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()


def _retired(path: Path) -> Path:
    return path.with_name(f".{path.name}.old-{os.getpid()}")


def publish_dir(staging: Path, final: Path, *, replace: bool) -> None:
    """Rename the complete directory `staging` to `final` (on the same file system).

    replace=True: an existing `final` is renamed aside first and removed once the new one is in place (put
    back if the rename fails). replace=False: `final` is content-addressed, so one that another process
    published meanwhile is the same: it is kept and `staging` removed."""
    final.parent.mkdir(parents=True, exist_ok=True)
    retired = _retired(final)
    if replace and final.exists():
        final.rename(retired)
    try:
        staging.rename(final)
    except OSError:
        if retired.exists():
            retired.rename(final)
        elif not replace and final.is_dir():
            shutil.rmtree(staging, ignore_errors=True)
            return
        raise
    finally:
        shutil.rmtree(retired, ignore_errors=True)


def remove_dir(path: Path) -> None:
    """Remove a published directory: renamed aside first, so that nobody sees it half removed."""
    if path.exists():
        retired = _retired(path)
        path.rename(retired)
        shutil.rmtree(retired, ignore_errors=True)


def verified_cached(path: Path, sha256: str, what: str) -> Path | None:
    """`path` when it is a file with the SHA-256 `sha256`; a file that differs is reported and its
    directory (`<sha256>/`, the cache entry) removed, so that the caller obtains it again; else None."""
    if not path.is_file():
        return None
    actual = sha256_file(path)
    if actual == sha256:
        log.info(f"{what}: cached and verified ({path})")
        return path
    log.warn(f"cached {what} {path} is broken (expected sha256 {sha256}, actual {actual}); getting it again")
    remove_dir(path.parent)
    return None


def locked_download(path: Path, sha256: str, source: str) -> str:
    """The SHA-256 of the file `path` downloaded from `source` (PyPI, Debian bookworm), which must be
    `sha256`, its lock's; IntegrityError otherwise, for a caller that has cached nothing of it."""
    actual = sha256_file(path)
    if actual != sha256:
        raise IntegrityError(
            f"{path.name} downloaded from {source} does not match the lock; nothing was cached",
            expected=sha256,
            actual=actual,
            hint=f"if {source} really serves a new file, review it and update its sha256 in locks/; "
            "otherwise retry (proxy or mirror corruption)",
        )
    return actual


def writable_dir(path: Path, what: str) -> None:
    """Create `path` (and its parents) and check that files can be written in it; ConfigError otherwise,
    naming the path and `what` it is (an option, an environment variable)."""
    problem = None
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".dgr-write-test.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except FileExistsError:
        problem = "it is a file, not a directory"
    except NotADirectoryError:
        problem = "a part of it is a file, not a directory"
    except PermissionError:
        problem = "permission denied"
    except OSError as exc:
        problem = exc.strerror or str(exc)
    if problem:
        raise ConfigError(
            f"{what} {path}: cannot write there ({problem})",
            hint=f"point {what} at a directory you can write to",
        )


def read_or_refuse(path: Path, missing: str, hint: str, error: type[DgrError]) -> bytes:
    """The bytes of `path`; `error` when it is missing (`missing` says what is not there) or unreadable."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise error(missing, expected=str(path), actual="missing", hint=hint) from None
    except OSError as exc:
        raise error(f"{path}: unreadable ({exc})", hint=hint) from exc


def extract_members(tar: tarfile.TarFile, dest: Path, members: Sequence[tarfile.TarInfo], what: str) -> None:
    """Extract `members` of `tar` into `dest`, refusing any that would land outside it: tarfile's "data"
    filter where this Python has it (3.11.4 and later), else the same checks made here (Debian 12's Python
    is 3.11.2): no absolute or `..` path, no link that leaves `dest`, no device or FIFO, no setuid bits."""
    if hasattr(tarfile, "data_filter"):
        try:
            tar.extractall(dest, members=members, filter="data")
        except tarfile.FilterError as exc:
            raise IntegrityError(
                f"{what}: {exc}", hint="the archive is not what the lock names: fetch it again"
            ) from exc
        return
    root = dest.resolve()
    for m in members:
        target = (root / m.name).resolve()
        where = (target.parent / m.linkname).resolve() if m.issym() else (root / m.linkname).resolve()
        bad = (
            m.name.startswith("/")
            or ".." in Path(m.name).parts
            or not target.is_relative_to(root)
            or ((m.issym() or m.islnk()) and not where.is_relative_to(root))
            or not (m.isfile() or m.isdir() or m.issym() or m.islnk())
        )
        if bad:
            raise IntegrityError(
                f"{what}: the member {m.name} would be written outside of {dest} or is not a plain file",
                hint="the archive is not what the lock names: fetch it again",
            )
        m.mode &= 0o755
    tar.extractall(dest, members=members)
