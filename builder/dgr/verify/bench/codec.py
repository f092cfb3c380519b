"""The bundle codec against memcpy of the same bytes: the worker's C++ codec and the Python one."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from dgr.contracts.bench import CodecSpeed
from dgr.verify.bench.split import run_json
from dgr.verify.wire import bundle


def measure(bin_dir: Path, quick: bool) -> dict[str, CodecSpeed]:
    """Encode + decode of a 512-token residual bundle vs memcpy of the same bytes, C++ and Python."""
    reps = 20 if quick else 200
    cpp = run_json(
        [bin_dir / "layer-bench", "codec", "--tokens", "512", "--n-embd", "576", "--reps", str(reps)], {}
    )
    residual = np.random.default_rng(0).standard_normal((512, 576)).astype(np.float32)
    meta = {
        "model": "0" * 16,
        "n_layer": "30",
        "layer_begin": "0",
        "layer_end": "10",
        "session": "b",
        "epoch": "1",
        "pos": "0",
        "n_tokens": "512",
    }
    best_codec = best_copy = float("inf")
    sink = np.empty_like(residual)
    for _ in range(reps):
        t0 = time.perf_counter()
        data = bundle.encode(meta, {"residual": ("F32", residual)})
        np.copyto(sink, bundle.decode(data).tensor("residual"))
        t1 = time.perf_counter()
        staged = residual.copy()
        np.copyto(sink, staged)
        t2 = time.perf_counter()
        best_codec, best_copy = min(best_codec, t1 - t0), min(best_copy, t2 - t1)
    gb = residual.nbytes / 1e9
    py = CodecSpeed(
        bytes=residual.nbytes,
        reps=reps,
        codec_gbps=gb / best_codec,
        memcpy_gbps=gb / best_copy,
        ratio_to_memcpy=best_copy / best_codec,
        zero_copy_decode=True,
    )
    return {"cpp": CodecSpeed.from_json(cpp, "layer-bench codec"), "python": py}
