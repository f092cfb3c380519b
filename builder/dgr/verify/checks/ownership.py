"""Concern 1: range-aware loading and authoritative ownership."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dgr.contracts.report import REAL_MODEL, SYNTHETIC, Check, Evidence
from dgr.errors import WorkerRequestError
from dgr.verify.checks.report import guarded, verdict
from dgr.verify.checks.session import conformance
from dgr.verify.models import inventory, synth
from dgr.verify.models.env import Env, RealModel
from dgr.verify.wire.client import ContextParams, Worker

# the largest deviation allowed between the model buffers a shard allocates and the bytes of its tensors
BUFFER_TOLERANCE = 0.01


def _mapped_buffers(inv: inventory.Inventory, buffers: list[dict[str, Any]], where: str) -> list[str]:
    """With mmap, the CPU_Mapped buffer of the weights is the file's byte range from the first to the last of
    its tensors (llama.cpp maps that range and nothing else); a tensor llama.cpp moved to another buffer type
    (CPU_REPACK: a layout for the CPU kernels) has its bytes there, at least its bytes in the file."""
    problems: list[str] = []
    mapped = [b for b in buffers if b["type"] == "CPU_Mapped"]
    if len(mapped) != 1:
        problems.append(f"{where}: {len(mapped)} CPU_Mapped weight buffers, expected one (the file)")
    for b in buffers:
        names = list(b["tensors"])
        unknown = [n for n in names if n not in inv.spans]
        if not names or unknown:
            held = unknown or "no tensor"
            problems.append(f"{where}: a {b['type']} buffer of {b['bytes']} bytes holds {held}")
            continue
        if b["type"] == "CPU_Mapped":
            first = min(inv.spans[n][0] for n in names)
            last = max(inv.spans[n][1] for n in names)
            if b["bytes"] != last - first:
                problems.append(
                    f"{where}: the mapped buffer is {b['bytes']} bytes; its {len(names)} tensors span "
                    f"{last - first} bytes of the file ({first} to {last})"
                )
        elif b["bytes"] < inv.bytes_of(set(names)):
            problems.append(
                f"{where}: the {b['type']} buffer is {b['bytes']} bytes for {inv.bytes_of(set(names))} "
                "bytes of its tensors in the file"
            )
    return problems


def _load(w: Worker, model: Path, begin: int, end: int, mmap: bool) -> dict[str, Any]:
    return w.load(model, (begin, end), mmap=mmap)


def check_split(env: Env, inv: inventory.Inventory, k: int, evidence: Evidence, label: str) -> Check:
    """Split into k shards: each shard holds exactly its inventory; together they hold the file once."""
    problems: list[str] = []
    shard_tensors: list[int] = []
    shard_bytes: list[int] = []
    max_dev = 0.0
    mmap_span: list[int] = []
    mmap_buffers: list[dict[str, int]] = []
    holders: dict[str, int] = {}
    ranges = inventory.split(inv.n_layer, k)
    with Worker(env.worker, f"{label}-k{k}") as w:
        for mmap in (False, True):
            for begin, end in ranges:
                rep = _load(w, inv.path, begin, end, mmap)
                held = {name: nbytes for name, nbytes in rep["tensors"]}
                expected = inv.expected(begin, end)
                where = f"[{begin}, {end}) {'mmap' if mmap else 'no mmap'}"
                if set(held) != expected:
                    problems.append(
                        f"{where}: extra {sorted(set(held) - expected)[:5]}, "
                        f"missing {sorted(expected - set(held))[:5]}"
                    )
                for name, nbytes in held.items():
                    if inv.tensors.get(name) != nbytes:
                        problems.append(
                            f"{where}: {name} is {nbytes} bytes, the file says {inv.tensors.get(name)}"
                        )
                flags = (rep["has_tok_embd"], rep["has_output_norm"], rep["has_output"])
                want = (begin == 0, end == inv.n_layer, end == inv.n_layer)
                if flags != want:
                    problems.append(f"{where}: (tok_embd, output_norm, output) = {flags}, expected {want}")
                if (rep["layer_begin"], rep["layer_end"]) != (begin, end):
                    problems.append(f"{where}: reports [{rep['layer_begin']}, {rep['layer_end']})")
                if mmap:
                    mmap_span.append(rep["buffer_size"])
                    mmap_buffers.append({b["type"]: b["bytes"] for b in rep["buffers"]})
                    problems += _mapped_buffers(inv, rep["buffers"], where)
                    continue
                owned = inv.bytes_of(expected)
                dev = abs(rep["buffer_size"] - owned) / owned
                max_dev = max(max_dev, dev)
                if dev > BUFFER_TOLERANCE:
                    problems.append(
                        f"{where}: allocates {rep['buffer_size']} bytes for {owned} bytes of tensors"
                    )
                shard_tensors.append(rep["n_tensors"])
                shard_bytes.append(rep["n_bytes"])
                for name in held:
                    holders[name] = holders.get(name, 0) + 1
    want_bytes = 0
    for name, nbytes in inv.tensors.items():
        want_holders = (
            k if inventory.is_shared(name) else (min(2, k) if inv.tied and name == "token_embd.weight" else 1)
        )
        want_bytes += want_holders * nbytes
        if holders.get(name, 0) != want_holders:
            problems.append(f"{name} is held by {holders.get(name, 0)} shards, expected {want_holders}")
    # the shards' own byte counts, summed, against the file's: each tensor once, a shared one once per holder
    if sum(shard_bytes) != want_bytes:
        problems.append(
            f"the shards hold {sum(shard_bytes)} bytes in all; the file's tensors, each counted once per "
            f"shard that must hold it, are {want_bytes} bytes ({inv.n_bytes} in the file)"
        )
    figures: dict[str, Any] = {
        "shards": k,
        "file_tensors": len(inv.tensors),
        "held_tensors_total": sum(shard_tensors),
        "file_bytes": inv.n_bytes,
        "held_bytes_total": sum(shard_bytes),
        "expected_held_bytes_total": want_bytes,
        "max_buffer_deviation": max_dev,
        "tensors_per_shard": shard_tensors,
        "bytes_per_shard": shard_bytes,
        "mmap_buffer_span_per_shard": mmap_span,
        "mmap_buffers_per_shard": mmap_buffers,
    }
    if inv.tied:
        figures["tied_head_holders"] = holders.get("token_embd.weight", 0)
    return verdict("ownership", f"split-{k}/{label}", evidence, problems, figures, limit=20)


@dataclass(frozen=True)
class RssLimits:
    """The limits of the peak RSS check (see check_peak_rss)."""

    slope: tuple[float, float]
    """The growth of peak RSS per owned byte (a byte of RSS per byte of tensors: 1)."""
    residual: float
    """How far any range may be from the line, as a fraction of the whole model's owned bytes."""
    fixed: float
    """The most that the part every range pays alike (the vocabulary, metadata, the loader) may be of the
    whole model's own growth of peak RSS (peak - idle)."""


