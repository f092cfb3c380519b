"""A ratio measured in paired rounds: what every ratio of `dgr bench` is (split / whole, patched / unpatched,
codec / memcpy). The rounds run in alternating order (round i: A then B for even i, B then A for odd i), so
that neither side always runs first (warm caches, a CPU clocking up); dgr.verify.bench.paired measures it."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from dgr.contracts import convert

SPREAD = "min-max"
"""What `low` and `high` are: the smallest and the largest per-round ratio (with 5 to 9 rounds quartiles
would be two of the rounds anyway)."""


@dataclass(frozen=True, kw_only=True)
class Paired(convert.Record):
    """B / A of paired rounds: `median` (the figure), `low`-`high` (the spread: min-max of the per-round
    ratios), `best` (B's best round over A's best round, the figure of older dgr) and every round's ratio."""

    median: float
    low: float
    high: float
    best: float
    rounds: tuple[float, ...]
    """The ratio of each round, in round order (even rounds ran A first, odd rounds B first)."""

    NON_EMPTY = ("rounds",)

    @classmethod
    def of(cls, pairs: Sequence[tuple[float, float]]) -> Paired:
        """The ratio B / A of rates (higher is better: tokens/s, GB/s), one (A, B) pair per round."""
        if not pairs:
            raise ValueError("no paired rounds")
        ratios = tuple(b / a for a, b in pairs)
        best = max(b for _, b in pairs) / max(a for a, _ in pairs)
        median = statistics.median(ratios)
        return cls(median=median, low=min(ratios), high=max(ratios), best=best, rounds=ratios)

    def text(self) -> str:
        """`0.975 (0.961-0.982, best 0.979)`: the median, the spread and the best-of."""
        return f"{self.median:.3f} ({self.low:.3f}-{self.high:.3f}, best {self.best:.3f})"
