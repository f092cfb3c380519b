"""Memory of a layer range: weight buffers, KV cache and peak RSS per range, and the chart."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dgr.contracts.bench import MemoryRow
from dgr.core import log
from dgr.verify.models import inventory, prompts
from dgr.verify.wire.client import ContextParams, Worker

PREFILL_TOKENS = 64
"""The tokens every range of the memory table decodes before its peak RSS is read."""


def table_ranges(n_layer: int, quick: bool = False) -> list[tuple[int, int]]:
    """The ranges of the memory table, from the layer count: the whole model; ranges from the start of the
    middle third of 1, 3 and 5 layers and the middle third itself; the middle two thirds; the first and the
    last third (for 30 layers: [0, 30), [10, 11), [10, 13), [10, 15), [10, 20), [5, 25), [0, 10), [20, 30)).
    Quick: the whole model and the middle third."""
    third = max(1, n_layer // 3)
    middle = (third, min(n_layer, 2 * third))
    grown = [(third, third + size) for size in (1, 3, 5) if third + size < middle[1]]
    ranges = [(0, n_layer), middle] if quick else [(0, n_layer), *grown, middle]
    if not quick:
        ranges += [(n_layer // 6, n_layer - n_layer // 6), (0, third), (n_layer - third, n_layer)]
    return [r for r in dict.fromkeys(ranges) if 0 <= r[0] < r[1] <= n_layer]


def prefill_tokens(worker: Path, model_path: Path) -> list[int]:
    """The `PREFILL_TOKENS` tokens of the prompt every range decodes before its peak RSS is read."""
    with Worker(worker, "mem-tokenizer") as w:
        w.load(model_path, (0, 1))
        return list(w.request("tokenize", text=prompts.LONG).header["tokens"][:PREFILL_TOKENS])


def _decode_fields(tokens: Sequence[int]) -> dict[str, Any]:
    return {"session": "m", "epoch": 1, "pos": 0, "n_tokens": len(tokens), "logits": "none"}


def hidden_state(
    worker: Path, model_path: Path, begin: int, tokens: Sequence[int], context: ContextParams
) -> bytes:
    """The bundle of the hidden state of `tokens` entering layer `begin`, from a worker of the layers
    [0, begin) of `model_path` (a separate process: its memory is not counted)."""
    with Worker(worker, f"mem-feed[0,{begin})") as feed:
        feed.load(model_path, (0, begin), context=context)
        return feed.request("decode", tokens=list(tokens), **_decode_fields(tokens)).body


def prefill(w: Worker, begin: int, tokens: Sequence[int], hidden: bytes) -> bytes:
    """The prefill of `tokens` through the range of `w`, which begins at `begin`: the tokens themselves at
    layer 0, else their hidden state `hidden` (`hidden_state`); the reply's body (before the last layer: the
    hidden state entering the next range, as `hidden_state` gives it)."""
    if begin == 0:
        return w.request("decode", tokens=list(tokens), **_decode_fields(tokens)).body
    return w.request("decode", hidden, **_decode_fields(tokens)).body


def measure(
    worker: Path, model_path: Path, inv: inventory.Inventory, quick: bool, ctx: int = 1024
) -> tuple[MemoryRow, ...]:
    """Model bytes, KV bytes (a context of `ctx` cells) and peak RSS (mmap off, fresh process, after the
    same 64-token prefill in every range) per range. A range after layer 0 is fed the hidden state of those
    64 tokens, computed by a separate process that holds the layers before it (its memory is not counted)."""
    n = inv.n_layer
    ranges = table_ranges(n, quick)
    context = ContextParams(n_ctx=ctx, max_sessions=1)
    tokens = prefill_tokens(worker, model_path)
    hidden: dict[int, bytes] = {}
    measured: list[tuple[int, int, int, int, int, int]] = []
    for begin, end in ranges:
        if begin > 0 and begin not in hidden:
            hidden[begin] = hidden_state(worker, model_path, begin, tokens, context)
        with Worker(worker, f"mem[{begin},{end})") as w:
            rep = w.load(model_path, (begin, end), mmap=False, context=context)
            prefill(w, begin, tokens, hidden.get(begin, b""))
            mem = w.request("memory").header
        owned = inv.expected(begin, end)
        row = (begin, end, inv.bytes_of(owned), rep["buffer_size"], mem["kv_bytes"], mem["peak_rss"])
        measured.append(row)
    whole = measured[0]
    return tuple(
        MemoryRow(
            layers=(begin, end),
            owned_layers=end - begin,
            owned_fraction=(end - begin) / n,
            owned_tensor_bytes=owned_bytes,
            model_bytes=model_bytes,
            model_fraction=model_bytes / inv.n_bytes,
            kv_bytes=kv_bytes,
            peak_rss=peak_rss,
            kv_fraction=kv_bytes / whole[4],
            peak_rss_fraction=peak_rss / whole[5],
        )
        for begin, end, owned_bytes, model_bytes, kv_bytes, peak_rss in measured
    )


def chart(rows: Sequence[MemoryRow], path: Path, title: str, ctx: int) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warn("matplotlib is not installed: no chart (pip install -e '.[bench]')")
        return None
    n_layer = max(r.layers[1] for r in rows)
    middle = sorted(
        (r for r in rows if (r.layers[0] > 0 and r.layers[1] < n_layer) or r.layers == (0, n_layer)),
        key=lambda r: r.owned_layers,
    )
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    x = [r.owned_layers for r in middle]
    series = {
        "model buffers": [r.model_bytes for r in middle],
        "KV cache": [r.kv_bytes for r in middle],
        "peak RSS": [r.peak_rss for r in middle],
    }
    for label, values in series.items():
        ax.plot(x, [v / 2**20 for v in values], marker="o", label=label)
    ax.set_xlabel(f"owned layers (ranges without the embeddings; {n_layer} = whole model)")
    ax.set_ylabel("MiB")
    ax.set_title(f"{title}: memory of a layer range (mmap off, n_ctx {ctx})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(
        path,
        metadata={"Software": None, "CreationDate": None} if path.suffix == ".pdf" else {"Software": None},
    )
    plt.close(fig)
    return path
