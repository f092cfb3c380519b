"""Field readers of the records whose documents are not a dataclass's fields one for one (the bench result:
the default model's keys at the top, lenient readings of older results): each refuses a malformed value
with a ConfigError naming where it is, as dgr.contracts.convert does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dgr.contracts.convert import mapping, scalar
from dgr.errors import ConfigError

Number = int | float
Figures = Mapping[str, Number | str | bool]
"""A flat set of named measurements (build timing, fuzzing): numbers, with a note or a flag here and there."""


def typed(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ConfigError(f"{where}: `{key}` is missing")
    return scalar(kind, data[key], where, key)


def strings(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    values = typed(data, key, list, where)
    if not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return tuple(values)


def number(data: Mapping[str, Any], key: str, where: str) -> float:
    return float(typed(data, key, (int, float), where))


def optional_number(data: Mapping[str, Any], key: str, where: str) -> float | None:
    return number(data, key, where) if key in data else None


def figures_of(value: Any, where: str) -> Figures:
    d = mapping(value, where)
    for key, v in d.items():
        if not isinstance(v, (int, float, str, bool)):
            raise ConfigError(f"{where}.{key}: {type(v).__name__} is not a number, a string or a flag")
    return dict(d)
