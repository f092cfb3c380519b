"""Concern 3: layer-filtered KV cache, and the session semantics of the worker."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from dgr.contracts.report import REAL_MODEL, Check, Evidence
from dgr.errors import ShardFailedError, WorkerRequestError
from dgr.verify.checks.report import guarded, matching_prefix, verdict
from dgr.verify.checks.session import conformance
from dgr.verify.models import inventory, kvsize, prompts, synth
from dgr.verify.models.env import Env, RealModel
from dgr.verify.wire.client import ContextParams, Worker
from dgr.verify.wire.pipeline import Pipeline

GEN_TOKENS = 64
KV_TOLERANCE = 0.01
FAILURE_DEADLINE = 10.0
RESTORE_STEPS = 8
"""The steps a restored session and the session it was saved from decode side by side, logits compared."""


def _refused(fn: Callable[[], object], code: str) -> str | None:
    try:
        fn()
    except WorkerRequestError as e:
        return None if e.code == code else f"expected {code}, got {e.code}: {e.message}"
    return f"accepted, expected {code}"


def check_interleaved_sessions(env: Env, m: RealModel) -> Check:
    """4 sessions interleaved token by token through 3 workers, each equal to its own unsplit run."""
    with Pipeline(env.worker, m.path, m.whole, threads=env.threads) as whole:
        prompts_tok = [whole.tokenize(p) for p in prompts.SESSIONS]
        refs = [whole.generate(f"ref{i}", 1, toks, GEN_TOKENS) for i, toks in enumerate(prompts_tok)]
    with Pipeline(env.worker, m.path, m.split(3), threads=env.threads, max_sessions=4) as split:
        outs: list[list[int]] = []
        pos = []
        for i, toks in enumerate(prompts_tok):
            outs.append([split.step(f"s{i}", 1, 0, toks).argmax[-1]])
            pos.append(len(toks))
        for _ in range(GEN_TOKENS - 1):
            for i in range(len(prompts_tok)):
                outs[i].append(split.step(f"s{i}", 1, pos[i], [outs[i][-1]]).argmax[-1])
                pos[i] += 1
    matched = [matching_prefix(r, o) for r, o in zip(refs, outs, strict=True)]
    passed = all(m == GEN_TOKENS for m in matched)
    return Check(
        group="kv",
        name=f"interleaved-4-sessions/{m.name}",
        evidence=REAL_MODEL,
        passed=passed,
        figures={"sessions": len(prompts_tok), "tokens_each": GEN_TOKENS, "matching_tokens": matched},
        detail="" if passed else f"sessions diverge from their unsplit runs at tokens {matched}",
    )


KV_CONTEXT = ContextParams(n_ctx=4096, max_sessions=1)
"""The context of the KV bytes check: one session of 4096 cells. A model with sliding-window layers (Gemma 3)
has two caches, one for those layers and one for its full-attention layers; the worker keeps llama.cpp's
default `swa_full = true`, so both hold n_ctx cells per layer. With `swa_full = false` the sliding-window
cache would hold n_swa + n_ubatch = 1024 of the 4096 cells, and a range's share would not be its fraction of
the layer count: the share is therefore computed per layer (dgr.verify.models.kvsize)."""
KV_SIZES = kvsize.KvContext(
    n_ctx=KV_CONTEXT.n_ctx,
    type_k=KV_CONTEXT.type_k,
    type_v="f16",
    swa_full=True,
    n_ubatch=KV_CONTEXT.n_ubatch,
)
"""KV_CONTEXT as the reference computes the cache from it: the worker's V cache is f16 and its `swa_full`
llama_context_default_params()'s (true)."""


def kv_verdict(
    measured: dict[tuple[int, int], int], expected: list[int], splits: list[list[tuple[int, int]]]
) -> tuple[list[str], dict[str, Any]]:
    """The problems and figures of KV bytes `measured` per range against `expected`, the bytes of every layer
    computed from the GGUF file (dgr.verify.models.kvsize): every single layer, the whole model and the
    ranges of `splits` hold exactly the bytes of their own layers (see check_kv_bytes)."""
    n_layer = len(expected)
    total = measured[(0, n_layer)]
    problems = []
    rows: list[dict[str, Any]] = []
    ranges = [(0, n_layer), *((i, i + 1) for i in range(n_layer)), *(r for split in splits for r in split)]
    for begin, end in dict.fromkeys(ranges):
        got, want = measured[(begin, end)], sum(expected[begin:end])
        naive_share = total * (end - begin) / n_layer
        rows.append(
            {
                "layers": [begin, end],
                "kv_bytes": got,
                "expected": want,
                "deviation": abs(got - want) / want if want else float("inf"),
                "naive": abs(got - naive_share) / naive_share if naive_share else float("inf"),
            }
        )
        if got != want:
            problems.append(
                f"[{begin}, {end}): {got} bytes of KV cache, its layers hold {want} (from the file)"
            )
    figures = {
        "whole_kv_bytes": total,
        "expected_whole_kv_bytes": sum(expected),
        "layer_kv_bytes": [measured[(i, i + 1)] for i in range(n_layer)],
        "expected_layer_kv_bytes": expected,
        "distinct_layer_sizes": sorted(set(expected)),
        "ranges": len(rows),
        "max_deviation": max(r["deviation"] for r in rows),
        "naive_max_deviation": max(r["naive"] for r in rows),
    }
    return problems, figures


