"""The order file `series/series`: one patch file name per line, `#` comments, blank lines."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dgr.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*(/[A-Za-z0-9][A-Za-z0-9._+-]*)*$")


@dataclass(frozen=True)
class Entry:
    name: str
    """A patch file, relative to patches/."""
    line: int
    """Its line in the order file, from 1."""


@dataclass(frozen=True)
class OrderFile:
    path: Path
    entries: tuple[Entry, ...]
    header: tuple[str, ...]
    """Comment and blank lines before the first entry, kept when the file is rewritten."""

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]


def parse(text: str, path: Path) -> OrderFile:
    """Parse the order file; anything but names, comments and blank lines is a ConfigError."""
    entries: list[Entry] = []
    header: list[str] = []
    bad: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            if not entries:
                header.append(raw)
            continue
        if not _NAME.match(line) or ".." in line.split("/"):
            bad.append(f"{path}:{lineno}: {raw!r} is not a patch file name (no spaces, options or '..')")
            continue
        entries.append(Entry(line, lineno))
    if bad:
        raise ConfigError(
            f"{path}: series syntax error",
            detail="\n".join(bad),
            hint="each line is a file name relative to patches/, a `#` comment, or blank",
        )
    return OrderFile(path, tuple(entries), tuple(header))


def load(path: Path) -> OrderFile:
    try:
        return parse(path.read_text(), path)
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: series file missing", hint="create it (it may be empty)") from exc


def render(header: tuple[str, ...], names: list[str]) -> str:
    return "".join(f"{line}\n" for line in (*header, *names))
