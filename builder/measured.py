"""The measurements `dgr export-upstream` renders, read back from `bench.json` (written by `dgr bench --rpc`):

- `upstream_comparison`: llama-perplexity and llama-bench of the unpatched and the patched upstream (no range
  set), the same model and text;
- `rpc`: the whole model through upstream's RPC backend (local `ggml-rpc-server` processes) beside a chain of
  processes that each load one range of layers.

Only a result measured on the inputs being exported is accepted (its `inputs_digest`); anything else is a
VerifyError (exit 9), as a missing verify report is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dgr.digest import sha256_bytes
from dgr.errors import ConfigError, VerifyError

BENCH_HINT = "run `dgr bench --rpc` for the current inputs, then `dgr export-upstream` again"


def _map(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object, found {type(value).__name__}")
    return value


def _get(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ConfigError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, found {value!r}")
    return value


def _float(data: Mapping[str, Any], key: str, where: str) -> float:
    return float(_get(data, key, (int, float), where))


def _strings(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = _get(data, key, list, where)
    if not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}.{key}: expected a list of strings")
    return tuple(value)


@dataclass(frozen=True, kw_only=True)
class Perplexity:
    final: float
    error: float
    chunks: tuple[float, ...]

    @classmethod
    def from_json(cls, data: Any, where: str) -> Perplexity:
        d = _map(data, where)
        chunks = _get(d, "chunks", list, where)
        if not chunks or not all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in chunks):
            raise ConfigError(f"{where}.chunks: expected a non-empty list of numbers")
        return cls(final=_float(d, "final", where), error=_float(d, "error", where), chunks=tuple(chunks))


@dataclass(frozen=True, kw_only=True)
class BenchRow:
    test: str
    """llama-bench's name of the test: pp64, tg16."""
    baseline_tps: float
    patched_tps: float
    ratio: float


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """llama-perplexity and llama-bench, unpatched (baseline) and patched without a range."""

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

    @classmethod
    def from_json(cls, data: Any, where: str = "upstream_comparison") -> Comparison:
        d = _map(data, where)
        model = _map(d.get("model"), f"{where}.model")
        ppl = _map(d.get("perplexity"), f"{where}.perplexity")
        bench = _map(d.get("bench"), f"{where}.bench")
        rows = _get(bench, "results", list, f"{where}.bench")
        if not rows:
            raise ConfigError(f"{where}.bench.results: empty")
        return cls(
            model_file=_get(model, "file", str, f"{where}.model"),
            model_sha256=_get(model, "sha256", str, f"{where}.model"),
            threads=_get(d, "threads", int, where),
            text=_get(ppl, "text", str, f"{where}.perplexity"),
            text_sha256=_get(ppl, "text_sha256", str, f"{where}.perplexity"),
            perplexity_args=_strings(ppl, "args", f"{where}.perplexity"),
            baseline=Perplexity.from_json(ppl.get("baseline"), f"{where}.perplexity.baseline"),
            patched=Perplexity.from_json(ppl.get("patched"), f"{where}.perplexity.patched"),
            identical=_get(ppl, "identical", bool, f"{where}.perplexity"),
            bench_args=_strings(bench, "args", f"{where}.bench"),
            rounds=_get(bench, "rounds", int, f"{where}.bench"),
            bench=tuple(
                BenchRow(
                    test=_get(_map(r, w), "test", str, w),
                    baseline_tps=_float(r, "baseline_tps", w),
                    patched_tps=_float(r, "patched_tps", w),
                    ratio=_float(r, "ratio", w),
                )
                for i, r in enumerate(rows)
                for w in (f"{where}.bench.results[{i}]",)
            ),
            target=_float(bench, "target", f"{where}.bench"),
        )


@dataclass(frozen=True, kw_only=True)
class Process:
    role: str
    """"head", "server" (an RPC server) or "range" (a process holding one range of layers)."""
    what: str
    peak_rss: int