RSS_LIMITS = RssLimits(slope=(0.95, 1.05), residual=0.02, fixed=0.25)
"""Measured: slope 1.000 for SmolLM2 and Gemma 3, residual under 0.1% of the owned bytes, fixed part 17% of
the whole model's (SmolLM2, its 49k-token vocabulary) and 18% (Gemma 3, 262k tokens)."""
RSS_LIMITS_SANITIZED = RssLimits(slope=(0.9, 1.5), residual=0.05, fixed=0.5)
"""Under ASan/UBSan, whose shadow memory grows with what a process allocates and whose redzones and
quarantine with the number of allocations (the vocabulary's many small ones): measured slope 1.03, residual
2.6% and fixed part 34% (Gemma 3). A range holding another range's tensors is still far off the line
(Gemma 3's embeddings are 72% of its owned bytes)."""


def rss_ranges(n_layer: int) -> dict[str, tuple[int, int]]:
    """The ranges the peak RSS check loads: the whole model, its thirds, and one layer in the middle."""
    ranges = {"whole": (0, n_layer)}
    if n_layer >= 3:
        ranges |= dict(zip(("head", "middle", "tail"), inventory.split(n_layer, 3), strict=True))
    if n_layer >= 2:
        ranges["one-layer"] = (n_layer // 2, n_layer // 2 + 1)
    return ranges


def rss_fit(owned: list[int], net: list[int]) -> tuple[float, float, float]:
    """The least-squares line net = slope * owned + fixed through the points, and the largest residual."""
    slope, fixed = (float(v) for v in np.polyfit(np.array(owned, float), np.array(net, float), 1))
    residual = max(abs(n - (slope * o + fixed)) for o, n in zip(owned, net, strict=True))
    return slope, fixed, float(residual)


def rss_verdict(
    idle: int, peaks: dict[str, int], owned: dict[str, int], sanitized: bool
) -> tuple[list[str], dict[str, Any]]:
    """The problems and the figures of peak RSS `peaks` of ranges owning `owned` bytes (both by label; one
    is "whole"), given an idle worker's peak `idle` (see check_peak_rss)."""
    labels = list(peaks)
    slope, fixed, residual = rss_fit([owned[k] for k in labels], [peaks[k] - idle for k in labels])
    whole_net = peaks["whole"] - idle
    limits = RSS_LIMITS_SANITIZED if sanitized else RSS_LIMITS
    low, high = limits.slope
    problems = []
    if not low <= slope <= high:
        problems.append(f"peak RSS grows by {slope:.3f} bytes per owned byte, outside [{low}, {high}]")
    if residual > limits.residual * owned["whole"]:
        problems.append(
            f"a range is {residual / 2**20:.1f} MiB off the line, over {limits.residual:.0%} of the model's "
            f"{owned['whole'] / 2**20:.1f} MiB"
        )
    if fixed > limits.fixed * whole_net:
        problems.append(
            f"every range pays {fixed / 2**20:.1f} MiB besides its tensors, over {limits.fixed:.0%} of the "
            f"whole model's {whole_net / 2**20:.1f} MiB"
        )
    figures: dict[str, Any] = {
        "idle_peak_rss": idle,
        **{f"{k}_peak_rss": v for k, v in peaks.items()},
        **{f"{k}_owned_bytes": v for k, v in owned.items()},
        **{f"{k}_ratio": peaks[k] / peaks["whole"] for k in labels if k != "whole"},
        "slope": slope,
        "fixed_bytes": fixed,
        "fixed_fraction": fixed / whole_net,
        "max_residual_bytes": residual,
        "slope_limits": [low, high],
        "residual_limit": limits.residual,
        "fixed_limit": limits.fixed,
    }
    return problems, figures


def check_peak_rss(env: Env, m: RealModel) -> Check:
    """A range's process needs the tensors it owns, not the model's: peak RSS (mmap off, each range in a
    fresh process) minus an idle worker's is a line of the bytes the range owns (read from the file) with a
    slope of 1 and a part every range pays alike (vocabulary, metadata, the loader) of at most a quarter of
    the whole model's; no range is off the line by more than 2% of the whole model's owned bytes
    (RSS_LIMITS). A range that held a tensor of another range (the 262k-token embeddings of Gemma 3 in a
    middle range) would be off the line by that tensor.

    Measured over the whole model, its thirds and one middle layer; under sanitizers with the limits of
    RSS_LIMITS_SANITIZED."""
    inv = m.inv
    with Worker(env.worker, "rss-idle") as w:
        idle = int(w.request("memory").header["peak_rss"])
    ranges = rss_ranges(inv.n_layer)
    peaks: dict[str, int] = {}
    owned: dict[str, int] = {}
    for label, (begin, end) in ranges.items():
        with Worker(env.worker, f"rss-{label}") as w:
            rep = _load(w, inv.path, begin, end, mmap=False)
            peaks[label] = int(rep["memory"]["peak_rss"])
        owned[label] = inv.bytes_of(inv.expected(begin, end))
    problems, figures = rss_verdict(idle, peaks, owned, env.sanitized)
    figures["ranges"] = {k: list(v) for k, v in ranges.items()}
    return verdict("ownership", f"peak-rss-per-range/{m.name}", REAL_MODEL, problems, figures)


def invalid_ranges(n_layer: int) -> dict[tuple[int, int], str]:
    """Ranges a model of `n_layer` layers must refuse, with a phrase of the message that says why."""
    return {
        (-1, 1): "negative layer",
        (0, -2): "negative layer",
        (0, n_layer + 1): f"the model has {n_layer} layers",
        (1, 1): "the range is empty",
        (2, 1): "the range is empty",
        (n_layer, -1): "the range is empty",
    }


def check_invalid_ranges(env: Env, m: RealModel) -> Check:
    problems: list[str] = []
    messages: dict[str, str] = {}
    cases = invalid_ranges(m.n_layer)
    with Worker(env.worker, "invalid-ranges") as w:
        for (begin, end), phrase in cases.items():
            try:
                _load(w, m.path, begin, end, mmap=True)
                problems.append(f"[{begin}, {end}) was accepted")
            except WorkerRequestError as e:
                messages[f"[{begin},{end})"] = e.message.splitlines()[0] if e.message else ""
                if e.code != "load_failed" or phrase not in e.message:
                    problems.append(f"[{begin}, {end}): {e.code}: {e.message!r} does not say '{phrase}'")
        # the worker survived every refusal and still loads a valid range
        rep = _load(w, m.path, 0, 1, mmap=True)
        if rep["layer_end"] != 1:
            problems.append("a valid range after the refusals did not load")
    return verdict(
        "ownership",
        f"invalid-ranges/{m.name}",
        REAL_MODEL,
        problems,
        {"refused": len(messages), "cases": len(cases), "messages": messages},
    )


def check_refused_range(env: Env) -> Check:
    """BitNet's graph reads the token embeddings as its output head, so it does not opt in to layer ranges:
    its whole model loads, by default and as [0, n_layer), and every range is refused at load with the
    standard message of an architecture without layer ranges."""
    path = env.synth(synth.BITNET)
    n_layer = synth.BITNET.n_layer
    problems: list[str] = []
    messages: dict[str, str] = {}
    context = ContextParams(n_ctx=64, max_sessions=1, threads=env.threads)
    with Worker(env.worker, "refused-range") as w:
        whole = w.load(path, (0, n_layer), context=context)
        if whole["n_tensors"] != len(inventory.read(path).tensors):
            problems.append("the whole model did not load all its tensors")
        for begin, end in ((0, n_layer - 1), (1, n_layer)):
            try:
                w.load(path, (begin, end), context=context)
                problems.append(f"the range [{begin}, {end}) loaded")
            except WorkerRequestError as e:
                messages[f"[{begin}, {end})"] = e.message.splitlines()[-1]
                if e.code != "load_failed" or "does not support layer ranges" not in e.message:
                    problems.append(f"[{begin}, {end}): unexpected error: {e.code}: {e.message!r}")
    return verdict(
        "ownership", "refused-range/bitnet", SYNTHETIC, problems, {"arch": "bitnet", "messages": messages}
    )


def run_fixtures(env: Env) -> list[Check]:
    """Splits of the synthetic models (tied and untied), and the range BitNet's graph cannot evaluate."""
    checks: list[Check] = []
    for model, evidence, label in env.synthetic_models():
        inv = inventory.read(model)
        for k in inventory.shard_counts(inv.n_layer, unsplit=True):
            checks += guarded(
                "ownership",
                f"split-{k}/{label}",
                evidence,
                partial(check_split, env, inv, k, evidence, label),
            )
    checks += guarded("ownership", "refused-range/bitnet", SYNTHETIC, lambda: check_refused_range(env))
    return checks


def run_model(env: Env, m: RealModel) -> list[Check]:
    """Splits of the model, peak RSS per range, invalid ranges."""
    checks: list[Check] = []
    for k in inventory.shard_counts(m.n_layer, unsplit=True):
        checks += guarded(
            "ownership",
            f"split-{k}/{m.name}",
            REAL_MODEL,
            partial(check_split, env, m.inv, k, REAL_MODEL, m.name),
        )
    checks += guarded(
        "ownership", f"peak-rss-per-range/{m.name}", REAL_MODEL, partial(check_peak_rss, env, m)
    )
    checks += guarded(
        "ownership", f"invalid-ranges/{m.name}", REAL_MODEL, partial(check_invalid_ranges, env, m)
    )
    return checks


GROUP = conformance("ownership", run_fixtures, run_model)