def check_kv_bytes(env: Env, inv: inventory.Inventory, label: str, evidence: Evidence) -> Check:
    """Each range's KV cache holds its own layers and nothing else, counted over every cache of the model
    (sliding-window and full attention): the whole model, each layer alone and the ranges of every split
    (inventory.shard_counts) hold exactly the K and V bytes of their layers as the GGUF file's
    hyperparameters give them (n_head_kv, key and value lengths, the sliding-window layers; see KV_SIZES).

    The share of a range is the sum of its layers', not its fraction of the layer count, which holds only
    while every layer holds as many cells (see KV_CONTEXT; `naive_max_deviation` says how far a share by
    layer count is)."""
    n = inv.n_layer
    expected = kvsize.layer_bytes(inv, KV_SIZES)
    splits = {k: inventory.split(n, k) for k in inventory.shard_counts(n) if k < n}
    ranges = list(
        dict.fromkeys([(0, n), *((i, i + 1) for i in range(n)), *(r for s in splits.values() for r in s)])
    )
    measured: dict[tuple[int, int], int] = {}
    with Worker(env.worker, f"kv-bytes/{label}") as w:
        for begin, end in ranges:
            w.load(inv.path, (begin, end), context=replace(KV_CONTEXT, threads=env.threads))
            measured[(begin, end)] = int(w.request("memory").header["kv_bytes"])
    problems, figures = kv_verdict(measured, expected, list(splits.values()))
    return verdict(
        "kv", f"kv-bytes-per-shard/{label}", evidence, problems, {"n_ctx": KV_CONTEXT.n_ctx, **figures}
    )


def check_model_kv_bytes(env: Env, m: RealModel) -> Check:
    return check_kv_bytes(env, m.inv, m.name, REAL_MODEL)


def _continue(pipe: Pipeline, session: str, pos: int, token: int, n: int) -> tuple[list[int], np.ndarray]:
    """`n` greedy tokens from `token` at `pos`, one at a time; with the logits of the first step."""
    first = pipe.step(session, 1, pos, [token])
    out = [first.argmax[-1]]
    while len(out) < n:
        out.append(pipe.step(session, 1, pos + len(out), [out[-1]]).argmax[-1])
    return out, first.logits[-1]


def check_truncate(env: Env, m: RealModel) -> Check:
    """truncate(n_keep) then continue == a fresh session fed the kept positions in the same batches (the
    prompt at once, then the kept generated tokens one at a time), then continued alike: the same tokens and
    bit-identical logits. (A fresh prefill of the kept tokens in one batch is no reference: on the CPU the
    quantized kernels of a batch and of a single token round differently, by up to 1.2 in Gemma 3's
    logits, unsplit as split.)"""
    with Pipeline(env.worker, m.path, m.split(3), threads=env.threads) as split:
        prompt = split.tokenize(prompts.GENERATION[1])
        generated = split.generate("t", 1, prompt, 16)
        seq = prompt + generated
        n_keep = len(prompt) + 6
        replies = split.broadcast("truncate", session="t", epoch=1, n_keep=n_keep)
        a, a_first = _continue(split, "t", n_keep, seq[n_keep], 16)
        split.step("fresh", 1, 0, prompt)
        for pos in range(len(prompt), n_keep):
            split.step("fresh", 1, pos, [seq[pos]])
        b, b_first = _continue(split, "fresh", n_keep, seq[n_keep], 16)
    max_abs = float(np.abs(a_first - b_first).max())
    passed = a == b and max_abs == 0.0 and all(r["n_pos"] == n_keep for r in replies)
    problems = (
        [] if passed else [f"truncated run {a} differs from the replayed session {b} (max abs {max_abs})"]
    )
    return verdict(
        "kv",
        f"truncate-then-continue/{m.name}",
        REAL_MODEL,
        problems,
        {
            "n_keep": n_keep,
            "continued_tokens": len(a),
            "identical_tokens": a == b,
            "first_logits_max_abs_diff": max_abs,
        },
    )


