"""A chain of layer-worker processes, one per layer range, passing bundles from one to the next."""

from __future__ import annotations

import contextlib
import itertools
import select
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dgr.errors import ShardFailedError, WorkerDiedError, WorkerRequestError
from dgr.verify.wire.client import ContextParams, Worker
from dgr.verify.wire.frames import Frame


def logits_of(reply: Frame) -> np.ndarray:
    """The logits a decode reply of the last range carries, [outputs, n_vocab] float32 (none with argmax)."""
    return np.frombuffer(reply.body, dtype="<f4").reshape(-1, int(reply.header["n_vocab"]))


@dataclass(frozen=True)
class BatchStep:
    """One step of a session in `Pipeline.step_batch`: its tokens at positions pos..."""

    session: str
    epoch: int
    pos: int
    tokens: list[int]


@dataclass
class BatchResult:
    argmax: list[int]  # per step: the argmax of its last token
    seconds: list[float]  # per shard: request sent to reply read (forwarded: one, the whole chain)


@dataclass
class StepResult:
    argmax: list[int]
    logits: np.ndarray  # [n_outputs, n_vocab] float32
    evicted: list[list[str]]  # per shard
    seconds: list[float]  # per shard: request sent to reply read (forwarded: one, the whole chain)


def parse_split(text: str, n_layer: int | None = None) -> list[tuple[int, int]]:
    """'0:10,10:20,20:30' -> [(0, 10), (10, 20), (20, 30)]; the ranges must tile [0, n_layer)."""
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        begin_s, sep, end_s = part.strip().partition(":")
        if not sep or not begin_s.strip().isdigit() or not end_s.strip().isdigit():
            raise ValueError(f"split part {part!r} is not BEGIN:END")
        ranges.append((int(begin_s), int(end_s)))
    expect = 0
    for begin, end in ranges:
        if begin != expect or end <= begin:
            raise ValueError(
                f"split {text!r} does not tile the layers: [{begin}, {end}) after layer {expect}"
            )
        expect = end
    if n_layer is not None and expect != n_layer:
        raise ValueError(f"split {text!r} ends at layer {expect}, the model has {n_layer} layers")
    return ranges


