"""Frames and fragment reassembly of the worker protocol (docs/protocol.md), Python side."""

from __future__ import annotations

import io

import pytest
from dgr.verify.wire import frames
from dgr.verify.wire.frames import Assembler, FrameError


def read_all(data: bytes) -> list[frames.Frame]:
    stream = io.BytesIO(data)
    out = []
    while (f := frames.read(stream)) is not None:
        out.append(f)
    return out


def with_part(
    parts: list[frames.Frame], i: int, header: dict, body: bytes | None = None
) -> list[frames.Frame]:
    """parts with part i replaced by one with `header` merged in (and `body`, if given)."""
    part = frames.Frame({**parts[i].header, **header}, parts[i].body if body is None else body)
    return [*parts[:i], part, *parts[i + 1 :]]


def assemble(parts: list[frames.Frame]) -> frames.Frame | None:
    a = Assembler()
    result = None
    for p in parts:
        result = a.add(p)
    return result


def test_small_message_is_one_frame() -> None:
    data = frames.encode_message({"id": 1, "op": "x"}, b"abc", max_body=16)
    [f] = read_all(data)
    assert f.header == {"id": 1, "op": "x"} and f.body == b"abc"


def test_large_message_is_fragmented_and_reassembled_exactly() -> None:
    body = bytes(range(256)) * 40
    parts = read_all(frames.encode_message({"id": 7, "op": "decode", "n": 3}, body, max_body=1000))
    assert len(parts) == 11
    assert all(len(p.body) <= 1000 for p in parts)
    assert "op" not in parts[0].header and parts[-1].header["op"] == "decode"
    msg = assemble(parts)
    assert msg is not None and msg.body == body and msg.header == {"id": 7, "op": "decode", "n": 3}


@pytest.mark.parametrize(
    ("edit", "phrase"),
    [
        (lambda ps: ps[1:], "fragment 0 is missing"),
        (lambda ps: [ps[0], ps[0], *ps[1:]], "overlap or duplicate"),
        (lambda ps: [ps[0], ps[2], *ps[3:]], "gap"),
        (lambda ps: with_part(ps, 1, {"id": 8}), "interleaves"),
        (lambda ps: with_part(ps, 1, {"fragment": {**ps[1].header["fragment"], "total": 5000}}), "changed"),
        (lambda ps: with_part(ps, len(ps) - 1, {}, ps[-1].body[:-1]), "gap"),
        (lambda ps: [ps[0], frames.Frame({"id": 1, "op": "x"})], "while fragments"),
    ],
)
def test_broken_fragment_sequences_are_refused(edit, phrase: str) -> None:
    parts = read_all(frames.encode_message({"id": 7, "op": "decode"}, b"x" * 3500, max_body=1000))
    with pytest.raises(FrameError, match=phrase):
        assemble(edit(parts))


def test_frame_with_bad_magic_is_refused() -> None:
    with pytest.raises(FrameError, match="magic"):
        frames.read(io.BytesIO(b"XXXX" + frames.encode({"id": 1})[4:]))


def test_truncated_frame_is_refused() -> None:
    with pytest.raises(FrameError, match="ended inside"):
        frames.read(io.BytesIO(frames.encode({"id": 1}, b"body")[:-2]))
