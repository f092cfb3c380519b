"""The Python bundle codec (docs/bundle.md): round trips, every refusal, and a fuzzed decoder."""

from __future__ import annotations

import contextlib
import json
import struct

import numpy as np
import pytest
from dgr.verify.wire import bundle
from dgr.verify.wire.bundle import BundleError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

META = {
    "model": "0123456789abcdef",
    "n_layer": "30",
    "layer_begin": "0",
    "layer_end": "10",
    "session": "s",
    "epoch": "1",
    "pos": "0",
    "n_tokens": "3",
}


def residual(n: int = 3, d: int = 8) -> np.ndarray:
    return np.arange(n * d, dtype=np.float32).reshape(n, d) / 7


def make(
    tensors: dict[str, tuple[str, np.ndarray]] | None = None, meta: dict[str, str] | None = None
) -> bytes:
    return bundle.encode(
        META if meta is None else meta, {"residual": ("F32", residual())} if tensors is None else tensors
    )


def rebuild(data: bytes, edit) -> bytes:
    """Decode the header of `data`, let `edit` change it, and re-encode header + the same data."""
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8 : 8 + n])
    edit(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data[8 + n :]


def test_round_trip_keeps_metadata_dtype_shape_and_values() -> None:
    data = make({"residual": ("F32", residual()), "mask": ("I32", np.array([[1], [2], [3]], dtype=np.int32))})
    b = bundle.decode(data)
    assert b.meta == META
    assert b.tensors["residual"][0] == "F32"
    np.testing.assert_array_equal(b.tensor("residual"), residual())
    np.testing.assert_array_equal(b.tensor("mask"), [[1], [2], [3]])
    assert bundle.encode(b.meta, b.tensors) == data


def test_header_is_padded_to_8_bytes_and_is_safetensors_layout() -> None:
    data = make()
    (n,) = struct.unpack_from("<Q", data)
    assert n % 8 == 0
    header = json.loads(data[8 : 8 + n])
    assert header["__metadata__"]["format"] == "layer-bundle"
    assert header["__metadata__"]["byte_order"] == "little"
    assert header["residual"] == {"dtype": "F32", "shape": [3, 8], "data_offsets": [0, 96]}
    assert len(data) == 8 + n + 96


def test_decode_is_zero_copy() -> None:
    data = bytearray(make())
    arr = bundle.decode(data).tensor("residual")
    data[-4:] = struct.pack("<f", 42.0)
    assert arr[-1, -1] == 42.0


@pytest.mark.parametrize(
    ("mutate", "phrase"),
    [
        (lambda d: d[:5], "truncated"),
        (lambda d: d[:-4], "truncated"),
        (lambda d: d + b"\0\0\0\0", "trailing bytes"),
        (lambda d: struct.pack("<Q", 1 << 30) + d[8:], "out of range"),
        (lambda d: struct.pack("<Q", 1 << 19) + d[8:], "truncated"),
        (lambda d: rebuild(d, lambda h: h["__metadata__"].update(version="2")), "unknown version"),
        (lambda d: rebuild(d, lambda h: h["__metadata__"].update(format="other")), "format"),
        (lambda d: rebuild(d, lambda h: h["__metadata__"].update(byte_order="big")), "byte_order"),
        (lambda d: rebuild(d, lambda h: h.pop("__metadata__")), "__metadata__"),
        (lambda d: rebuild(d, lambda h: h["residual"].update(dtype="F64")), "unknown dtype"),
        (lambda d: rebuild(d, lambda h: h["residual"].update(shape=[3, 9])), "shape needs"),
        (lambda d: rebuild(d, lambda h: h["residual"].update(shape=[3, -8])), "non-negative"),
        (lambda d: rebuild(d, lambda h: h["residual"].update(shape="3x8")), "non-negative"),
        (lambda d: rebuild(d, lambda h: h["residual"].update(data_offsets=[0, 200])), "outside"),
        (lambda d: rebuild(d, lambda h: h["residual"].pop("dtype")), "needs dtype"),
        (lambda d: rebuild(d, lambda h: h["__metadata__"].update(n_tokens="4")), "n_tokens"),
        (lambda d: d[:8] + b"{not json" + d[17:], "not JSON"),
    ],
)
def test_malformed_bundles_are_refused_with_the_problem_named(mutate, phrase: str) -> None:
    with pytest.raises(BundleError, match=phrase):
        bundle.decode(mutate(make()))


def test_non_finite_values_are_refused() -> None:
    for bad in (np.nan, np.inf, -np.inf):
        r = residual()
        r[1, 2] = bad
        with pytest.raises(BundleError, match="non-finite"):
            bundle.decode(make({"residual": ("F32", r)}))
    with pytest.raises(BundleError, match="non-finite"):
        bundle.decode(make({"residual": ("F16", np.full((3, 2), np.inf, dtype=np.float16))}))
    with pytest.raises(BundleError, match="non-finite"):
        bundle.decode(make({"residual": ("BF16", np.full((3, 2), 0x7F80, dtype=np.uint16))}))


def test_gaps_and_overlaps_between_tensors_are_refused() -> None:
    two = {"a": ("F32", residual(3, 2)), "b": ("F32", residual(3, 2))}
    data = make(two)
    with pytest.raises(BundleError, match="overlaps"):
        bundle.decode(rebuild(data, lambda h: h["b"].update(data_offsets=[0, 24])))
    gap = rebuild(data + b"\0" * 4, lambda h: h["b"].update(data_offsets=[28, 52]))
    with pytest.raises(BundleError, match="gap"):
        bundle.decode(gap)


def test_oversized_bundle_is_refused() -> None:
    with pytest.raises(BundleError, match="oversized"):
        bundle.decode(make(), max_size=64)


@settings(max_examples=6000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
def test_fuzz_random_bytes_never_crash(data: bytes) -> None:
    with contextlib.suppress(BundleError):
        bundle.decode(data)


@settings(max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_mutated_bundles_decode_or_are_refused(data: st.DataObject) -> None:
    """Flip, cut or extend a valid bundle: the decoder returns a bundle that re-encodes consistently,
    or raises BundleError; never another exception."""
    raw = bytearray(make())
    op = data.draw(st.sampled_from(["flip", "cut", "extend", "splice"]))
    if op == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= data.draw(st.integers(1, 255))
    elif op == "cut":
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    elif op == "extend":
        raw += data.draw(st.binary(min_size=1, max_size=64))
    else:
        i = data.draw(st.integers(0, len(raw)))
        raw = raw[:i] + bytearray(data.draw(st.binary(max_size=32))) + raw[i:]
    try:
        b = bundle.decode(bytes(raw))
    except BundleError:
        return
    for _, arr in b.tensors.values():
        assert arr.nbytes <= len(raw)
