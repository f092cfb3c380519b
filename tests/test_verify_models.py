"""The harness on any locked model: splits, ranges and limits derived from the model's own layer count and
measurements, never from SmolLM2's 30 layers (no worker runs here)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from dgr.verify.bench import memory
from dgr.verify.checks import boundary, kv, ownership
from dgr.verify.checks.session import parts
from dgr.verify.models import inventory, synth
from dgr.verify.models.env import Env, RealModel

from tests.helpers import ROOT

MiB = 2**20


@pytest.mark.parametrize(
    ("n_layer", "counts"),
    [(30, (2, 3, 6, 30)), (18, (2, 3, 6, 18)), (26, (2, 3, 6, 26)), (4, (2, 3, 4)), (2, (2,)), (1, (1,))],
)
def test_shard_counts_come_from_the_layer_count(n_layer: int, counts: tuple[int, ...]) -> None:
    assert inventory.shard_counts(n_layer) == counts
    assert inventory.shard_counts(n_layer, unsplit=True) == tuple(sorted({1, *counts}))
    for k in counts:
        ranges = inventory.split(n_layer, k)
        assert ranges[0][0] == 0 and ranges[-1][1] == n_layer and len(ranges) == k


def test_no_splits_of_no_layers() -> None:
    with pytest.raises(ValueError, match="a model of 0 layers has no splits"):
        inventory.shard_counts(0)


def test_gemma_thirds_and_sixths() -> None:
    """18 layers: thirds of six layers (five sliding-window layers, then a full-attention one), sixths of
    three (some without a full-attention layer)."""
    assert inventory.split(18, 3) == [(0, 6), (6, 12), (12, 18)]
    assert inventory.split(18, 6) == [(0, 3), (3, 6), (6, 9), (9, 12), (12, 15), (15, 18)]


def test_memory_table_ranges() -> None:
    # for 30 layers: the table the README's figures were measured with
    assert memory.table_ranges(30) == [
        (0, 30),
        (10, 11),
        (10, 13),
        (10, 15),
        (10, 20),
        (5, 25),
        (0, 10),
        (20, 30),
    ]
    assert memory.table_ranges(18) == [(0, 18), (6, 7), (6, 9), (6, 11), (6, 12), (3, 15), (0, 6), (12, 18)]
    assert memory.table_ranges(18, quick=True) == [(0, 18), (6, 12)]
    assert memory.table_ranges(1) == [(0, 1)] == memory.table_ranges(1, quick=True)


def test_invalid_ranges_and_rss_ranges_follow_the_layer_count() -> None:
    assert set(ownership.invalid_ranges(18)) == {(-1, 1), (0, -2), (0, 19), (1, 1), (2, 1), (18, -1)}
    assert ownership.invalid_ranges(18)[(0, 19)] == "the model has 18 layers"
    assert ownership.rss_ranges(18) == {
        "whole": (0, 18),
        "head": (0, 6),
        "middle": (6, 12),
        "tail": (12, 18),
        "one-layer": (9, 10),
    }


# Gemma 3 270M as measured (MiB): the embeddings (170 MiB) are held by the head and the tail; 51 MiB more
# than its tensors in every range (vocabulary, metadata)
GEMMA_OWNED = {"whole": 235.2, "head": 191.7, "middle": 21.3, "tail": 192.1, "one-layer": 3.4}
GEMMA_FIXED = 51.0
IDLE = 7 * MiB


def peaks_of(owned: dict[str, float], fixed: float) -> dict[str, int]:
    return {k: int(IDLE + (v + fixed) * MiB) for k, v in owned.items()}


def test_peak_rss_on_the_line_passes() -> None:
    owned = {k: int(v * MiB) for k, v in GEMMA_OWNED.items()}
    problems, figures = ownership.rss_verdict(
        IDLE, peaks_of(GEMMA_OWNED, GEMMA_FIXED), owned, sanitized=False
    )
    assert problems == []
    assert figures["slope"] == pytest.approx(1.0, abs=1e-6)
    assert figures["fixed_bytes"] == pytest.approx(GEMMA_FIXED * MiB, rel=1e-4)
    assert figures["middle_ratio"] < 0.3


def test_a_middle_range_holding_the_embeddings_is_off_the_line() -> None:
    owned = {k: int(v * MiB) for k, v in GEMMA_OWNED.items()}
    peaks = peaks_of(GEMMA_OWNED, GEMMA_FIXED)
    peaks["middle"] += 170 * MiB
    problems, _ = ownership.rss_verdict(IDLE, peaks, owned, sanitized=False)
    assert any("off the line" in p for p in problems)


def test_every_range_holding_a_copy_of_the_file_is_too_much_fixed_cost() -> None:
    owned = {k: int(v * MiB) for k, v in GEMMA_OWNED.items()}
    problems, _ = ownership.rss_verdict(
        IDLE, peaks_of(GEMMA_OWNED, GEMMA_FIXED + 240), owned, sanitized=False
    )
    assert any("besides its tensors, over 25%" in p for p in problems)


def test_a_slope_of_two_is_refused_but_the_sanitizers_get_room() -> None:
    owned = {k: int(v * MiB) for k, v in GEMMA_OWNED.items()}
    doubled = {k: 2 * v for k, v in GEMMA_OWNED.items()}
    problems, _ = ownership.rss_verdict(IDLE, peaks_of(doubled, GEMMA_FIXED), owned, sanitized=False)
    assert any("grows by 2.000 bytes per owned byte" in p for p in problems)
    # under ASan (measured on Gemma 3): 3% more per owned byte and a third of the whole model's fixed
    asan = {k: 1.03 * v for k, v in GEMMA_OWNED.items()}
    assert ownership.rss_verdict(IDLE, peaks_of(asan, 128.0), owned, sanitized=True)[0] == []
    assert ownership.rss_verdict(IDLE, peaks_of(asan, 128.0), owned, sanitized=False)[0] != []


def kv_measured(per_layer: list[int], splits: list[list[tuple[int, int]]]) -> dict[tuple[int, int], int]:
    n = len(per_layer)
    ranges = [(0, n), *((i, i + 1) for i in range(n)), *(r for s in splits for r in s)]
    return {(b, e): sum(per_layer[b:e]) for b, e in ranges}


def test_kv_share_is_counted_per_layer() -> None:
    """Sliding-window layers of 1 MiB and a full-attention layer of 4 MiB in every six: the halves are not
    half of the whole, they are the sum of their layers."""
    per_layer = [(4 if i % 6 == 5 else 1) * MiB for i in range(18)]
    splits = [inventory.split(18, k) for k in (2, 3, 6)]
    problems, figures = kv.kv_verdict(kv_measured(per_layer, splits), per_layer, splits)
    assert problems == [] and figures["max_deviation"] == 0.0
    assert figures["distinct_layer_sizes"] == [MiB, 4 * MiB]
    assert figures["naive_max_deviation"] > 0.1  # a share by layer count would be 11% off for [0, 9)


def test_kv_of_a_range_holding_another_layer_is_refused() -> None:
    per_layer = [(4 if i % 6 == 5 else 1) * MiB for i in range(18)]
    splits = [inventory.split(18, 3)]
    measured = kv_measured(per_layer, splits)
    measured[(6, 12)] += MiB  # a cache for one layer too many
    problems, _ = kv.kv_verdict(measured, per_layer, splits)
    assert problems == [f"[6, 12): {10 * MiB} bytes of KV cache, its layers hold {9 * MiB} (from the file)"]


def test_the_groups_run_fixtures_then_every_locked_model(tmp_path: Path) -> None:
    """A group's parts are the fixtures and each model by its lock name, the default first."""
    small = synth.ensure(synth.QWEN2, tmp_path)
    other = synth.ensure(synth.BITNET, tmp_path)
    env = Env(
        worker=tmp_path / "layer-worker",
        models=(RealModel.read("first", small), RealModel.read("second", other)),
        fixtures=tmp_path,
    )
    assert env.default.name == "first" and env.models[1].split(2) == [(0, 2), (2, 4)]
    for group in (ownership, boundary, kv):
        assert [name for name, _ in parts(env, group.run_fixtures, group.run_model)] == [
            "fixtures",
            "first",
            "second",
        ]


HARNESS = [
    *sorted((ROOT / "builder" / "dgr" / "verify" / "checks").glob("*.py")),
    *sorted((ROOT / "builder" / "dgr" / "verify" / "bench").glob("*.py")),
]


def code_strings(tree: ast.AST) -> list[str]:
    """The string literals of a module's code (docstrings, which may give examples, left out: a string that
    is a statement of its own)."""
    docs = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


@pytest.mark.parametrize("path", HARNESS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_check_names_a_model_or_a_layer_range_of_one(path: Path) -> None:
    """The checks and the measurements take layer counts, ranges and names from the model: no string of
    their code names a locked model, and no pair of numbers is a range of SmolLM2's 30 layers."""
    tree = ast.parse(path.read_text())
    for text in code_strings(tree):
        assert not any(name in text.lower() for name in ("smollm", "gemma")), text
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and len(node.elts) == 2:
            values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            assert not (len(values) == 2 and 30 in values), f"{path.name}:{node.lineno}: {values}"
