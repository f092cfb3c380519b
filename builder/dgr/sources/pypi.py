"""Downloads from PyPI with `pip download`, verified into `<cache>/downloads/<sha256>/<file>`.

pip is used (not raw HTTP) so that the machine's pip configuration (index,
proxy, certificates) applies. A file enters the cache only after its SHA-256
matches the lock; on a mismatch nothing is kept.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dgr.core import log, proc
from dgr.core.digest import sha256_file
from dgr.core.fs import locked_download, publish_dir, verified_cached
from dgr.core.paths import Cache
from dgr.errors import ConfigError, IntegrityError, NetworkError, UpstreamError

_NETWORK_PATTERNS = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|"
    r"Name or service not known|Network is unreachable|Connection refused|ConnectTimeout|ReadTimeout|"
    r"No route to host|Could not fetch URL|ProxyError|SSLError|Max retries exceeded",
)


@dataclass(frozen=True)
class Download:
    """One distribution file on PyPI; `sha256` None means unverified (no lock entry)."""

    package: str
    version: str
    filename: str
    sha256: str | None
    binary: bool

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


def fetch(cache: Cache, item: Download, rejected: Path | None = None) -> Path:
    """The verified file in the cache, downloading it when it is not there (or broken); a download that
    does not match the lock is moved into `rejected` (if given) for a closer look, never into the cache."""
    return fetch_all(cache, [item], rejected)[0]


def fetch_all(cache: Cache, items: Sequence[Download], rejected: Path | None = None) -> list[Path]:
    """The verified files of `items` in the cache (in order); those not there (or broken) are downloaded by
    one `pip download`, so that several wheels cost one pip start. A file that does not match its lock stops
    it: nothing of that file is cached (the others that matched are)."""
    found: dict[int, Path] = {}
    for i, item in enumerate(items):
        if item.sha256 and (
            cached := verified_cached(
                cache.downloads / item.sha256 / item.filename, item.sha256, item.filename
            )
        ):
            found[i] = cached
    # one download per file, however many items name it (two models may share a wheel)
    missing = list({item.filename: item for i, item in enumerate(items) if i not in found}.values())
    for item in items:
        other = next((m for m in missing if m.filename == item.filename), None)
        if other is not None and other.sha256 != item.sha256:
            raise ConfigError(
                f"{item.filename} is locked with two SHA-256s",
                expected=other.sha256,
                actual=item.sha256,
                hint="one file has one digest: fix the locks",
            )
    if not missing:
        return [found[i] for i in range(len(items))]
    with cache.tmpdir(f"download-{missing[0].package}") as tmp:
        what = missing[0].requirement if len(missing) == 1 else f"{len(missing)} packages"
        with log.step(f"download {what} from PyPI (pip download)"):
            _pip_download(missing, tmp)
        files = {p.name: p for p in tmp.iterdir() if p.is_file()}
        published = {item.filename: _publish(cache, item, files, rejected) for item in missing}
    return [found.get(i) or published[item.filename] for i, item in enumerate(items)]


def _publish(cache: Cache, item: Download, files: dict[str, Path], rejected: Path | None) -> Path:
    """The downloaded file of `item`, verified and published into `downloads/<sha256>/`."""
    got = files.get(item.filename)
    if got is None:
        raise UpstreamError(
            f"pip download {item.requirement} did not produce {item.filename}",
            actual=", ".join(sorted(files)) or "no file",
            hint="check the package name and version in the lock",
        )
    if item.sha256 is None:
        actual = sha256_file(got)
        log.warn(f"{item.filename} is not in any lock: UNVERIFIED download (sha256 {actual})")
    else:
        try:
            actual = locked_download(got, item.sha256, "PyPI")
        except IntegrityError:
            if rejected is not None:
                rejected.mkdir(parents=True, exist_ok=True)
                got.rename(rejected / got.name)
            raise
    final = cache.downloads / actual
    # a directory holding just the file, published by one rename (next to its final place)
    staging = cache.downloads / f".{actual}.{os.getpid()}"
    staging.mkdir(parents=True)
    got.rename(staging / got.name)
    publish_dir(staging, final, replace=False)
    return final / got.name


def _pip_download(items: Sequence[Download], dest: Path) -> None:
    requirements = " ".join(item.requirement for item in items)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        # Never build anything from source to fetch a file: pip prepares an sdist's metadata, which installs
        # its build requirements (scikit-build-core, CMake, ...). `--no-binary :all:` would compile those
        # from source too (CMake alone takes 20+ minutes); only the package itself is taken as an sdist.
        "--only-binary",
        ":all:",
        *[arg for item in items if not item.binary for arg in ("--no-binary", item.package)],
        "--dest",
        str(dest),
        *(item.requirement for item in items),
    ]
    _pip(cmd, f"pip download {requirements}")


def _pip(cmd: list[str], what: str) -> subprocess.CompletedProcess[str]:
    """Run pip; a failure that reads as an unreachable index is a NetworkError (exit 10)."""
    try:
        return proc.run(cmd, error=UpstreamError, what=f"{what} failed")
    except UpstreamError as exc:
        if exc.detail and _NETWORK_PATTERNS.search(exc.detail):
            raise NetworkError(
                f"PyPI is unreachable: {what} failed",
                detail=exc.detail,
                hint="check the network or pip's index configuration, or use a local mirror (--mirror PATH)",
            ) from exc
        raise


def newest_version(package: str) -> str:
    """The highest version of `package` on the index (`pip index versions`, through pip's configuration)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check", package]
    result = _pip(cmd, f"pip index versions {package}")
    match = re.search(rf"^{re.escape(package)} \(([^)]+)\)", result.stdout, flags=re.M)
    if match is None:
        raise UpstreamError(
            f"pip index versions {package} named no version",
            detail=result.stdout,
            hint=f"check that {package} is on the index",
        )
    return match.group(1)
