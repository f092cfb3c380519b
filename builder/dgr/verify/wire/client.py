"""Start a layer-worker process and talk to it over its stdin/stdout frames, with deadlines."""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dgr.core import proc
from dgr.errors import WorkerDiedError, WorkerRequestError
from dgr.verify.wire import frames

# OpenMP threads spin for a short while at a barrier, then sleep: spinning keeps a graph's many barriers
# fast (3x the decode speed of sleeping at once, on 2 cores), sleeping soon lets the other workers of a
# chain on the same cores run (spinning forever, the default, made a 3-process chain 50x slower)
OMP_ENV = {"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": "1000"}


@dataclass(frozen=True, kw_only=True)
class ContextParams:
    """The context a worker creates at `load`: `n_ctx` cells shared by `max_sessions` sessions (each gets
    n_ctx / max_sessions), batches of at most `n_batch` tokens."""

    n_ctx: int = 1024
    n_batch: int = 512
    n_ubatch: int = 512
    threads: int = 2
    max_sessions: int = 4
    type_k: str = "f16"

    def fields(self) -> dict[str, Any]:
        return {
            "n_ctx": self.n_ctx,
            "n_batch": self.n_batch,
            "n_ubatch": self.n_ubatch,
            "n_threads": self.threads,
            "max_sessions": self.max_sessions,
            "type_k": self.type_k,
        }


