"""Concern 2: boundary input/output, the bundle, and split generation; every split of a locked model run
from its parts too."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dgr.contracts.report import REAL_MODEL, Check, Evidence
from dgr.errors import WorkerRequestError
from dgr.verify.checks.report import guarded, matching_prefix, verdict
from dgr.verify.checks.session import conformance
from dgr.verify.models import inventory, prompts, synth
from dgr.verify.models.env import Env, RealModel
from dgr.verify.models.parts import ModelParts, RangeParts
from dgr.verify.wire import bundle
from dgr.verify.wire.client import Worker
from dgr.verify.wire.pipeline import Pipeline

PREFILL_TOKENS = 64
GEN_TOKENS = 64
FRAGMENT_BODY = 16 << 10
"""The frame body limit of the fragmented-bundles check: every bundle and the logits travel in pieces."""


def _prefill_tokens(pipe: Pipeline, model_is_real: bool) -> list[int]:
    if model_is_real:
        tokens = pipe.tokenize(prompts.LONG)
        if len(tokens) < PREFILL_TOKENS:
            raise RuntimeError(f"the prompt has {len(tokens)} tokens, fewer than {PREFILL_TOKENS}")
        return tokens[:PREFILL_TOKENS]
    rng = np.random.default_rng(5)
    return [int(t) for t in rng.integers(0, synth.LLAMA_UNTIED.n_vocab, PREFILL_TOKENS)]


def check_prefill_splits(
    env: Env,
    model: Path,
    evidence: Evidence,
    label: str,
    parts: Callable[[], ModelParts] | None = None,
) -> list[Check]:
    """Tail logits of a split prefill vs the unsplit model's, bit for bit, for every token of the prompt,
    for every split of inventory.shard_counts (halves, thirds, sixths, every layer alone).

    With `parts` (the parts of a locked model), every split, and the whole model as one range, also runs
    with each range loaded from its own directory of parts, compared with the run from the whole file it
    follows (`check_parts_split`)."""
    n_layer = inventory.read(model).n_layer
    checks = []
    with Pipeline(env.worker, model, [(0, n_layer)], threads=env.threads) as whole:
        tokens = _prefill_tokens(whole, evidence == REAL_MODEL)
        ref = whole.step(PREFILL_SESSION, 1, 0, tokens, logits="all").logits
        ref_runs = ran(whole) if parts is not None else []
    if parts is not None:
        checks += _parts_split(env, parts, [(0, n_layer)], tokens, ref, ref_runs, evidence, label)
    for k in inventory.shard_counts(n_layer):
        split = inventory.split(n_layer, k)
        with Pipeline(env.worker, model, split, threads=env.threads) as pipe:
            out = pipe.step(PREFILL_SESSION, 1, 0, tokens, logits="all").logits
            runs = ran(pipe) if parts is not None else []
        max_abs = float(np.abs(out - ref).max())
        exact = bool(np.array_equal(out, ref))
        figures = {
            "shards": k,
            "tokens": len(tokens),
            "max_abs_diff": max_abs,
            "bit_exact": exact,
            "logits_compared": int(ref.size),
        }
        checks.append(
            Check(
                group="boundary",
                name=f"prefill-split-{k}/{label}",
                evidence=evidence,
                # the split computes what the whole model computes: the logits are equal bit for bit
                passed=exact,
                figures=figures,
                detail=""
                if exact
                else f"the logits differ from the unsplit model's (max abs diff {max_abs})",
            )
        )
        if parts is not None:
            checks += _parts_split(env, parts, split, tokens, out, runs, evidence, label)
    return checks


PREFILL_SESSION = "prefill"


@dataclass(frozen=True)
class RangeRun:
    """What the worker of one range held and kept in a run: its `load` reply (what it holds, its weight
    buffers, its KV cache's bytes) and the state of the prefill's session (`state_save`)."""

    info: dict[str, Any]
    state: bytes


def ran(pipe: Pipeline) -> list[RangeRun]:
    """Each range's `RangeRun` after the prefill of PREFILL_SESSION."""
    return [
        RangeRun(info, w.request("state_save", session=PREFILL_SESSION, epoch=1).body)
        for info, w in zip(pipe.info, pipe.workers, strict=True)
    ]


STATE_MAGIC = b"LWS1"
STATE_HEADER = len(STATE_MAGIC) + 16 + len("[000000,000000)")
"""A saved state begins with the magic, the model's identity (16 hex digits) and the layers the worker holds
(docs/protocol.md, `state_save`); llama.cpp's sequence state follows."""


def state_fields(state: bytes) -> tuple[str, str, bytes]:
    """The model's identity, the layers and llama.cpp's sequence state of a state saved by `state_save`;
    ValueError when it is none."""
    if len(state) < STATE_HEADER or not state.startswith(STATE_MAGIC):
        raise ValueError(
            f"a state of {len(state)} bytes that does not begin with {STATE_MAGIC!r} and its header"
        )
    head = state[len(STATE_MAGIC) : STATE_HEADER].decode("ascii", errors="replace")
    return head[:16], head[16:], state[STATE_HEADER:]


OWNERSHIP_FIELDS = (
    "n_layer",
    "layer_begin",
    "layer_end",
    "partial",
    "has_tok_embd",
    "has_output_norm",
    "has_output",
    "n_tensors",
    "n_bytes",
    "identity",
)
"""The fields of a `load` reply that say what a range holds: the same from its parts as from the whole file
(with its `tensors`, by name and bytes), the model's identity included (a hash of its metadata without the
keys of the files it is stored in, `split.*` and `part.*`: the worker's). Not compared: `model` (the path) and
the buffers (with mmap, one mapping per file: `mapped_bytes_*` are figures)."""


def parts_verdict(
    ranges: Sequence[RangeParts],
    whole_logits: np.ndarray,
    parts_logits: np.ndarray,
    whole_runs: Sequence[RangeRun],
    parts_runs: Sequence[RangeRun],
) -> tuple[list[str], dict[str, Any]]:
    """The problems and figures of a split run with each range from its own directory of parts against the
    same split from the whole file: the logits equal bit for bit, and per range the same ownership
    (OWNERSHIP_FIELDS and the tensors held, with their bytes), the same KV cache bytes and the same saved
    state (the model's identity, the layers and llama.cpp's sequence state, bit for bit). The figures say what
    each range's directory holds against the whole file."""
    problems: list[str] = []
    same_shape = whole_logits.shape == parts_logits.shape
    exact = same_shape and bool(np.array_equal(whole_logits, parts_logits))
    max_abs = float(np.abs(parts_logits - whole_logits).max()) if same_shape else None
    if not exact:
        problems.append(
            "the logits from the parts differ from the whole file's "
            + (
                f"(max abs diff {max_abs})"
                if same_shape
                else f"(shape {parts_logits.shape} vs {whole_logits.shape})"
            )
        )
    owned = states = kv = True
    identities: set[tuple[str, str]] = set()
    for r, a, b in zip(ranges, whole_runs, parts_runs, strict=True):
        where = f"[{r.begin}, {r.end})"
        for key in OWNERSHIP_FIELDS:
            if a.info.get(key) != b.info.get(key):
                owned = False
                problems.append(
                    f"{where}: {key} is {b.info.get(key)!r} from the parts, {a.info.get(key)!r} from the "
                    "whole file"
                )
        held_a = {str(n): int(v) for n, v in a.info.get("tensors", [])}
        held_b = {str(n): int(v) for n, v in b.info.get("tensors", [])}
        if held_a != held_b:
            owned = False
            extra = sorted(n for n in held_b if held_a.get(n) != held_b[n])
            missing = sorted(set(held_a) - set(held_b))
            problems.append(
                f"{where}: from the parts it holds other tensors: extra or of other bytes {extra[:5]}, "
                f"missing {missing[:5]}"
            )
        kv_a, kv_b = (run.info.get("memory", {}).get("kv_bytes") for run in (a, b))
        if kv_a != kv_b:
            kv = False
            problems.append(f"{where}: {kv_b} bytes of KV cache from the parts, {kv_a} from the whole file")
        try:
            (id_a, layers_a, state_a), (id_b, layers_b, state_b) = (
                state_fields(a.state),
                state_fields(b.state),
            )
        except ValueError as exc:
            states = False
            problems.append(f"{where}: {exc}")
            continue
        identities.add((id_a, id_b))
        if id_a != id_b or layers_a != layers_b or state_a != state_b or not state_a:
            states = False
            problems.append(
                f"{where}: the saved state from the parts ({id_b} {layers_b}, {len(state_b)} bytes) is not "
                f"the whole file's ({id_a} {layers_a}, {len(state_a)} bytes)"
            )
    whole = ranges[0].whole_bytes
    figures: dict[str, Any] = {
        "shards": len(ranges),
        "ranges": [[r.begin, r.end] for r in ranges],
        "whole_file_bytes": whole,
        "range_files": [len(r.files) for r in ranges],
        "range_bytes": [r.bytes for r in ranges],
        "range_fraction": [round(r.bytes / whole, 4) for r in ranges],
        "mapped_bytes_whole_file": [run.info.get("buffer_size") for run in whole_runs],
        "mapped_bytes_parts": [run.info.get("buffer_size") for run in parts_runs],
        "logits_bit_exact": exact,
        "max_abs_diff": max_abs,
        "logits_compared": int(whole_logits.size),
        "states_bit_exact": states,
        "state_bytes": [len(run.state) for run in parts_runs],
        "ownership_equal": owned,
        "kv_bytes_equal": kv,
        "identity": [{"whole_file": a, "parts": b} for a, b in sorted(identities)],
    }
    return problems, figures


def check_parts_split(
    env: Env,
    parts: Callable[[], ModelParts],
    split: list[tuple[int, int]],
    tokens: list[int],
    whole_logits: np.ndarray,
    whole_runs: list[RangeRun],
    evidence: Evidence,
    label: str,
) -> Check:
    """The split `split` with each range loaded from its own directory of parts (only the files it needs,
    checked as it starts: dgr.verify.models.parts.ModelParts), the same prefill as the run from the whole
    file that gave `whole_logits` and `whole_runs`: `parts_verdict`."""
    model_parts = parts()
    ranges = [model_parts.range(begin, end) for begin, end in split]
    with Pipeline(env.worker, model_parts.model_for, split, threads=env.threads) as pipe:
        out = pipe.step(PREFILL_SESSION, 1, 0, tokens, logits="all").logits
        runs = ran(pipe)
    problems, figures = parts_verdict(ranges, whole_logits, out, whole_runs, runs)
    return verdict("boundary", f"parts-split-{len(split)}/{label}", evidence, problems, figures, limit=20)


def _parts_split(
    env: Env,
    parts: Callable[[], ModelParts],
    split: list[tuple[int, int]],
    tokens: list[int],
    whole_logits: np.ndarray,
    whole_runs: list[RangeRun],
    evidence: Evidence,
    label: str,
) -> list[Check]:
    fn = partial(check_parts_split, env, parts, split, tokens, whole_logits, whole_runs, evidence, label)
    return guarded("boundary", f"parts-split-{len(split)}/{label}", evidence, fn)


def baseline_verdict(
    patched: np.ndarray, upstream: np.ndarray, states: list[bytes], defaults: list[bool]
) -> tuple[list[str], dict[str, Any]]:
    """The problems and figures of the patched build's logits and saved state against upstream's (see
    check_baseline): the logits equal bit for bit, both loaded with the default parameters, and the states
    equal and not empty (two empty states are equal and prove nothing: a session after a prefill holds
    its KV cache)."""
    exact = patched.shape == upstream.shape and bool(np.array_equal(patched, upstream))
    same_state = states[0] == states[1]
    figures = {
        "tokens": int(patched.shape[0]),
        "default_params": defaults,
        "bit_identical": exact,
        "max_abs_diff": float(np.abs(patched - upstream).max()) if patched.shape == upstream.shape else None,
        "state_bytes": [len(s) for s in states],
        "state_identical": same_state,
    }
    problems = [] if exact else ["the logits of the patched build without a range differ from upstream"]
    if not all(defaults):
        problems.append("a worker did not load with llama_model_default_params() as they are")
    empty = [who for who, state in zip(("patched", "upstream"), states, strict=True) if not state]
    if empty:
        problems.append(
            f"the saved state of the {' and the '.join(empty)} build is empty: nothing to compare"
        )
    elif not same_state:
        problems.append(
            f"the saved state differs from upstream's ({len(states[0])} vs {len(states[1])} bytes)"
        )
    return problems, figures


def check_baseline(env: Env, m: RealModel) -> Check:
    """The patched build with no range gives the logits and the saved state of the upstream build, bit for
    bit."""
    name = f"no-range-vs-upstream/{m.name}"
    if env.baseline_worker is None:
        return Check(
            group="boundary",
            name=name,
            evidence=REAL_MODEL,
            passed=False,
            figures={},
            detail="no upstream baseline build: run `dgr build --upstream-only`",
        )
    results = []
    states = []
    defaults = []
    for binary in (env.worker, env.baseline_worker):
        # no range and no model parameter asked for: both load with llama_model_default_params() as they are
        with Pipeline(binary, m.path, None, threads=env.threads) as pipe:
            defaults.append(bool(pipe.info[0].get("default_params")))
            tokens = pipe.tokenize(prompts.LONG)[:PREFILL_TOKENS]
            results.append(pipe.step("baseline", 1, 0, tokens, logits="all").logits)
            results.append(pipe.step("baseline", 1, len(tokens), [tokens[-1]], logits="all").logits)
            # the saved state of the session (its KV cache): the patch keeps a whole model's state format
            states.append(pipe.workers[0].request("state_save", session="baseline", epoch=1).body)
    problems, figures = baseline_verdict(
        np.concatenate(results[:2]), np.concatenate(results[2:]), states, defaults
    )
    return verdict("boundary", name, REAL_MODEL, problems, figures, sep="; ")


def check_generation(env: Env, m: RealModel) -> Check:
    """Greedy generation through 3 worker processes equals the unsplit model, token for token."""
    problems = []
    matched = []
    with (
        Pipeline(env.worker, m.path, m.whole, threads=env.threads) as whole,
        Pipeline(env.worker, m.path, m.split(3), threads=env.threads) as split,
    ):
        for i, text in enumerate(prompts.GENERATION):
            tokens = whole.tokenize(text)
            a = whole.generate(f"gen{i}", 1, tokens, GEN_TOKENS)
            b = split.generate(f"gen{i}", 1, tokens, GEN_TOKENS)
            same = matching_prefix(a, b)
            matched.append(same)
            if a != b:
                problems.append(f"prompt {i}: diverges at token {same}")
    return verdict(
        "boundary",
        f"generate-3-workers/{m.name}",
        REAL_MODEL,
        problems,
        {
            "prompts": len(prompts.GENERATION),
            "tokens_each": GEN_TOKENS,
            "split": [list(r) for r in m.split(3)],
            "matching_tokens": matched,
        },
    )


def check_fragments(env: Env, m: RealModel) -> Check:
    """With a 16 KiB frame limit every bundle and the logits travel as fragments; results stay identical."""
    with (
        Pipeline(env.worker, m.path, m.whole, threads=env.threads) as whole,
        Pipeline(env.worker, m.path, m.split(2), threads=env.threads, max_body=FRAGMENT_BODY) as split,
    ):
        tokens = whole.tokenize(prompts.LONG)[:PREFILL_TOKENS]
        ref = whole.step("frag", 1, 0, tokens, logits="all").logits
        out = split.step("frag", 1, 0, tokens, logits="all").logits
    exact = bool(np.array_equal(ref, out))
    bundle_bytes = PREFILL_TOKENS * m.inv.n_embd * 4
    problems = [] if exact else ["the logits through fragmented frames differ from the unsplit model's"]
    return verdict(
        "boundary",
        f"fragmented-bundles/{m.name}",
        REAL_MODEL,
        problems,
        {
            "max_body": FRAGMENT_BODY,
            "bundle_bytes": bundle_bytes,
            "fragments_per_bundle": -(-bundle_bytes // FRAGMENT_BODY),
            "logits_bytes": int(out.nbytes),
            "fragments_per_logits": -(-int(out.nbytes) // FRAGMENT_BODY),
            "bit_exact": exact,
        },
    )


def _expect_refusal(w: Worker, code: str, phrase: str, body: bytes = b"", **fields: Any) -> str | None:
    try:
        w.request("decode", body, **fields)
    except WorkerRequestError as e:
        if e.code != code or phrase not in e.message:
            return f"expected {code} mentioning {phrase!r}, got {e.code}: {e.message}"
        return None
    return f"accepted, expected {code}"


def check_refusals(env: Env, m: RealModel) -> Check:
    other_spec = synth.LLAMA_UNTIED
    with (
        Pipeline(env.worker, m.path, m.split(3), threads=env.threads) as pipe,
        Pipeline(
            env.worker, env.synth(other_spec), inventory.split(other_spec.n_layer, 2), threads=env.threads
        ) as other,
    ):
        head, middle, tail = pipe.workers
        tokens = pipe.tokenize(prompts.GENERATION[0])
        n = len(tokens)
        base: dict[str, Any] = {"session": "r", "epoch": 1, "pos": 0, "n_tokens": n}
        good = head.request("decode", tokens=tokens, **base).body
        other_tokens = [t % other_spec.n_vocab for t in tokens]
        other_bundle = other.workers[0].request("decode", tokens=other_tokens, **base).body
        # name: (worker, error code, phrase of its message, body, fields over `base`)
        cases: dict[str, tuple[Worker, str, str, bytes, dict[str, Any]]] = {
            "middle fed tokens": (middle, "wrong_input", "not tokens", b"", {"tokens": tokens}),
            "head fed a bundle": (head, "wrong_input", "not a bundle", good, {}),
            "bundle from another model": (middle, "bundle_mismatch", "model", other_bundle, {}),
            "bundle of the wrong layer range": (tail, "bundle_mismatch", "layer_end", good, {}),
            "bundle with another epoch": (middle, "bundle_mismatch", "epoch", good, {"epoch": 2}),
            "truncated bundle": (middle, "bad_bundle", "truncated", good[:-100], {}),
            "bundle with trailing bytes": (middle, "bad_bundle", "trailing", good + b"\0" * 8, {}),
        }
        problems: dict[str, str] = {}
        for name, (w, code, phrase, body, extra) in cases.items():
            err = _expect_refusal(w, code, phrase, body, **{**base, **extra})
            if err:
                problems[name] = err
        # the chain still works after the refusals
        middle.request("decode", good, **base)
    return Check(
        group="boundary",
        name=f"refusals/{m.name}",
        evidence=REAL_MODEL,
        passed=not problems,
        figures={"cases": len(cases), "refused": len(cases) - len(problems)},
        detail="\n".join(f"{k}: {v}" for k, v in problems.items()),
    )


def check_codec_roundtrip(env: Env, m: RealModel) -> Check:
    """A bundle the worker wrote decodes in Python with every field, and re-encodes to the same bytes."""
    split = [m.split(3)[0], (m.split(3)[0][1], m.n_layer)]
    with Pipeline(env.worker, m.path, split, threads=env.threads) as pipe:
        tokens = pipe.tokenize(prompts.GENERATION[1])
        rep = pipe.workers[0].request(
            "decode", tokens=tokens, session="c", epoch=3, pos=0, n_tokens=len(tokens)
        )
    b = bundle.decode(rep.body)
    meta_ok = (
        b.meta.get("layer_end") == str(split[0][1])
        and b.meta.get("session") == "c"
        and b.meta.get("epoch") == "3"
        and b.meta.get("n_tokens") == str(len(tokens))
    )
    res = b.tensor("residual")
    same = bundle.encode(b.meta, b.tensors) == rep.body
    passed = meta_ok and res.shape == (len(tokens), m.inv.n_embd) and same
    return Check(
        group="boundary",
        name=f"bundle-codec-interop/{m.name}",
        evidence=REAL_MODEL,
        passed=passed,
        figures={"bundle_bytes": len(rep.body), "shape": list(res.shape), "reencoded_identical": same},
    )


def run_fixtures(env: Env) -> list[Check]:
    """Split prefills of the synthetic models."""
    checks: list[Check] = []
    for model, evidence, label in env.synthetic_models():
        checks += guarded(
            "boundary",
            f"prefill-splits/{label}",
            evidence,
            partial(check_prefill_splits, env, model, evidence, label),
        )
    return checks


MODEL_CHECKS = (
    ("no-range-vs-upstream", check_baseline),
    ("generate-3-workers", check_generation),
    ("fragmented-bundles", check_fragments),
    ("refusals", check_refusals),
    ("bundle-codec-interop", check_codec_roundtrip),
)


def run_model(env: Env, m: RealModel) -> list[Check]:
    """Split prefills of the model, from the whole file and from its parts, then MODEL_CHECKS."""
    parts = partial(env.parts.of, m.name) if env.parts is not None else None
    checks = guarded(
        "boundary",
        f"prefill-splits/{m.name}",
        REAL_MODEL,
        partial(check_prefill_splits, env, m.path, REAL_MODEL, m.name, parts),
    )
    for name, fn in MODEL_CHECKS:
        checks += guarded("boundary", f"{name}/{m.name}", REAL_MODEL, partial(fn, env, m))
    return checks


GROUP = conformance("boundary", run_fixtures, run_model, needs_baseline=True)
