"""The bench result (`bench.json`): split cost, memory, codec, models, build timing, fuzzing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from dgr.contracts import convert
from dgr.contracts.convert import mapping
from dgr.contracts.fields import (
    Figures,
    figures_of,
    typed,
)
from dgr.contracts.harness import Harness
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
class Machine(convert.Record):
    date: str
    cpu: str
    cores: int | None
    platform: str = ""
    python: str = ""


@dataclass(frozen=True, kw_only=True)
class Speed(convert.Record):
    """Tokens per second of the whole model and of the split, measured interleaved; ratio = split / whole."""

    tokens: int
    whole_tps: float
    split_tps: float
    ratio: float
    same_tokens: bool | None = field(default=None, metadata=convert.OMIT_NONE)
    """Decode only: the split generated the same tokens as the whole model."""
    whole_step_ms: float | None = field(default=None, metadata=convert.OMIT_NONE)
    """Worker decode only: milliseconds per token of the whole model's request."""
    shard_step_ms: tuple[float, ...] = field(default=(), metadata=convert.OMIT_EMPTY)
    """Worker decode only: milliseconds per token of each worker's request, in chain order."""
    round_trip_ms: float | None = field(default=None, metadata=convert.OMIT_NONE)
    """Worker decode only: the median of a request that does no work (transport and supervisor)."""


@dataclass(frozen=True, kw_only=True)
class SplitCost(convert.Record):
    """One split into `shards` ranges: prefill speeds per prompt length and the decode speed."""

    prefill: tuple[Speed, ...]
    decode: Speed
    split: str | None = field(default=None, metadata=convert.OMIT_NONE)
    """In-process rows (layer-bench): the ranges, the threads and the repetitions it ran."""
    threads: int | None = field(default=None, metadata=convert.OMIT_NONE)
    reps: int | None = field(default=None, metadata=convert.OMIT_NONE)
    shards: int


@dataclass(frozen=True, kw_only=True)
class MemoryRow(convert.Record):
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

    @classmethod
    def from_json(cls, data: Any, where: str = "memory row") -> Self:
        layers = convert.mapping(data, where).get("layers")
        if not isinstance(layers, list) or len(layers) != 2:
            raise ConfigError(f"{where}: `layers` must be [begin, end]")
        return convert.from_json(cls, data, where)


@dataclass(frozen=True, kw_only=True)
class CodecSpeed(convert.Record):
    """Encode + decode of a residual bundle against memcpy of the same bytes."""

    bytes: int
    reps: int
    encode_gbps: float | None = field(default=None, metadata=convert.OMIT_NONE)
    decode_gbps: float | None = field(default=None, metadata=convert.OMIT_NONE)
    codec_gbps: float
    memcpy_gbps: float
    ratio_to_memcpy: float
    zero_copy_decode: bool


@dataclass(frozen=True, kw_only=True)
class BenchModel(convert.Record):
    file: str
    n_layer: int
    bytes: int
    name: str = field(default="", metadata=convert.OMIT_EMPTY)
    """Its name in locks/model.toml (empty: not a locked model)."""


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
    harness: Harness | None = None
    """What measured (dgr.contracts.harness); None: a result of a dgr that did not record it."""
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
        if self.harness is not None:
            data["harness"] = self.harness.to_json()
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
            harness=Harness.from_json(d["harness"], f"{where}.harness") if "harness" in d else None,
            format=fmt,
        )
