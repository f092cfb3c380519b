"""The typed contracts that cross layer boundaries, in one place.

Each record is a frozen dataclass with `to_json` / `from_json`; closed sets of values are `Literal`s.
The series manager writes the build manifest, verify writes the report, bench writes its result; commands
and the export read them back through `from_json`, which refuses a malformed document with a ConfigError
naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from dgr.errors import ConfigError


def _literal(kind: Any, value: Any, where: str) -> Any:
    choices = get_args(kind)
    if value not in choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(str, choices))}")
    return value


def _typed(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ConfigError(f"{where}: `{key}` is missing")
    value = data[key]
    # bool is an int: a flag where a number is expected (or the reverse) is malformed
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float, (int, float))):
        raise ConfigError(f"{where}: `{key}` is {type(value).__name__}, expected {kind}")
    return value


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object, found {type(value).__name__}")
    return value


# --------------------------------------------------------------------------- the verify report

# the registry of verify groups: one line per group, in the order they run; the group `<name>` is the
# module dgr.verify.checks.<name> (its `GROUP`)
Group = Literal[
    "native",
    "series",
    "archs",
    "graph",
    "ownership",
    "boundary",
    "kv",
]
GROUPS: tuple[Group, ...] = get_args(Group)
"""The groups of `dgr verify`, in the order they run; a report usable for export covers all of them."""

Evidence = Literal["native test", "synthetic fixture", "real model"]
NATIVE: Evidence = "native test"
SYNTHETIC: Evidence = "synthetic fixture"
REAL_MODEL: Evidence = "real model"

REPORT_FORMAT = 1


@dataclass(frozen=True, kw_only=True)
class Check:
    """One check of `dgr verify`: what it proves (group, evidence class), its figures, pass or fail."""

    group: Group
    name: str
    evidence: Evidence
    passed: bool
    figures: Mapping[str, Any] = field(default_factory=dict)
    detail: str = ""

    @property
    def id(self) -> str:
        return f"{self.group}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "name": self.name,
            "evidence": self.evidence,
            "passed": self.passed,
            "figures": dict(self.figures),
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "check") -> Check:
        d = _mapping(data, where)
        return cls(
            group=_literal(Group, d.get("group"), f"{where}.group"),
            name=_typed(d, "name", str, where),
            evidence=_literal(Evidence, d.get("evidence"), f"{where}.evidence"),
            passed=_typed(d, "passed", bool, where),
            figures=_mapping(d.get("figures", {}), f"{where}.figures"),
            detail=_typed(d, "detail", str, where) if "detail" in d else "",
        )


@dataclass(frozen=True, kw_only=True)
class Report:
    """The report of one `dgr verify` run over the inputs `inputs_digest` (and the unpatched baseline)."""

    inputs_digest: str
    baseline_digest: str | None
    groups: tuple[Group, ...]
    durations_s: Mapping[str, float]
    checks: tuple[Check, ...]
    format: int = REPORT_FORMAT

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def group(self, group: Group) -> list[Check]:
        return [c for c in self.checks if c.group == group]

    def problems(self, digest: str) -> list[str]:
        """Why this is not a complete pass for the inputs `digest` (empty: it is one)."""
        found: list[str] = []
        if self.inputs_digest != digest:
            found.append(f"it is for the inputs {self.inputs_digest}, not {digest}")
        missing = [g for g in GROUPS if g not in self.groups or not self.group(g)]
        if missing:
            found.append(
                f"it does not cover the group(s) {', '.join(missing)} "
                f"(it ran {', '.join(self.groups) or 'none'})"
            )
        failed = [c.id for c in self.checks if not c.passed]
        if failed:
            found.append(f"{len(failed)} check(s) failed: {', '.join(failed)}")
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "inputs_digest": self.inputs_digest,
            "baseline_digest": self.baseline_digest,
            "groups": list(self.groups),
            "passed": self.passed,
            "durations_s": dict(self.durations_s),
            "checks": [c.to_json() for c in self.checks],
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "report") -> Report:
        d = _mapping(data, where)
        fmt = _typed(d, "format", int, where)
        if fmt != REPORT_FORMAT:
            raise ConfigError(f"{where}: format {fmt} is not {REPORT_FORMAT}; run `dgr verify` again")
        checks = _typed(d, "checks", list, where)
        groups = _typed(d, "groups", list, where)
        baseline = d.get("baseline_digest")
        if baseline is not None and not isinstance(baseline, str):
            raise ConfigError(f"{where}: `baseline_digest` is {type(baseline).__name__}, expected str")
        report = cls(
            format=fmt,
            inputs_digest=_typed(d, "inputs_digest", str, where),
            baseline_digest=baseline,
            groups=tuple(_literal(Group, g, f"{where}.groups[{i}]") for i, g in enumerate(groups)),
            durations_s=_mapping(d.get("durations_s", {}), f"{where}.durations_s"),
            checks=tuple(Check.from_json(c, f"{where}.checks[{i}]") for i, c in enumerate(checks)),
        )
        if "passed" in d and d["passed"] is not report.passed:
            raise ConfigError(f"{where}: `passed` is {d['passed']!r}, but its checks say {report.passed!r}")
        return report


# --------------------------------------------------------------------------- the build manifest

BuildStatus = Literal["built", "cached"]


def _strings(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    values = _typed(data, key, list, where)
    if not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return tuple(values)


def _string_map(data: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    values = _mapping(data.get(key, {}), f"{where}.{key}")
    if not all(isinstance(v, str) for v in values.values()):
        raise ConfigError(f"{where}: `{key}` must map names to strings")
    return dict(values)


@dataclass(frozen=True, kw_only=True)
class BuildInfo:
    inputs_digest: str
    upstream_only: bool
    targets: tuple[str, ...]
    native_tests: tuple[str, ...]
    worker: bool
    """The build has the worker (verify/worker/ exists)."""
    source_dir: str
    build_dir: str

    def to_json(self) -> dict[str, Any]:
        return {
            "inputs_digest": self.inputs_digest,
            "upstream_only": self.upstream_only,
            "targets": list(self.targets),
            "native_tests": list(self.native_tests),
            "worker": self.worker,
            "source_dir": self.source_dir,
            "build_dir": self.build_dir,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> BuildInfo:
        d = _mapping(data, where)
        return cls(
            inputs_digest=_typed(d, "inputs_digest", str, where),
            upstream_only=_typed(d, "upstream_only", bool, where),
            targets=_strings(d, "targets", where),
            native_tests=_strings(d, "native_tests", where),
            worker=_typed(d, "worker", bool, where),
            source_dir=_typed(d, "source_dir", str, where),
            build_dir=_typed(d, "build_dir", str, where),
        )


@dataclass(frozen=True, kw_only=True)
class UpstreamInfo:
    repo: str
    commit: str
    tree: str
    source: str
    """Where the verified upstream came from (the cache's note)."""

    def to_json(self) -> dict[str, Any]:
        return {"repo": self.repo, "commit": self.commit, "tree": self.tree, "source": self.source}

    @classmethod
    def from_json(cls, data: Any, where: str) -> UpstreamInfo:
        d = _mapping(data, where)
        return cls(**{k: _typed(d, k, str, where) for k in ("repo", "commit", "tree", "source")})


@dataclass(frozen=True, kw_only=True)
class PatchedInfo:
    commit: str
    tree: str

    def to_json(self) -> dict[str, Any]:
        return {"commit": self.commit, "tree": self.tree}

    @classmethod
    def from_json(cls, data: Any, where: str) -> PatchedInfo:
        d = _mapping(data, where)
        return cls(commit=_typed(d, "commit", str, where), tree=_typed(d, "tree", str, where))


@dataclass(frozen=True, kw_only=True)
class AppliedPatch:
    name: str
    sha256: str
    commit: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256, "commit": self.commit}

    @classmethod
    def from_json(cls, data: Any, where: str) -> AppliedPatch:
        d = _mapping(data, where)
        return cls(**{k: _typed(d, k, str, where) for k in ("name", "sha256", "commit")})


