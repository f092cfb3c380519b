"""The bench's comparisons with upstream: perplexity and llama-bench before and after the series
(`upstream_comparison`), the RPC backend beside layer ranges (`rpc`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

from dgr.contracts import convert
from dgr.contracts.convert import mapping
from dgr.contracts.fields import (
    number,
    strings,
    typed,
)
from dgr.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Perplexity(convert.Record):
    """What llama-perplexity printed: the final estimate, its error and the value after every chunk."""

    final: float
    error: float
    chunks: tuple[float, ...]

    @classmethod
    def from_json(cls, data: Any, where: str = "perplexity") -> Self:
        if not convert.mapping(data, where).get("chunks"):
            raise ConfigError(f"{where}: `chunks` must be a non-empty list of numbers")
        return convert.from_json(cls, data, where)


@dataclass(frozen=True, kw_only=True)
class BenchRow(convert.Record):
    test: str
    """llama-bench's name of the test: pp512, tg128."""
    baseline_tps: float
    patched_tps: float
    ratio: float


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """`upstream_comparison` (`dgr bench --rpc`): llama-perplexity and llama-bench, unpatched (baseline) and
    patched without a range, the same model and text."""

    model_file: str
    model_sha256: str
    threads: int
    text: str
    """The text file of upstream's tree that llama-perplexity read."""
    text_sha256: str
    perplexity_args: tuple[str, ...]
    baseline: Perplexity
    patched: Perplexity
    identical: bool
    """The final estimate and every chunk, as llama-perplexity printed them, are the same."""
    bench_args: tuple[str, ...]
    rounds: int
    bench: tuple[BenchRow, ...]
    target: float

    @property
    def min_ratio(self) -> float:
        return min(r.ratio for r in self.bench)

    @property
    def met(self) -> bool:
        return all(r.ratio >= self.target for r in self.bench)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": {"file": self.model_file, "sha256": self.model_sha256},
            "threads": self.threads,
            "perplexity": {
                "text": self.text,
                "text_sha256": self.text_sha256,
                "args": list(self.perplexity_args),
                "baseline": self.baseline.to_json(),
                "patched": self.patched.to_json(),
                "identical": self.identical,
            },
            "bench": {
                "args": list(self.bench_args),
                "rounds": self.rounds,
                "results": [r.to_json() for r in self.bench],
                "target": self.target,
                "met": self.met,
            },
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "upstream_comparison") -> Comparison:
        d = mapping(data, where)
        model = mapping(d.get("model"), f"{where}.model")
        ppl = mapping(d.get("perplexity"), f"{where}.perplexity")
        bench = mapping(d.get("bench"), f"{where}.bench")
        rows = typed(bench, "results", list, f"{where}.bench")
        if not rows:
            raise ConfigError(f"{where}.bench: `results` is empty")
        return cls(
            model_file=typed(model, "file", str, f"{where}.model"),
            model_sha256=typed(model, "sha256", str, f"{where}.model"),
            threads=typed(d, "threads", int, where),
            text=typed(ppl, "text", str, f"{where}.perplexity"),
            text_sha256=typed(ppl, "text_sha256", str, f"{where}.perplexity"),
            perplexity_args=strings(ppl, "args", f"{where}.perplexity"),
            baseline=Perplexity.from_json(ppl.get("baseline"), f"{where}.perplexity.baseline"),
            patched=Perplexity.from_json(ppl.get("patched"), f"{where}.perplexity.patched"),
            identical=typed(ppl, "identical", bool, f"{where}.perplexity"),
            bench_args=strings(bench, "args", f"{where}.bench"),
            rounds=typed(bench, "rounds", int, f"{where}.bench"),
            bench=tuple(BenchRow.from_json(r, f"{where}.bench.results[{i}]") for i, r in enumerate(rows)),
            target=number(bench, "target", f"{where}.bench"),
        )


@dataclass(frozen=True, kw_only=True)
class Process(convert.Record):
    role: str
    """"head", "server" (an RPC server) or "range" (a process holding one range of layers)."""
    what: str
    peak_rss: int


@dataclass(frozen=True, kw_only=True)
class RpcRow(convert.Record):
    engine: str
    """"whole" (one process), "rpc" (the whole model through RPC servers) or "ranges" (one process per
    range of layers)."""
    processes: int
    """RPC servers, or processes holding a range."""
    start: str
    """RPC: "first" (empty tensor cache of the servers) or "later" (the cache filled); ranges: "cold"."""
    wire_bytes_before_first_token: int
    wire_bytes_per_token: float
    ttft_s: float
    prefill_tps: float
    decode_tps: float
    same_output: bool
    procs: tuple[Process, ...]

    @property
    def head_rss(self) -> int:
        return next((p.peak_rss for p in self.procs if p.role == "head"), 0)

    @property
    def max_other_rss(self) -> int:
        return max((p.peak_rss for p in self.procs if p.role != "head"), default=0)


@dataclass(frozen=True, kw_only=True)
class Rpc:
    """`rpc` (`dgr bench --rpc`): the whole model through upstream's RPC backend (local `ggml-rpc-server`
    processes) beside a chain of processes that each load one range of layers."""

    model_file: str
    n_layer: int
    threads: int
    prompt_tokens: int
    decode_tokens: int
    wire_method: str
    head_args: tuple[str, ...]
    """The arguments of the RPC head, for the most servers (the model by its file name)."""
    server_args: tuple[str, ...]
    rows: tuple[RpcRow, ...]
    prompt: str | None = None
    reps: int | None = None
    reference_output: str | None = None
    """The unsplit model's greedy output, which every row is compared with (`same_output`)."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "model": {"file": self.model_file, "n_layer": self.n_layer},
            "threads": self.threads,
            "prompt_tokens": self.prompt_tokens,
            "decode_tokens": self.decode_tokens,
            "head_args": list(self.head_args),
            "server_args": list(self.server_args),
            "wire_method": self.wire_method,
            "rows": [r.to_json() for r in self.rows],
        }
        optional = {"prompt": self.prompt, "reps": self.reps, "reference_output": self.reference_output}
        return data | {k: v for k, v in optional.items() if v is not None}

    @classmethod
    def from_json(cls, data: Any, where: str = "rpc") -> Rpc:
        d = mapping(data, where)
        rows = typed(d, "rows", list, where)
        if not rows:
            raise ConfigError(f"{where}: `rows` is empty")
        model = mapping(d.get("model"), f"{where}.model")
        return cls(
            model_file=typed(model, "file", str, f"{where}.model"),
            n_layer=typed(model, "n_layer", int, f"{where}.model"),
            threads=typed(d, "threads", int, where),
            prompt_tokens=typed(d, "prompt_tokens", int, where),
            decode_tokens=typed(d, "decode_tokens", int, where),
            wire_method=typed(d, "wire_method", str, where),
            head_args=strings(d, "head_args", where),
            server_args=strings(d, "server_args", where),
            rows=tuple(RpcRow.from_json(r, f"{where}.rows[{i}]") for i, r in enumerate(rows)),
            prompt=typed(d, "prompt", str, where) if "prompt" in d else None,
            reps=typed(d, "reps", int, where) if "reps" in d else None,
            reference_output=typed(d, "reference_output", str, where) if "reference_output" in d else None,
        )
