"""Step logger: every step and its duration go to stderr; stdout stays for results."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

_state = {"verbose": False, "quiet": False}


def set_verbose(verbose: bool) -> None:
    _state["verbose"] = verbose


def is_verbose() -> bool:
    return _state["verbose"]


def set_quiet(quiet: bool) -> None:
    """Quiet: no steps, details or notes on stderr; warnings and errors still go there."""
    _state["quiet"] = quiet


def info(message: str) -> None:
    if not _state["quiet"]:
        print(f"dgr: {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    print(f"dgr: warning: {message}", file=sys.stderr, flush=True)


def detail(message: str) -> None:
    """A line that belongs to the current step (indented)."""
    if not _state["quiet"]:
        print(f"    {message}", file=sys.stderr, flush=True)


@contextmanager
def step(title: str) -> Iterator[None]:
    """Print `==> title`, run the body, then its duration (or that it failed); nothing when quiet, but a
    failure."""
    quiet = _state["quiet"]
    if not quiet:
        print(f"==> {title}", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        yield
    except BaseException:
        failed = f"{title}: failed" if quiet else "failed"
        print(f"    {failed} after {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)
        raise
    if not quiet:
        print(f"    done in {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)
