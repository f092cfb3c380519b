"""The bundle codec against memcpy of the same bytes: the worker's C++ codec and the Python one, in paired
repetitions in alternating order (dgr.verify.bench.paired)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from dgr.contracts.bench import CodecSpeed
from dgr.errors import BenchError
from dgr.verify.bench import paired
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
    sink = np.empty_like(residual)

    def hop(_: int) -> float:
        t0 = time.perf_counter()
        data = bundle.encode(meta, {"residual": ("F32", residual)})
        np.copyto(sink, bundle.decode(data).tensor("residual"))
        return time.perf_counter() - t0

    def copy_twice(_: int) -> float:
        t0 = time.perf_counter()
        staged = residual.copy()
        np.copyto(sink, staged)
        return time.perf_counter() - t0

    py = speed(residual.nbytes, reps, paired.alternate(reps, copy_twice, hop))
    try:
        cpp_rounds = list(zip(cpp["memcpy_s"], cpp["codec_s"], strict=True))
        extra = {"encode_gbps": float(cpp["encode_gbps"]), "decode_gbps": float(cpp["decode_gbps"])}
        cpp_speed = speed(int(cpp["bytes"]), int(cpp["reps"]), cpp_rounds, **extra)
    except (KeyError, TypeError, ValueError) as exc:
        what = f"layer-bench codec printed no seconds per repetition ({exc})"
        raise BenchError(what, detail=str(cpp)) from exc
    return {"cpp": cpp_speed, "python": py}


def speed(nbytes: int, reps: int, seconds: list[tuple[float, float]], **extra: float) -> CodecSpeed:
    """The codec against memcpy of `nbytes` from the seconds of each repetition (memcpy's, the codec's)."""
    memcpy_gbps, codec_gbps, ratio = paired.of_seconds(nbytes / 1e9, seconds)
    return CodecSpeed(
        bytes=nbytes,
        reps=reps,
        codec_gbps=codec_gbps,
        memcpy_gbps=memcpy_gbps,
        ratio_to_memcpy=ratio,
        **extra,
    )