class Pipeline:
    """Workers for the ranges of `split`, loaded with contexts (each offloading `n_gpu_layers` of its range
    to the build's GPU devices, or the range's own of a sequence; None: llama.cpp's default); `step` runs
    tokens through all of them.
    `split` None: one worker that loads the model with llama.cpp's default model parameters (no range
    asked for; `n_gpu_layers` if given); its `split` is then the range the loaded model holds.
    `forward`: each worker sends the hidden state of a decode on to the next one itself, over the next one's
    input (`--next-fd`, the request field `forward` of docs/protocol.md), and only the last replies; without
    it the supervisor relays every hop.
    `model`: the GGUF file every range loads, or a function that gives the file of the range [begin, end)
    (the first file of the range's own directory of parts, checked there: dgr.verify.models.parts
    .ModelParts.model_for), called for every range before any worker starts."""

    def __init__(
        self,
        worker_bin: Path,
        model: Path | Callable[[int, int], Path],
        split: list[tuple[int, int]] | None,
        *,
        threads: int = 2,
        max_sessions: int = 4,
        max_body: int = 64 << 20,
        timeout: float = 120.0,
        n_ctx: int = 1024,
        type_k: str = "f16",
        n_gpu_layers: int | Sequence[int] | None = None,
        forward: bool = False,
    ) -> None:
        context = ContextParams(n_ctx=n_ctx, threads=threads, max_sessions=max_sessions, type_k=type_k)
        self.workers: list[Worker] = []
        self.info: list[dict[str, Any]] = []
        if callable(model) and split is None:
            raise ValueError("a model given per range needs the ranges: no split, no range to ask it for")
        # each range's file, checked before any worker starts
        models = [model(begin, end) if callable(model) else model for begin, end in split or []]
        try:
            if split is None:
                assert not callable(model)
                w = Worker(worker_bin, "whole (default parameters)", timeout=timeout, max_body=max_body)
                self.workers.append(w)
                assert n_gpu_layers is None or isinstance(n_gpu_layers, int)
                self.info.append(w.load(model, None, context=context, n_gpu_layers=n_gpu_layers))
                split = [(int(self.info[0]["layer_begin"]), int(self.info[0]["layer_end"]))]
            else:
                # the last first: a worker that forwards inherits the input of the next one
                ids = itertools.count(1)
                for i, (begin, end) in reversed(list(enumerate(split))):
                    following = self.workers[0] if forward and self.workers else None
                    name = f"shard{i}[{begin},{end})"
                    w = Worker(
                        worker_bin, name, timeout=timeout, max_body=max_body, next_stage=following, ids=ids
                    )
                    self.workers.insert(0, w)
                # every worker loads at the same time (a load is mostly one thread: on N cores N load at once)
                loading = []
                for i, w in enumerate(self.workers):
                    ngl = (
                        n_gpu_layers
                        if n_gpu_layers is None or isinstance(n_gpu_layers, int)
                        else n_gpu_layers[i]
                    )
                    loading.append(w.start_load(models[i], split[i], context=context, n_gpu_layers=ngl))
                self.info = [w.finish_load(rid) for w, rid in zip(self.workers, loading, strict=True)]
        except Exception:
            self.close()
            raise
        self.split: list[tuple[int, int]] = split
        self.forward = forward and len(self.workers) > 1

    @property
    def head(self) -> Worker:
        return self.workers[0]

    @property
    def n_layer(self) -> int:
        """The model's layer count, as the workers loaded it."""
        return int(self.info[0]["n_layer"])

    @property
    def n_batch(self) -> int:
        """The most tokens one `decode` request may carry (every worker's context has the same)."""
        return min(int(i["n_batch"]) for i in self.info)

    @property
    def capacity(self) -> int:
        """The positions one session holds: n_ctx / max_sessions of the workers' contexts."""
        return min(int(i["n_ctx"]) // int(i["max_sessions"]) for i in self.info)

    def tokenize(self, text: str, chat: bool = False) -> list[int]:
        return list(self.head.request("tokenize", text=text, chat=chat).header["tokens"])

    def detokenize(self, tokens: list[int]) -> str:
        return str(self.head.request("detokenize", tokens=tokens).header["text"])

    def _call(self, index: int, op: str, body: bytes = b"", **fields: Any) -> Any:
        try:
            return self.workers[index].request(op, body, **fields)
        except WorkerDiedError as exc:
            self._release_others(index, fields.get("session"))
            raise ShardFailedError(index, self.split[index], exc) from exc

    def _release_others(self, failed: int, session: str | None) -> None:
        if session is None:
            return
        for i, w in enumerate(self.workers):
            if i != failed and w.proc.poll() is None:
                with contextlib.suppress(WorkerDiedError, WorkerRequestError):
                    w.request("release", session=session, timeout=10.0)

    def _forwarded(
        self, op: str, release: str | None, **fields: Any
    ) -> tuple[Any, list[dict[str, Any]], float]:
        """`op` sent to the first worker with `forward`: each worker sends its output on to the next one, the
        last replies. Its reply, the trail (the reply fields of the others, in order) and the seconds;
        `release`: the session the others release when a worker dies."""
        start = time.perf_counter()
        try:
            rid = self.workers[0].send(op, forward=len(self.workers) - 1, **fields)
        except WorkerDiedError as exc:
            self._fail(0, rid=None, session=release)
            raise ShardFailedError(0, self.split[0], exc) from exc
        index, reply = self._first_reply(op, rid, release)
        try:
            rep = self.workers[index].checked(reply, op, rid)
        except WorkerRequestError as exc:
            if exc.code == "forward_failed" and index + 1 < len(self.workers):
                # the next worker is gone: it is the one that failed
                nxt = self.workers[index + 1]
                self._fail(index + 1, rid=None, session=release)
                cause = WorkerDiedError(nxt.name, exc.message, nxt.stderr_tail())
                raise ShardFailedError(index + 1, self.split[index + 1], cause) from exc
            raise
        if index != len(self.workers) - 1:
            raise WorkerDiedError(
                self.workers[index].name, f"replied to a forwarded '{op}' instead of forwarding it"
            )
        trail = rep.header.get("trail", [])
        if not isinstance(trail, list) or len(trail) != len(self.workers) - 1:
            raise WorkerDiedError(
                self.workers[index].name,
                f"the trail of a forwarded '{op}' is not one entry per earlier worker",
            )
        return rep, trail, time.perf_counter() - start

    def _fail(self, failed: int, rid: int | None, session: str | None) -> None:
        """Worker `failed` is gone: a reply to the forwarded request `rid` that another worker may still write
        is dropped when it comes, and the others release `session`."""
        if rid is not None:
            for w in self.workers:
                w.abandon(rid)
        self._release_others(failed, session)

    def _first_reply(self, op: str, rid: int, session: str | None) -> tuple[int, Any]:
        """The first reply any worker writes to the forwarded request `rid` (the last worker's, or a refusal
        of one on the way), and which worker wrote it."""
        limit = max(w.timeout for w in self.workers)
        deadline = time.monotonic() + limit
        while True:
            ready = [i for i, w in enumerate(self.workers) if w.buffered()]
            if not ready:
                fds = [w.fd for w in self.workers]
                readable = select.select(fds, [], [], max(deadline - time.monotonic(), 0.0))[0]
                if not readable:
                    last = len(self.workers) - 1
                    self._fail(last, rid, session)
                    cause = WorkerDiedError(
                        self.workers[last].name, f"no reply to '{op}' within {limit:.0f} s"
                    )
                    raise ShardFailedError(last, self.split[last], cause)
                ready = [fds.index(readable[0])]
            index = ready[0]
            try:
                reply = self.workers[index].read_message(op)
            except WorkerDiedError as exc:
                self._fail(index, rid, session)
                raise ShardFailedError(index, self.split[index], exc) from exc
            if not self.workers[index].dropped(reply):
                return index, reply

    def step(self, session: str, epoch: int, pos: int, tokens: list[int], logits: str = "last") -> StepResult:
        """Run `tokens` (at positions pos...) through every shard; WorkerRequestError on a refusal (a cache
        miss, a batch over n_batch)."""
        # what every range is asked; the first range also takes the tokens
        fields = {"session": session, "epoch": epoch, "pos": pos, "n_tokens": len(tokens), "logits": logits}
        if self.forward:
            rep, trail, elapsed = self._forwarded("decode", session, **fields, tokens=tokens)
            shards = [list(t.get("evicted", [])) for t in trail] + [list(rep.header.get("evicted", []))]
            return self._result(rep, shards, [elapsed])
        body = b""
        evicted: list[list[str]] = []
        seconds: list[float] = []
        rep = None
        for i in range(len(self.workers)):
            start = time.perf_counter()
            rep = self._call(i, "decode", body, **fields, **({"tokens": tokens} if i == 0 else {}))
            seconds.append(time.perf_counter() - start)
            evicted.append(list(rep.header.get("evicted", [])))
            body = rep.body
        assert rep is not None
        return self._result(rep, evicted, seconds)

    @staticmethod
    def _result(rep: Frame, evicted: list[list[str]], seconds: list[float]) -> StepResult:
        return StepResult(list(rep.header["argmax"]), logits_of(rep), evicted, seconds)

    def step_batch(self, steps: list[BatchStep], logits: str = "argmax") -> BatchResult:
        """One step of each of several cached sessions, in one batch through every shard (`decode_batch`,
        docs/protocol.md); WorkerRequestError on a refusal (a session not cached, a wrong position)."""
        # what every range is asked of each step; the first range also takes the tokens
        fields = [
            {"session": s.session, "epoch": s.epoch, "pos": s.pos, "n_tokens": len(s.tokens)} for s in steps
        ]
        first = [f | {"tokens": s.tokens} for f, s in zip(fields, steps, strict=True)]
        if self.forward:
            rep, _, elapsed = self._forwarded("decode_batch", None, steps=first, logits=logits)
            return BatchResult([int(a) for a in rep.header["argmax"]], [elapsed])
        body = b""
        seconds: list[float] = []
        rep = None
        for i in range(len(self.workers)):
            start = time.perf_counter()
            rep = self._call(i, "decode_batch", body, steps=first if i == 0 else fields, logits=logits)
            seconds.append(time.perf_counter() - start)
            body = rep.body
        assert rep is not None
        return BatchResult([int(a) for a in rep.header["argmax"]], seconds)

    def prefill(self, session: str, epoch: int, tokens: list[int], logits: str = "last") -> StepResult:
        """Run a prompt of any length from position 0, in chunks of n_batch tokens: each chunk goes through
        every range before the next one, positions continue, and only the last chunk asks for `logits`."""
        if not tokens:
            raise ValueError("an empty prompt has nothing to prefill")
        size = self.n_batch
        chunks = [tokens[i : i + size] for i in range(0, len(tokens), size)]
        for i, chunk in enumerate(chunks[:-1]):
            self.step(session, epoch, i * size, chunk, logits="none")
        return self.step(session, epoch, (len(chunks) - 1) * size, chunks[-1], logits=logits)

    def generate(
        self, session: str, epoch: int, prompt: list[int], n: int, stop: set[int] | None = None
    ) -> list[int]:
        """Greedy: prefill the prompt, then feed back the argmax token by token; returns the new tokens."""
        res = self.prefill(session, epoch, prompt)
        out = [res.argmax[-1]]
        pos = len(prompt)
        while len(out) < n and not (stop and out[-1] in stop):
            res = self.step(session, epoch, pos, [out[-1]], logits="argmax")
            pos += 1
            out.append(res.argmax[-1])
        return out

    def broadcast(self, op: str, **fields: Any) -> list[Any]:
        return [self._call(i, op, **fields).header for i in range(len(self.workers))]

    def close(self) -> None:
        for w in self.workers:
            w.close()
        self.workers = []

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