@dataclass(frozen=True, kw_only=True)
class RpcRow:
    engine: str
    """"rpc" (the whole model through RPC servers) or "ranges" (one process per range of layers)."""
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

    @classmethod
    def from_json(cls, data: Any, where: str = "rpc") -> Rpc:
        d = _map(data, where)
        rows = _get(d, "rows", list, where)
        if not rows:
            raise ConfigError(f"{where}.rows: empty")
        parsed = []
        for i, raw in enumerate(rows):
            w = f"{where}.rows[{i}]"
            r = _map(raw, w)
            procs = _get(r, "procs", list, w)
            parsed.append(
                RpcRow(
                    engine=_get(r, "engine", str, w),
                    processes=_get(r, "processes", int, w),
                    start=_get(r, "start", str, w),
                    wire_bytes_before_first_token=_get(r, "wire_bytes_before_first_token", int, w),
                    wire_bytes_per_token=_float(r, "wire_bytes_per_token", w),
                    ttft_s=_float(r, "ttft_s", w),
                    prefill_tps=_float(r, "prefill_tps", w),
                    decode_tps=_float(r, "decode_tps", w),
                    same_output=_get(r, "same_output", bool, w),
                    procs=tuple(
                        Process(
                            role=_get(_map(p, pw), "role", str, pw),
                            what=_get(p, "what", str, pw),
                            peak_rss=_get(p, "peak_rss", int, pw),
                        )
                        for j, p in enumerate(procs)
                        for pw in (f"{w}.procs[{j}]",)
                    ),
                )
            )
        model = _map(d.get("model"), f"{where}.model")
        return cls(
            model_file=_get(model, "file", str, f"{where}.model"),
            n_layer=_get(model, "n_layer", int, f"{where}.model"),
            threads=_get(d, "threads", int, where),
            prompt_tokens=_get(d, "prompt_tokens", int, where),
            decode_tokens=_get(d, "decode_tokens", int, where),
            wire_method=_get(d, "wire_method", str, where),
            head_args=_strings(d, "head_args", where),
            server_args=_strings(d, "server_args", where),
            rows=tuple(parsed),
        )


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What `dgr bench --rpc` measured for the inputs being exported."""

    path: Path
    sha256: str
    date: str
    cpu: str
    cores: int | None
    quick: bool
    comparison: Comparison
    rpc: Rpc


def load(path: Path, digest: str) -> Measured:
    """The bench result at `path`, if it measured the inputs `digest` with `--rpc`; VerifyError otherwise."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise VerifyError(
            "there is no bench result with the comparisons upstream asks for (perplexity, llama-bench, RPC)",
            expected=str(path),
            actual="missing",
            hint=BENCH_HINT,
        ) from None
    except OSError as exc:
        raise VerifyError(f"{path}: unreadable ({exc})", hint=BENCH_HINT) from exc
    try:
        data = _map(json.loads(raw), str(path))
        measured_digest = _get(data, "inputs_digest", str, str(path))
        if measured_digest != digest:
            raise VerifyError(
                "the bench result measured other inputs than the ones being exported",
                expected=f"inputs {digest}",
                actual=f"inputs {measured_digest} ({path})",
                hint=BENCH_HINT,
            )
        missing = [k for k in ("upstream_comparison", "rpc") if k not in data]
        if missing:
            raise VerifyError(
                f"{path} has no {' and no '.join(missing)}: it was measured without --rpc", hint=BENCH_HINT
            )
        machine = _map(data.get("machine"), f"{path}.machine")
        cores = machine.get("cores")
        return Measured(
            path=path,
            sha256=sha256_bytes(raw),
            date=_get(machine, "date", str, f"{path}.machine"),
            cpu=_get(machine, "cpu", str, f"{path}.machine"),
            cores=cores if isinstance(cores, int) else None,
            quick=bool(data.get("quick", False)),
            comparison=Comparison.from_json(data["upstream_comparison"]),
            rpc=Rpc.from_json(data["rpc"]),
        )
    except ValueError as exc:
        raise VerifyError(f"{path} is not valid JSON ({exc})", hint=BENCH_HINT) from exc
    except ConfigError as exc:
        raise VerifyError(f"{path} is not a bench result with --rpc: {exc.what}", hint=BENCH_HINT) from exc
