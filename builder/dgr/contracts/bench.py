"""The bench result (`bench.json`): split cost, memory, codec, models, build timing, fuzzing."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from dgr.contracts import convert
from dgr.contracts.harness import Harness
from dgr.contracts.paired import Paired
from dgr.contracts.upstreambench import Comparison, Rpc
from dgr.errors import ConfigError

BENCH_FORMAT = 3
"""2: every ratio is a paired-rounds object (dgr.contracts.paired), the perplexity comparison is
llama-perplexity's KL divergence mode. 3: every model has its figures from its parts (`parts`). A result of
another format is refused: rerun `dgr bench`."""
OLDER_FORMATS: Mapping[int, str] = {
    1: "best-of ratios, perplexity compared as text",
    2: "no figures from the parts of the models",
}
"""What a result of an older format lacks, as the refusal says it."""
Figures = Mapping[str, int | float | str | bool]
"""A flat set of named measurements (build timing, fuzzing): numbers, with a note or a flag here and there."""
TARGETS: Mapping[str, float] = {
    "in_process_prefill": 0.97,
    "in_process_decode": 0.97,
    "workers_decode": 0.93,
    "batched_decode": 0.95,
    "ranges_vs_rpc": 1.0,
    "codec": 0.5,
}
"""The ratio each measurement should reach (split / whole; the codec: to memcpy; ranges_vs_rpc: layer ranges /
RPC, prefill and decode, at every number of processes of `dgr bench --rpc`). workers_decode and batched_decode
read the workers that forward (`forward`) where the result has them."""


@dataclass(frozen=True, kw_only=True)
class Machine(convert.Record):
    date: str
    cpu: str
    cores: int | None
    platform: str = ""
    python: str = ""


@dataclass(frozen=True, kw_only=True)
class StageParts(convert.Record):
    """Where one worker's decode requests went, in milliseconds per token: the worker's own account (its
    `timing` request, docs/protocol.md) and the request as the supervisor saw it."""

    step_ms: float
    """The supervisor: the request sent to its reply read."""
    wait_ms: float
    """The worker: from its previous reply to the first byte of the request (the other stages' turn)."""
    read_ms: float
    parse_ms: float
    process_ms: float
    """llama_process: the compute graph built or reused, and computed."""
    output_ms: float
    write_ms: float
    """The worker's write of its reply: it can end after the supervisor has read the reply (the worker
    descheduled before its write returned), so it is not a part of `step_ms`."""
    graphs_reused: float
    """The fraction of the requests whose llama_process reused the previous compute graph."""

    @property
    def transport_ms(self) -> float:
        """The step less what the worker accounts for from the request to its reply: the pipes (the reply
        written and read among them) and the supervisor."""
        return self.step_ms - (self.read_ms + self.parse_ms + self.process_ms + self.output_ms)


@dataclass(frozen=True, kw_only=True)
class Speed(convert.Record):
    """Tokens per second of the whole model and of the split (the fastest round of each), measured in paired
    rounds; ratio = split / whole of each round (dgr.contracts.paired)."""

    tokens: int
    whole_tps: float
    split_tps: float
    ratio: Paired
    same_tokens: bool | None = field(default=None, metadata=convert.OMIT_NONE)
    """Decode only: the split generated the same tokens as the whole model."""
    whole_step_ms: float | None = field(default=None, metadata=convert.OMIT_NONE)
    """Worker decode only: milliseconds per token of the whole model's request."""
    shard_step_ms: tuple[float, ...] = field(default=(), metadata=convert.OMIT_EMPTY)
    """Worker decode only: milliseconds per token of each worker's request, in chain order."""
    round_trip_ms: float | None = field(default=None, metadata=convert.OMIT_NONE)
    """Worker decode only: the median of a request that does no work (transport and supervisor)."""
    whole_parts: StageParts | None = field(default=None, metadata=convert.OMIT_NONE)
    """Worker decode only: where the whole model's request went, per token."""
    shard_parts: tuple[StageParts, ...] = field(default=(), metadata=convert.OMIT_EMPTY)
    """Worker decode only: where each worker's request went, per token, in chain order."""


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
    forwarded: Speed | None = field(default=None, metadata=convert.OMIT_NONE)
    """Worker rows: the decode through the same ranges when each worker sends its hidden state on to the next
    itself and only the last replies (`forward`, docs/protocol.md), against the whole model in the same rounds
    as `decode` (the whole model, the relayed ranges and these, in rotating order)."""
    forwarded_gain: Paired | None = field(default=None, metadata=convert.OMIT_NONE)
    """Worker rows: forwarded tokens/s / relayed tokens/s, in each of those rounds."""


@dataclass(frozen=True, kw_only=True)
class BatchedCost(convert.Record):
    """Several sessions decoding together, one step of each per request (`decode_batch`), through one worker
    per range and through the whole model's worker: tokens/s of all sessions, in paired rounds."""

    shards: int
    sessions: int
    speed: Speed
    """`tokens`: of all sessions in a round; `same_tokens`: every session's tokens equal the whole model's."""
    same_as_alone: bool
    """The whole model's tokens of each session in the batch equal those of the session decoded alone."""
    forwarded: Speed | None = field(default=None, metadata=convert.OMIT_NONE)
    """The same sessions through the same ranges when each worker forwards (`forward`), against the whole
    model in the same rounds as `speed` (the whole model, the relayed ranges and these, in rotating order)."""
    forwarded_gain: Paired | None = field(default=None, metadata=convert.OMIT_NONE)
    """Forwarded tokens/s / relayed tokens/s, in each of those rounds."""


def _layers(data: Any, where: str) -> None:
    """`layers` of a row: [begin, end] (the decoder reads a tuple of any length)."""
    layers = convert.mapping(data, where).get("layers")
    if not isinstance(layers, list) or len(layers) != 2:
        raise ConfigError(f"{where}: `layers` must be [begin, end]")


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
        _layers(data, where)
        return convert.from_json(cls, data, where)


@dataclass(frozen=True, kw_only=True)
class PartsRow(convert.Record):
    """One range of a split run from its parts (`dgr parts`: a directory holding only the files the range
    needs, as a machine that fetched them holds them) against from the whole model file: what a machine
    stores, the load time in paired rounds, the peak RSS of the range's worker with mmap on and off."""

    layers: tuple[int, int]
    files: int
    """The part files the range needs."""
    part_bytes: int
    """What a machine that runs the range stores: the size of those files (`PartsFigures.whole_bytes`
    without the parts)."""
    load_whole_s: float
    load_parts_s: float
    """Worker start to model loaded (mmap on, no context), the fastest round of each side."""
    load: Paired
    """Loads per second from the parts / from the whole file (whole s / parts s), in each paired round."""
    peak_rss_whole_mmap: int
    peak_rss_parts_mmap: int
    peak_rss_whole_no_mmap: int
    peak_rss_parts_no_mmap: int
    """Peak RSS (VmHWM) of the range's worker, a fresh process per figure, after the same prefill."""

    @classmethod
    def from_json(cls, data: Any, where: str = "parts row") -> Self:
        _layers(data, where)
        return convert.from_json(cls, data, where)


@dataclass(frozen=True, kw_only=True)
class PartsSplit(convert.Record):
    """The ranges of a split into `shards` (nearly) equal ranges, each from its parts and from the whole."""

    shards: int
    ranges: tuple[PartsRow, ...]

    NON_EMPTY = ("ranges",)


@dataclass(frozen=True, kw_only=True)
class PartsFigures(convert.Record):
    """A model's ranges run from its parts against from the whole file (`parts` of bench.json, beside the
    memory table; dgr.verify.bench.fromparts measures it)."""

    files: int
    """The files of the parts of the model (`dgr parts`), the metadata's among them."""
    whole_bytes: int
    """The size of the whole model file: what every machine stores without the parts."""
    rounds: int
    """The paired rounds of the load times."""
    prefill_tokens: int
    n_ctx: int
    """The prompt every range decodes, and its context, before its peak RSS is read."""
    splits: tuple[PartsSplit, ...]

    NON_EMPTY = ("splits",)


@dataclass(frozen=True, kw_only=True)
class CodecSpeed(convert.Record):
    """Encode + decode of a residual bundle against memcpy of the same bytes."""

    bytes: int
    reps: int
    encode_gbps: float | None = field(default=None, metadata=convert.OMIT_NONE)
    decode_gbps: float | None = field(default=None, metadata=convert.OMIT_NONE)
    codec_gbps: float
    memcpy_gbps: float
    """The fastest repetition of each."""
    ratio_to_memcpy: Paired
    """codec / memcpy GB/s of each repetition (both run in every repetition, in alternating order)."""

    RETIRED: ClassVar[Mapping[str, bool]] = {"zero_copy_decode": True}
    """Keys that results of format 2 wrote as a constant, not a measurement (the decoder's design, never
    measured): read back only with the value they always had, and dropped."""

    @classmethod
    def from_json(cls, data: Any, where: str = "codec") -> Self:
        d = convert.mapping(data, where)
        for key, value in cls.RETIRED.items():
            if key in d and d[key] is not value:
                raise ConfigError(f"{where}.{key}: a retired key, only ever written as {json.dumps(value)}")
        return convert.from_json(cls, {k: v for k, v in d.items() if k not in cls.RETIRED}, where)


@dataclass(frozen=True, kw_only=True)
class BenchModel(convert.Record):
    file: str
    n_layer: int
    bytes: int
    name: str = field(default="", metadata=convert.OMIT_EMPTY)
    """Its name in locks/model.toml (empty: not a locked model)."""


@dataclass(frozen=True, kw_only=True)
class ModelBench(convert.Record):
    """The split cost and the memory table of one more locked model (`models.<name>` of bench.json)."""

    model: BenchModel
    hop_bytes_per_token: int
    in_process: tuple[SplitCost, ...]
    workers: tuple[SplitCost, ...]
    memory: tuple[MemoryRow, ...]
    parts: PartsFigures
    """Its ranges run from its parts against from the whole file."""
    chart: str | None = None
    upstream_comparison: Comparison | None = field(default=None, metadata=convert.OMIT_NONE)
    """`--rpc`: perplexity and llama-bench of this model, patched without a range vs upstream."""
    batched: tuple[BatchedCost, ...] = field(default=(), metadata=convert.OMIT_EMPTY)
    """Several sessions in one batch through 2 and 3 ranges (none in a result of an older dgr)."""

    @property
    def name(self) -> str:
        return self.model.name


@dataclass(frozen=True, kw_only=True)
class Summary:
    """Per target, the worst ratio (the median of its paired rounds) of every model and whether every model
    reaches it (`summary` of bench.json: derived from the measurements, never read back)."""

    worst: Mapping[str, Mapping[str, float]]
    """target -> model name -> its worst median ratio (absent: the model has no such measurement)."""
    met: Mapping[str, bool]
    """target -> every model was measured for it and every one reaches it."""

    def to_json(self) -> dict[str, Any]:
        worst = {k: dict(v) for k, v in self.worst.items()}
        return {"targets": dict(TARGETS), "worst": worst, "met": dict(self.met)}


def _worst(model: ModelBench) -> dict[str, float]:
    """Target -> the worst median ratio of one model's measurements."""
    out: dict[str, float] = {}
    if model.in_process:
        out["in_process_prefill"] = min(p.ratio.median for r in model.in_process for p in r.prefill)
        out["in_process_decode"] = min(r.decode.ratio.median for r in model.in_process)
    # the workers' targets read the forwarded chain where the bench measured it: the relayed one is the
    # supervisor's test topology, the forwarded one is how a chain of workers runs
    if model.workers:
        out["workers_decode"] = min((r.forwarded or r.decode).ratio.median for r in model.workers)
    if model.batched:
        out["batched_decode"] = min((b.forwarded or b.speed).ratio.median for b in model.batched)
    return out


@dataclass(frozen=True, kw_only=True)
class BenchResult(convert.Record):
    """`bench.json` of `dgr bench` (keys documented in README.md): the default model's measurements at the
    top, every other locked model's under `models.<name>`; the summary is derived, never read back."""

    format: int
    machine: Machine
    quick: bool
    inputs_digest: str
    model: BenchModel
    hop_bytes_per_token: int
    in_process: tuple[SplitCost, ...]
    workers: tuple[SplitCost, ...]
    memory: tuple[MemoryRow, ...]
    parts: PartsFigures
    """The default model's ranges run from its parts against from the whole file."""
    codec: Mapping[str, CodecSpeed]
    """"cpp" (the worker's codec) and "python"."""
    build: Figures
    fuzz: Figures | None = field(default=None, metadata=convert.OMIT_NONE)
    models: Mapping[str, ModelBench] = field(default_factory=dict, metadata=convert.OMIT_EMPTY)
    """The other locked models by name (the keys above are the default model's)."""
    chart: str | None = None
    upstream_comparison: Comparison | None = field(default=None, metadata=convert.OMIT_NONE)
    rpc: Rpc | None = field(default=None, metadata=convert.OMIT_NONE)
    """`--rpc`: the comparisons with upstream (both or neither)."""
    harness: Harness | None = field(default=None, metadata=convert.OMIT_NONE)
    """What measured (dgr.contracts.harness); None: a result of a dgr that did not record it."""
    batched: tuple[BatchedCost, ...] = field(default=(), metadata=convert.OMIT_EMPTY)
    """Several sessions in one batch through 2 and 3 ranges, the default model's."""

    def all_models(self) -> dict[str, ModelBench]:
        """Every model by name, the default first, each with its split cost, memory and comparison."""
        default = ModelBench(**convert.fields_of(ModelBench, self))
        return {self.model.name or self.model.file: default, **self.models}

    def summary(self) -> Summary:
        """Every target over every model: the worst ratio of each, met only when every model meets it."""
        per_model = {name: _worst(m) for name, m in self.all_models().items()}
        single = ("codec", "ranges_vs_rpc")  # one figure, not one per model
        worst = {t: {n: w[t] for n, w in per_model.items() if t in w} for t in TARGETS if t not in single}
        if "cpp" in self.codec:
            worst["codec"] = {"cpp": self.codec["cpp"].ratio_to_memcpy.median}
        if self.rpc is not None and self.rpc.paired:
            rpc_model = self.rpc.model.file
            worst["ranges_vs_rpc"] = {
                rpc_model: min(min(p.prefill.median, p.decode.median) for p in self.rpc.paired)
            }
        met = {
            t: bool(worst.get(t))
            and (t in single or len(worst[t]) == len(per_model))
            and all(v >= TARGETS[t] for v in worst[t].values())
            for t in TARGETS
        }
        return Summary(worst=worst, met=met)

    def to_json(self) -> dict[str, Any]:
        return convert.to_json(self) | {"summary": self.summary().to_json()}

    @classmethod
    def from_json(cls, data: Any, where: str = "bench result") -> Self:
        fmt = convert.mapping(data, where).get("format")
        if fmt != BENCH_FORMAT:
            newer = isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > BENCH_FORMAT
            lacks = OLDER_FORMATS.get(fmt) if isinstance(fmt, int) and not isinstance(fmt, bool) else None
            made = "a newer dgr" if newer else "an older dgr" + (f" ({lacks})" if lacks else "")
            raise ConfigError(
                f"{where}: format {fmt} is not {BENCH_FORMAT}: made by {made}; rerun `dgr bench`"
            )
        # `summary` is derived from the measurements: read back only to be compared with them
        d = convert.mapping(data, where)
        result = convert.from_json(cls, {k: v for k, v in d.items() if k != "summary"}, where)
        if "summary" in d and d["summary"] != result.summary().to_json():
            raise ConfigError(f"{where}: `summary` is not the one its measurements give; rerun `dgr bench`")
        return result
