"""Errors and exit codes: the one place where each failure family gets its code.

Every error names the file or commit concerned, the expected and actual values
where there are two, and a hint saying what to run next.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERRUPTED = 130


class DgrError(Exception):
    """Base class: an expected failure with a clear message (exit 1: of no family below)."""

    exit_code = 1
    label = "error"

    def __init_subclass__(cls, *, code: int | None = None, label: str | None = None) -> None:
        """A family is declared by its class line, `class UsageError(DgrError, code=2, label="usage")`: its
        exit code and the label of its messages (a subclass without them keeps its parent's)."""
        super().__init_subclass__()
        if code is not None:
            cls.exit_code = code
        if label is not None:
            cls.label = label

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


class BenchError(DgrError, label="bench"):
    """A measurement of `dgr bench` failed: layer-bench, the fuzz harness (or the crash it found),
    llama-perplexity, llama-bench or the RPC run (exit 1: a domain of its own, of no family below)."""


class GitError(DgrError, label="git"):
    """A git command failed (exit 1: a domain of its own, of no family below)."""


class UsageError(DgrError, code=2, label="usage"):
    """Bad command line or a request that does not make sense in this state (exit 2)."""


class IntegrityError(DgrError, code=3, label="integrity"):
    """A digest does not match: patch, series, manifest, sdist, wheel, model, cached artifact (exit 3)."""


class UpstreamError(DgrError, code=4, label="upstream"):
    """The upstream commit or tree differs from the lock, or no source has it (exit 4)."""


class ApplyError(DgrError, code=5, label="apply"):
    """A patch of the series does not apply (exit 5)."""


class BuildError(DgrError, code=6, label="build"):
    """CMake, ninja or the compiler failed (exit 6)."""


class LintError(DgrError, code=7, label="lint"):
    """`dgr check` (or `export-patches --dry-run`) found problems (exit 7)."""


class ConfigError(DgrError, code=8, label="config"):
    """Unreadable or invalid locks, series syntax, a missing file (exit 8)."""


class VerifyError(DgrError, code=9, label="verify"):
    """A verification failed (`dgr verify`), `dgr generate` differs from the unsplit model, or no passing
    report exists for the inputs (`export-upstream`, `pin`) (exit 9)."""


class StaleError(VerifyError):
    """A verify report or bench result of the current inputs, run by another harness or against other models
    than the repository's now (exit 9, as a missing one): the message names it, the detail what changed."""


class NetworkError(DgrError, code=10, label="network"):
    """A download or remote fetch could not reach the network (exit 10)."""


class InternalError(DgrError, code=11, label="internal error"):
    """An exception dgr did not expect: a bug (exit 11). Only the command line raises it, around every
    other exception; -v shows the traceback."""


class WorkerRequestError(DgrError, code=12, label="worker"):
    """A layer worker answered a request with an error (exit 12); `code` and `message` are the worker's."""

    def __init__(self, worker: str, op: str, code: str, message: str) -> None:
        super().__init__(f"{worker}: {op}: {code}: {message}")
        self.worker = worker
        self.op = op
        self.code = code
        self.message = message


class WorkerDiedError(DgrError, code=13, label="worker died"):
    """A layer worker exited, closed its pipe, sent garbage or missed a deadline (exit 13)."""

    def __init__(self, worker: str, reason: str, stderr_tail: str = "") -> None:
        lines = stderr_tail.splitlines()[-15:]
        super().__init__(
            f"{worker}: {reason}",
            detail="worker stderr:\n" + "\n".join("  " + line for line in lines) if lines else None,
            hint="rerun with -v for every request; the worker's stderr is above",
        )
        self.worker = worker
        self.reason = reason


class ShardFailedError(WorkerDiedError):
    """A worker of a chain died or missed its deadline; the others released the session (exit 13)."""

    def __init__(self, index: int, layers: tuple[int, int], cause: WorkerDiedError) -> None:
        super().__init__(f"shard {index} (layers [{layers[0]}, {layers[1]}))", f"failed: {cause.reason}")
        self.detail = cause.detail
        self.index = index
        self.layers = layers


EXIT_CODES: dict[int, str] = {
    EXIT_OK: "ok",
    DgrError.exit_code: "generic error",
    UsageError.exit_code: "usage",
    IntegrityError.exit_code: "integrity: a digest does not match",
    UpstreamError.exit_code: "upstream: commit/tree mismatch or no source has it",
    ApplyError.exit_code: "apply: a patch does not apply",
    BuildError.exit_code: "build: cmake, ninja or the compiler failed",
    LintError.exit_code: "lint: dgr check found problems",
    ConfigError.exit_code: "config: invalid locks or series, a missing file, an unwritable cache or --out",
    VerifyError.exit_code: "verify: a check failed, generate differs from unsplit, or no passing report",
    NetworkError.exit_code: "network unreachable",
    InternalError.exit_code: "internal error: a bug (rerun with -v for the traceback)",
    WorkerRequestError.exit_code: "worker: a layer worker refused a request",
    WorkerDiedError.exit_code: "worker died: a layer worker exited, hung or broke the protocol",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}
