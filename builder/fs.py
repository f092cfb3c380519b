"""File-system helpers of the core: writing files and directories so that readers never see half of them."""

from __future__ import annotations

import os
from pathlib import Path

from dgr.errors import ConfigError


def write_atomic(path: Path, data: bytes) -> None:
    write_all_atomic({path: data})


def write_all_atomic(files: dict[Path, bytes]) -> None:
    """Write every file to a temporary sibling first, then rename them all into place."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            staged.append((tmp, path))
            tmp.write_bytes(data)
        for tmp, path in staged:
            tmp.replace(path)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


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
