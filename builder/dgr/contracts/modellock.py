"""`locks/model.toml`: the models, each a set of wheels whose members make up the GGUF file."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dgr.contracts import convert
from dgr.contracts.tomlfields import TomlFields
from dgr.errors import ConfigError

MODEL_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*$")
GGUF_FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.gguf$")
WHEEL_FILE_RE = re.compile(r"^[A-Za-z0-9_.+-]+-[^-/]+(-[^-/]+)?-[^-/]+-[^-/]+-[^-/]+\.whl$")


def _is_member_path(path: str) -> bool:
    """A relative path inside a zip file, without `..` or empty parts."""
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and all(p not in ("", ".", "..") for p in parts)


@dataclass(frozen=True)
class ModelWheel:
    """One wheel on PyPI and the member of it that holds the model file (or, in order, one part of it)."""

    package: str
    version: str
    wheel: str
    wheel_sha256: str
    member: str

    @staticmethod
    def parse(fields: TomlFields) -> ModelWheel:
        wheel = ModelWheel(
            package=fields.text("package"),
            version=fields.version("version"),
            wheel=fields.text("wheel", WHEEL_FILE_RE, "a wheel file name (NAME-VERSION-PY-ABI-PLATFORM.whl)"),
            wheel_sha256=fields.sha256("wheel_sha256"),
            member=fields.text("member"),
        )
        if wheel.member and not _is_member_path(wheel.member):
            fields.problems.append(
                f"{fields.where}.member: {wheel.member!r} is not a relative path in the wheel"
            )
        return wheel

    def to_toml(self) -> dict[str, Any]:
        return convert.to_json(self)


@dataclass(frozen=True)
class ModelLock:
    """A locked model: the GGUF file (`file`, its SHA-256 and size) and the wheels whose members, in order,
    concatenate to it (one wheel holds a small model whole; a large one is split into chunk wheels)."""

    name: str
    file: str
    sha256: str
    size: int
    wheels: tuple[ModelWheel, ...]

    @property
    def filename(self) -> str:
        return self.file

    @property
    def _single(self) -> ModelWheel:
        """The wheel of a model held whole by one wheel (what export-upstream's reproduce steps name)."""
        if len(self.wheels) != 1:
            raise ValueError(f"model {self.name} is assembled from {len(self.wheels)} wheels, not one")
        return self.wheels[0]

    @property
    def package(self) -> str:
        return self._single.package

    @property
    def version(self) -> str:
        return self._single.version

    @property
    def wheel(self) -> str:
        return self._single.wheel

    @property
    def member(self) -> str:
        return self._single.member

    @staticmethod
    def parse(name: str, fields: TomlFields) -> ModelLock:
        problems = fields.problems
        if not MODEL_NAME_RE.match(name):
            problems.append(f"{fields.where}: the name {name!r} is not lowercase letters, digits, - and _")
        file = fields.text("file", GGUF_FILE_RE, "a .gguf file name")
        size = fields.data.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            problems.append(f"{fields.where}.size: expected the file's size in bytes, a positive integer")
            size = 0
        raw = fields.data.get("wheels")
        if not isinstance(raw, list) or not raw:
            problems.append(f"{fields.where}.wheels: expected a non-empty array of tables")
            raw = []
        wheels = tuple(
            ModelWheel.parse(TomlFields(w, f"{fields.where}.wheels[{i}]", problems))
            for i, w in enumerate(raw)
        )
        seen: dict[str, int] = {}
        for i, w in enumerate(wheels):
            if w.wheel and w.wheel in seen:
                problems.append(
                    f"{fields.where}.wheels[{i}].wheel: {w.wheel} is also wheels[{seen[w.wheel]}]"
                )
            seen.setdefault(w.wheel, i)
        return ModelLock(name=name, file=file, sha256=fields.sha256("sha256"), size=size, wheels=wheels)

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
    def parse(data: dict[str, Any], where: str, problems: list[str]) -> ModelsLock:
        top = TomlFields(data, where, problems)
        default = top.text("default")
        table = top.table("models")
        if not table.data:
            problems.append(f"{table.where}: expected at least one model")
        models = {name: ModelLock.parse(name, table.table(name)) for name in table.data}
        if default and table.data and default not in models:
            problems.append(f"{where}.default: {default!r} is not a model of [models] ({', '.join(models)})")
        for key in sorted(set(data) - {"default", "models"}):
            problems.append(f"{where}.{key}: unknown key (expected default and [models.NAME])")
        return ModelsLock(default=default, models=models)

    def to_toml(self) -> dict[str, Any]:
        return {"default": self.default, "models": {n: m.to_toml() for n, m in self.models.items()}}
