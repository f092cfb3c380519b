"""The `offload` group (`dgr verify --backend NAME`): layer ranges with layers offloaded to a GPU device.

For each model and each configuration (a split into ranges, and the `n_gpu_layers` of every range):
- placement: in each range the last `n_gpu_layers` layers (the output layer first, if the range holds it) have
  their weights in buffers of the device and their K cache there, and no other tensor or layer does; the
  device's weight bytes are those of the offloaded tensors, read from the model file;
- numbers, against the unsplit model (loaded with no range, llama.cpp's default path, with an n_gpu_layers):
  - a split wholly on the CPU or wholly on the device: its logits of a prefill equal, within an NMSE
    tolerance (in practice: bit for bit), those of the unsplit model there, and its greedy decoding gives the
    same tokens
    (a GPU backend's kernels are not the CPU's: on lavapipe the unsplit model on the device and on the CPU
    differ by NMSE 1e-3 for Q4 weights, and decoding parts after a few tokens, so only a run with the same
    placement can be expected to give the same numbers);
  - a split with layers on both sides: each range against the unsplit model loaded with the n_gpu_layers that
    places the range's layers as the range places them (llama.cpp offloads the last n_gpu_layers of the whole
    model, the output layer first; a range offloads the last of its own). The range takes the unsplit model's
    hidden state that enters its first layer (upstream's `llama_set_embeddings_layer_inp`, the worker's
    `layer_inp`), for a prefill and then each token of the prompt's continuation, and its output must equal
    the unsplit model's bit for bit (the same kernels on the same inputs): the hidden state that enters the
    layer where the range ends, or the logits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dgr.contracts.report import REAL_MODEL, SYNTHETIC, Check, Evidence
from dgr.errors import VerifyError
from dgr.verify.checks.report import guarded, matching_prefix, verdict
from dgr.verify.checks.session import conformance
from dgr.verify.models import inventory, prompts, synth
from dgr.verify.models.env import Env, RealModel
from dgr.verify.wire import bundle
from dgr.verify.wire.client import ContextParams, Worker
from dgr.verify.wire.frames import Frame
from dgr.verify.wire.pipeline import Pipeline, logits_of

NMSE_TOLERANCE = 1e-4
"""The largest normalized mean squared error of a split's logits against those of a run with the same
placement (the tolerance upstream's test-llama-archs uses to compare backends)."""
PREFILL_TOKENS = 16
"""Fewer than the batch from which ggml's scheduler runs a product of host weights on the device (op offload,
32 tokens by default for Vulkan and CUDA): so the prefill's products run where the weights are, and a split
with its layers on the CPU is compared with the unsplit model on the CPU, not with the device's kernels."""
GREEDY_TOKENS = 16
STEPS = 4
"""The tokens after the prefill that each range of a split with layers on both sides decodes one at a time,
against the unsplit model decoding the same tokens."""
TIMEOUT = 900.0
"""How long a worker request may take: a software device (lavapipe) on 2 cores runs a prefill of Gemma 3's
262k-token head in minutes."""
ALL = 999
"""An n_gpu_layers above every range's size: every layer of the range is offloaded."""

_LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class Offload:
    shards: int
    n_gpu_layers: int

    @property
    def name(self) -> str:
        ngl = "all" if self.n_gpu_layers >= ALL else str(self.n_gpu_layers)
        return f"split-{self.shards}-ngl-{ngl}"


def configs(n_layer: int) -> list[Offload]:
    """Halves with nothing, some and every layer of each range offloaded; thirds with some: `some` is half of
    the smallest range, so that every range has layers on both sides."""
    some = max(1, min(e - b for b, e in inventory.split(n_layer, 3)) // 2)
    return [Offload(2, 0), Offload(2, some), Offload(2, ALL), Offload(3, some)]


def offloaded_layers(begin: int, end: int, n_layer: int, n_gpu_layers: int) -> tuple[set[int], bool]:
    """The layers of [begin, end) that n_gpu_layers offloads, and whether the output layer is offloaded:
    counted from the end of the range, the output layer first when the range holds it (as llama.cpp counts
    the whole model: the last n_gpu_layers of its layers and its output layer)."""
    top = n_layer + 1 if end == n_layer else end
    first = max(top - n_gpu_layers, begin)
    return set(range(first, min(top, end))), end == n_layer and first <= n_layer < top


def reference_ngl(begin: int, end: int, n_layer: int, n_gpu_layers: int) -> int:
    """The n_gpu_layers of the unsplit model that places the layers of [begin, end), and the output layer when
    the range holds it, as the range loaded with `n_gpu_layers` places them."""
    layers, output = offloaded_layers(begin, end, n_layer, n_gpu_layers)
    if end == n_layer and not output:
        return 0
    return n_layer + 1 - min(layers, default=end)


def expected_on_device(inv: inventory.Inventory, begin: int, end: int, n_gpu_layers: int) -> set[str]:
    """The tensors of the range that must be in buffers of the device (the shared ones, which every layer
    uses, are not judged)."""
    layers, output = offloaded_layers(begin, end, inv.n_layer, n_gpu_layers)
    out: set[str] = set()
    for name in inv.expected(begin, end):
        m = _LAYER.match(name)
        if m:
            if int(m.group(1)) in layers:
                out.add(name)
        elif inventory.is_shared(name):
            continue
        elif name == "token_embd.weight":
            # the input layer stays on the CPU; with tied embeddings the head is token_embd.weight too
            if output and inv.tied:
                out.add(name)
        elif output:
            out.add(name)
    return out


def placement_problems(
    inv: inventory.Inventory, rep: dict[str, Any], begin: int, end: int, ngl: int, device: str
) -> list[str]:
    """Where the layers, the weights and the K cache of the range [begin, end) loaded with n_gpu_layers `ngl`
    are, against the expectation; [] when all are where they should be.

    The layer assignment (`dev_layer`, `dev_output`) is judged strictly. A weight of an offloaded layer may
    stay in host memory only when the device does not support the op that uses it (llama.cpp's buffer-type
    selection falls back to the CPU then: lavapipe's 128 MiB storage buffers cannot hold Gemma 3's 178 MB
    tied head); the worker says which tensors, and whether the device supports their op."""
    where = f"[{begin}, {end})"
    problems = []
    layers, output = offloaded_layers(begin, end, inv.n_layer, ngl)
    for il, dev in zip(range(begin, end), rep["layer_devices"], strict=True):
        want_dev = device if il in layers else "CPU"
        if dev != want_dev:
            problems.append(f"{where}: layer {il} is assigned to {dev}, not {want_dev}")
    if end == inv.n_layer and rep["output_device"] != (device if output else "CPU"):
        problems.append(f"{where}: the output layer is assigned to {rep['output_device']}")
    kept = {t["name"]: t for t in rep["host_kept"]}
    for name, t in sorted(kept.items()):
        if t["device_supports"]:
            problems.append(f"{where}: {name} is in host memory, though {t['device']} supports its op")
    fallback = {n for n, t in kept.items() if not t["device_supports"]}
    on_device = {n for n in rep["device_tensors"] if not inventory.is_shared(n)}
    want = expected_on_device(inv, begin, end, ngl) - fallback
    if on_device != want:
        problems.append(
            f"{where}: on the device but not offloaded {sorted(on_device - want)[:4]}, "
            f"offloaded but not on the device {sorted(want - on_device)[:4]}"
        )
    # the bytes llama.cpp holds on the device (its tensors' sizes), against the offloaded tensors' in the file
    shared = {n for n in rep["device_tensors"] if inventory.is_shared(n) and n in inv.tensors}
    device_bytes, want_bytes = int(rep["device_bytes"]) - inv.bytes_of(shared), inv.bytes_of(want)
    if device_bytes != want_bytes:
        problems.append(
            f"{where}: {device_bytes} bytes of weights on the device, the offloaded tensors have "
            f"{want_bytes} in the file"
        )
    kv = rep.get("kv_layers", [])
    if not kv:
        problems.append(f"{where}: the worker reported no KV cache layers")
    for layer in kv:
        il, dev = int(layer["layer"]), bool(layer["on_device"])
        if not begin <= il < end:
            problems.append(f"{where}: the KV cache has layer {il}, outside of the range")
        elif dev != (il in layers):
            problems.append(f"{where}: the K cache of layer {il} is {'' if dev else 'not '}on the device")
    kv_device = int(rep["memory"]["kv_device_bytes"])
    if (kv_device > 0) != bool(layers):
        problems.append(
            f"{where}: {kv_device} bytes of KV cache on the device for {len(layers)} offloaded layers"
        )
    return problems


def nmse(ref: np.ndarray, out: np.ndarray) -> float:
    """The normalized mean squared error of `out` against `ref`; infinite when their shapes differ."""
    if ref.shape != out.shape:
        return float("inf")
    ref64, out64 = ref.astype(np.float64), out.astype(np.float64)
    return float(np.sum((ref64 - out64) ** 2) / np.sum(ref64**2))


@dataclass(frozen=True)
class Outcome:
    """The logits of a prefill and the greedy tokens after it."""

    logits: np.ndarray
    greedy: list[int]


@dataclass(frozen=True)
class Reference:
    """The unsplit model with every layer on the device and with none: a split wholly on one side is compared
    with the unsplit model there (a device's kernels are not the CPU's, so decoding can part after a few
    tokens). `continuation`: the tokens that follow the prompt, decoded one at a time by each range of a
    split with layers on both sides."""

    tokens: list[int]
    continuation: list[int]
    device: Outcome
    cpu: Outcome

    @property
    def cpu_nmse(self) -> float:
        """The NMSE of the prefill on the CPU (n_gpu_layers 0) against the same on the device."""
        return nmse(self.device.logits, self.cpu.logits)

    def of(self, n_gpu_layers: int) -> Outcome | None:
        """The run of the same placement: None for a split with layers both on the device and on the CPU."""
        return self.cpu if n_gpu_layers == 0 else self.device if n_gpu_layers >= ALL else None


def _prompt(env: Env, model: Path, real: bool) -> list[int]:
    """The prompt's first PREFILL_TOKENS + STEPS tokens."""
    n = PREFILL_TOKENS + STEPS
    if not real:
        rng = np.random.default_rng(7)
        return [int(t) for t in rng.integers(0, synth.LLAMA_UNTIED.n_vocab, n)]
    with Pipeline(env.worker, model, None, threads=env.threads, n_gpu_layers=0, timeout=TIMEOUT) as whole:
        tokens = whole.tokenize(prompts.LONG)
    if len(tokens) < n:
        raise RuntimeError(f"the prompt has {len(tokens)} tokens, fewer than {n}")
    return tokens[:n]


def _run(
    env: Env, model: Path, ranges: list[tuple[int, int]] | None, ngl: int, tokens: list[int]
) -> tuple[list[dict[str, Any]], Outcome]:
    """A prefill of `tokens` (all their logits) and greedy decoding after it, through `ranges` (None: the
    unsplit model)."""
    with Pipeline(env.worker, model, ranges, threads=env.threads, n_gpu_layers=ngl, timeout=TIMEOUT) as pipe:
        info = list(pipe.info)
        logits = pipe.step("prefill", 1, 0, tokens, logits="all").logits
        greedy = pipe.generate("greedy", 1, tokens, GREEDY_TOKENS)
    return info, Outcome(logits, greedy)


def reference(env: Env, model: Path, real: bool) -> Reference:
    tokens = _prompt(env, model, real)
    prompt, continuation = tokens[:PREFILL_TOKENS], tokens[PREFILL_TOKENS:]
    _, device = _run(env, model, None, ALL, prompt)
    _, cpu = _run(env, model, None, 0, prompt)
    return Reference(prompt, continuation, device=device, cpu=cpu)


def _output(reply: Frame, end: int, n_layer: int) -> np.ndarray:
    """What a decode reply carries: the logits (a range that ends with the model) or the hidden state."""
    return bundle.decode(reply.body).tensor("residual") if end < n_layer else logits_of(reply)


def range_against_unsplit(
    env: Env, inv: inventory.Inventory, ref: Reference, shard: Worker, begin: int, end: int, ngl: int
) -> tuple[list[str], dict[str, Any]]:
    """The range [begin, end) loaded with `ngl` (the worker `shard`) against the unsplit model loaded with the
    n_gpu_layers that places those layers alike: given the unsplit model's hidden state that enters `begin`,
    for the prompt and then each token of the continuation, the range must output what the unsplit model
    computes (the hidden state that enters `end`, or the logits)."""
    where = f"[{begin}, {end})"
    n_layer = inv.n_layer
    ref_ngl = reference_ngl(begin, end, n_layer, ngl)
    chunks = [ref.tokens] + [[t] for t in ref.continuation]
    figures: dict[str, Any] = {
        "range": [begin, end],
        "compared_with": f"unsplit-ngl-{ref_ngl}",
        "nmse": 0.0,
        "steps_bit_exact": 0,
    }
    context = ContextParams(threads=env.threads)
    with Worker(env.worker, f"unsplit-ngl-{ref_ngl}", timeout=TIMEOUT) as unsplit:
        captured = [il for il in (begin, end) if 0 < il < n_layer]
        unsplit.load(inv.path, None, context=context, n_gpu_layers=ref_ngl, layer_inp=captured)
        pos = 0
        for chunk in chunks:
            step: dict[str, Any] = {"epoch": 1, "pos": pos, "n_tokens": len(chunk), "tokens": chunk}
            body = b""
            if begin > 0:
                # the input of the range: the unsplit model's hidden state that enters layer `begin`
                body = unsplit.request("decode", session="in", layer_inp=begin, logits="none", **step).body
            out: dict[str, Any] = {"layer_inp": end, "logits": "none"} if end < n_layer else {"logits": "all"}
            want = _output(unsplit.request("decode", session="out", **step, **out), end, n_layer)
            sent = step if begin == 0 else {k: v for k, v in step.items() if k != "tokens"}
            logits = "all" if end == n_layer else "none"
            got = _output(shard.request("decode", body, session="in", logits=logits, **sent), end, n_layer)
            error = nmse(want, got)
            figures["nmse"] = max(figures["nmse"], error)
            # the same kernels on the same inputs: bit for bit (one layer placed elsewhere gave NMSE 4e-5 on
            # SmolLM2's hidden state, below the logits' tolerance)
            if not np.array_equal(want, got):
                what = "logits" if end == n_layer else f"hidden state that enters layer {end}"
                return [
                    f"{where}: at position {pos} the {what} differ from those of unsplit-ngl-{ref_ngl}: "
                    f"NMSE {error:.3e}"
                ], figures
            figures["steps_bit_exact"] += 1
            pos += len(chunk)
    return [], figures


def check_config(
    env: Env, inv: inventory.Inventory, ref: Reference, config: Offload, evidence: Evidence, label: str
) -> Check:
    ranges = inventory.split(inv.n_layer, config.shards)
    problems: list[str] = []
    device_bytes, host_kept = [], []
    assert env.device is not None
    ngl = config.n_gpu_layers
    figures: dict[str, Any] = {
        "ranges": [list(r) for r in ranges],
        "n_gpu_layers": ngl,
        "offloaded_layers": [len(offloaded_layers(b, e, inv.n_layer, ngl)[0]) for b, e in ranges],
        "unsplit_device_vs_cpu_nmse": ref.cpu_nmse,
        "unsplit_device_vs_cpu_greedy": matching_prefix(ref.device.greedy, ref.cpu.greedy),
    }
    pipe = Pipeline(env.worker, inv.path, ranges, threads=env.threads, n_gpu_layers=ngl, timeout=TIMEOUT)
    with pipe:
        for (begin, end), rep in zip(ranges, pipe.info, strict=True):
            problems += placement_problems(inv, rep, begin, end, ngl, env.device)
            device_bytes.append(int(rep["device_bytes"]))
            host_kept += [{"range": [begin, end], **t} for t in rep["host_kept"]]
        figures |= {"device_bytes": device_bytes, "host_kept": host_kept}
        base = ref.of(ngl)
        if base is None:
            # layers on both sides: no unsplit run places them alike, so each range against its own
            per_range = []
            for (begin, end), shard in zip(ranges, pipe.workers, strict=True):
                found, fig = range_against_unsplit(env, inv, ref, shard, begin, end, ngl)
                problems += found
                per_range.append(fig)
            figures["per_range"] = per_range
            return verdict("offload", f"{config.name}/{label}", evidence, problems, figures)
        logits = pipe.step("prefill", 1, 0, ref.tokens, logits="all").logits
        greedy = pipe.generate("greedy", 1, ref.tokens, GREEDY_TOKENS)
    compared_with = "unsplit-ngl-0" if ngl == 0 else "unsplit-ngl-all"
    error = nmse(base.logits, logits)
    if not error <= NMSE_TOLERANCE:
        problems.append(f"the logits differ from those of {compared_with}: NMSE {error:.3e}")
    same = matching_prefix(greedy, base.greedy)
    if same != GREEDY_TOKENS:
        problems.append(f"greedy decoding: {same} of {GREEDY_TOKENS} tokens match those of {compared_with}")
    figures |= {"compared_with": compared_with, "nmse": error, "greedy_tokens_matching": same}
    return verdict("offload", f"{config.name}/{label}", evidence, problems, figures)


def _checks(env: Env, model: Path, evidence: Evidence, label: str) -> list[Check]:
    if env.device is None:
        raise VerifyError(
            "the offload group needs a GPU backend",
            hint="run it as `dgr verify --backend vulkan` (or another GPU backend)",
        )
    inv = inventory.read(model)
    refs: list[Reference] = []

    def unsplit() -> list[Check]:
        refs.append(reference(env, model, evidence == REAL_MODEL))
        return []

    # the unsplit model on the device: what every split is compared with (a failure is a failed check)
    checks = guarded("offload", f"unsplit/{label}", evidence, unsplit)
    if not refs:
        return checks
    ref = refs[0]
    for config in configs(inv.n_layer):
        checks += guarded(
            "offload",
            f"{config.name}/{label}",
            evidence,
            partial(check_config, env, inv, ref, config, evidence, label),
        )
    return checks


def run_fixtures(env: Env) -> list[Check]:
    """The synthetic dense Llama with untied output."""
    return _checks(env, env.synth(synth.LLAMA_UNTIED), SYNTHETIC, "synth-untied")


def run_model(env: Env, m: RealModel) -> list[Check]:
    return _checks(env, m.path, REAL_MODEL, m.name)


GROUP = conformance("offload", run_fixtures, run_model)
