"""The bench result (`bench.json`): split cost, memory, codec, models, build timing, fuzzing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dgr.contracts.convert import mapping
from dgr.contracts.fields import (
    Figures,
    figures_of,
    number,
    optional_number,
    typed,
)
from dgr.contracts.upstreambench import Comparison, Rpc
from dgr.errors import ConfigError

BENCH_FORMAT = 1
TARGETS: Mapping[str, float] = {
    "in_process_prefill": 0.97,
    "in_process_decode": 0.97,
    "workers_decode": 0.90,
    "codec": 0.5,
}
"""The ratio each measurement should reach (split / whole; the codec: to memcpy)."""


@dataclass(frozen=True, kw_only=True)
class Machine:
    date: str
    cpu: str
    cores: int | None
    platform: str = ""
    python: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "date": self.date,
            "cpu": self.cpu,
            "cores": self.cores,
            "platform": self.platform,
            "python": self.python,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> Machine:
        d = mapping(data, where)
        cores = d.get("cores")
        return cls(
            date=typed(d, "date", str, where),
            cpu=typed(d, "cpu", str, where),
            cores=cores if isinstance(cores, int) else None,
            platform=str(d.get("platform", "")),
            python=str(d.get("python", "")),
        )


@dataclass(frozen=True, kw_only=True)
class Speed:
    """Tokens per second of the whole model and of the split, measured interleaved; ratio = split / whole."""

    tokens: int
    whole_tps: float
    split_tps: float
    ratio: float
    same_tokens: bool | None = None
    """Decode only: the split generated the same tokens as the whole model."""
    whole_step_ms: float | None = None
    """Worker decode only: milliseconds per token of the whole model's request."""
    shard_step_ms: tuple[float, ...] = ()
    """Worker decode only: milliseconds per token of each worker's request, in chain order."""
    round_trip_ms: float | None = None
    """Worker decode only: the median of a request that does no work (transport and supervisor)."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "tokens": self.tokens,
            "whole_tps": self.whole_tps,
            "split_tps": self.split_tps,
            "ratio": self.ratio,
        }
        if self.same_tokens is not None:
            data["same_tokens"] = self.same_tokens
        if self.whole_step_ms is not None:
            data["whole_step_ms"] = self.whole_step_ms
            data["shard_step_ms"] = list(self.shard_step_ms)
        if self.round_trip_ms is not None:
            data["round_trip_ms"] = self.round_trip_ms
        return data

    @classmethod
    def from_json(cls, data: Any, where: str) -> Speed:
        d = mapping(data, where)
        same = d.get("same_tokens")
        steps = d.get("shard_step_ms", [])
        if not isinstance(steps, list) or not all(isinstance(s, (int, float)) for s in steps):
            raise ConfigError(f"{where}: `shard_step_ms` must be a list of numbers")
        return cls(
            tokens=typed(d, "tokens", int, where),
            whole_tps=number(d, "whole_tps", where),
            split_tps=number(d, "split_tps", where),
            ratio=number(d, "ratio", where),
            same_tokens=same if isinstance(same, bool) else None,
            whole_step_ms=optional_number(d, "whole_step_ms", where),
            shard_step_ms=tuple(float(s) for s in steps),
            round_trip_ms=optional_number(d, "round_trip_ms", where),
        )


@dataclass(frozen=True, kw_only=True)
class SplitCost:
    """One split into `shards` ranges: prefill speeds per prompt length and the decode speed."""

    shards: int
    prefill: tuple[Speed, ...]
    decode: Speed
    split: str | None = None
    """In-process rows (layer-bench): the ranges, the threads and the repetitions it ran."""
    threads: int | None = None
    reps: int | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "prefill": [p.to_json() for p in self.prefill],
            "decode": self.decode.to_json(),
        }
        for key in ("split", "threads", "reps"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        data["shards"] = self.shards
        return data

    @classmethod
    def from_json(cls, data: Any, where: str) -> SplitCost:
        d = mapping(data, where)
        prefill = typed(d, "prefill", list, where)
        split, threads, reps = d.get("split"), d.get("threads"), d.get("reps")
        return cls(
            shards=typed(d, "shards", int, where),
            prefill=tuple(Speed.from_json(p, f"{where}.prefill[{i}]") for i, p in enumerate(prefill)),
            decode=Speed.from_json(d.get("decode"), f"{where}.decode"),
            split=split if isinstance(split, str) else None,
            threads=threads if isinstance(threads, int) else None,
            reps=reps if isinstance(reps, int) else None,
        )


@dataclass(frozen=True, kw_only=True)
class MemoryRow:
    """One layer range in a fresh process (mmap off): its bytes and their fractions of the whole model's."""

    layers: tuple[int, int]
    owned_layers: int
    owned_fraction: float
    owned_tensor_bytes: int
    model_bytes: int
    model_fraction: float
    kv_bytes: int
    peak_rss: int
    kv_fraction: float
    peak_rss_fraction: float

    def to_json(self) -> dict[str, Any]:
        return {
            "layers": list(self.layers),
            "owned_layers": self.owned_layers,
            "owned_fraction": self.owned_fraction,
            "owned_tensor_bytes": self.owned_tensor_bytes,
            "model_bytes": self.model_bytes,
            "model_fraction": self.model_fraction,
            "kv_bytes": self.kv_bytes,
            "peak_rss": self.peak_rss,
            "kv_fraction": self.kv_fraction,
            "peak_rss_fraction": self.peak_rss_fraction,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> MemoryRow:
        d = mapping(data, where)
        layers = typed(d, "layers", list, where)
        if len(layers) != 2 or not all(isinstance(n, int) for n in layers):
            raise ConfigError(f"{where}: `layers` must be [begin, end]")
        return cls(
            layers=(layers[0], layers[1]),
            owned_layers=typed(d, "owned_layers", int, where),
            owned_fraction=number(d, "owned_fraction", where),
            owned_tensor_bytes=typed(d, "owned_tensor_bytes", int, where),
            model_bytes=typed(d, "model_bytes", int, where),
            model_fraction=number(d, "model_fraction", where),
            kv_bytes=typed(d, "kv_bytes", int, where),
            peak_rss=typed(d, "peak_rss", int, where),
            kv_fraction=number(d, "kv_fraction", where),
            peak_rss_fraction=number(d, "peak_rss_fraction", where),
        )


@dataclass(frozen=True, kw_only=True)
class CodecSpeed:
    """Encode + decode of a residual bundle against memcpy of the same bytes."""

    bytes: int
    reps: int
    codec_gbps: float
    memcpy_gbps: float
    ratio_to_memcpy: float
    zero_copy_decode: bool
    encode_gbps: float | None = None
    decode_gbps: float | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"bytes": self.bytes, "reps": self.reps}
        if self.encode_gbps is not None and self.decode_gbps is not None:
            data |= {"encode_gbps": self.encode_gbps, "decode_gbps": self.decode_gbps}
        return data | {
            "codec_gbps": self.codec_gbps,
            "memcpy_gbps": self.memcpy_gbps,
            "ratio_to_memcpy": self.ratio_to_memcpy,
            "zero_copy_decode": self.zero_copy_decode,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> CodecSpeed:
        d = mapping(data, where)
        return cls(
            bytes=typed(d, "bytes", int, where),
            reps=typed(d, "reps", int, where),
            codec_gbps=number(d, "codec_gbps", where),
            memcpy_gbps=number(d, "memcpy_gbps", where),
            ratio_to_memcpy=number(d, "ratio_to_memcpy", where),
            zero_copy_decode=typed(d, "zero_copy_decode", bool, where),
            encode_gbps=optional_number(d, "encode_gbps", where),
            decode_gbps=optional_number(d, "decode_gbps", where),
        )


@dataclass(frozen=True, kw_only=True)
class BenchModel:
    file: str
    n_layer: int
    bytes: int
    name: str = ""
    """Its name in locks/model.toml (empty: not a locked model)."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"file": self.file, "n_layer": self.n_layer, "bytes": self.bytes}
        return data | ({"name": self.name} if self.name else {})

    @classmethod
    def from_json(cls, data: Any, where: str) -> BenchModel:
        d = mapping(data, where)
        name = d.get("name", "")
        return cls(
            file=typed(d, "file", str, where),
            n_layer=typed(d, "n_layer", int, where),
            bytes=typed(d, "bytes", int, where),
            name=name if isinstance(name, str) else "",
        )


@dataclass(frozen=True, kw_only=True)
class ModelBench:
    """The split cost and the memory table of one more locked model (`models.<name>` of bench.json)."""

    name: str
    model: BenchModel
    hop_bytes_per_token: int
    in_process: tuple[SplitCost, ...]
    workers: tuple[SplitCost, ...]
    memory: tuple[MemoryRow, ...]
    chart: str | None = None
    upstream_comparison: Comparison | None = None
    """`--rpc`: perplexity and llama-bench of this model, patched without a range vs upstream."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "model": self.model.to_json(),
            "hop_bytes_per_token": self.hop_bytes_per_token,
            "in_process": [r.to_json() for r in self.in_process],
            "workers": [r.to_json() for r in self.workers],
            "memory": [r.to_json() for r in self.memory],
            "chart": self.chart,
        }
        if self.upstream_comparison is not None:
            data["upstream_comparison"] = self.upstream_comparison.to_json()
        return data

    @classmethod
    def from_json(cls, name: str, data: Any, where: str) -> ModelBench:
        d = mapping(data, where)
        chart = d.get("chart")
        return cls(
            name=name,
            model=BenchModel.from_json(d.get("model"), f"{where}.model"),
            hop_bytes_per_token=typed(d, "hop_bytes_per_token", int, where),
            in_process=tuple(
                SplitCost.from_json(r, f"{where}.in_process[{i}]")
                for i, r in enumerate(typed(d, "in_process", list, where))
            ),
            workers=tuple(
                SplitCost.from_json(r, f"{where}.workers[{i}]")
                for i, r in enumerate(typed(d, "workers", list, where))
            ),
            memory=tuple(
                MemoryRow.from_json(r, f"{where}.memory[{i}]")
                for i, r in enumerate(typed(d, "memory", list, where))
            ),
            chart=chart if isinstance(chart, str) else None,
            upstream_comparison=(
                Comparison.from_json(d["upstream_comparison"], f"{where}.upstream_comparison")
                if "upstream_comparison" in d
                else None
            ),
        )