@dataclass(frozen=True, kw_only=True)
class ToolchainInfo:
    cmake: str
    ninja: str
    cc: str
    cc_path: str
    cxx: str
    cxx_path: str

    def to_json(self) -> dict[str, Any]:
        return {
            "cmake": self.cmake,
            "ninja": self.ninja,
            "cc": self.cc,
            "cc_path": self.cc_path,
            "cxx": self.cxx,
            "cxx_path": self.cxx_path,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> ToolchainInfo:
        d = _mapping(data, where)
        keys = ("cmake", "ninja", "cc", "cc_path", "cxx", "cxx_path")
        return cls(**{k: _typed(d, k, str, where) for k in keys})


@dataclass(frozen=True, kw_only=True)
class BuildManifest:
    """`builds/<digest>/manifest.toml`: what was built from which inputs, and the SHA-256 of every artifact.

    `dgr build --json` prints it (with `path` and `status`); its `inputs` hold a digest per component of
    the inputs, so two manifests show which input made a rebuild necessary."""

    build: BuildInfo
    upstream: UpstreamInfo
    patched: PatchedInfo
    patches: tuple[AppliedPatch, ...]
    toolchain: ToolchainInfo
    inputs: Mapping[str, str]
    cmake_options: Mapping[str, str]
    source_date_epoch: int
    artifacts: Mapping[str, str] = field(default_factory=dict)
    """Relative path -> sha256 of every published file (filled when the build is published)."""
    links: Mapping[str, str] = field(default_factory=dict)
    """Relative path -> target of every published symbolic link."""

    @property
    def inputs_digest(self) -> str:
        return self.build.inputs_digest

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "build": self.build.to_json(),
            "upstream": self.upstream.to_json(),
            "patched": self.patched.to_json(),
            "patches": [p.to_json() for p in self.patches],
            "toolchain": self.toolchain.to_json(),
            "inputs": dict(self.inputs),
            "cmake_options": dict(self.cmake_options),
            "source_date_epoch": self.source_date_epoch,
        }
        if self.artifacts or self.links:
            data["artifacts"] = dict(self.artifacts)
            data["links"] = dict(self.links)
        return data

    @classmethod
    def from_json(cls, data: Any, where: str = "build manifest") -> BuildManifest:
        d = _mapping(data, where)
        patches = _typed(d, "patches", list, where)
        return cls(
            build=BuildInfo.from_json(d.get("build"), f"{where}.build"),
            upstream=UpstreamInfo.from_json(d.get("upstream"), f"{where}.upstream"),
            patched=PatchedInfo.from_json(d.get("patched"), f"{where}.patched"),
            patches=tuple(AppliedPatch.from_json(p, f"{where}.patches[{i}]") for i, p in enumerate(patches)),
            toolchain=ToolchainInfo.from_json(d.get("toolchain"), f"{where}.toolchain"),
            inputs=_string_map(d, "inputs", where),
            cmake_options=_string_map(d, "cmake_options", where),
            source_date_epoch=_typed(d, "source_date_epoch", int, where),
            artifacts=_string_map(d, "artifacts", where),
            links=_string_map(d, "links", where),
        )


