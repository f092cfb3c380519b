"""The only subprocess wrapper.

`run` captures output and shows it (indented) only when the command fails, or
always with -v. `stream` forwards progress lines (ninja's `[n/N]`) while the
command runs and keeps the tail of the output for the failure report. `watch`
stops a command that prints nothing for a while (a hung driver) and keeps what
it printed. A program that cannot be started is an error of each of them alike
(`_cannot_start`): missing, the caller's family; there but not executable, a
ConfigError (exit 8) saying to make it executable or reinstall it.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shlex
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from dgr.core import log
from dgr.errors import ConfigError, DgrError

_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")
_TAIL_LINES = 200


def _env(env: Mapping[str, str] | None) -> dict[str, str]:
    merged = dict(os.environ)
    if env:
        merged.update(env)
    return merged


def _quote(cmd: Sequence[str | Path]) -> str:
    return shlex.join(str(part) for part in cmd)


def _indent(text: str) -> str:
    return (
        "\n".join("  " + line for line in text.rstrip("\n").split("\n")) if text.strip() else "  (no output)"
    )


def _interrupted(returncode: int) -> bool:
    """The child died of SIGINT, or said so (ninja exits 130 on Ctrl-C)."""
    return returncode in (-signal.SIGINT, 128 + signal.SIGINT)


@contextlib.contextmanager
def _stopped_on_error(child: subprocess.Popen[Any]) -> Iterator[None]:
    """Stop `child` when the block raises (Ctrl-C included), so that nothing keeps running in the
    background."""
    try:
        yield
    except BaseException:
        stop(child)
        raise


def _wait(child: subprocess.Popen[Any]) -> int:
    """The exit code of `child`; KeyboardInterrupt when it died of Ctrl-C (it reached the child first:
    treat it as ours, whenever Python sees it)."""
    returncode = child.wait()
    if _interrupted(returncode):
        raise KeyboardInterrupt
    return returncode


def _cannot_start(
    cmd: Sequence[str | Path], exc: OSError, error: type[DgrError], what: str | None, hint: str | None
) -> DgrError:
    """The error of a program that did not start: not executable (PermissionError: a file without +x, or a
    directory), a ConfigError naming it and what to do; missing or otherwise unstartable, `error`."""
    program = exc.filename if isinstance(exc.filename, str) and exc.filename else str(cmd[0])
    if isinstance(exc, PermissionError):
        return ConfigError(
            f"cannot run {program}: it is not executable ({exc.strerror})",
            actual=str(exc),
            hint=f"make it executable (`chmod +x {shlex.quote(program)}`) or reinstall what provides it "
            "(the pinned cmake and ninja: `pip install -e .`; a built program: `dgr build`)",
        )
    if isinstance(exc, FileNotFoundError):
        return error(what or f"cannot run {cmd[0]}", actual=str(exc), hint=hint or f"install {cmd[0]}")
    return error(what or f"cannot start {cmd[0]}", actual=str(exc), hint=hint)


def _popen(
    cmd: Sequence[str | Path], error: type[DgrError], what: str | None, hint: str | None, **kwargs: Any
) -> subprocess.Popen[Any]:
    """`subprocess.Popen(cmd, **kwargs)`; a program that cannot be started is `_cannot_start`'s error."""
    try:
        return subprocess.Popen([str(part) for part in cmd], **kwargs)
    except OSError as exc:
        raise _cannot_start(cmd, exc, error, what, hint) from exc


def failure_detail(cmd: Sequence[str | Path], returncode: int, output: str) -> str:
    return f"$ {_quote(cmd)}\nexit code {returncode}; its output:\n{_indent(output)}"