@dataclass(frozen=True, kw_only=True)
class BenchResult:
    """`bench.json` of `dgr bench` (keys documented in README.md); the summary is derived, never stored."""

    machine: Machine
    quick: bool
    inputs_digest: str
    model: BenchModel
    hop_bytes_per_token: int
    in_process: tuple[SplitCost, ...]
    workers: tuple[SplitCost, ...]
    memory: tuple[MemoryRow, ...]
    codec: Mapping[str, CodecSpeed]
    """"cpp" (the worker's codec) and "python"."""
    build: Figures
    fuzz: Figures | None = None
    chart: str | None = None
    models: tuple[ModelBench, ...] = ()
    """The other locked models (the keys above are the default model's): `models.<name>` in bench.json."""
    upstream_comparison: Comparison | None = None
    rpc: Rpc | None = None
    """`--rpc`: the comparisons with upstream (both or neither)."""
    format: int = BENCH_FORMAT

    def summary(self) -> dict[str, Any]:
        """The worst ratio of each kind, the targets, and whether each is met."""
        s: dict[str, Any] = {}
        if self.in_process:
            s["in_process_prefill_min_ratio"] = min(p.ratio for r in self.in_process for p in r.prefill)
            s["in_process_decode_min_ratio"] = min(r.decode.ratio for r in self.in_process)
        if self.workers:
            s["workers_prefill_min_ratio"] = min(p.ratio for r in self.workers for p in r.prefill)
            s["workers_decode_min_ratio"] = min(r.decode.ratio for r in self.workers)
        if "cpp" in self.codec:
            s["codec_ratio_to_memcpy"] = self.codec["cpp"].ratio_to_memcpy
        s["targets"] = dict(TARGETS)
        s["met"] = {
            "in_process_prefill": s.get("in_process_prefill_min_ratio", 0) >= TARGETS["in_process_prefill"],
            "in_process_decode": s.get("in_process_decode_min_ratio", 0) >= TARGETS["in_process_decode"],
            "workers_decode": s.get("workers_decode_min_ratio", 0) >= TARGETS["workers_decode"],
            "codec": s.get("codec_ratio_to_memcpy", 0) >= TARGETS["codec"],
        }
        return s

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": self.format,
            "machine": self.machine.to_json(),
            "quick": self.quick,
            "inputs_digest": self.inputs_digest,
            "model": self.model.to_json(),
            "hop_bytes_per_token": self.hop_bytes_per_token,
            "in_process": [r.to_json() for r in self.in_process],
            "workers": [r.to_json() for r in self.workers],
            "memory": [r.to_json() for r in self.memory],
            "codec": {k: v.to_json() for k, v in self.codec.items()},
            "build": dict(self.build),
        }
        if self.fuzz is not None:
            data["fuzz"] = dict(self.fuzz)
        if self.models:
            data["models"] = {m.name: m.to_json() for m in self.models}
        data |= {"summary": self.summary(), "chart": self.chart}
        if self.upstream_comparison is not None:
            data["upstream_comparison"] = self.upstream_comparison.to_json()
        if self.rpc is not None:
            data["rpc"] = self.rpc.to_json()
        return data

    @classmethod
    def from_json(cls, data: Any, where: str = "bench result") -> BenchResult:
        d = mapping(data, where)
        fmt = typed(d, "format", int, where)
        if fmt != BENCH_FORMAT:
            raise ConfigError(f"{where}: format {fmt} is not {BENCH_FORMAT}; run `dgr bench` again")

        def rows(key: str) -> list[Any]:
            value: list[Any] = typed(d, key, list, where)
            return value

        chart = d.get("chart")
        return cls(
            machine=Machine.from_json(d.get("machine"), f"{where}.machine"),
            quick=typed(d, "quick", bool, where),
            inputs_digest=typed(d, "inputs_digest", str, where),
            model=BenchModel.from_json(d.get("model"), f"{where}.model"),
            hop_bytes_per_token=typed(d, "hop_bytes_per_token", int, where),
            in_process=tuple(
                SplitCost.from_json(r, f"{where}.in_process[{i}]") for i, r in enumerate(rows("in_process"))
            ),
            workers=tuple(
                SplitCost.from_json(r, f"{where}.workers[{i}]") for i, r in enumerate(rows("workers"))
            ),
            memory=tuple(
                MemoryRow.from_json(r, f"{where}.memory[{i}]") for i, r in enumerate(rows("memory"))
            ),
            codec={
                k: CodecSpeed.from_json(v, f"{where}.codec.{k}")
                for k, v in mapping(d.get("codec"), f"{where}.codec").items()
            },
            build=figures_of(d.get("build", {}), f"{where}.build"),
            fuzz=figures_of(d["fuzz"], f"{where}.fuzz") if "fuzz" in d else None,
            chart=chart if isinstance(chart, str) else None,
            models=tuple(
                ModelBench.from_json(name, m, f"{where}.models.{name}")
                for name, m in mapping(d.get("models", {}), f"{where}.models").items()
            ),
            upstream_comparison=(
                Comparison.from_json(d["upstream_comparison"], f"{where}.upstream_comparison")
                if "upstream_comparison" in d
                else None
            ),
            rpc=Rpc.from_json(d["rpc"], f"{where}.rpc") if "rpc" in d else None,
            format=fmt,
        )
