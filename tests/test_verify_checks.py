"""The verdicts of the conformance checks on figures made up to break them: each fails when what it names
is absent or differs from its reference (the GGUF file, the unsplit model), and passes only when it holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from dgr.errors import ConfigError
from dgr.verify.checks import boundary, kv
from dgr.verify.models import inventory, kvsize
from dgr.verify.models.inventory import Inventory

LOGITS = np.arange(12, dtype=np.float32).reshape(3, 4)


def test_baseline_empty_states_fail() -> None:
    problems, figures = boundary.baseline_verdict(LOGITS, LOGITS.copy(), [b"", b""], [True, True])
    assert figures["state_identical"] is True  # equal, and proving nothing
    assert problems == ["the saved state of the patched and the upstream build is empty: nothing to compare"]
    problems, _ = boundary.baseline_verdict(LOGITS, LOGITS.copy(), [b"kv", b""], [True, True])
    assert problems == ["the saved state of the upstream build is empty: nothing to compare"]


def test_baseline_equal_states_and_logits_pass() -> None:
    assert boundary.baseline_verdict(LOGITS, LOGITS.copy(), [b"kv", b"kv"], [True, True])[0] == []
    problems, _ = boundary.baseline_verdict(LOGITS, LOGITS + 1, [b"kv", b"kx"], [True, False])
    assert len(problems) == 3


def llama(n_layer: int = 4, **metadata: Any) -> Inventory:
    md = {"llama.attention.head_count": 4, "llama.attention.head_count_kv": 2, **metadata}
    return Inventory(Path("m.gguf"), "llama", n_layer, 64, {}, metadata=md)


def gemma3(**metadata: Any) -> Inventory:
    md = {
        "gemma3.attention.head_count": 4,
        "gemma3.attention.head_count_kv": 1,
        "gemma3.attention.key_length": 256,
        "gemma3.attention.value_length": 256,
        "gemma3.attention.sliding_window": 512,
        **metadata,
    }
    return Inventory(Path("g.gguf"), "gemma3", 18, 640, {}, metadata=md)


def test_kv_bytes_from_the_hyperparameters() -> None:
    # 2 KV heads of 64 / 4 = 16: a K and a V row of 32 f16 elements per cell
    assert kvsize.layer_bytes(llama(), kvsize.KvContext(n_ctx=4096)) == [4096 * 2 * 32 * 2] * 4
    assert kvsize.layer_bytes(llama(), kvsize.KvContext(n_ctx=4000))[0] == 4096 * 2 * 32 * 2  # padded to 256
    f32 = kvsize.layer_bytes(llama(), kvsize.KvContext(n_ctx=256, type_k="f32"))
    assert f32 == [256 * 32 * (4 + 2)] * 4
    # Gemma 3: each sixth layer is full attention; swa_full gives the others as many cells
    assert sorted(set(range(18)) - kvsize.swa_layers(gemma3())) == [5, 11, 17]
    assert kvsize.layer_bytes(gemma3(), kvsize.KvContext(n_ctx=4096)) == [4096 * 256 * 2 * 2] * 18
    short = kvsize.layer_bytes(gemma3(), kvsize.KvContext(n_ctx=4096, swa_full=False))
    assert short[5] == 4096 * 1024 and short[0] == 1024 * 1024  # n_swa + n_ubatch = 1024 cells
    with pytest.raises(ConfigError, match="head_count is missing"):
        kvsize.layer_bytes(Inventory(Path("x.gguf"), "llama", 2, 64, {}), kvsize.KvContext(n_ctx=256))


def measured_as(per_layer: list[int], splits: list[list[tuple[int, int]]]) -> dict[tuple[int, int], int]:
    n = len(per_layer)
    ranges = [(0, n), *((i, i + 1) for i in range(n)), *(r for s in splits for r in s)]
    return {(b, e): sum(per_layer[b:e]) for b, e in ranges}


def test_kv_verdict_against_the_file() -> None:
    expected = [100, 100, 100, 400]
    splits = [inventory.split(4, 2)]
    assert kv.kv_verdict(measured_as(expected, splits), expected, splits)[0] == []
    # the worker's own figures agree with each other (its layers add up) but not with the file
    problems, _ = kv.kv_verdict(measured_as([100] * 4, splits), expected, splits)
    assert "[0, 4): 400 bytes of KV cache, its layers hold 700 (from the file)" in problems
    # a range that holds the whole model's cache
    whole = measured_as(expected, splits) | {(2, 4): 700}
    assert kv.kv_verdict(whole, expected, splits)[0] == [
        "[2, 4): 700 bytes of KV cache, its layers hold 500 (from the file)"
    ]
