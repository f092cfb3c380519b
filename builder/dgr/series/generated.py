"""The patches whose mechanical part is the output of a rewrite rule: `series/rules/rules.toml` names them
and their rule, `series/rules/rewrite.py` is the rule (a program of its own, for reviewers too; `dgr check`
runs it, dgr.maintain.rules, and `dgr export-upstream` puts it in the package)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from dgr.contracts import convert
from dgr.core.paths import Repo
from dgr.errors import ConfigError

RULES_DIR = Path("series") / "rules"
CONFIG = RULES_DIR / "rules.toml"
PROGRAM = RULES_DIR / "rewrite.py"
PACKAGED = (
    "README.md",
    "requirements.txt",
    "rewrite.py",
    "cppsyntax.py",
    "layerloop.py",
    "layer-inputs.skip",
    "layer-range-archs.txt",
)
"""The files of RULES_DIR that a reviewer needs to run the rules: the program and its modules, its README
and its lists."""
PATHS = "src/models"
"""What the rules edit: the graph files of the architectures."""


@dataclass(frozen=True)
class Generated:
    patch: str
    """A file of patches/ whose `src/models/` part is the rule's output."""
    rule: str
    """The name rewrite.py knows the rule by."""


@dataclass(frozen=True)
class _RulesFile:
    generated: tuple[Generated, ...] = ()


def load(repo: Repo) -> list[Generated]:
    """The generated patches of the series (none when the repository has no rules.toml)."""
    path = repo.root / CONFIG
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{CONFIG}: cannot be read: {exc}", hint="fix the file") from exc
    # the one strict decoder: a key but `generated`, or a table with a key but `patch` and `rule`, is refused
    try:
        return list(convert.from_json(_RulesFile, data, str(CONFIG)).generated)
    except ConfigError as exc:
        raise ConfigError(
            f"{CONFIG}: each [[generated]] table has exactly the strings `patch` and `rule`",
            detail="\n".join(convert.problems(exc)),
            hint='write [[generated]] patch = "<file in patches/>" rule = "<rule of rewrite.py>"',
        ) from exc


def rules_of(repo: Repo) -> dict[str, str]:
    """The rule of each generated patch, by patch name; none for a port (rules.toml is the series')."""
    return {} if repo.port is not None else {g.patch: g.rule for g in load(repo)}


MISSING = f"{CONFIG} names it, the series does not"
"""The problem of a generated patch that the series lacks."""


def missing(generated: list[Generated], patches: list[str]) -> list[Generated]:
    """The generated patches that the series does not have (each a finding: MISSING)."""
    return [g for g in generated if g.patch not in patches]
