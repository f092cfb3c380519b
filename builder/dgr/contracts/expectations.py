"""What the series declares that `dgr verify` holds it to beyond its own checks: `series/verify.toml`.

- `[archs] certified_at_least`: the floor of architectures the series certifies (a CERTIFIED row of
  `test-llama-archs --layer-ranges`); the `archs` group fails below it, so that a series that refused every
  architecture does not pass.
- `[upstream_failures.<test>] why`: upstream's own tests (the `upstream` group, by CTest name) that may fail
  here on the unpatched baseline as on the patched build, and why (the network, a tool the build leaves
  out). Such a test failing on both builds is a failure on upstream too, counted apart with its `why`; any
  other test failing on both builds is a failure.

People edit the file; dgr only reads it, through the strict decoder (dgr.contracts.convert): a missing key, a
value of another type and an unknown key are refused (exit 8), every problem listed with its key path."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from dgr.contracts import convert
from dgr.errors import ConfigError

PATH = "series/verify.toml"
"""The file, relative to the repository root."""


@dataclass(frozen=True, kw_only=True)
class UpstreamFailure:
    """An upstream test that may fail on both builds here, and why."""

    why: Annotated[str, convert.NON_EMPTY_TEXT]


@dataclass(frozen=True, kw_only=True)
class ArchsFloor:
    certified_at_least: Annotated[int, convert.POSITIVE]
    """The fewest architectures certified that pass the `archs` group."""


@dataclass(frozen=True, kw_only=True)
class Expectations:
    """The file as written: the archs floor, and the declared upstream failures by CTest name."""

    archs: ArchsFloor
    upstream_failures: Mapping[str, UpstreamFailure] = field(default_factory=dict)

    def why_upstream_fails(self, test: str) -> str | None:
        """Why upstream's test `test` may fail on both builds here; None: it is not declared."""
        declared = self.upstream_failures.get(test)
        return declared.why if declared is not None else None


def load(root: Path) -> Expectations:
    """`series/verify.toml` of the repository at `root`; ConfigError (exit 8) naming the file and every
    problem when it is missing, not TOML, or not the schema."""
    path = root / PATH
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(
            f"{PATH}: missing: the series declares there what `dgr verify` expects of it",
            hint=f"restore it with `git checkout -- {PATH}`",
        ) from exc
    except OSError as exc:
        raise ConfigError(f"{PATH}: unreadable: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{PATH}: not valid TOML: {exc}", hint="fix the syntax") from exc
    try:
        return convert.from_json(Expectations, data, "verify.toml")
    except ConfigError as exc:
        found = convert.problems(exc)
        raise ConfigError(
            f"{PATH}: invalid ({len(found)} problem{'s' if len(found) > 1 else ''})",
            detail="\n".join(found),
            hint="fix the file (docs/reference.md, `dgr verify`, says what it holds)",
        ) from exc