def _reprefill(
    pipe: Pipeline, session: str, prompt: list[int], generated: list[int], total: int
) -> list[int]:
    """Start `session` over with the prompt and the tokens it had generated in one batch, then generate
    one token at a time until it has `total`; the new tokens."""
    out = [pipe.step(session, 1, 0, prompt + generated).argmax[-1]]
    while len(generated) + len(out) < total:
        out.append(pipe.step(session, 1, len(prompt) + len(generated) + len(out) - 1, [out[-1]]).argmax[-1])
    return out


def check_release_evict_miss(env: Env, m: RealModel) -> Check:
    problems: list[str] = []
    figures: dict[str, object] = {}
    with Pipeline(env.worker, m.path, m.whole, threads=env.threads) as whole:
        toks = [whole.tokenize(p) for p in prompts.SESSIONS[:3]]
        # the unsplit model fed the same batches as session A below: 8 tokens generated, then everything
        # prefilled again at once and continued (the batches matter: see check_truncate)
        ref = whole.generate("ref", 1, toks[0], 8)
        ref += _reprefill(whole, "ref", toks[0], ref, 24)
    with Pipeline(env.worker, m.path, m.split(3), threads=env.threads, max_sessions=2) as split:
        # release: the session is gone everywhere and a request for it is a cache miss
        split.generate("rel", 1, toks[1], 4)
        released = split.broadcast("release", session="rel")
        if not all(r["released"] for r in released):
            problems.append("release did not find the session on every shard")
        err = _refused(lambda: split.step("rel", 1, len(toks[1]) + 3, [1]), "cache_miss")
        if err:
            problems.append(f"request after release: {err}")

        # eviction: capacity 2, a third session evicts the least recently used one and says so
        a = split.generate("A", 1, toks[0], 8)
        split.generate("B", 1, toks[1], 4)
        res = split.step("C", 1, 0, toks[2])
        evicted = res.evicted
        figures["evicted_per_shard"] = evicted
        if evicted != [["A"], ["A"], ["A"]]:
            problems.append(f"the third session evicted {evicted}, expected A on every shard")

        # a miss, then a re-prefill of everything A had, continues as the unsplit model does
        pos_a = len(toks[0]) + len(a) - 1
        err = _refused(lambda: split.step("A", 1, pos_a, [a[-1]]), "cache_miss")
        if err:
            problems.append(f"request for the evicted session: {err}")
        cont = _reprefill(split, "A", toks[0], a, 24)
        if a + cont != ref:
            problems.append(f"the re-prefilled session {a + cont} differs from the unsplit model's {ref}")
        figures["reprefill_identical"] = a + cont == ref

        # stale epoch: a newer epoch took over the session; the old epoch is refused
        split.step("A", 2, 0, toks[0])
        err = _refused(lambda: split.step("A", 1, len(toks[0]), [5]), "stale_epoch")
        if err:
            problems.append(f"stale epoch: {err}")
        err = _refused(lambda: split.step("A", 3, len(toks[0]), [5]), "cache_miss")
        if err:
            problems.append(f"unknown newer epoch: {err}")
    return verdict("kv", f"release-evict-miss-epoch/{m.name}", REAL_MODEL, problems, figures)


