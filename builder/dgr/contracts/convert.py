"""One way to write a record as JSON (or TOML) and read it back: driven by the fields of its dataclass.

`to_json(record)` writes the fields in their order (a nested record as an object, a tuple as a list, a
mapping as an object); `from_json(Kind, data, where)` reads them back, checking every value against the
field's type: `str`, `int` (not a flag), `float` (an int is taken), `bool`, a `Literal`, `X | None`, a
union of scalars (the first that reads the value), a nested record (a `Record` by its own `from_json`),
`tuple[X, ...]`, `Mapping[str, X]`, `Any`. A field with a default may be missing. What is
wrong is a ConfigError naming where (`report.checks[3]: `passed` is str, expected <class 'bool'>`).

A field's metadata can rename its key (`key`: "no-model", not a Python name) and leave it out when it is
None or empty (`OMIT_NONE`, `OMIT_EMPTY`); see `keyed`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Self, TypeVar, Union, get_args, get_origin

from dgr.errors import ConfigError

T = TypeVar("T")

OMIT_NONE: Mapping[str, Any] = {"omit_none": True}
"""Field metadata: the key is left out while the value is None (and read back as None when missing)."""
OMIT_EMPTY: Mapping[str, Any] = {"omit_empty": True}
"""Field metadata: the key is left out while the value is empty ("", (), {}; read back as the default)."""


def keyed(name: str) -> Mapping[str, Any]:
    """Field metadata: the key of the field in the document is `name`."""
    return {"key": name}


_FIELDS: dict[type, tuple[tuple[dataclasses.Field[Any], str, Any], ...]] = {}


def _fields(kind: type) -> tuple[tuple[dataclasses.Field[Any], str, Any], ...]:
    """(field, its key, its type) of every field of the record type `kind`, in order."""
    if kind not in _FIELDS:
        hints = typing.get_type_hints(kind)
        _FIELDS[kind] = tuple(
            (f, f.metadata.get("key", f.name), hints[f.name]) for f in dataclasses.fields(kind)
        )
    return _FIELDS[kind]


def to_json(record: Any) -> dict[str, Any]:
    """The document of a record: its fields in order, nested records and containers as JSON values."""
    out: dict[str, Any] = {}
    for f, key, _ in _fields(type(record)):
        value = getattr(record, f.name)
        if (value is None and f.metadata.get("omit_none")) or (not value and f.metadata.get("omit_empty")):
            continue
        out[key] = _value(value)
    return out


def _value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(value)
    if isinstance(value, (tuple, list)):
        return [_value(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _value(v) for k, v in value.items()}
    return value


class Record:
    """A record read and written by this module: `to_json()`, and `Kind.from_json(data, where)`, which also
    refuses an empty value of each key of `NON_EMPTY` (a list of rows that means nothing without one)."""

    NON_EMPTY: typing.ClassVar[tuple[str, ...]] = ()

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, data: Any, where: str = "record") -> Self:
        for key in cls.NON_EMPTY:
            if not mapping(data, where).get(key):
                raise ConfigError(f"{where}: `{key}` is empty")
        return from_json(cls, data, where)


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object, found {type(value).__name__}")
    return value


def from_json(kind: type[T], data: Any, where: str) -> T:
    """The record of type `kind` that `data` holds; ConfigError naming the first thing that is wrong."""
    d = mapping(data, where)
    values: dict[str, Any] = {}
    for f, key, hint in _fields(kind):
        if key not in d:
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            if has_default:
                continue
            if _optional(hint):
                values[f.name] = None
                continue
            raise ConfigError(f"{where}: `{key}` is missing")
        values[f.name] = _read(hint, d[key], where, key)
    return kind(**values)


def _optional(hint: Any) -> bool:
    return _is_union(hint) and type(None) in get_args(hint)


def _is_union(hint: Any) -> bool:
    return get_origin(hint) in (Union, types.UnionType)


def _read(hint: Any, value: Any, where: str, key: str) -> Any:
    """`value`, the field `key` of the object at `where`, as the type `hint`."""
    origin = get_origin(hint)
    if hint is Any:
        return value
    if _is_union(hint):
        if value is None and type(None) in get_args(hint):
            return None
        inner = [a for a in get_args(hint) if a is not type(None)]
        if len(inner) == 1:
            return _read(inner[0], value, where, key)
        # a union of scalars (`int | float | str | bool`): the first that reads it
        for alternative in inner:
            try:
                return _read(alternative, value, where, key)
            except ConfigError:
                continue
        names = " | ".join(getattr(a, "__name__", str(a)) for a in inner)
        raise ConfigError(f"{where}: `{key}` is {type(value).__name__}, expected {names}")
    if origin is Literal:
        if value not in get_args(hint):
            choices = ", ".join(map(str, get_args(hint)))
            raise ConfigError(f"{_path(where, key)}: {value!r} is not one of {choices}")
        return value
    if dataclasses.is_dataclass(hint):
        kind = typing.cast(type, hint)
        if issubclass(kind, Record):  # its own reading (a check of its own beside the fields')
            return kind.from_json(value, _path(where, key))
        return from_json(kind, value, _path(where, key))
    if origin is tuple:
        items = scalar(list, value, where, key)
        inner = get_args(hint)[0]
        return tuple(_read(inner, v, _path(where, key), f"[{i}]") for i, v in enumerate(items))
    if origin is Mapping or origin is dict:
        items = mapping(value, _path(where, key))
        inner = get_args(hint)[1]
        return {k: _read(inner, v, _path(where, key), k) for k, v in items.items()}
    if hint is float:
        return float(scalar((int, float), value, where, key))
    return scalar(hint, value, where, key)


def _path(where: str, key: str) -> str:
    """Where the field `key` of the object at `where` is (`[i]`: an item of the list at `where`)."""
    return f"{where}{key}" if key.startswith("[") else f"{where}.{key}"


def scalar(kind: type | tuple[type, ...], value: Any, where: str, key: str) -> Any:
    # bool is an int: a flag where a number is expected (or the reverse) is malformed
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float, (int, float))):
        raise ConfigError(f"{where}: `{key}` is {type(value).__name__}, expected {kind}")
    return value
