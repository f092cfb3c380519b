"""A chain of layer-worker processes, one per layer range, passing bundles from one to the next."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dgr.errors import ShardFailedError, WorkerDiedError, WorkerRequestError
from dgr.verify.wire.client import ContextParams, Worker


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
    seconds: list[float]  # per shard: request sent to reply read


@dataclass
class StepResult:
    argmax: list[int]
    logits: np.ndarray  # [n_outputs, n_vocab] float32
    evicted: list[list[str]]  # per shard
    seconds: list[float]  # per shard: request sent to reply read


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
    asked for; `n_gpu_layers` if given); its `split` is then the range the loaded model holds."""

    def __init__(
        self,
        worker_bin: Path,
        model: Path,
        split: list[tuple[int, int]] | None,
        *,
        threads: int = 2,
        max_sessions: int = 4,
        max_body: int = 64 << 20,
        timeout: float = 120.0,
        n_ctx: int = 1024,
        type_k: str = "f16",
        n_gpu_layers: int | Sequence[int] | None = None,
    ) -> None:
        context = ContextParams(n_ctx=n_ctx, threads=threads, max_sessions=max_sessions, type_k=type_k)
        self.workers: list[Worker] = []
        self.info: list[dict[str, Any]] = []
        try:
            if split is None:
                w = Worker(worker_bin, "whole (default parameters)", timeout=timeout, max_body=max_body)
                self.workers.append(w)
                assert n_gpu_layers is None or isinstance(n_gpu_layers, int)
                self.info.append(w.load(model, None, context=context, n_gpu_layers=n_gpu_layers))
                split = [(int(self.info[0]["layer_begin"]), int(self.info[0]["layer_end"]))]
            else:
                for i, (begin, end) in enumerate(split):
                    w = Worker(worker_bin, f"shard{i}[{begin},{end})", timeout=timeout, max_body=max_body)
                    self.workers.append(w)
                    ngl = (
                        n_gpu_layers
                        if n_gpu_layers is None or isinstance(n_gpu_layers, int)
                        else n_gpu_layers[i]
                    )
                    self.info.append(w.load(model, (begin, end), context=context, n_gpu_layers=ngl))
        except Exception:
            self.close()
            raise
        self.split: list[tuple[int, int]] = split

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

    def step(self, session: str, epoch: int, pos: int, tokens: list[int], logits: str = "last") -> StepResult:
        """Run `tokens` (at positions pos...) through every shard; WorkerRequestError on a refusal (a cache
        miss, a batch over n_batch)."""
        body = b""
        evicted: list[list[str]] = []
        seconds: list[float] = []
        rep = None
        for i in range(len(self.workers)):
            fields: dict[str, Any] = {
                "session": session,
                "epoch": epoch,
                "pos": pos,
                "n_tokens": len(tokens),
                "logits": logits,
            }
            if i == 0:
                fields["tokens"] = tokens
            start = time.perf_counter()
            rep = self._call(i, "decode", body, **fields)
            seconds.append(time.perf_counter() - start)
            evicted.append(list(rep.header.get("evicted", [])))
            body = rep.body
        assert rep is not None
        n_vocab = int(rep.header["n_vocab"])
        arr = (
            np.frombuffer(rep.body, dtype="<f4").reshape(-1, n_vocab)
            if rep.body
            else np.zeros((0, n_vocab), "<f4")
        )
        return StepResult(list(rep.header["argmax"]), arr, evicted, seconds)

    def step_batch(self, steps: list[BatchStep], logits: str = "argmax") -> BatchResult:
        """One step of each of several cached sessions, in one batch through every shard (`decode_batch`,
        docs/protocol.md); WorkerRequestError on a refusal (a session not cached, a wrong position)."""
        body = b""
        seconds: list[float] = []
        rep = None
        for i in range(len(self.workers)):
            fields = [
                {"session": s.session, "epoch": s.epoch, "pos": s.pos, "n_tokens": len(s.tokens)}
                | ({"tokens": s.tokens} if i == 0 else {})
                for s in steps
            ]
            start = time.perf_counter()
            rep = self._call(i, "decode_batch", body, steps=fields, logits=logits)
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
