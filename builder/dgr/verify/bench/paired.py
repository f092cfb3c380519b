"""Paired rounds in alternating order, the one way `dgr bench` measures a ratio of two things (split vs
whole, patched vs unpatched, codec vs memcpy): round i runs A then B for even i, B then A for odd i, so
neither side always runs first; the ratio of each round, their median and spread and the best-of
(dgr.contracts.paired.Paired)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from dgr.contracts.paired import Paired

T = TypeVar("T")


def order(round_index: int) -> tuple[int, int]:
    """Which side runs first in round `round_index`: (0, 1) is A then B, (1, 0) is B then A."""
    return (0, 1) if round_index % 2 == 0 else (1, 0)


def rotate(rounds: int, sides: Sequence[Callable[[int], T]]) -> list[tuple[T, ...]]:
    """Each side's measurement of each of `rounds` rounds, in the order of `sides`: round i runs them in that
    order for even i, in reverse for odd i; each side is called with the round's index."""
    out: list[tuple[T, ...]] = []
    for r in range(rounds):
        got: dict[int, T] = {}
        for side in range(len(sides)) if r % 2 == 0 else reversed(range(len(sides))):
            got[side] = sides[side](r)
        out.append(tuple(got[i] for i in range(len(sides))))
    return out


def alternate(rounds: int, a: Callable[[int], T], b: Callable[[int], T]) -> list[tuple[T, T]]:
    """(A's, B's) measurement of each of `rounds` rounds (`rotate` of the two)."""
    return [(x[0], x[1]) for x in rotate(rounds, (a, b))]


def rates(amount: float, seconds: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (A, B) rates of rounds timed in seconds for the same `amount` (tokens, bytes)."""
    return [(amount / sa, amount / sb) for sa, sb in seconds]


def of_seconds(amount: float, seconds: list[tuple[float, float]]) -> tuple[float, float, Paired]:
    """A's and B's best rate (amount / fastest round) and the ratio B / A of the rounds timed in seconds."""
    pairs = rates(amount, seconds)
    return max(p[0] for p in pairs), max(p[1] for p in pairs), Paired.of(pairs)
