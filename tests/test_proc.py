"""The subprocess wrapper: failures carry the command, exit code and output; Ctrl-C in a child is ours."""

from __future__ import annotations

import sys
import time

import pytest
from dgr.core import proc
from dgr.core.proc import run
from dgr.core.proc import stream as real_stream
from dgr.errors import BuildError


def test_run_failure_shows_command_code_and_indented_output() -> None:
    with pytest.raises(BuildError) as info:
        run(["sh", "-c", "echo out; echo err >&2; exit 3"], error=BuildError, what="it failed", hint="fix it")
    assert info.value.what == "it failed"
    assert (
        info.value.detail
        == "$ sh -c 'echo out; echo err >&2; exit 3'\nexit code 3; its output:\n  err\n  out"
    )
    assert info.value.hint == "fix it"


def test_run_returns_captured_output() -> None:
    assert run(["sh", "-c", "echo hello"]).stdout == "hello\n"


def test_stream_forwards_progress_and_keeps_the_tail(capsys: pytest.CaptureFixture[str]) -> None:
    tail = real_stream(["sh", "-c", "echo noise; echo '[1/2] a'; echo '[2/2] b'"], every_s=0)
    assert tail == ["noise", "[1/2] a", "[2/2] b"]
    assert capsys.readouterr().err == "    [1/2] a\n    [2/2] b\n"


def test_stream_failure(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BuildError) as info:
        real_stream(["sh", "-c", "echo 'compile error'; exit 1"], error=BuildError)
    assert "compile error" in (info.value.detail or "")


@pytest.mark.parametrize("script", ["exit 130", "kill -INT $$"])
def test_child_interrupted_is_an_interrupt(script: str) -> None:
    with pytest.raises(KeyboardInterrupt):
        real_stream(["sh", "-c", script])


def test_watch_stops_a_command_that_prints_nothing_and_keeps_what_it_printed() -> None:
    script = "import sys, time; print('row', end='', flush=True); time.sleep(30)"
    t0 = time.monotonic()
    watched = proc.watch([sys.executable, "-c", script], idle_s=1.0)
    assert watched.stalled and watched.returncode == -9 and watched.output == "row"
    assert time.monotonic() - t0 < 10


def test_watch_returns_the_exit_code_of_a_command_that_keeps_printing() -> None:
    script = "import sys, time\nfor i in range(3):\n    print(i, flush=True); time.sleep(0.6)\nsys.exit(3)"
    watched = proc.watch([sys.executable, "-c", script], idle_s=1.0)
    assert not watched.stalled and watched.returncode == 3 and watched.output.split() == ["0", "1", "2"]
