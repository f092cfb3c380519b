"""The one JSON decoder of dgr: every JSON document dgr reads (a file: a verify report, bench.json; a worker's
frame or bundle header; the output of a program: ctest, cmake's file API, layer-bench, llama-bench) goes
through `loads`, which refuses what the standard library's `json.loads` lets through:

- a key twice in one object: `json.loads` keeps the last value, so `{"passed": false, "passed": true}`
  would read as passed;
- `NaN`, `Infinity` and `-Infinity`, which are no JSON (RFC 8259 has no such numbers), and a number out of
  the range of a double (`1e400`, which `json.loads` reads as infinity): no figure or count of dgr is one,
  and a NaN fails every comparison while an infinity passes every floor.

A problem is `error(message)`, the message naming `where` (the file, or the source: `the frame header`) and
the key, with its path in the document written as dgr.contracts.convert writes paths
(`reports/X.json.checks[3]: duplicate key `passed``). `error` is ConfigError (exit 8) unless the caller
decodes a wire whose malformed input has a class of its own (the worker protocol's FrameError, the bundle's
BundleError), or wraps the error itself (ValueError, as `json.loads` raises it).

The checks cost nothing on a document without a problem beyond the hooks `json.loads` calls: the document
is walked for the path only when a hook has seen one.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from dgr.errors import ConfigError

__all__ = ["loads"]

ErrorClass = Callable[[str], Exception]
"""What makes the error of a problem from its message: an exception class taking one message."""


class _Repeated(dict[str, Any]):
    """An object of the document that has a key more than once (`repeated`: those keys, in order)."""

    def __init__(self, pairs: list[tuple[str, Any]], repeated: list[str]) -> None:
        super().__init__(pairs)
        self.repeated = repeated


class _NotANumber:
    """A number of the document that JSON does not have (`text`: as written: NaN, Infinity, 1e400)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def loads(raw: str | bytes | bytearray, where: str, error: ErrorClass = ConfigError) -> Any:
    """The JSON document `raw` (text, or bytes in UTF-8, -16 or -32), read from `where`; `error(message)`
    when it is no JSON, has a key twice in an object, or a number JSON does not have."""
    seen: list[bool] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) == len(items):
            return obj
        seen.append(True)
        return _Repeated(items, [k for k, n in Counter(k for k, _ in items).items() if n > 1])

    def constant(text: str) -> _NotANumber:
        seen.append(True)
        return _NotANumber(text)

    def number(text: str) -> float | _NotANumber:
        value = float(text)
        return value if math.isfinite(value) else constant(text)

    try:
        document = json.loads(raw, object_pairs_hook=pairs, parse_constant=constant, parse_float=number)
    except ValueError as exc:  # json.JSONDecodeError, or bytes of no UTF encoding (UnicodeDecodeError)
        raise error(f"{where} is not JSON: {exc}") from exc
    if seen:
        raise error(_problem(document, where) or f"{where}: a key twice in an object, or NaN or Infinity")
    return document


def _problem(value: Any, path: str) -> str | None:
    """The first problem of the document `value` (at `path`), in the order of the document."""
    if isinstance(value, _NotANumber):
        if value.text in ("NaN", "Infinity", "-Infinity"):
            return f"{path}: {value.text} is refused: JSON has no NaN, Infinity or -Infinity"
        return f"{path}: {value.text} is out of the range of a number (a double)"
    if isinstance(value, _Repeated):
        return f"{path}: duplicate key `{value.repeated[0]}` (a key may appear once in an object)"
    items: Iterable[tuple[str, Any]]
    if isinstance(value, dict):
        items = ((f"{path}.{k}", v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for where, item in items:
        if found := _problem(item, where):
            return found
    return None