def run(
    cmd: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    error: type[DgrError] = DgrError,
    what: str | None = None,
    hint: str | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `cmd` with captured output; raise `error` on a non-zero exit when `check`."""
    if log.is_verbose():
        log.detail(f"$ {_quote(cmd)}")
    try:
        result = subprocess.run(
            [str(part) for part in cmd],
            cwd=cwd,
            env=_env(env),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except OSError as exc:
        raise _cannot_start(cmd, exc, error, what, hint) from exc
    except subprocess.TimeoutExpired as exc:
        raise error(what or f"{cmd[0]} timed out after {timeout} s", hint=hint) from exc
    if log.is_verbose():
        for stream in (result.stdout, result.stderr):
            if stream.strip():
                print(_indent(stream), file=sys.stderr, flush=True)
    if result.returncode == -signal.SIGINT:
        raise KeyboardInterrupt
    if check and result.returncode != 0:
        raise error(
            what or f"command failed: {_quote(cmd)}",
            hint=hint,
            detail=failure_detail(cmd, result.returncode, result.stderr + result.stdout),
        )
    return result


def stream(
    cmd: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    error: type[DgrError] = DgrError,
    what: str | None = None,
    hint: str | None = None,
    every_s: float = 2.0,
) -> list[str]:
    """Run `cmd`, printing its `[n/N]` progress lines (at most one per `every_s`, all with -v).

    Returns the tail of the output. On Ctrl-C the child is stopped before the
    interrupt propagates, so nothing keeps running in the background.
    """
    if log.is_verbose():
        log.detail(f"$ {_quote(cmd)}")
    tail: deque[str] = deque(maxlen=_TAIL_LINES)
    with (
        _popen(
            cmd,
            error,
            what,
            hint,
            cwd=cwd,
            env=_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        ) as child,
        _stopped_on_error(child),
    ):
        assert child.stdout is not None
        last_shown = 0.0
        for raw in child.stdout:
            line = raw.rstrip("\n")
            tail.append(line)
            match = _PROGRESS.match(line)
            if log.is_verbose():
                log.detail(line)
            elif match:
                now = time.monotonic()
                if now - last_shown >= every_s or match.group(1) == match.group(2):
                    log.detail(line)
                    last_shown = now
        returncode = _wait(child)
    if returncode != 0:
        raise error(
            what or f"command failed: {_quote(cmd)}",
            hint=hint,
            detail=failure_detail(cmd, returncode, "\n".join(tail)),
        )
    return list(tail)


@dataclass(frozen=True)
class Watched:
    output: str
    """stdout and stderr, interleaved as printed (partial lines too)."""
    returncode: int
    """The exit code; -9 when the command was stopped for printing nothing."""
    stalled: bool


def watch(
    cmd: Sequence[str | Path],
    *,
    idle_s: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    error: type[DgrError] = DgrError,
) -> Watched:
    """Run `cmd` to its end, unless it prints nothing (not a byte) for `idle_s` seconds: then it is killed
    and the result says `stalled`, with everything it printed until then. A failing exit code is returned,
    not raised: the caller judges it."""
    if log.is_verbose():
        log.detail(f"$ {_quote(cmd)}")
    chunks: list[bytes] = []
    stalled = False
    child = _popen(
        cmd, error, None, None, cwd=cwd, env=_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    with child, _stopped_on_error(child), selectors.DefaultSelector() as sel:
        assert child.stdout is not None
        fd = child.stdout.fileno()
        sel.register(fd, selectors.EVENT_READ)
        while True:
            if not sel.select(timeout=idle_s):
                stalled = True
                child.kill()
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            if log.is_verbose():
                log.detail(chunk.decode(errors="replace").rstrip("\n"))
        returncode = _wait(child)
    return Watched(b"".join(chunks).decode(errors="replace"), -9 if stalled else returncode, stalled)


def stop(child: subprocess.Popen[Any]) -> None:
    """Terminate `child` if it still runs; kill it when it has not exited 10 s later."""
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def spawn(
    cmd: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    stderr: int | IO[bytes] | None = None,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """Start a long-running child that talks binary frames on its stdin/stdout (a layer worker); `pass_fds`:
    open file descriptors it inherits, under the same numbers.

    The caller owns the process: it reads and writes the pipes and waits for it.
    """
    if log.is_verbose():
        log.detail(f"$ {_quote(cmd)} &")
    child: subprocess.Popen[bytes] = _popen(
        cmd,
        DgrError,
        None,
        "run `dgr build` to build it",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=_env(env),
        bufsize=0,
        pass_fds=tuple(pass_fds),
    )
    return child
