"""The bytes of a model's KV cache per layer, computed from the GGUF file's hyperparameters alone (not from
what llama.cpp or the worker report): the reference of the `kv` group's KV bytes check.

A layer's cache holds, for each of its cells, a K row of n_head_kv * key_length elements of the K cache type
and a V row of n_head_kv * value_length of the V cache type (key_length and value_length default to
n_embd / n_head). A model with sliding-window layers (Gemma 3: every layer but each sixth, or the file's
`sliding_window_pattern`) has two caches (llama_kv_cache_iswa): the full-attention layers hold the context's
cells, the sliding-window layers as many with `swa_full` (llama_context_default_params()'s default, which the
worker keeps), else min(cells, n_swa + n_ubatch) padded to 256."""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from dgr.errors import ConfigError
from dgr.verify.models.inventory import Inventory

PAD = 256
"""llama.cpp pads the cells of a KV cache (and the sliding-window cache) to a multiple of 256."""
SWA_PATTERNS = {"gemma3": 6}
"""The architectures with sliding-window layers this module knows, and llama.cpp's default pattern (every
n-th layer is full attention, counted from the first: `set_swa_pattern(n, dense_first=false)`)."""


@dataclass(frozen=True)
class KvContext:
    """What of the context sizes the cache of one session (one stream, as the worker's `max_sessions = 1`):
    its cells (`n_ctx`), the cache types, the sliding-window cache's size (`swa_full`, `n_ubatch`)."""

    n_ctx: int
    type_k: str = "f16"
    type_v: str = "f16"
    swa_full: bool = True
    n_ubatch: int = 512


def _pad(n: int) -> int:
    return -(-n // PAD) * PAD


def _row_bytes(kind: str, n: int) -> int:
    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType[kind.upper()]]
    except KeyError as exc:
        raise ConfigError(f"unknown KV cache type {kind!r}") from exc
    if n % block:
        raise ConfigError(f"a row of {n} elements is not whole blocks of {block} ({kind})")
    return n // block * size


def _int(inv: Inventory, key: str, default: int | None = None) -> int:
    value = inv.metadata.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        found = "missing" if key not in inv.metadata else f"{value!r} (an array per layer?)"
        raise ConfigError(f"{inv.path}: metadata {key} is {found}: no KV size can be computed from it")
    return value


def swa_layers(inv: Inventory) -> set[int]:
    """The layers with a sliding window (empty: none)."""
    a = inv.arch
    if a not in SWA_PATTERNS or not inv.metadata.get(f"{a}.attention.sliding_window"):
        return set()
    n = _int(inv, f"{a}.attention.sliding_window_pattern", SWA_PATTERNS[a])
    return {il for il in range(inv.n_layer) if il % n < n - 1}


def layer_bytes(inv: Inventory, ctx: KvContext) -> list[int]:
    """The bytes of the K and V cache of every layer of the model, in order."""
    a = inv.arch
    n_head = _int(inv, f"{a}.attention.head_count")
    n_head_kv = _int(inv, f"{a}.attention.head_count_kv", n_head)
    head_k = _int(inv, f"{a}.attention.key_length", inv.n_embd // n_head)
    head_v = _int(inv, f"{a}.attention.value_length", inv.n_embd // n_head)
    row = _row_bytes(ctx.type_k, n_head_kv * head_k) + _row_bytes(ctx.type_v, n_head_kv * head_v)
    cells = _pad(ctx.n_ctx)
    swa = swa_layers(inv)
    swa_cells = cells
    if swa and not ctx.swa_full:
        n_swa = _int(inv, f"{a}.attention.sliding_window")
        swa_cells = _pad(min(cells, n_swa + ctx.n_ubatch))
    return [row * (swa_cells if il in swa else cells) for il in range(inv.n_layer)]
