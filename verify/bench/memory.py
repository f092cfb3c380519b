"""Memory of a layer range: weight buffers, KV cache and peak RSS per range, and the chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dgr import log
from dgr.verify import inventory, prompts
from dgr.verify.client import Worker


def measure(worker: Path, model_path: Path, inv: inventory.Inventory, quick: bool) -> list[dict[str, Any]]:
    """Model bytes, KV bytes and peak RSS (mmap off, fresh process, after a 64-token prefill) per range."""
    n = inv.n_layer
    ranges = [(0, n), (10, 11), (10, 13), (10, 15), (10, 20), (5, 25), (0, 10), (20, n)]
    if quick:
        ranges = [(0, n), (10, 20)]
    out = []
    for begin, end in ranges:
        with Worker(worker, f"mem[{begin},{end})") as w:
            rep = w.request(
                "load",
                model=str(model_path),
                layer_begin=begin,
                layer_end=end,
                mmap=False,
                context=True,
                n_ctx=1024,
                max_sessions=1,
            ).header
            tokens = w.request("tokenize", text=prompts.LONG).header["tokens"][:64] if begin == 0 else None
            if tokens is not None:
                w.request("decode", tokens=tokens, session="m", epoch=1, pos=0, n_tokens=len(tokens))
            mem = w.request("memory").header
        owned = inv.expected(begin, end)
        out.append(
            {
                "layers": [begin, end],
                "owned_layers": end - begin,
                "owned_fraction": (end - begin) / n,
                "owned_tensor_bytes": inv.bytes_of(owned),
                "model_bytes": rep["buffer_size"],
                "model_fraction": rep["buffer_size"] / inv.n_bytes,
                "kv_bytes": mem["kv_bytes"],
                "peak_rss": mem["peak_rss"],
            }
        )
    whole = out[0]
    for row in out:
        row["kv_fraction"] = row["kv_bytes"] / whole["kv_bytes"]
        row["peak_rss_fraction"] = row["peak_rss"] / whole["peak_rss"]
    return out


def chart(rows: list[dict[str, Any]], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warn("matplotlib is not installed: no chart (pip install -e '.[bench]')")
        return None
    middle = sorted(
        (r for r in rows if (r["layers"][0] > 0 and r["layers"][1] < 30) or r["layers"] == [0, 30]),
        key=lambda r: r["owned_layers"],
    )
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    x = [r["owned_layers"] for r in middle]
    for key, label in (("model_bytes", "model buffers"), ("kv_bytes", "KV cache"), ("peak_rss", "peak RSS")):
        ax.plot(x, [r[key] / 2**20 for r in middle], marker="o", label=label)
    ax.set_xlabel("owned layers (ranges without the embeddings; 30 = whole model)")
    ax.set_ylabel("MiB")
    ax.set_title("SmolLM2-135M Q4_1: memory of a layer range (mmap off, n_ctx 1024)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(
        path,
        metadata={"Software": None, "CreationDate": None} if path.suffix == ".pdf" else {"Software": None},
    )
    plt.close(fig)
    return path
