"""The one decoder of every schema: the JSON documents (reports, manifests, bench results) and the TOML files
(locks/*.toml, upstream-package/package.toml) alike, driven by the fields of a dataclass.

`to_json(record)` writes the fields in their order (a nested record as an object, a tuple as a list, a
mapping as an object); `from_json(Kind, data, where)` reads them back, checking every value against the
field's type: `str`, `int` (not a flag), `float` (an int is taken), `bool`, a `Literal`, `X | None`, a
union of scalars (the first that reads the value), a nested record (a `Record` by its own `from_json`),
`tuple[X, ...]`, `Mapping[str, X]`, `Any`, a TOML date-time (`datetime.datetime`, with its UTC offset), and
`Annotated[X, Rule(...)]` (a value of X that the rule also accepts: a pattern, a positive number). A field
with a default may be missing. It is strict: a key that is no field of the record is refused, with the
closest field's key as the suggestion (`report: unknown key `pased`; did you mean `passed`?`), and it reads
on past a problem, so that every problem of a document is listed at once. What is wrong is a ConfigError
(exit 8) naming where (`report.checks[3].passed: expected true or false, found str`); with more than one
problem its detail lists them all (`problems(exc)`).

Why this module rather than a library: it was already the decoder of every JSON document, and it is small; a
library with a strict mode (msgspec's Struct with forbid_unknown_fields) would mean a second type per
record (a Struct beside the frozen dataclasses that the rest of dgr passes around), and neither msgspec nor
cattrs reads on past the first problem, which `dgr check` needs to list every problem of a lock.

A field's metadata can rename its key (`key`: "no-model", not a Python name) and leave it out when it is
None or empty (`OMIT_NONE`, `OMIT_EMPTY`); see `keyed`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Self, TypeVar, Union, get_args, get_origin

from dgr.errors import ConfigError

T = TypeVar("T")

OMIT_NONE: Mapping[str, Any] = {"omit_none": True}
"""Field metadata: the key is left out while the value is None (and read back as None when missing)."""
OMIT_EMPTY: Mapping[str, Any] = {"omit_empty": True}
"""Field metadata: the key is left out while the value is empty ("", (), {}; read back as the default)."""


def keyed(name: str) -> Mapping[str, Any]:
    """Field metadata: the key of the field in the document is `name`."""
    return {"key": name}


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a value must also be, beside its type (`Annotated[str, Rule(...)]`): `accepts` it, else the
    problem `<where>.<key>: <value> is not <what>`."""

    accepts: Callable[[Any], bool]
    what: str
    message: str | None = None
    """The problem said without the value (`is empty, ...`), instead of `<value> is not <what>`."""


def matches(pattern: re.Pattern[str], what: str) -> Rule:
    """A string that `pattern` matches (from its start)."""
    return Rule(lambda value: bool(pattern.match(value)), what)


POSITIVE = Rule(lambda value: value > 0, "a positive number")
NON_EMPTY_TEXT = Rule(lambda value: bool(value.strip()), "a non-empty string", "expected a non-empty string")
AT_LEAST_ONE = Rule(bool, "non-empty", "is empty, expected at least one entry")

VERSION_RE = re.compile(r"^\d+(\.\d+)*([a-z0-9.+-]*)?$")

_TYPE_NAMES: Mapping[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "an object",
}


class InvalidDocumentError(ConfigError):
    """Every problem of a document: the first is the message, all of them the detail (more than one)."""

    def __init__(self, problems: list[str]) -> None:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        super().__init__(problems[0] + more, detail="\n".join(problems) if more else None)
        self.problems = problems


def problems(exc: ConfigError) -> list[str]:
    """Every problem a ConfigError of this module names (one, unless it is `InvalidDocumentError`)."""
    return exc.problems if isinstance(exc, InvalidDocumentError) else [exc.what]


_FIELDS: dict[type, tuple[tuple[dataclasses.Field[Any], str, Any], ...]] = {}


def _fields(kind: type) -> tuple[tuple[dataclasses.Field[Any], str, Any], ...]:
    """(field, its key, its type) of every field of the record type `kind`, in order."""
    if kind not in _FIELDS:
        hints = typing.get_type_hints(kind, include_extras=True)
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


