"""Typed access to a table of a TOML file (the lock files, upstream-package/package.toml), recording every
problem instead of stopping at the first."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from dgr.core.digest import GIT_OID_RE, SHA256_RE

VERSION_RE = re.compile(r"^\d+(\.\d+)*([a-z0-9.+-]*)?$")


class TomlFields:
    """Typed access to a TOML table that records problems instead of raising."""

    def __init__(self, data: Any, where: str, problems: list[str]) -> None:
        self.where = where
        self.problems = problems
        if not isinstance(data, dict):
            problems.append(f"{where}: expected a table")
            data = {}
        self.data: dict[str, Any] = data

    def _problem(self, key: str, message: str) -> None:
        self.problems.append(f"{self.where}.{key}: {message}" if self.where else f"{key}: {message}")

    def text(self, key: str, pattern: re.Pattern[str] | None = None, what: str = "") -> str:
        value = self.data.get(key)
        if value is None:
            self._problem(key, "missing")
            return ""
        if not isinstance(value, str):
            self._problem(key, f"expected a string, found {type(value).__name__}")
            return ""
        if pattern is not None and not pattern.match(value):
            self._problem(key, f"{value!r} is not {what or pattern.pattern}")
        return value

    def oid(self, key: str) -> str:
        return self.text(key, GIT_OID_RE, "a 40-hex git object id")

    def sha256(self, key: str) -> str:
        return self.text(key, SHA256_RE, "a 64-hex sha256")

    def version(self, key: str) -> str:
        return self.text(key, VERSION_RE, "a version number")

    def date(self, key: str) -> dt.datetime:
        value = self.data.get(key)
        if not isinstance(value, dt.datetime) or value.tzinfo is None:
            self._problem(key, "expected a TOML date-time with a UTC offset, e.g. 2026-08-16T14:53:13+02:00")
            return dt.datetime.fromtimestamp(0, dt.UTC)
        return value

    def strings(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        """A non-empty list of strings; `default` when the key is missing and there is one."""
        value = self.data.get(key, list(default) if default else None)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            self._problem(key, "expected a non-empty list of strings")
            return ()
        return tuple(value)

    def optional_strings(self, key: str) -> tuple[str, ...]:
        """A list of non-empty strings, empty when the key is missing."""
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self._problem(key, "expected a list of strings")
            return ()
        return tuple(value)

    def nonempty_text(self, key: str) -> str:
        value = self.data.get(key)
        if isinstance(value, str) and not value.strip():
            self._problem(key, "expected a non-empty string")
            return ""
        return self.text(key)

    def positive(self, key: str) -> int:
        value = self.data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            self._problem(key, "expected a positive integer")
            return 0
        return value

    def table(self, key: str, *, optional: bool = False) -> TomlFields:
        value = self.data.get(key)
        if value is None and optional:
            value = {}
        elif value is None:
            self._problem(key, "missing table")
            value = {}
        return TomlFields(value, f"{self.where}.{key}" if self.where else key, self.problems)
