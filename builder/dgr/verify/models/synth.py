"""Small deterministic synthetic models written with the `gguf` package.

They are random dense-Llama (or another architecture's) checkpoints: real GGUF files that llama.cpp loads
and evaluates, small enough to run every split in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np


@dataclass(frozen=True)
class SynthSpec:
    name: str
    arch: str = "llama"
    n_layer: int = 30
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_vocab: int = 256
    n_ctx: int = 512
    tied: bool = False
    seed: int = 0


# the fixtures the harness uses: tied and untied dense Llama, Qwen2 (another architecture), and BitNet, whose
# graph reads the token embeddings as its output head, so that a range without the input layer is refused
LLAMA_UNTIED = SynthSpec("synth-llama-untied", tied=False, seed=1)
LLAMA_TIED = SynthSpec("synth-llama-tied", tied=True, seed=2)
QWEN2 = SynthSpec("synth-qwen2", arch="qwen2", n_layer=4, tied=False, seed=3)
BITNET = SynthSpec("synth-bitnet", arch="bitnet", n_layer=4, tied=True, seed=4)


def _weights(rng: np.random.Generator, *shape: int, scale: float = 0.05) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _norm(rng: np.random.Generator, n: int) -> np.ndarray:
    return (1.0 + rng.standard_normal(n) * 0.05).astype(np.float32)


def write(spec: SynthSpec, path: Path) -> Path:
    """Write the model to `path` (numpy shapes are the reverse of ggml's ne)."""
    rng = np.random.default_rng(spec.seed)
    n_embd_kv = spec.n_embd // spec.n_head * spec.n_head_kv

    writer = gguf.GGUFWriter(str(path), spec.arch)
    writer.add_name(spec.name)
    writer.add_block_count(spec.n_layer)
    writer.add_context_length(spec.n_ctx)
    writer.add_embedding_length(spec.n_embd)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(spec.n_vocab)
    writer.add_tokenizer_model("no_vocab")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    writer.add_tensor("token_embd.weight", _weights(rng, spec.n_vocab, spec.n_embd, scale=1.0))
    for il in range(spec.n_layer):
        p = f"blk.{il}."
        writer.add_tensor(p + "attn_norm.weight", _norm(rng, spec.n_embd))
        writer.add_tensor(p + "attn_q.weight", _weights(rng, spec.n_embd, spec.n_embd))
        writer.add_tensor(p + "attn_k.weight", _weights(rng, n_embd_kv, spec.n_embd))
        writer.add_tensor(p + "attn_v.weight", _weights(rng, n_embd_kv, spec.n_embd))
        writer.add_tensor(p + "attn_output.weight", _weights(rng, spec.n_embd, spec.n_embd))
        if spec.arch == "qwen2":
            writer.add_tensor(p + "attn_q.bias", _weights(rng, spec.n_embd))
            writer.add_tensor(p + "attn_k.bias", _weights(rng, n_embd_kv))
            writer.add_tensor(p + "attn_v.bias", _weights(rng, n_embd_kv))
        if spec.arch == "bitnet":
            writer.add_tensor(p + "attn_sub_norm.weight", _norm(rng, spec.n_embd))
            writer.add_tensor(p + "ffn_sub_norm.weight", _norm(rng, spec.n_ff))
        writer.add_tensor(p + "ffn_norm.weight", _norm(rng, spec.n_embd))
        writer.add_tensor(p + "ffn_gate.weight", _weights(rng, spec.n_ff, spec.n_embd))
        writer.add_tensor(p + "ffn_up.weight", _weights(rng, spec.n_ff, spec.n_embd))
        writer.add_tensor(p + "ffn_down.weight", _weights(rng, spec.n_embd, spec.n_ff))
    writer.add_tensor("output_norm.weight", _norm(rng, spec.n_embd))
    if not spec.tied:
        writer.add_tensor("output.weight", _weights(rng, spec.n_vocab, spec.n_embd))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def ensure(spec: SynthSpec, directory: Path) -> Path:
    """The model file for `spec` in `directory`, written once (atomically)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{spec.name}-{spec.seed}.gguf"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        write(spec, tmp)
        tmp.replace(path)
    return path
