"""Concern 1: range-aware loading and authoritative ownership."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from dgr.contracts import REAL_MODEL, SYNTHETIC, Check, Evidence
from dgr.errors import WorkerRequestError
from dgr.verify import inventory, synth
from dgr.verify.client import Context, Worker
from dgr.verify.env import Env
from dgr.verify.report import guarded

SPLITS = (1, 2, 3, 5, 30)
# the largest deviation allowed between the model buffers a shard allocates and the bytes of its tensors
BUFFER_TOLERANCE = 0.01
RSS_RATIO_MAX = 0.45


def _load(w: Worker, model: Path, begin: int, end: int, mmap: bool) -> dict[str, Any]:
    return w.load(model, (begin, end), mmap=mmap)


def check_split(env: Env, inv: inventory.Inventory, k: int, evidence: Evidence, label: str) -> Check:
    """Split into k shards: each shard holds exactly its inventory; together they hold the file once."""
    problems: list[str] = []
    shard_tensors: list[int] = []
    shard_bytes: list[int] = []
    max_dev = 0.0
    mmap_span: list[int] = []
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
    for name in inv.tensors:
        want_holders = (
            k if inventory.is_shared(name) else (min(2, k) if inv.tied and name == "token_embd.weight" else 1)
        )
        if holders.get(name, 0) != want_holders:
            problems.append(f"{name} is held by {holders.get(name, 0)} shards, expected {want_holders}")
    figures: dict[str, Any] = {
        "shards": k,
        "file_tensors": len(inv.tensors),
        "held_tensors_total": sum(shard_tensors),
        "file_bytes": inv.n_bytes,
        "held_bytes_total": sum(shard_bytes),
        "max_buffer_deviation": max_dev,
        "tensors_per_shard": shard_tensors,
        "bytes_per_shard": shard_bytes,
        "mmap_buffer_span_per_shard": mmap_span,
    }
    if inv.tied:
        figures["tied_head_holders"] = holders.get("token_embd.weight", 0)
    return Check(
        group="ownership",
        name=f"split-{k}/{label}",
        evidence=evidence,
        passed=not problems,
        figures=figures,
        detail="\n".join(problems[:20]),
    )


def check_peak_rss(env: Env) -> Check:
    """Peak RSS (mmap off) of 10-layer ranges of SmolLM2 against the whole model, each in a fresh process.

    The limit applies to the process's peak RSS. Under sanitizers most of a process's memory is their
    shadow and allocator, so there it applies to what loading adds to an idle worker's peak (net)."""
    peaks: dict[str, int] = {}
    with Worker(env.worker, "rss-idle") as w:
        peaks["idle"] = w.request("memory").header["peak_rss"]
    for label, (begin, end) in {
        "whole": (0, -1),
        "head": (0, 10),
        "middle": (10, 20),
        "tail": (20, 30),
    }.items():
        with Worker(env.worker, f"rss-{label}") as w:
            rep = _load(w, env.model, begin, end, mmap=False)
            peaks[label] = rep["memory"]["peak_rss"]
    ratios = {f"{k}_ratio": peaks[k] / peaks["whole"] for k in ("head", "middle", "tail")}
    net = {
        f"{k}_net_ratio": (peaks[k] - peaks["idle"]) / (peaks["whole"] - peaks["idle"])
        for k in ("head", "middle", "tail")
    }
    criterion = "middle_net_ratio" if env.sanitized else "middle_ratio"
    value = {**ratios, **net}[criterion]
    passed = value <= RSS_RATIO_MAX
    figures = {
        **{f"{k}_peak_rss": v for k, v in peaks.items()},
        **ratios,
        **net,
        "criterion": criterion,
        "limit": RSS_RATIO_MAX,
    }
    detail = "" if passed else f"middle range [10, 20): {criterion} {value:.1%}, over {RSS_RATIO_MAX:.0%}"
    return Check(
        group="ownership",
        name="peak-rss-10-layers/smollm2",
        evidence=REAL_MODEL,
        passed=passed,
        figures=figures,
        detail=detail,
    )


INVALID_RANGES = {
    (-1, 5): "must not be negative",
    (0, 31): "exceeds the number of layers",
    (5, 5): "must be less than layer_end",
    (7, 3): "must be less than layer_end",
    (30, -1): "must be less than layer_end",
}


def check_invalid_ranges(env: Env) -> Check:
    problems: list[str] = []
    messages: dict[str, str] = {}
    with Worker(env.worker, "invalid-ranges") as w:
        for (begin, end), phrase in INVALID_RANGES.items():
            try:
                _load(w, env.model, begin, end, mmap=True)
                problems.append(f"[{begin}, {end}) was accepted")
            except WorkerRequestError as e:
                messages[f"[{begin},{end})"] = e.message.splitlines()[0] if e.message else ""
                if e.code != "load_failed" or phrase not in e.message:
                    problems.append(f"[{begin}, {end}): {e.code}: {e.message!r} does not say '{phrase}'")
        # the worker survived every refusal and still loads a valid range
        rep = _load(w, env.model, 0, 1, mmap=True)
        if rep["layer_end"] != 1:
            problems.append("a valid range after the refusals did not load")
    return Check(
        group="ownership",
        name="invalid-ranges/smollm2",
        evidence=REAL_MODEL,
        passed=not problems,
        figures={"refused": len(messages), "messages": messages},
        detail="\n".join(problems),
    )


def check_refused_range(env: Env) -> Check:
    """BitNet's graph reads the token embeddings as its output head: its ranges load, but a range without the
    input layer cannot be evaluated, and creating its context says which tensor it lacks."""
    path = env.synth(synth.BITNET)
    n_layer = synth.BITNET.n_layer
    problems: list[str] = []
    message = ""
    context = Context(n_ctx=64, max_sessions=1, threads=env.threads)
    with Worker(env.worker, "refused-range") as w:
        whole = w.load(path, (0, n_layer), context=context)
        if whole["n_tensors"] != len(inventory.read(path).tensors):
            problems.append("the whole model did not load all its tensors")
        head = w.load(path, (0, n_layer - 1), context=context)
        if head["layer_end"] != n_layer - 1:
            problems.append("the range without the output layer did not load")
        try:
            w.load(path, (1, n_layer), context=context)
            problems.append("a context of a range without the input layer was created")
        except WorkerRequestError as e:
            message = e.message.splitlines()[-1]
            if e.code != "context_failed" or "token_embd.weight" not in e.message:
                problems.append(f"unexpected error: {e.code}: {e.message!r}")
    return Check(
        group="ownership",
        name="refused-range/bitnet",
        evidence=SYNTHETIC,
        passed=not problems,
        figures={"arch": "bitnet", "message": message},
        detail="\n".join(problems),
    )


def run(env: Env) -> list[Check]:
    checks: list[Check] = []
    for model, evidence, label in env.llama_models():
        inv = inventory.read(model)
        for k in SPLITS:
            checks += guarded(
                "ownership",
                f"split-{k}/{label}",
                evidence,
                partial(check_split, env, inv, k, evidence, label),
            )
    checks += guarded("ownership", "peak-rss-10-layers/smollm2", REAL_MODEL, lambda: check_peak_rss(env))
    checks += guarded("ownership", "invalid-ranges/smollm2", REAL_MODEL, lambda: check_invalid_ranges(env))
    checks += guarded("ownership", "refused-range/bitnet", SYNTHETIC, lambda: check_refused_range(env))
    return checks