# --------------------------------------------------------------------------- the bench result

BENCH_FORMAT = 1
TARGETS: Mapping[str, float] = {
    "in_process_prefill": 0.97,
    "in_process_decode": 0.97,
    "workers_decode": 0.90,
    "codec": 0.5,
}
"""The ratio each measurement should reach (split / whole; the codec: to memcpy)."""

Number = int | float
Figures = Mapping[str, Number | str | bool]
"""A flat set of named measurements (build timing, fuzzing): numbers, with a note or a flag here and there."""


def _number(data: Mapping[str, Any], key: str, where: str) -> float:
    return float(_typed(data, key, (int, float), where))


def _optional_number(data: Mapping[str, Any], key: str, where: str) -> float | None:
    return _number(data, key, where) if key in data else None


def _figures(value: Any, where: str) -> Figures:
    d = _mapping(value, where)
    for key, v in d.items():
        if not isinstance(v, (int, float, str, bool)):
            raise ConfigError(f"{where}.{key}: {type(v).__name__} is not a number, a string or a flag")
    return dict(d)


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
        d = _mapping(data, where)
        cores = d.get("cores")
        return cls(
            date=_typed(d, "date", str, where),
            cpu=_typed(d, "cpu", str, where),
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
        d = _mapping(data, where)
        same = d.get("same_tokens")
        steps = d.get("shard_step_ms", [])
        if not isinstance(steps, list) or not all(isinstance(s, (int, float)) for s in steps):
            raise ConfigError(f"{where}: `shard_step_ms` must be a list of numbers")
        return cls(
            tokens=_typed(d, "tokens", int, where),
            whole_tps=_number(d, "whole_tps", where),
            split_tps=_number(d, "split_tps", where),
            ratio=_number(d, "ratio", where),
            same_tokens=same if isinstance(same, bool) else None,
            whole_step_ms=_optional_number(d, "whole_step_ms", where),
            shard_step_ms=tuple(float(s) for s in steps),
            round_trip_ms=_optional_number(d, "round_trip_ms", where),
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
        d = _mapping(data, where)
        prefill = _typed(d, "prefill", list, where)
        split, threads, reps = d.get("split"), d.get("threads"), d.get("reps")
        return cls(
            shards=_typed(d, "shards", int, where),
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
        d = _mapping(data, where)
        layers = _typed(d, "layers", list, where)
        if len(layers) != 2 or not all(isinstance(n, int) for n in layers):
            raise ConfigError(f"{where}: `layers` must be [begin, end]")
        return cls(
            layers=(layers[0], layers[1]),
            owned_layers=_typed(d, "owned_layers", int, where),
            owned_fraction=_number(d, "owned_fraction", where),
            owned_tensor_bytes=_typed(d, "owned_tensor_bytes", int, where),
            model_bytes=_typed(d, "model_bytes", int, where),
            model_fraction=_number(d, "model_fraction", where),
            kv_bytes=_typed(d, "kv_bytes", int, where),
            peak_rss=_typed(d, "peak_rss", int, where),
            kv_fraction=_number(d, "kv_fraction", where),
            peak_rss_fraction=_number(d, "peak_rss_fraction", where),
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
        d = _mapping(data, where)
        return cls(
            bytes=_typed(d, "bytes", int, where),
            reps=_typed(d, "reps", int, where),
            codec_gbps=_number(d, "codec_gbps", where),
            memcpy_gbps=_number(d, "memcpy_gbps", where),
            ratio_to_memcpy=_number(d, "ratio_to_memcpy", where),
            zero_copy_decode=_typed(d, "zero_copy_decode", bool, where),
            encode_gbps=_optional_number(d, "encode_gbps", where),
            decode_gbps=_optional_number(d, "decode_gbps", where),
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
        d = _mapping(data, where)
        name = d.get("name", "")
        return cls(
            file=_typed(d, "file", str, where),
            n_layer=_typed(d, "n_layer", int, where),
            bytes=_typed(d, "bytes", int, where),
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
        d = _mapping(data, where)
        chart = d.get("chart")
        return cls(
            name=name,
            model=BenchModel.from_json(d.get("model"), f"{where}.model"),
            hop_bytes_per_token=_typed(d, "hop_bytes_per_token", int, where),
            in_process=tuple(
                SplitCost.from_json(r, f"{where}.in_process[{i}]")
                for i, r in enumerate(_typed(d, "in_process", list, where))
            ),
            workers=tuple(
                SplitCost.from_json(r, f"{where}.workers[{i}]")
                for i, r in enumerate(_typed(d, "workers", list, where))
            ),
            memory=tuple(
                MemoryRow.from_json(r, f"{where}.memory[{i}]")
                for i, r in enumerate(_typed(d, "memory", list, where))
            ),
            chart=chart if isinstance(chart, str) else None,
            upstream_comparison=(
                Comparison.from_json(d["upstream_comparison"], f"{where}.upstream_comparison")
                if "upstream_comparison" in d
                else None
            ),
        )


@dataclass(frozen=True, kw_only=True)
class Perplexity:
    """What llama-perplexity printed: the final estimate, its error and the value after every chunk."""

    final: float
    error: float
    chunks: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {"final": self.final, "error": self.error, "chunks": list(self.chunks)}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Perplexity:
        d = _mapping(data, where)
        chunks = _typed(d, "chunks", list, where)
        if not chunks or not all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in chunks):
            raise ConfigError(f"{where}: `chunks` must be a non-empty list of numbers")
        return cls(final=_number(d, "final", where), error=_number(d, "error", where), chunks=tuple(chunks))


@dataclass(frozen=True, kw_only=True)
class BenchRow:
    test: str
    """llama-bench's name of the test: pp512, tg128."""
    baseline_tps: float
    patched_tps: float
    ratio: float

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "baseline_tps": self.baseline_tps,
            "patched_tps": self.patched_tps,
            "ratio": self.ratio,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> BenchRow:
        d = _mapping(data, where)
        return cls(
            test=_typed(d, "test", str, where),
            baseline_tps=_number(d, "baseline_tps", where),
            patched_tps=_number(d, "patched_tps", where),
            ratio=_number(d, "ratio", where),
        )


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
        d = _mapping(data, where)
        model = _mapping(d.get("model"), f"{where}.model")
        ppl = _mapping(d.get("perplexity"), f"{where}.perplexity")
        bench = _mapping(d.get("bench"), f"{where}.bench")
        rows = _typed(bench, "results", list, f"{where}.bench")
        if not rows:
            raise ConfigError(f"{where}.bench: `results` is empty")
        return cls(
            model_file=_typed(model, "file", str, f"{where}.model"),
            model_sha256=_typed(model, "sha256", str, f"{where}.model"),
            threads=_typed(d, "threads", int, where),
            text=_typed(ppl, "text", str, f"{where}.perplexity"),
            text_sha256=_typed(ppl, "text_sha256", str, f"{where}.perplexity"),
            perplexity_args=_strings(ppl, "args", f"{where}.perplexity"),
            baseline=Perplexity.from_json(ppl.get("baseline"), f"{where}.perplexity.baseline"),
            patched=Perplexity.from_json(ppl.get("patched"), f"{where}.perplexity.patched"),
            identical=_typed(ppl, "identical", bool, f"{where}.perplexity"),
            bench_args=_strings(bench, "args", f"{where}.bench"),
            rounds=_typed(bench, "rounds", int, f"{where}.bench"),
            bench=tuple(BenchRow.from_json(r, f"{where}.bench.results[{i}]") for i, r in enumerate(rows)),
            target=_number(bench, "target", f"{where}.bench"),
        )


@dataclass(frozen=True, kw_only=True)
class Process:
    role: str
    """"head", "server" (an RPC server) or "range" (a process holding one range of layers)."""
    what: str
    peak_rss: int

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "what": self.what, "peak_rss": self.peak_rss}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Process:
        d = _mapping(data, where)
        return cls(
            role=_typed(d, "role", str, where),
            what=_typed(d, "what", str, where),
            peak_rss=_typed(d, "peak_rss", int, where),
        )


@dataclass(frozen=True, kw_only=True)
class RpcRow:
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

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "processes": self.processes,
            "start": self.start,
            "wire_bytes_before_first_token": self.wire_bytes_before_first_token,
            "wire_bytes_per_token": self.wire_bytes_per_token,
            "ttft_s": self.ttft_s,
            "prefill_tps": self.prefill_tps,
            "decode_tps": self.decode_tps,
            "same_output": self.same_output,
            "procs": [p.to_json() for p in self.procs],
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> RpcRow:
        r = _mapping(data, where)
        procs = _typed(r, "procs", list, where)
        return cls(
            engine=_typed(r, "engine", str, where),
            processes=_typed(r, "processes", int, where),
            start=_typed(r, "start", str, where),
            wire_bytes_before_first_token=_typed(r, "wire_bytes_before_first_token", int, where),
            wire_bytes_per_token=_number(r, "wire_bytes_per_token", where),
            ttft_s=_number(r, "ttft_s", where),
            prefill_tps=_number(r, "prefill_tps", where),
            decode_tps=_number(r, "decode_tps", where),
            same_output=_typed(r, "same_output", bool, where),
            procs=tuple(Process.from_json(p, f"{where}.procs[{j}]") for j, p in enumerate(procs)),
        )


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
        d = _mapping(data, where)
        rows = _typed(d, "rows", list, where)
        if not rows:
            raise ConfigError(f"{where}: `rows` is empty")
        model = _mapping(d.get("model"), f"{where}.model")
        return cls(
            model_file=_typed(model, "file", str, f"{where}.model"),
            n_layer=_typed(model, "n_layer", int, f"{where}.model"),
            threads=_typed(d, "threads", int, where),
            prompt_tokens=_typed(d, "prompt_tokens", int, where),
            decode_tokens=_typed(d, "decode_tokens", int, where),
            wire_method=_typed(d, "wire_method", str, where),
            head_args=_strings(d, "head_args", where),
            server_args=_strings(d, "server_args", where),
            rows=tuple(RpcRow.from_json(r, f"{where}.rows[{i}]") for i, r in enumerate(rows)),
            prompt=_typed(d, "prompt", str, where) if "prompt" in d else None,
            reps=_typed(d, "reps", int, where) if "reps" in d else None,
            reference_output=_typed(d, "reference_output", str, where) if "reference_output" in d else None,
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
        d = _mapping(data, where)
        fmt = _typed(d, "format", int, where)
        if fmt != BENCH_FORMAT:
            raise ConfigError(f"{where}: format {fmt} is not {BENCH_FORMAT}; run `dgr bench` again")

        def rows(key: str) -> list[Any]:
            value: list[Any] = _typed(d, key, list, where)
            return value

        chart = d.get("chart")
        return cls(
            machine=Machine.from_json(d.get("machine"), f"{where}.machine"),
            quick=_typed(d, "quick", bool, where),
            inputs_digest=_typed(d, "inputs_digest", str, where),
            model=BenchModel.from_json(d.get("model"), f"{where}.model"),
            hop_bytes_per_token=_typed(d, "hop_bytes_per_token", int, where),
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
                for k, v in _mapping(d.get("codec"), f"{where}.codec").items()
            },
            build=_figures(d.get("build", {}), f"{where}.build"),
            fuzz=_figures(d["fuzz"], f"{where}.fuzz") if "fuzz" in d else None,
            chart=chart if isinstance(chart, str) else None,
            models=tuple(
                ModelBench.from_json(name, m, f"{where}.models.{name}")
                for name, m in _mapping(d.get("models", {}), f"{where}.models").items()
            ),
            upstream_comparison=(
                Comparison.from_json(d["upstream_comparison"], f"{where}.upstream_comparison")
                if "upstream_comparison" in d
                else None
            ),
            rpc=Rpc.from_json(d["rpc"], f"{where}.rpc") if "rpc" in d else None,
            format=fmt,
        )
