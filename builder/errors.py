"""Errors and exit codes: the one place where each failure family gets its code.

Every error names the file or commit concerned, the expected and actual values
where there are two, and a hint saying what to run next.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERRUPTED = 130


class DgrError(Exception):
    """Base class: an expected failure with a clear message (exit 1: generic)."""

    exit_code = 1
    label = "error"

    def __init__(
        self,
        what: str,
        *,
        expected: str | None = None,
        actual: str | None = None,
        hint: str | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(what)
        self.what = what
        self.expected = expected
        self.actual = actual
        self.hint = hint
        self.detail = detail

    def render(self) -> str:
        lines = [f"dgr: {self.label}: {self.what}"]
        if self.expected is not None:
            lines.append(f"  expected: {self.expected}")
        if self.actual is not None:
            lines.append(f"  actual:   {self.actual}")
        if self.detail:
            lines.extend("  " + line if line else "" for line in self.detail.rstrip("\n").split("\n"))
        if self.hint:
            lines.append(f"  next: {self.hint}")
        return "\n".join(lines)


class UsageError(DgrError):
    """Bad command line or a request that does not make sense in this state (exit 2)."""

    exit_code = 2
    label = "usage"


class IntegrityError(DgrError):
    """A digest does not match: patch, series, manifest, sdist, wheel, model, cached artifact (exit 3)."""

    exit_code = 3
    label = "integrity"


class UpstreamError(DgrError):
    """The upstream commit or tree differs from the lock, or no source has it (exit 4)."""

    exit_code = 4
    label = "upstream"


class ApplyError(DgrError):
    """A patch of the series does not apply (exit 5)."""

    exit_code = 5
    label = "apply"


class BuildError(DgrError):
    """CMake, ninja or the compiler failed (exit 6)."""

    exit_code = 6
    label = "build"


class LintError(DgrError):
    """`dgr check` (or `export-patches --dry-run`) found problems (exit 7)."""

    exit_code = 7
    label = "lint"


class ConfigError(DgrError):
    """Unreadable or invalid locks, series syntax, a missing file (exit 8)."""

    exit_code = 8
    label = "config"


class VerifyError(DgrError):
    """Reserved for `dgr verify`: a verification failed (exit 9)."""

    exit_code = 9
    label = "verify"


class NetworkError(DgrError):
    """A download or remote fetch could not reach the network (exit 10)."""

    exit_code = 10
    label = "network"


EXIT_CODES: dict[int, str] = {
    EXIT_OK: "ok",
    DgrError.exit_code: "generic or unexpected error",
    UsageError.exit_code: "usage",
    IntegrityError.exit_code: "integrity: a digest does not match",
    UpstreamError.exit_code: "upstream: commit/tree mismatch or no source has it",
    ApplyError.exit_code: "apply: a patch does not apply",
    BuildError.exit_code: "build: cmake, ninja or the compiler failed",
    LintError.exit_code: "lint: dgr check found problems",
    ConfigError.exit_code: "config: unreadable or invalid locks, series syntax, missing file",
    VerifyError.exit_code: "verify failed",
    NetworkError.exit_code: "network unreachable",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}
