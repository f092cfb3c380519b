"""The figures of the `archs` group's checks, typed: a row of the table of `test-llama-archs --layer-ranges`
(`ArchRow`) and the check of the whole table (`ArchsSummary`). dgr.verify.checks.archs writes them into the
report; dgr.export.evidence reads them back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from dgr.contracts import convert
from dgr.contracts.report import Group

ARCHS: Group = "archs"
"""The verify group of the per-architecture table."""
ARCHS_SUMMARY = "every-architecture"
"""The name of the check of the whole table."""

ArchStatus = Literal["certified", "refused", "no-model", "failed", "crashed", "device-failure"]
ARCH_STATUSES: tuple[ArchStatus, ...] = get_args(ArchStatus)
"""The result of a row of the table (`crashed`: the test stopped at it; `device-failure`: on a GPU device, the
test stopped at it and upstream's own test of the architecture, the unpatched build's, on that device,
without a range, fails too)."""


@dataclass(frozen=True, kw_only=True)
class ArchRow(convert.Record):
    """One architecture and variant (`llama/dense`): split into ranges and compared, refused, or no model."""

    status: ArchStatus
    n_layer: int | None
    ranges: tuple[str, ...]
    reason: str | None = field(default=None, metadata=convert.OMIT_NONE)
    """Why it was refused or has no model (only then)."""


@dataclass(frozen=True, kw_only=True)
class ArchsSummary(convert.Record):
    """The whole table: architectures of the arch list, rows, architectures per status."""

    architectures: int | None
    """From the test's summary line (None: it printed none)."""
    rows: int
    certified: int
    refused: int
    no_model_count: int = field(metadata=convert.keyed("no-model"))
    failed: int
    certified_archs: tuple[str, ...]
    no_model: Mapping[str, str]
    """Architecture -> why upstream's random-model generator cannot build it."""
    device_failure: Mapping[str, str] = field(default_factory=dict, metadata=convert.OMIT_EMPTY)
    """On a GPU device: architecture -> how upstream's own test of it (the unpatched build's) fails there
    too."""
    certified_floor: int | None = field(default=None, metadata=convert.OMIT_NONE)
    """The fewest certified architectures that pass the table (series/verify.toml; None: a report that did
    not record it)."""

    def in_archs(self) -> dict[ArchStatus, int]:
        """Architectures per status, as the test counted them (`crashed` is no status of its own here)."""
        counts = (self.certified, self.refused, self.no_model_count, self.failed)
        return dict(zip(ARCH_STATUSES, counts, strict=False))
