"""The boundary bundle (docs/bundle.md): safetensors layout with our metadata, decoded strictly."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

import numpy as np

from dgr.core import jsonio

FORMAT = "layer-bundle"
VERSION = "1"
MAX_HEADER = 1 << 20
DEFAULT_MAX_SIZE = 1 << 30

_DTYPES: dict[str, np.dtype] = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # raw bfloat16 bits
    "I32": np.dtype("<i4"),
}
_FLOAT = {"F32", "F16"}


class BundleError(ValueError):
    """A bundle that does not decode; the message names the problem."""


@dataclass
class Bundle:
    meta: dict[str, str]
    tensors: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)  # name -> (dtype, array)

    def tensor(self, name: str) -> np.ndarray:
        return self.tensors[name][1]


def encode(meta: dict[str, str], tensors: dict[str, tuple[str, np.ndarray]]) -> bytearray:
    """The bundle bytes; each tensor is copied once, straight into its place."""
    header: dict[str, object] = {
        "__metadata__": {"format": FORMAT, "version": VERSION, "byte_order": "little", **meta}
    }
    arrays: list[np.ndarray] = []
    offset = 0
    for name in sorted(tensors):
        dtype, array = tensors[name]
        if dtype not in _DTYPES:
            raise BundleError(f"unknown dtype {dtype!r}")
        data = np.ascontiguousarray(array, dtype=_DTYPES[dtype])
        header[name] = {
            "dtype": dtype,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + data.nbytes],
        }
        arrays.append(data)
        offset += data.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    out = bytearray(8 + len(text) + offset)
    struct.pack_into("<Q", out, 0, len(text))
    out[8 : 8 + len(text)] = text
    pos = 8 + len(text)
    dest = np.frombuffer(out, dtype=np.uint8)  # a view of `out`: the copy below writes straight into it
    for data in arrays:
        dest[pos : pos + data.nbytes] = data.reshape(-1).view(np.uint8)
        pos += data.nbytes
    return out


def decode(data: bytes | bytearray | memoryview, max_size: int = DEFAULT_MAX_SIZE) -> Bundle:
    """Decode and validate; arrays are zero-copy views of `data` where the layout allows."""
    buf = memoryview(data)
    if len(buf) > max_size:
        raise BundleError(f"oversized: {len(buf)} bytes, the limit is {max_size}")
    if len(buf) < 8:
        raise BundleError(f"truncated: {len(buf)} bytes, shorter than the 8-byte header size")
    (n,) = struct.unpack_from("<Q", buf, 0)
    if not 2 <= n <= MAX_HEADER:
        raise BundleError(f"header size {n} is out of range [2, {MAX_HEADER}]")
    if n > len(buf) - 8:
        raise BundleError(f"truncated: the header needs {n} bytes, {len(buf) - 8} remain")
    header = jsonio.loads(bytes(buf[8 : 8 + n]), "header", BundleError)  # strict: a key twice, NaN refused
    if not isinstance(header, dict):
        raise BundleError("header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise BundleError("no __metadata__ map of strings")
    if meta.get("format") != FORMAT:
        raise BundleError(f"format {meta.get('format')!r} is not {FORMAT!r}")
    if meta.get("version") != VERSION:
        raise BundleError(f"unknown version {meta.get('version')!r} (this decoder reads version {VERSION})")
    if meta.get("byte_order") != "little":
        raise BundleError(f"unsupported byte_order {meta.get('byte_order')!r} (only little)")
    meta = {k: v for k, v in meta.items() if k not in ("format", "version", "byte_order")}

    body = buf[8 + n :]
    spans: list[tuple[int, int, str]] = []
    tensors: dict[str, tuple[str, np.ndarray]] = {}
    for name, info in header.items():
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
            raise BundleError(f"tensor {name!r} needs dtype, shape and data_offsets")
        dtype = info["dtype"]
        if dtype not in _DTYPES:
            raise BundleError(f"tensor {name!r} has an unknown dtype {dtype!r}")
        shape = info["shape"]
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise BundleError(
                f"tensor {name!r} has a shape that is not a list of non-negative integers: {shape!r}"
            )
        offsets = info["data_offsets"]
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
        ):
            raise BundleError(f"tensor {name!r} has invalid data_offsets {offsets!r}")
        begin, end = offsets
        if begin > end or end > len(body):
            raise BundleError(
                f"tensor {name!r} data [{begin}, {end}) is outside the {len(body)} data bytes (truncated)"
            )
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        need = count * _DTYPES[dtype].itemsize
        if end - begin != need:
            raise BundleError(f"tensor {name!r} has {end - begin} bytes, its shape needs {need}")
        array = np.frombuffer(body[begin:end], dtype=_DTYPES[dtype]).reshape(tuple(shape))
        if dtype in _FLOAT and not np.isfinite(array).all():
            raise BundleError(f"tensor {name!r} has non-finite values")
        if dtype == "BF16" and ((array >> 7) & 0xFF == 0xFF).any():
            raise BundleError(f"tensor {name!r} has non-finite values")
        spans.append((begin, end, name))
        tensors[name] = (dtype, array)
    expect = 0
    for begin, end, name in sorted(spans):
        if begin != expect:
            raise BundleError(
                f"a gap before tensor {name!r}"
                if begin > expect
                else f"tensor {name!r} overlaps the previous one"
            )
        expect = end
    if expect != len(body):
        raise BundleError(f"{len(body) - expect} trailing bytes after the last tensor")
    if "n_tokens" in meta:
        for name, (_, array) in tensors.items():
            # a 0-d tensor has no rows: its first dimension is absent, never n_tokens
            if [str(n) for n in array.shape[:1]] != [meta["n_tokens"]]:
                raise BundleError(
                    f"tensor {name!r} has {array.shape[:1]} rows, n_tokens is {meta['n_tokens']}"
                )
    return Bundle(meta, tensors)
