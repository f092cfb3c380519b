"""What the templates of the upstream package (upstream-package/templates/) render: typed, frozen records,
derived by dgr.export.render.context from the applied series, its branches, the verify report and the bench
result. A template reads their fields (`pull.lines.core`); `PackageContext.variables()` gives the template
its top-level names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dgr.contracts import convert
from dgr.contracts.bench import PartsRow
from dgr.contracts.modellock import ModelLock
from dgr.contracts.upstreambench import Comparison, Rpc
from dgr.export.apisurface import Item
from dgr.export.branches import Stat
from dgr.export.measured import Measured
from dgr.export.upstream_package import Concern, LineGlobs, Pull, UpstreamConventions


@dataclass(frozen=True)
class Section:
    """A section of upstream's pull request template."""

    heading: str
    """The heading's text (`Overview`), empty for what precedes the first heading."""
    text: str
    """The section as upstream wrote it: the heading line and everything up to the next heading."""


@dataclass(frozen=True)
class PinFacts:
    repo: str
    commit: str
    short: str
    date: str
    """The commit date, ISO 8601 with its UTC offset."""


@dataclass(frozen=True)
class LineCounts:
    """The files a diff touches and its changed lines (added + removed) by kind."""

    files: int
    core: int
    """Hand-written, outside the tests."""
    tests: int
    mechanical: int
    """The same change repeated (one per architecture: `mechanical_paths` of package.toml)."""


@dataclass(frozen=True)
class AbiChange:
    """Fields added to a public struct of upstream, before the member `before` (None: at its end)."""

    struct: str
    fields: tuple[str, ...]
    before: str | None


@dataclass(frozen=True)
class HeaderApi:
    """The public declarations a patch adds to one header, with what they do to the ABI."""

    path: str
    decls: tuple[Item, ...]
    code: str
    abi: tuple[AbiChange, ...]


@dataclass(frozen=True)
class NativeTest:
    name: str
    """Its CTest name."""
    target: str
    """The CMake target of its executable (CTest runs one executable under several names)."""


@dataclass(frozen=True)
class CommitFacts:
    """One commit of a pull request (one patch of the series)."""

    index: int
    """1-based, within its pull request."""
    commit: str
    subject: str
    concern: Concern
    """Its concern of package.toml: its provenance (`answers`, `drop_when`) and `notes`."""
    stat: Stat
    lines: LineCounts
    files: tuple[str, ...]
    """The files it touches, a directory of many files of one kind as one glob."""
    tests: tuple[NativeTest, ...]
    """The native tests it adds."""
    api: tuple[HeaderApi, ...]
    rule: str | None
    """The rule that generates its `src/models/` part (None: written by hand)."""
    parent_commit: str


@dataclass(frozen=True)
class BranchTest(NativeTest):
    """A native test on the branch of a pull request, and where it comes from."""

    added_by: int
    """The number of the pull request that adds it."""
    commit: int | None
    """The index of this pull request's commit that adds it (None: an earlier pull request's)."""
    extended_in: int | None
    """The index of this pull request's commit that first changes its source."""


@dataclass(frozen=True)
class Prefix:
    """The verify report's native tests of the series up to the end of a pull request, built on its own."""

    patches: int
    tests: Mapping[str, Any]
    """CTest name -> passed."""
    passed: bool


@dataclass(frozen=True, kw_only=True)
class PullFacts(Pull):
    """One pull request of the package (its `[[pulls]]` table of package.toml, inherited): its branch, bundle,
    commits and native tests."""

    bundle: str
    body: str
    """The file of its description (`PR-<n>.md`)."""
    head: str
    """The last commit of its branch."""
    stacked_on: str | None
    """The branch of the previous pull request (None: the first, on the pin)."""
    stat: Stat
    lines: LineCounts
    hours: tuple[float, float]
    """Upstream's review time of its lines: at the faster rate, at the slower."""
    commits: tuple[CommitFacts, ...]
    tests: tuple[str, ...]
    """The native tests of the branch so far, by CTest name."""
    branch_tests: tuple[BranchTest, ...]
    targets: tuple[str, ...]
    api_so_far: bool
    """A commit of this or an earlier pull request adds public API."""
    ctest_regex: str
    prefix: Prefix | None


@dataclass(frozen=True)
class Spread:
    """The lowest and the highest of a figure over the ranges of a split."""

    low: float
    high: float


@dataclass(frozen=True)
class PartsSplitFacts:
    """A model split into `shards` ranges, each loaded from the files that hold only its tensors against from
    the whole file: every range's figures, and over them the lowest and the highest of each."""

    shards: int
    ranges: tuple[PartsRow, ...]
    stored: Spread
    """The bytes one machine stores: the size of its range's files."""
    share: Spread
    """Those bytes over the whole file's."""
    load: Spread
    """The median of each range's paired rounds: loads per second from its files / from the whole file."""
    rss_mmap: Spread
    rss_no_mmap: Spread
    """The peak RSS of each range's process loaded from its files / from the whole file, mmap on, off."""


@dataclass(frozen=True)
class PartsFacts:
    """One model's ranges from the files that hold only their tensors (the bench's `parts`)."""

    model_file: str
    n_layer: int
    whole_bytes: int
    files: int
    """The files the model is cut into."""
    rounds: int
    prefill_tokens: int
    n_ctx: int
    splits: tuple[PartsSplitFacts, ...]


@dataclass(frozen=True)
class PackageContext:
    """Everything the templates show, in series order."""

    pin: PinFacts
    upstream: UpstreamConventions
    issue_url: str
    pulls: tuple[PullFacts, ...]
    last: PullFacts
    all_targets: tuple[str, ...]
    authors: tuple[str, ...]
    all_ctest_regex: str
    sections: tuple[Section, ...]
    """Upstream's pull request template cut at its headings."""
    ci_commands: tuple[str, ...]
    submitter_begin: str
    submitter_end: str
    archs: Mapping[str, Any] | None
    """dgr.export.evidence.archs_table (None: the report has no table of architectures)."""
    graphs: Mapping[str, Any] | None
    archs_test: str | None
    real_model: Sequence[Mapping[str, str]]
    measured: Measured
    comparison: Comparison
    """The default model's comparison with upstream."""
    comparisons: tuple[Comparison, ...]
    rpc: Rpc
    rpc_better: tuple[str, ...]
    rpc_head_args: str
    rpc_ports: tuple[int, ...]
    parts: tuple[PartsFacts, ...]
    """Every model's ranges from their own files against from the whole file, the default model first."""
    model: ModelLock
    """The default model, with the wheels it is downloaded from."""
    cmake_options: tuple[str, ...]
    questions: tuple[str, ...]
    line_globs: LineGlobs

    def variables(self, **more: Any) -> dict[str, Any]:
        """The template's top-level names: every field (the records as they are), and `more`."""
        return convert.fields_of(PackageContext, self) | more
