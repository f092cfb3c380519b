"""A model's tensor inventory read from the GGUF file by dgr's own strict reader (dgr.verify.models.gguffile),
independently of llama.cpp, and the tensors a layer range must hold according to it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgr.errors import ConfigError
from dgr.verify.models import gguffile

_LAYER = re.compile(r"^blk\.(\d+)\.")
# tensors used by every layer (Llama 3 RoPE frequency factors): every range holds them
_SHARED = ("rope_freqs.", "rope_factors_")


def is_shared(name: str) -> bool:
    """A tensor every layer uses, held by every range."""
    return name.startswith(_SHARED)


@dataclass(frozen=True)
class Inventory:
    path: Path
    arch: str
    n_layer: int
    n_embd: int
    tensors: dict[str, int]  # name -> bytes
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The file's scalar and string metadata by key (arrays: None; see gguffile.Header)."""
    spans: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """name -> the byte range [start, end) of the tensor's data in the file."""

    @property
    def tied(self) -> bool:
        return "output.weight" not in self.tensors

    @property
    def n_bytes(self) -> int:
        return sum(self.tensors.values())

    def expected(self, begin: int, end: int) -> set[str]:
        """Names of the tensors that the range [begin, end) must hold."""
        out: set[str] = set()
        for name in self.tensors:
            m = _LAYER.match(name)
            if m:
                if begin <= int(m.group(1)) < end:
                    out.add(name)
            elif is_shared(name):
                out.add(name)
            elif name == "token_embd.weight":
                if begin == 0 or (self.tied and end == self.n_layer):
                    out.add(name)
            elif end == self.n_layer:
                out.add(name)
        return out

    def bytes_of(self, names: set[str]) -> int:
        return sum(self.tensors[n] for n in names)


def read(path: Path) -> Inventory:
    """The inventory of the GGUF file at `path`; ConfigError (exit 8) naming the file and the offset or the
    key when it is cut short, corrupt, or lacks what a model of the layer loop has."""
    return of_header(path, gguffile.read(path))


def of_header(path: Path, header: gguffile.Header) -> Inventory:
    """The inventory of the GGUF header of the file `path`; ConfigError unless it names the architecture, its
    layer count and its embedding width."""

    def number(key: str) -> int:
        value = header.metadata.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            found = "it is missing" if key not in header.metadata else f"{value!r} is not a positive integer"
            raise ConfigError(f"{path}: not a model of layers: metadata {key}: {found}", hint=gguffile.HINT)
        return value

    arch = header.metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ConfigError(
            f"{path}: not a model of layers: metadata general.architecture: "
            + ("it is missing" if arch is None else f"{arch!r} is not a name"),
            hint=gguffile.HINT,
        )
    return Inventory(
        path=path,
        arch=arch,
        n_layer=number(f"{arch}.block_count"),
        n_embd=number(f"{arch}.embedding_length"),
        tensors={t.name: t.n_bytes for t in header.tensors},
        metadata=header.metadata,
        spans={
            t.name: (header.data_offset + t.offset, header.data_offset + t.offset + t.n_bytes)
            for t in header.tensors
        },
    )


def split(n_layer: int, k: int) -> list[tuple[int, int]]:
    """`k` contiguous ranges covering [0, n_layer), sizes differing by at most one (larger first)."""
    if not 1 <= k <= n_layer:
        raise ValueError(f"cannot split {n_layer} layers into {k} shards")
    base, extra = divmod(n_layer, k)
    ranges, begin = [], 0
    for i in range(k):
        end = begin + base + (1 if i < extra else 0)
        ranges.append((begin, end))
        begin = end
    return ranges


SHARD_COUNTS = (2, 3, 6)
"""How many ranges the split checks cut a model into, besides every layer alone: halves, thirds and sixths
(ranges of a few layers; on Gemma 3, whose layers come in groups of five sliding-window layers and one
full-attention layer, sixths of 18 layers give ranges without a full-attention layer and ranges that end on
one, and thirds give ranges of one group each)."""


def shard_counts(n_layer: int, *, unsplit: bool = False) -> tuple[int, ...]:
    """The splits the checks run on a model of `n_layer` layers: SHARD_COUNTS that leave more than one layer
    per range, then `n_layer` (every layer alone); with `unsplit`, 1 (the whole model as one range) first."""
    if n_layer < 1:
        raise ValueError(f"a model of {n_layer} layers has no splits")
    counts = {k for k in SHARD_COUNTS if k < n_layer} | {n_layer}
    if unsplit:
        counts.add(1)
    return tuple(sorted(counts))
