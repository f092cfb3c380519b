"""Reading a JSON document into the typed records: each helper refuses a malformed value with a
ConfigError naming where it is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from dgr.errors import ConfigError

Number = int | float
Figures = Mapping[str, Number | str | bool]
"""A flat set of named measurements (build timing, fuzzing): numbers, with a note or a flag here and there."""


def literal(kind: Any, value: Any, where: str) -> Any:
    choices = get_args(kind)
    if value not in choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(str, choices))}")
    return value


def typed(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ConfigError(f"{where}: `{key}` is missing")
    value = data[key]
    # bool is an int: a flag where a number is expected (or the reverse) is malformed
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float, (int, float))):
        raise ConfigError(f"{where}: `{key}` is {type(value).__name__}, expected {kind}")
    return value


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object, found {type(value).__name__}")
    return value


def strings(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    values = typed(data, key, list, where)
    if not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return tuple(values)


def string_map(data: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    values = mapping(data.get(key, {}), f"{where}.{key}")
    if not all(isinstance(v, str) for v in values.values()):
        raise ConfigError(f"{where}: `{key}` must map names to strings")
    return dict(values)


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
