"""Files of a Debian package used without installing it, verified into `<cache>/downloads/<sha256>/`.

`apt-get download` fetches the locked version of a package from a named suite of the Debian archive that
the machine's own apt sources use (the same archive, another suite: a newer release's headers for an older
machine), with a sources list and package lists of its own in a temporary directory, so that the machine's
apt configuration is neither changed nor updated. The .deb enters the cache only once its SHA-256 matches
the lock; `dpkg-deb -x` unpacks it beside it (`root/`), and the directory is published by one rename.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from dgr.contracts.locks import DebPackage
from dgr.core import log, proc
from dgr.core.fs import locked_download, publish_dir
from dgr.core.paths import Cache
from dgr.errors import ConfigError, IntegrityError, NetworkError

APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))
DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
_HINT = "dgr fetches it with apt-get from the Debian archive of the machine's apt sources: check them"


def _entries(text: str, deb822: bool) -> list[tuple[str, str, str]]:
    """(uri, suites, signed-by) of the `deb` entries of one sources file."""
    found = []
    if deb822:
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, flags=re.M))
            if "deb" in fields.get("Types", "").split() and fields.get("URIs"):
                found.append(
                    (fields["URIs"].split()[0], fields.get("Suites", ""), fields.get("Signed-By", ""))
                )
        return found
    for line in text.splitlines():
        m = re.match(r"^\s*deb\s+(?:\[(?P<opts>[^]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)", line)
        if m:
            signed = re.search(r"signed-by=(\S+)", m.group("opts") or "")
            found.append((m.group("uri"), m.group("suite"), signed.group(1) if signed else ""))
    return found


def archive(sources: tuple[Path, ...] = APT_SOURCES) -> tuple[str, str]:
    """The URI of the Debian archive the machine's apt sources use (not its security archive), and the
    keyring that signs it; ConfigError when apt has no Debian archive."""
    files: list[Path] = []
    for place in sources:
        if place.is_dir():
            files += sorted(p for p in place.iterdir() if p.suffix in (".list", ".sources"))
        elif place.is_file():
            files.append(place)
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        for uri, suites, keyring in _entries(text, path.suffix == ".sources"):
            if "security" not in uri and "security" not in suites and re.search(r"/debian/?$", uri):
                return uri, keyring or DEFAULT_KEYRING
    raise ConfigError(
        "the machine's apt sources name no Debian archive",
        actual=", ".join(str(p) for p in files) or "no apt sources",
        hint="a GPU backend fetches Debian packages with apt-get: run it on Debian (or build on the CPU)",
    )


def fetch(cache: Cache, deb: DebPackage) -> Path:
    """The unpacked root of `deb` in the cache (`downloads/<sha256>/root`), fetched when it is not there."""
    final = cache.downloads / deb.sha256
    if (final / "root").is_dir() and (final / f"{deb.package}.deb").is_file():
        return final / "root"
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise ConfigError(f"fetching the Debian package {deb.package} needs {tool}", hint=_HINT)
    uri, keyring = archive()
    with cache.tmpdir(f"deb-{deb.package}") as tmp:
        (tmp / "lists" / "partial").mkdir(parents=True)
        (tmp / "archives" / "partial").mkdir(parents=True)
        sources = tmp / "sources.list"
        sources.write_text(f"deb [signed-by={keyring}] {uri} {deb.suite} main\n")
        options = [
            f"-oDir::Etc::SourceList={sources}",
            "-oDir::Etc::SourceParts=/dev/null",
            f"-oDir::State::Lists={tmp / 'lists'}",
            f"-oDir::Cache={tmp}",
            "-oAcquire::Languages=none",
            "-oAPT::Sandbox::User=root",
            "-qq",
        ]
        spec = f"{deb.package}={deb.version}"
        with log.step(f"download {spec} from Debian {deb.suite} (apt-get download)"):
            proc.run(
                ["apt-get", *options, "update"],
                error=NetworkError,
                what=f"apt-get update of Debian {deb.suite}",
            )
            proc.run(
                ["apt-get", *options, "download", spec],
                error=NetworkError,
                what=f"apt-get download {spec}",
                cwd=tmp,
            )
        got = next(tmp.glob(f"{deb.package}_*.deb"), None)
        if got is None:
            raise NetworkError(f"apt-get download {spec} produced no .deb", hint=_HINT)
        actual = locked_download(got, deb.sha256, f"Debian {deb.suite}")
        staging = cache.downloads / f".{actual}.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        got.rename(staging / f"{deb.package}.deb")
        proc.run(
            ["dpkg-deb", "-x", staging / f"{deb.package}.deb", staging / "root"],
            error=IntegrityError,
            what=f"dpkg-deb -x {got.name}",
        )
        publish_dir(staging, final, replace=True)
    return final / "root"
