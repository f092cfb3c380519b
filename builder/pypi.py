"""Downloads from PyPI with `pip download`, verified into `<cache>/downloads/<sha256>/<file>`.

pip is used (not raw HTTP) so that the machine's pip configuration (index,
proxy, certificates) applies. A file enters the cache only after its SHA-256
matches the lock; on a mismatch nothing is kept.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from dgr import log, proc
from dgr.digest import sha256_file
from dgr.errors import IntegrityError, NetworkError, UpstreamError
from dgr.fs import publish_dir, verified_cached
from dgr.paths import Cache

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


def fetch(cache: Cache, item: Download) -> Path:
    """The verified file in the cache, downloading it when it is not there (or broken)."""
    if item.sha256 and (
        cached := verified_cached(cache.downloads / item.sha256 / item.filename, item.sha256, item.filename)
    ):
        return cached
    with cache.tmpdir(f"download-{item.package}") as tmp:
        with log.step(f"download {item.requirement} from PyPI (pip download)"):
            _pip_download(item, tmp)
        files = [p for p in tmp.iterdir() if p.is_file()]
        found = next((p for p in files if p.name == item.filename), None)
        if found is None:
            raise UpstreamError(
                f"pip download {item.requirement} did not produce {item.filename}",
                actual=", ".join(p.name for p in files) or "no file",
                hint="check the package name and version in the lock",
            )
        actual = sha256_file(found)
        if item.sha256 is None:
            log.warn(f"{item.filename} is not in any lock: UNVERIFIED download (sha256 {actual})")
        elif actual != item.sha256:
            raise IntegrityError(
                f"{item.filename} downloaded from PyPI does not match the lock; nothing was cached",
                expected=item.sha256,
                actual=actual,
                hint="if PyPI really serves a new file, review it and update the sha256 in locks/; "
                "otherwise retry (proxy or mirror corruption)",
            )
        final = cache.downloads / actual
        # a directory holding just the file, published by one rename (next to its final place)
        staging = cache.downloads / f".{actual}.{os.getpid()}"
        staging.mkdir(parents=True)
        found.rename(staging / found.name)
        publish_dir(staging, final, replace=False)
        return final / found.name


def _pip_download(item: Download, dest: Path) -> None:
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
        *([] if item.binary else ["--no-binary", item.package]),
        "--dest",
        str(dest),
        item.requirement,
    ]
    try:
        proc.run(cmd, error=UpstreamError, what=f"pip download {item.requirement} failed")
    except UpstreamError as exc:
        if exc.detail and _NETWORK_PATTERNS.search(exc.detail):
            raise NetworkError(
                f"PyPI is unreachable: pip download {item.requirement} failed",
                detail=exc.detail,
                hint="check the network or pip's index configuration, or use a local mirror (--mirror PATH)",
            ) from exc
        raise
