"""Paired rounds in alternating order (dgr.verify.bench.paired), with fake timers: which side runs first in
each round, and the median, spread and best-of of the per-round ratios."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from dgr.contracts.paired import Paired
from dgr.errors import ConfigError
from dgr.verify.bench import paired


def recording(calls: list[str]) -> Callable[[str], Callable[[int], str]]:
    """Sides that append their name and round to `calls` and return them."""

    def side(name: str) -> Callable[[int], str]:
        def run(r: int) -> str:
            calls.append(f"{name}{r}")
            return f"{name}{r}"

        return run

    return side


def test_even_rounds_run_a_first_and_odd_rounds_b_first() -> None:
    calls: list[str] = []
    side = recording(calls)
    pairs = paired.alternate(4, side("a"), side("b"))
    assert calls == ["a0", "b0", "b1", "a1", "a2", "b2", "b3", "a3"]
    assert pairs == [("a0", "b0"), ("a1", "b1"), ("a2", "b2"), ("a3", "b3")]


def test_three_sides_rotate_forward_then_back() -> None:
    """`rotate`: the whole model, the relayed and the forwarding ranges of the bench, each first in turn."""
    calls: list[str] = []
    side = recording(calls)
    rounds = paired.rotate(2, [side("w"), side("r"), side("f")])
    assert calls == ["w0", "r0", "f0", "f1", "r1", "w1"]
    assert rounds == [("w0", "r0", "f0"), ("w1", "r1", "f1")]


def test_a_fake_clock_gives_the_median_spread_and_best_of_the_round_ratios() -> None:
    """A fake timer: the side that runs second in a round is slowed by a warm-up effect of 10 %, so a fixed
    order (A always first) would bias the ratio; alternating, the median of the paired ratios is 1.0."""
    clock = {"position": 0}

    def timed(base: float) -> Callable[[int], float]:
        def run(r: int) -> float:
            clock["position"] += 1
            second = clock["position"] % 2 == 0
            return base * (1.1 if second else 1.0)

        return run

    seconds = paired.alternate(5, timed(2.0), timed(2.0))
    assert seconds == [(2.0, 2.2), (2.2, 2.0), (2.0, 2.2), (2.2, 2.0), (2.0, 2.2)]
    a_best, b_best, ratio = paired.of_seconds(100, seconds)
    assert a_best == b_best == pytest.approx(50.0)
    assert ratio.rounds == pytest.approx((1 / 1.1, 1.1, 1 / 1.1, 1.1, 1 / 1.1))
    assert ratio.median == pytest.approx(1 / 1.1)  # 3 of 5 rounds ran A first
    assert (ratio.low, ratio.high, ratio.best) == pytest.approx((1 / 1.1, 1.1, 1.0))
    assert paired.of_seconds(100, seconds[:4])[2].median == pytest.approx((1 / 1.1 + 1.1) / 2)


def test_the_ratio_is_b_over_a_of_rates() -> None:
    p = Paired.of([(100.0, 90.0), (100.0, 99.0), (80.0, 96.0)])
    assert p.rounds == pytest.approx((0.9, 0.99, 1.2))
    # best: 99 / 100, the best round of each side
    assert p.median == pytest.approx(0.99) and p.best == pytest.approx(0.99)
    assert p.text() == "0.990 (0.900-1.200, best 0.990)"
    assert Paired.from_json(p.to_json()) == p
    with pytest.raises(ValueError, match="no paired rounds"):
        Paired.of([])
    with pytest.raises(ConfigError, match="`rounds` is empty"):
        Paired.from_json(p.to_json() | {"rounds": []})