def check_recipes(env: Env, m: RealModel) -> Check:
    """A saved session restores into a worker with the same recipe and continues identically; a state of
    another layer range, another K cache type, the whole model, or the same range of another model (a
    synthetic one) is refused with `incompatible_recipe`."""
    problems: list[str] = []
    refusals: dict[str, str] = {}
    three = m.split(3)
    other_spec = synth.LLAMA_UNTIED
    other_head = (0, min(three[0][1], other_spec.n_layer - 1))
    with (
        Pipeline(env.worker, m.path, three, threads=env.threads) as split,
        Pipeline(env.worker, m.path, three, threads=env.threads) as twin,
        Pipeline(env.worker, m.path, three, threads=env.threads, type_k="f32") as other_type,
        Pipeline(env.worker, m.path, m.whole, threads=env.threads) as whole,
        Pipeline(
            env.worker, m.path, [other_head, (other_head[1], m.n_layer)], threads=env.threads
        ) as same_head,
        Pipeline(
            env.worker,
            env.synth(other_spec),
            [other_head, (other_head[1], other_spec.n_layer)],
            threads=env.threads,
        ) as other_model,
    ):
        prompt = split.tokenize(prompts.GENERATION[0])
        gen = split.generate("r", 1, prompt, 8)
        states = [w.request("state_save", session="r", epoch=1).body for w in split.workers]
        for w, state in zip(twin.workers, states, strict=True):
            w.request("state_load", state, session="r", epoch=1)
        # both continue from the saved position, fed the same tokens: the logits of every step are equal
        pos, token, steps_equal = len(prompt) + len(gen) - 1, gen[-1], 0
        for _ in range(RESTORE_STEPS):
            a, b = split.step("r", 1, pos, [token]), twin.step("r", 1, pos, [token])
            if not np.array_equal(a.logits, b.logits):
                problems.append(
                    f"the restored session continues differently at position {pos} "
                    f"(max abs diff {float(np.abs(a.logits - b.logits).max())})"
                )
                break
            steps_equal += 1
            pos, token = pos + 1, a.argmax[-1]

        whole.generate("r", 1, prompt, 2)
        whole_state = whole.workers[0].request("state_save", session="r", epoch=1).body
        other_model.workers[0].request(
            "decode",
            tokens=[t % other_spec.n_vocab for t in prompt],
            session="r",
            epoch=1,
            pos=0,
            n_tokens=len(prompt),
        )
        other_state = other_model.workers[0].request("state_save", session="r", epoch=1).body
        cases = {
            "layers": (twin.workers[1], states[0]),
            "cache_type": (other_type.workers[0], states[0]),
            "missing": (twin.workers[0], whole_state),
            "model": (same_head.workers[0], other_state),
        }
        for want, (w, state) in cases.items():
            try:
                w.request("state_load", state, session="x", epoch=1)
                problems.append(f"{want}: the state was accepted")
            except WorkerRequestError as e:
                refusals[want] = e.message.splitlines()[0]
                if e.code != "incompatible_recipe":
                    problems.append(f"{want}: {e.code}: {e.message}")
    return verdict(
        "kv",
        f"state-recipes/{m.name}",
        REAL_MODEL,
        problems,
        {
            "states_bytes": [len(s) for s in states],
            "restored_steps_bit_identical": steps_equal,
            "restored_steps": RESTORE_STEPS,
            "refused": refusals,
        },
    )


def check_worker_failure(env: Env, m: RealModel) -> Check:
    """The middle worker dies (or hangs) mid-generation: the failing shard is named within the deadline,
    and the other workers release the session."""
    problems: list[str] = []
    figures: dict[str, object] = {}
    for mode in ("killed", "hung"):
        with Pipeline(env.worker, m.path, m.split(3), threads=env.threads, timeout=FAILURE_DEADLINE) as split:
            prompt = split.tokenize(prompts.GENERATION[2])
            out = split.generate("f", 1, prompt, 4)
            victim = split.workers[1].proc
            os.kill(victim.pid, signal.SIGKILL if mode == "killed" else signal.SIGSTOP)
            start = time.monotonic()
            try:
                split.step("f", 1, len(prompt) + 3, [out[-1]])
                problems.append(f"{mode}: the step succeeded")
            except ShardFailedError as e:
                elapsed = time.monotonic() - start
                figures[f"{mode}_detected_s"] = round(elapsed, 3)
                figures[f"{mode}_shard"] = e.index
                if e.index != 1 or elapsed > FAILURE_DEADLINE + 2:
                    problems.append(f"{mode}: shard {e.index} reported after {elapsed:.1f} s")
            for i in (0, 2):
                left = [s["session"] for s in split.workers[i].request("sessions").header["sessions"]]
                if "f" in left:
                    problems.append(f"{mode}: shard {i} still holds the session")
            if mode == "hung":
                os.kill(victim.pid, signal.SIGKILL)
    return verdict(
        "kv", f"worker-failure/{m.name}", REAL_MODEL, problems, {**figures, "deadline_s": FAILURE_DEADLINE}
    )


CHECKS = (
    ("interleaved-4-sessions", check_interleaved_sessions),
    ("kv-bytes-per-shard", check_model_kv_bytes),
    ("truncate-then-continue", check_truncate),
    ("release-evict-miss-epoch", check_release_evict_miss),
    ("state-recipes", check_recipes),
)
DEFAULT_MODEL_CHECKS = (("worker-failure", check_worker_failure),)
"""Checks of the supervisor, not of the model (a worker killed or stopped): they run on the default model."""


def run_fixtures(env: Env) -> list[Check]:
    """The KV bytes per range of the synthetic models (the other KV checks need a tokenizer: real models)."""
    checks: list[Check] = []
    for model, evidence, label in env.synthetic_models():
        inv = inventory.read(model)
        checks += guarded(
            "kv", f"kv-bytes-per-shard/{label}", evidence, partial(check_kv_bytes, env, inv, label, evidence)
        )
    return checks


def run_model(env: Env, m: RealModel) -> list[Check]:
    checks: list[Check] = []
    for name, fn in CHECKS + (DEFAULT_MODEL_CHECKS if m.name == env.default.name else ()):
        checks += guarded("kv", f"{name}/{m.name}", REAL_MODEL, partial(fn, env, m))
    return checks


GROUP = conformance("kv", run_fixtures, run_model)