def fields_of(kind: type, source: Any) -> dict[str, Any]:
    """The values of `source` named as the fields of the record type `kind`: what makes a `kind` of a record
    that holds its fields among its own (`kind(**fields_of(kind, source))`)."""
    return {f.name: getattr(source, f.name) for f in dataclasses.fields(kind)}


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


class TomlTable:
    """A record written back to its lock file as it is read: `to_toml()` is its fields in order, as
    `to_json` writes them."""

    def to_toml(self) -> dict[str, Any]:
        return to_json(self)


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object, found {type(value).__name__}")
    return value


def unknown_keys(data: Mapping[str, Any], known: typing.Collection[str], where: str) -> list[str]:
    """A problem for every key of `data` that is not one of `known`, with the closest known key."""
    found = []
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            hint = f"; did you mean `{close[0]}`?" if close else f" (known: {', '.join(known) or 'none'})"
            found.append(f"{where}: unknown key `{key}`{hint}")
    return found


def from_json(kind: type[T], data: Any, where: str) -> T:
    """The record of type `kind` that `data` holds; ConfigError naming what is wrong (all of it, if more)."""
    d = mapping(data, where)
    values: dict[str, Any] = {}
    found: list[str] = []
    for f, key, hint in _fields(kind):
        if key not in d:
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            if has_default:
                continue
            if _optional(hint):
                values[f.name] = None
                continue
            found.append(f"{_path(where, key)}: missing")
            continue
        try:
            values[f.name] = _read(hint, d[key], where, key)
        except ConfigError as exc:
            found += problems(exc)
    found += unknown_keys(d, [key for _, key, _ in _fields(kind)], where)
    if found:
        raise InvalidDocumentError(found)
    return kind(**values)


def _each(items: Any, read: Callable[[Any, Any], Any]) -> list[Any]:
    """`read(key, value)` of every item of `items` (pairs), reading on past a problem (then raising all)."""
    out, found = [], []
    for k, v in items:
        try:
            out.append(read(k, v))
        except ConfigError as exc:
            found += problems(exc)
    if found:
        raise InvalidDocumentError(found)
    return out


def _optional(hint: Any) -> bool:
    return _is_union(hint) and type(None) in get_args(hint)


def _is_union(hint: Any) -> bool:
    return get_origin(hint) in (Union, types.UnionType)


def _read(hint: Any, value: Any, where: str, key: str) -> Any:
    """`value`, the field `key` of the object at `where`, as the type `hint`."""
    origin = get_origin(hint)
    if hint is Any:
        return value
    if origin is Annotated:
        inner, *rules = get_args(hint)
        value = _read(inner, value, where, key)
        for rule in rules:
            if isinstance(rule, Rule) and not rule.accepts(value):
                raise ConfigError(f"{_path(where, key)}: {rule.message or f'{value!r} is not {rule.what}'}")
        return value
    if hint is dt.datetime:
        if not isinstance(value, dt.datetime) or value.tzinfo is None:
            raise ConfigError(
                f"{_path(where, key)}: expected a TOML date-time with a UTC offset, "
                "e.g. 2026-08-16T14:53:13+02:00"
            )
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
        raise ConfigError(f"{_path(where, key)}: expected {names}, found {type(value).__name__}")
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
        return tuple(_each(enumerate(items), lambda i, v: _read(inner, v, _path(where, key), f"[{i}]")))
    if origin is Mapping or origin is dict:
        items = mapping(value, _path(where, key))
        inner = get_args(hint)[1]
        read = _each(items.items(), lambda k, v: (k, _read(inner, v, _path(where, key), k)))
        return dict(read)
    if hint is float:
        return float(scalar((int, float), value, where, key))
    return scalar(hint, value, where, key)


def _path(where: str, key: str) -> str:
    """Where the field `key` of the object at `where` is (`[i]`: an item of the list at `where`)."""
    return f"{where}{key}" if key.startswith("[") else f"{where}.{key}"


def scalar(kind: type | tuple[type, ...], value: Any, where: str, key: str) -> Any:
    # bool is an int: a flag where a number is expected (or the reverse) is malformed
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float, (int, float))):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        expected = (
            "a number"
            if kinds == (int, float)
            else " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        )
        raise ConfigError(f"{_path(where, key)}: expected {expected}, found {type(value).__name__}")
    return value
