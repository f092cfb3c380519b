"""Concern 3: layer-filtered KV cache, and the session semantics of the worker."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from functools import partial

import numpy as np
from dgr.contracts import REAL_MODEL, Check
from dgr.errors import ShardFailedError, WorkerRequestError
from dgr.verify import prompts
from dgr.verify.env import Env
from dgr.verify.pipeline import Pipeline
from dgr.verify.report import guarded, matching_prefix

THREE = [(0, 10), (10, 20), (20, 30)]
GEN_TOKENS = 64
KV_TOLERANCE = 0.01
FAILURE_DEADLINE = 10.0


def _refused(fn: Callable[[], object], code: str) -> str | None:
    try:
        fn()
    except WorkerRequestError as e:
        return None if e.code == code else f"expected {code}, got {e.code}: {e.message}"
    return f"accepted, expected {code}"


def check_interleaved_sessions(env: Env) -> Check:
    """4 sessions interleaved token by token through 3 workers, each equal to its own unsplit run."""
    with Pipeline(env.worker, env.model, [(0, 30)], threads=env.threads) as whole:
        prompts_tok = [whole.tokenize(p) for p in prompts.SESSIONS]
        refs = [whole.generate(f"ref{i}", 1, toks, GEN_TOKENS) for i, toks in enumerate(prompts_tok)]
    with Pipeline(env.worker, env.model, THREE, threads=env.threads, max_sessions=4) as split:
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
        name="interleaved-4-sessions/smollm2",
        evidence=REAL_MODEL,
        passed=passed,
        figures={"sessions": len(prompts_tok), "tokens_each": GEN_TOKENS, "matching_tokens": matched},
        detail="" if passed else f"sessions diverge from their unsplit runs at tokens {matched}",
    )


def check_kv_bytes(env: Env) -> Check:
    """Each shard's KV cache is its owned share of the whole model's, within 1%."""
    with Pipeline(env.worker, env.model, [(0, 30)], threads=env.threads) as whole:
        total = whole.workers[0].request("memory").header["kv_bytes"]
    problems = []
    per_shard = []
    with Pipeline(env.worker, env.model, THREE, threads=env.threads) as split:
        for (begin, end), w in zip(THREE, split.workers, strict=True):
            got = w.request("memory").header["kv_bytes"]
            want = total * (end - begin) / 30
            dev = abs(got - want) / want
            per_shard.append(
                {"layers": [begin, end], "kv_bytes": got, "expected": int(want), "deviation": dev}
            )
            if dev > KV_TOLERANCE:
                problems.append(f"[{begin}, {end}): {got} bytes, expected {want:.0f}")
    return Check(
        group="kv",
        name="kv-bytes-per-shard/smollm2",
        evidence=REAL_MODEL,
        passed=not problems,
        figures={
            "whole_kv_bytes": total,
            "shards": per_shard,
            "max_deviation": max(s["deviation"] for s in per_shard),
        },
        detail="\n".join(problems),
    )


def check_truncate(env: Env) -> Check:
    """truncate(n_keep) then continue == a fresh prefill of the n_keep tokens, then continue."""
    with Pipeline(env.worker, env.model, THREE, threads=env.threads) as split:
        prompt = split.tokenize(prompts.GENERATION[1])
        generated = split.generate("t", 1, prompt, 16)
        seq = prompt + generated
        n_keep = len(prompt) + 6
        replies = split.broadcast("truncate", session="t", epoch=1, n_keep=n_keep)
        a_first = split.step("t", 1, n_keep, [seq[n_keep]])
        a = [a_first.argmax[-1]]
        for i in range(15):
            a.append(split.step("t", 1, n_keep + 1 + i, [a[-1]]).argmax[-1])
        b_first = split.step("fresh", 1, 0, seq[: n_keep + 1])
        b = [b_first.argmax[-1]]
        for i in range(15):
            b.append(split.step("fresh", 1, n_keep + 1 + i, [b[-1]]).argmax[-1])
    max_abs = float(np.abs(a_first.logits[-1] - b_first.logits[-1]).max())
    passed = a == b and all(r["n_pos"] == n_keep for r in replies)
    return Check(
        group="kv",
        name="truncate-then-continue/smollm2",
        evidence=REAL_MODEL,
        passed=passed,
        figures={
            "n_keep": n_keep,
            "continued_tokens": len(a),
            "identical_tokens": a == b,
            "first_logits_max_abs_diff": max_abs,
        },
        detail="" if passed else f"truncated run {a} differs from fresh prefill {b}",
    )


def check_release_evict_miss(env: Env) -> Check:
    problems: list[str] = []
    figures: dict[str, object] = {}
    with Pipeline(env.worker, env.model, [(0, 30)], threads=env.threads) as whole:
        toks = [whole.tokenize(p) for p in prompts.SESSIONS[:3]]
        ref = whole.generate("ref", 1, toks[0], 24)
    with Pipeline(env.worker, env.model, THREE, threads=env.threads, max_sessions=2) as split:
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

        # a miss, then a re-prefill of everything A had, gives the uninterrupted output
        pos_a = len(toks[0]) + len(a) - 1
        err = _refused(lambda: split.step("A", 1, pos_a, [a[-1]]), "cache_miss")
        if err:
            problems.append(f"request for the evicted session: {err}")
        redo = split.step("A", 1, 0, toks[0] + a)
        cont = [redo.argmax[-1]]
        pos = len(toks[0]) + len(a)
        while len(a) + len(cont) < 24:
            cont.append(split.step("A", 1, pos, [cont[-1]]).argmax[-1])
            pos += 1
        if a + cont != ref:
            problems.append("the re-prefilled session differs from the uninterrupted run")
        figures["reprefill_identical"] = a + cont == ref

        # stale epoch: a newer epoch took over the session; the old epoch is refused
        split.step("A", 2, 0, toks[0])
        err = _refused(lambda: split.step("A", 1, len(toks[0]), [5]), "stale_epoch")
        if err:
            problems.append(f"stale epoch: {err}")
        err = _refused(lambda: split.step("A", 3, len(toks[0]), [5]), "cache_miss")
        if err:
            problems.append(f"unknown newer epoch: {err}")
    return Check(
        group="kv",
        name="release-evict-miss-epoch/smollm2",
        evidence=REAL_MODEL,
        passed=not problems,
        figures=figures,
        detail="\n".join(problems),
    )


def check_recipes(env: Env) -> Check:
    """A saved session restores into a worker with the same recipe and continues identically;
    another layer range, cache type or a whole-model state is refused."""
    problems: list[str] = []
    refusals: dict[str, str] = {}
    with (
        Pipeline(env.worker, env.model, THREE, threads=env.threads) as split,
        Pipeline(env.worker, env.model, THREE, threads=env.threads) as twin,
        Pipeline(env.worker, env.model, THREE, threads=env.threads, type_k="f32") as other_type,
        Pipeline(env.worker, env.model, [(0, 30)], threads=env.threads) as whole,
    ):
        prompt = split.tokenize(prompts.GENERATION[0])
        gen = split.generate("r", 1, prompt, 8)
        states = [w.request("state_save", session="r", epoch=1).body for w in split.workers]
        for w, state in zip(twin.workers, states, strict=True):
            w.request("state_load", state, session="r", epoch=1)
        pos = len(prompt) + len(gen) - 1
        if split.step("r", 1, pos, [gen[-1]]).argmax != twin.step("r", 1, pos, [gen[-1]]).argmax:
            problems.append("the restored session continues differently")

        whole.generate("r", 1, prompt, 2)
        whole_state = whole.workers[0].request("state_save", session="r", epoch=1).body
        cases = {
            "layers": (twin.workers[1], states[0]),
            "cache_type": (other_type.workers[0], states[0]),
            "missing": (twin.workers[0], whole_state),
        }
        for want, (w, state) in cases.items():
            try:
                w.request("state_load", state, session="x", epoch=1)
                problems.append(f"{want}: the state was accepted")
            except WorkerRequestError as e:
                refusals[want] = e.message.splitlines()[0]
                if e.code != "incompatible_recipe":
                    problems.append(f"{want}: {e.code}: {e.message}")
    return Check(
        group="kv",
        name="state-recipes/smollm2",
        evidence=REAL_MODEL,
        passed=not problems,
        figures={"states_bytes": [len(s) for s in states], "refused": refusals},
        detail="\n".join(problems),
    )


def check_worker_failure(env: Env) -> Check:
    """The middle worker dies (or hangs) mid-generation: the failing shard is named within the deadline,
    and the other workers release the session."""
    problems: list[str] = []
    figures: dict[str, object] = {}
    for mode in ("killed", "hung"):
        with Pipeline(env.worker, env.model, THREE, threads=env.threads, timeout=FAILURE_DEADLINE) as split:
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
    return Check(
        group="kv",
        name="worker-failure/smollm2",
        evidence=REAL_MODEL,
        passed=not problems,
        figures={**figures, "deadline_s": FAILURE_DEADLINE},
        detail="\n".join(problems),
    )


CHECKS = (
    ("interleaved-4-sessions/smollm2", check_interleaved_sessions),
    ("kv-bytes-per-shard/smollm2", check_kv_bytes),
    ("truncate-then-continue/smollm2", check_truncate),
    ("release-evict-miss-epoch/smollm2", check_release_evict_miss),
    ("state-recipes/smollm2", check_recipes),
    ("worker-failure/smollm2", check_worker_failure),
)


def run(env: Env) -> list[Check]:
    checks: list[Check] = []
    for name, fn in CHECKS:
        checks += guarded("kv", name, REAL_MODEL, partial(fn, env))
    return checks
