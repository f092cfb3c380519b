"""The verify reports kept in the cache: `reports/<inputs-digest>.json` (all groups) or
`reports/<inputs-digest>-<group>-....json` (a subset, from `dgr verify --only`).

`dgr verify` writes them; `dgr export-upstream` and `dgr pin` accept only a complete pass for the inputs
digest they are about, run by the harness and against the models of the repository as it is now (a report
of another harness is stale: dgr.contracts.harness)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dgr.contracts.harness import Harness
from dgr.contracts.report import GROUPS, Group, Report
from dgr.core import jsonio
from dgr.core.digest import sha256_bytes
from dgr.core.fs import read_or_refuse, write_atomic
from dgr.core.paths import Cache
from dgr.errors import ConfigError, StaleError, VerifyError

VERIFY_HINT = "run `dgr verify` (all groups) for the current inputs, then this command again"


def name(digest: str, groups: tuple[Group, ...] = GROUPS) -> str:
    """The report's path relative to the cache."""
    return f"reports/{digest}{'' if groups == GROUPS else '-' + '-'.join(groups)}.json"


def write(cache: Cache, report: Report) -> tuple[Path, bytes]:
    """Keep `report` in the cache (atomically); returns its path and bytes."""
    data = (json.dumps(report.to_json(), indent=2, default=str) + "\n").encode()
    path = cache.root / name(report.inputs_digest, report.groups)
    write_atomic(path, data)
    return path, data


@dataclass(frozen=True)
class Stored:
    """A report read back from the cache, with where it was and the digest of its bytes."""

    name: str
    sha256: str
    report: Report


def load_passing(
    cache: Cache, digest: str, harness: Harness, hint: str = VERIFY_HINT, groups: tuple[Group, ...] = GROUPS
) -> Stored:
    """The report of `groups` (default: the CPU build's, all) for `digest`; VerifyError unless it exists, is
    well-formed, passed, covers every group and was run by `harness` (the current one: dgr.builds.harness)."""
    rel = name(digest, groups)
    path = cache.root / rel
    raw = read_or_refuse(path, "there is no verify report for the current inputs", hint, VerifyError)
    try:
        report = Report.from_json(jsonio.loads(raw, str(path)), str(path))
    except ValueError as exc:
        raise VerifyError(f"{path} is not valid JSON ({exc})", hint=hint) from exc
    except ConfigError as exc:
        raise VerifyError(f"{path} is not a verify report: {exc.what}", hint=hint) from exc
    problems = report.problems(digest, groups)
    if problems:
        raise VerifyError(
            "the verify report for the current inputs is not a complete pass",
            detail=f"{path}:\n" + "\n".join(f"- {p}" for p in problems),
            hint=hint,
        )
    changed = report.stale(harness)
    if changed:
        raise StaleError(
            f"the verify report {path} is stale: the harness or the model lock changed since it ran",
            detail="\n".join(f"- {c}" for c in changed),
            hint=hint,
        )
    return Stored(rel, sha256_bytes(raw), report)
