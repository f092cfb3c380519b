"""The bench's comparisons with upstream: perplexity and llama-bench before and after the series
(`upstream_comparison`), the RPC backend beside layer ranges (`rpc`). Read and written by
dgr.contracts.convert; the properties give the flat names the export's templates use."""

from __future__ import annotations

from dataclasses import dataclass, field

from dgr.contracts import convert
from dgr.contracts.paired import Paired

KL_SAME_TOP_TARGET = 100.0
"""Percent of the tokens whose most probable next token is the baseline's."""


@dataclass(frozen=True, kw_only=True)
class Perplexity(convert.Record):
    """What llama-perplexity printed: the final estimate, its error and the value after every chunk."""

    NON_EMPTY = ("chunks",)

    final: float
    error: float
    chunks: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class KlStats(convert.Record):
    """llama-perplexity `--kl-divergence` against the baseline's `--kl-divergence-base` file: its printed
    "KL divergence statistics" (`Mean KLD` ± error, `Maximum KLD`) and `Same top p` (percent)."""

    mean: float
    mean_error: float
    max: float
    same_top_percent: float


@dataclass(frozen=True, kw_only=True)
class KlDivergence(convert.Record):
    """The patched build against the baseline's logits (`patched`), beside the baseline against its own
    (`reference`): the base file holds 16-bit log-probabilities, so even the same logits print a KL
    divergence of that rounding, never exactly 0. Met: the patched statistics are the reference's, as
    printed (6 decimals), and the same top token everywhere."""

    base_args: tuple[str, ...]
    """The arguments of the baseline's run that wrote the base file (`--kl-divergence-base FILE`)."""
    args: tuple[str, ...]
    """The arguments of the comparing runs (`--kl-divergence --kl-divergence-base FILE`)."""
    reference: KlStats
    patched: KlStats

    @property
    def met(self) -> bool:
        return self.patched == self.reference and self.patched.same_top_percent >= KL_SAME_TOP_TARGET


@dataclass(frozen=True, kw_only=True)
class ModelFile(convert.Record):
    """The model a comparison ran (`model` of `upstream_comparison`: with its SHA-256; of `rpc`: with its
    layer count)."""

    file: str
    sha256: str | None = field(default=None, metadata=convert.OMIT_NONE)
    n_layer: int | None = field(default=None, metadata=convert.OMIT_NONE)


@dataclass(frozen=True, kw_only=True)
class PerplexityComparison(convert.Record):
    text: str
    """The text file of upstream's tree that llama-perplexity read."""
    text_sha256: str
    args: tuple[str, ...]
    baseline: Perplexity
    """The baseline against its own base file (`Mean PPL(Q)` and the PPL column of its chunk table); results
    of an older dgr hold the `Final estimate` of the run that wrote the base file (4 decimals)."""
    patched: Perplexity
    """The patched build against the base file, read the same way (`Mean PPL(Q)`, 6 decimals)."""
    kl: KlDivergence


@dataclass(frozen=True, kw_only=True)
class BenchRow(convert.Record):
    test: str
    """llama-bench's name of the test: pp512, tg128."""
    baseline_tps: float
    patched_tps: float
    """The fastest round of each side."""
    paired: Paired = field(metadata=convert.keyed("ratio"))
    """patched / baseline tokens/s of each round (`ratio` in bench.json)."""

    @property
    def ratio(self) -> float:
        """The figure: the median of the per-round ratios."""
        return self.paired.median


@dataclass(frozen=True, kw_only=True)
class LlamaBench(convert.Record):
    args: tuple[str, ...]
    rounds: int
    """Paired rounds, in alternating order (even rounds the baseline first, odd rounds the patched)."""
    results: tuple[BenchRow, ...]
    target: float
    """The median ratio every test should reach."""

    NON_EMPTY = ("results",)


@dataclass(frozen=True, kw_only=True)
class Comparison(convert.Record):
    """`upstream_comparison` (`dgr bench --rpc`): llama-perplexity and llama-bench, unpatched (baseline) and
    patched without a range, the same model and text."""

    model: ModelFile
    threads: int
    perplexity: PerplexityComparison
    llama_bench: LlamaBench = field(metadata=convert.keyed("bench"))

    model_file = property(lambda self: self.model.file)
    model_sha256 = property(lambda self: self.model.sha256)
    text = property(lambda self: self.perplexity.text)
    text_sha256 = property(lambda self: self.perplexity.text_sha256)
    perplexity_args = property(lambda self: self.perplexity.args)
    baseline = property(lambda self: self.perplexity.baseline)
    patched = property(lambda self: self.perplexity.patched)
    kl = property(lambda self: self.perplexity.kl)
    bench_args = property(lambda self: self.llama_bench.args)
    rounds = property(lambda self: self.llama_bench.rounds)
    target = property(lambda self: self.llama_bench.target)

    @property
    def bench(self) -> tuple[BenchRow, ...]:
        return self.llama_bench.results

    @property
    def min_ratio(self) -> float:
        return min(r.ratio for r in self.bench)

    @property
    def met(self) -> bool:
        """Every llama-bench test's median ratio reaches the target."""
        return all(r.ratio >= self.llama_bench.target for r in self.bench)


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
    """Every repetition's output was the unsplit model's."""
    same_output_reps: int
    """The repetitions whose output was the unsplit model's."""
    procs: tuple[Process, ...]

    @property
    def head_rss(self) -> int:
        return next((p.peak_rss for p in self.procs if p.role == "head"), 0)

    @property
    def max_other_rss(self) -> int:
        return max((p.peak_rss for p in self.procs if p.role != "head"), default=0)


@dataclass(frozen=True, kw_only=True)
class RpcPaired(convert.Record):
    """Layer ranges over RPC for one number of processes, in paired alternating rounds (one round: the RPC
    servers started with an empty tensor cache, then again with it filled, and the chain of range processes;
    the chain runs after the RPC pair in even rounds and before it in odd ones): ranges / RPC of the later
    start, per round."""

    processes: int
    prefill: Paired
    """Prompt tokens/s of the ranges / of RPC."""
    decode: Paired
    """Decoded tokens/s of the ranges / of RPC."""


@dataclass(frozen=True, kw_only=True)
class Rpc(convert.Record):
    """`rpc` (`dgr bench --rpc`): the whole model through upstream's RPC backend (local `ggml-rpc-server`
    processes) beside a chain of processes that each load one range of layers."""

    model: ModelFile
    threads: int
    prompt: str | None = field(default=None, metadata=convert.OMIT_NONE)
    prompt_tokens: int
    decode_tokens: int
    head_args: tuple[str, ...]
    """The arguments of the RPC head, for the most servers (the model by its file name)."""
    server_args: tuple[str, ...]
    wire_method: str
    reps: int | None = field(default=None, metadata=convert.OMIT_NONE)
    reference_output: str | None = field(default=None, metadata=convert.OMIT_NONE)
    """The unsplit model's greedy output, which every row is compared with (`same_output`)."""
    rows: tuple[RpcRow, ...]
    """Per configuration, the repetition fastest to the first token."""
    paired: tuple[RpcPaired, ...] = field(default=(), metadata=convert.OMIT_EMPTY)
    """Ranges / RPC per number of processes, as paired alternating rounds (absent in results of older dgr)."""

    NON_EMPTY = ("rows",)

    model_file = property(lambda self: self.model.file)
    n_layer = property(lambda self: self.model.n_layer)
