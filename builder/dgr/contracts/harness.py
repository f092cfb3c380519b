"""What the checks and the measurements ran: the harness, recorded in every verify report and bench result.

The inputs digest says what was built; it does not say what checked the build. `Harness` holds the SHA-256 of
every file of the harness (the worker's sources, the Python of the checks and measurements and every module
they import) and of the model lock, by path in the repository, and one digest over them. A report or a
bench result is current only for the harness and the models it ran with: `changes` names the files that
differ (dgr.builds.harness computes the current one)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from dgr.contracts import convert
from dgr.core.digest import sha256_canonical
from dgr.errors import ConfigError

SHOWN = 8
"""The most paths `changes` names of each kind (the rest are counted)."""


@dataclass(frozen=True, kw_only=True)
class Harness(convert.Record):
    """The SHA-256 of every file the checks ran, by its path in the repository, and their digest."""

    digest: str
    files: Mapping[str, str]

    @classmethod
    def of(cls, files: Mapping[str, str]) -> Harness:
        ordered = dict(sorted(files.items()))
        return cls(digest=sha256_canonical(ordered), files=ordered)

    @classmethod
    def from_json(cls, data: Any, where: str = "harness") -> Self:
        read = convert.from_json(cls, data, where)
        if sha256_canonical(dict(sorted(read.files.items()))) != read.digest:
            raise ConfigError(f"{where}: `digest` is not the digest of its `files`")
        return read

    def changes(self, current: Harness) -> list[str]:
        """What differs between the harness that ran (`self`) and `current`: changed, new and removed files,
        by path (empty: the same harness)."""
        if self.digest == current.digest:
            return []
        then, now = self.files, current.files
        kinds = (
            ("changed", [p for p in now if p in then and then[p] != now[p]]),
            ("new", [p for p in now if p not in then]),
            ("removed", [p for p in then if p not in now]),
        )
        out = []
        for kind, paths in kinds:
            if paths:
                more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
                out.append(f"{kind}: {', '.join(paths[:SHOWN])}{more}")
        return out
