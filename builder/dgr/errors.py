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


class BenchError(DgrError):
    """A measurement of `dgr bench` failed: layer-bench, the fuzz harness (or the crash it found),
    llama-perplexity, llama-bench or the RPC run (exit 1: a domain of its own, of no family below)."""

    label = "bench"


class GitError(DgrError):
    """A git command failed (exit 1: a domain of its own, of no family below)."""

    label = "git"


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
    """A verification failed (`dgr verify`), `dgr generate` differs from the unsplit model, or no passing
    report exists for the inputs (`export-upstream`, `pin`) (exit 9)."""

    exit_code = 9
    label = "verify"


class StaleError(VerifyError):
    """A verify report or bench result of the current inputs, run by another harness or against other models
    than the repository's now (exit 9, as a missing one): the message names it, the detail what changed."""


class NetworkError(DgrError):
    """A download or remote fetch could not reach the network (exit 10)."""

    exit_code = 10
    label = "network"


class InternalError(DgrError):
    """An exception dgr did not expect: a bug (exit 11). Only the command line raises it, around every
    other exception; -v shows the traceback."""

    exit_code = 11
    label = "internal error"


class WorkerRequestError(DgrError):
    """A layer worker answered a request with an error (exit 12); `code` and `message` are the worker's."""

    exit_code = 12
    label = "worker"

    def __init__(self, worker: str, op: str, code: str, message: str) -> None:
        super().__init__(f"{worker}: {op}: {code}: {message}")
        self.worker = worker
        self.op = op
        self.code = code
        self.message = message


class WorkerDiedError(DgrError):
    """A layer worker exited, closed its pipe, sent garbage or missed a deadline (exit 13)."""

    exit_code = 13
    label = "worker died"

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