class _DeadlineReader:
    """A buffered file-like reader over a pipe fd whose reads fail after a deadline: one read() system call
    usually brings a whole reply."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.deadline = float("inf")
        self._buf = bytearray()

    @property
    def pending(self) -> int:
        return len(self._buf)

    def read(self, n: int) -> bytes:
        if not self._buf:
            timeout = self.deadline - time.monotonic()
            if timeout <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if not ready:
                raise TimeoutError
            self._buf += os.read(self.fd, max(n, 1 << 16))
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out


class Worker:
    """One layer-worker process (one layer range)."""

    def __init__(
        self,
        binary: Path,
        name: str,
        *,
        timeout: float = 300.0,
        verbose: bool = False,
        max_body: int = 64 << 20,
        env: dict[str, str] | None = None,
        next_stage: Worker | None = None,
        ids: Iterator[int] | None = None,
    ) -> None:
        """`next_stage`: the worker of the next range, whose input this one's decode requests with `forward`
        go on to (`--next-fd`, docs/protocol.md). `ids`: the request ids, shared by the workers of a chain
        whose requests travel from one to the next."""
        self.name = name
        self.timeout = timeout
        self.max_body = max_body
        self._ids = ids if ids is not None else itertools.count(1)
        self._abandoned: set[int] = set()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the process, closed in close()
        cmd = [str(binary), "--max-body", str(max_body)] + (["--verbose"] if verbose else [])
        next_fds: tuple[int, ...] = ()
        if next_stage is not None:
            assert next_stage.proc.stdin is not None
            next_fds = (next_stage.proc.stdin.fileno(),)
            cmd += ["--next-fd", str(next_fds[0])]
        self.proc: subprocess.Popen[bytes] = proc.spawn(
            cmd, env={**OMP_ENV, **os.environ, **(env or {})}, stderr=self._stderr, pass_fds=next_fds
        )
        assert self.proc.stdout is not None
        self._reader = _DeadlineReader(self.proc.stdout.fileno())

    def stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-4000:]

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerDiedError(
                self.name, f"cannot write to the worker: {exc}", self.stderr_tail()
            ) from exc

    def abandon(self, rid: int) -> None:
        """A reply to request `rid` may still come and answers nobody: it is dropped when it arrives."""
        self._abandoned.add(rid)

    def read_reply(self, op: str, timeout: float | None = None) -> frames.Frame:
        """The next complete message (fragments reassembled) that is not the reply to an abandoned request,
        within the deadline."""
        while True:
            reply = self.read_message(op, timeout)
            if not self.dropped(reply):
                return reply

    def dropped(self, reply: frames.Frame) -> bool:
        """`reply` answers an abandoned request: it is dropped."""
        rid = reply.header.get("id")
        if isinstance(rid, int) and rid in self._abandoned:
            self._abandoned.discard(rid)
            return True
        return False

    def read_message(self, op: str, timeout: float | None = None) -> frames.Frame:
        limit = timeout if timeout is not None else self.timeout
        self._reader.deadline = time.monotonic() + limit
        assembler = frames.Assembler()
        while True:
            try:
                frame = frames.read(self._reader, self.max_body)
                if frame is not None:
                    frame = assembler.add(frame)
                    if frame is None:
                        continue
            except TimeoutError as exc:
                raise WorkerDiedError(
                    self.name, f"no reply to '{op}' within {limit:.0f} s", self.stderr_tail()
                ) from exc
            except frames.FrameError as exc:
                raise WorkerDiedError(
                    self.name, f"invalid reply to '{op}': {exc}", self.stderr_tail()
                ) from exc
            if frame is None:
                code = self.proc.poll()
                raise WorkerDiedError(
                    self.name,
                    f"the worker closed its output during '{op}' (exit code {code})",
                    self.stderr_tail(),
                )
            return frame

    @property
    def fd(self) -> int:
        """The worker's output, for select()."""
        return self._reader.fd

    def buffered(self) -> bool:
        """Bytes of a reply were read from the worker's output and not yet taken."""
        return bool(self._reader.pending)

    def send(self, op: str, body: bytes = b"", **fields: Any) -> int:
        """Send a request; its id."""
        rid = next(self._ids)
        self.send_raw(frames.encode_message({"id": rid, "op": op, **fields}, body, self.max_body))
        return rid

    def request(
        self, op: str, body: bytes = b"", timeout: float | None = None, **fields: Any
    ) -> frames.Frame:
        rid = self.send(op, body, **fields)
        return self.checked(self.read_reply(op, timeout), op, rid)

    def checked(self, reply: frames.Frame, op: str, rid: int) -> frames.Frame:
        """The reply to request `rid`; WorkerDiedError when it answers another, WorkerRequestError when it
        is a refusal."""
        if reply.header.get("id") != rid:
            raise WorkerDiedError(
                self.name, f"reply id {reply.header.get('id')} does not match request id {rid}"
            )
        if not reply.header.get("ok"):
            err = reply.header.get("error") or {}
            raise WorkerRequestError(self.name, op, str(err.get("code")), str(err.get("message")))
        return reply

    def load(
        self,
        model: Path,
        layers: tuple[int, int] | None = (0, -1),
        *,
        mmap: bool = True,
        context: ContextParams | None = None,
        n_gpu_layers: int | None = None,
        layer_inp: Sequence[int] = (),
    ) -> dict[str, Any]:
        """Load the layer range `layers` of `model` (end -1: the last layer; None with `mmap` true: no model
        parameter is sent, so the worker loads with `llama_model_default_params()` as they are) and, with
        `context`, a context for sessions; the reply: what the model holds (ownership), with the context's
        `n_ctx`, `n_batch` and `max_sessions` when there is one (docs/protocol.md, `load`). `n_gpu_layers`:
        the layers of the range to offload to the GPU devices of the build (None: llama.cpp's default).
        `layer_inp`: layers inside the range whose input every decode extracts, for a decode request that asks
        for one of them instead of its output (`layer_inp`)."""
        rid = self.start_load(
            model, layers, mmap=mmap, context=context, n_gpu_layers=n_gpu_layers, layer_inp=layer_inp
        )
        return self.finish_load(rid)

    def start_load(
        self,
        model: Path,
        layers: tuple[int, int] | None = (0, -1),
        *,
        mmap: bool = True,
        context: ContextParams | None = None,
        n_gpu_layers: int | None = None,
        layer_inp: Sequence[int] = (),
    ) -> int:
        """Send the `load` request of `load` without waiting for its reply (`finish_load` reads it), so that
        several workers load at the same time; its id."""
        fields: dict[str, Any] = {} if layers is None and mmap else {"mmap": mmap}
        if n_gpu_layers is not None:
            fields["n_gpu_layers"] = n_gpu_layers
        if layers is not None:
            fields |= {"layer_begin": layers[0], "layer_end": layers[1]}
        if context is not None:
            fields |= {"context": True, **context.fields()}
        if layer_inp:
            fields["layer_inp"] = list(layer_inp)
        return self.send("load", model=str(model), **fields)

    def finish_load(self, rid: int) -> dict[str, Any]:
        """The reply to the `load` request `rid` (`start_load`)."""
        header: dict[str, Any] = self.checked(self.read_reply("load"), "load", rid).header
        return header

    def close(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(WorkerDiedError, WorkerRequestError):
                self.request("shutdown", timeout=timeout)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
