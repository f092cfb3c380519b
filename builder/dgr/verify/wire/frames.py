"""Frames and messages of the layer worker protocol (docs/protocol.md), the Python side of
verify/worker/frame.cpp."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, Protocol

from dgr.core import jsonio

MAGIC = b"LWP1"
PREFIX = struct.Struct("<4sIQ")
MAX_HEADER = 1 << 20
MAX_MESSAGE = 1 << 30


class Reader(Protocol):
    """What frames are read from: a binary file, or anything with its `read(n)`."""

    def read(self, n: int, /) -> bytes: ...


class FrameError(Exception):
    """The byte stream is not a valid frame or message."""


@dataclass
class Frame:
    header: dict[str, Any]
    body: bytes = field(default=b"")


def encode(header: dict[str, Any], body: bytes | bytearray = b"") -> bytes:
    """One frame."""
    data = json.dumps(header, separators=(",", ":")).encode()
    if not 0 < len(data) <= MAX_HEADER:
        raise FrameError(f"frame header of {len(data)} bytes is over the limit of {MAX_HEADER}")
    return PREFIX.pack(MAGIC, len(data), len(body)) + data + body


def encode_message(header: dict[str, Any], body: bytes | bytearray, max_body: int) -> bytes:
    """One frame, or fragments when the body is over `max_body`: the last fragment holds the header."""
    if len(body) <= max_body:
        return encode(header, body)
    total = len(body)
    count = (total + max_body - 1) // max_body
    out = []
    for i in range(count):
        offset = i * max_body
        fragment = {"index": i, "count": count, "offset": offset, "total": total}
        h = dict(header) if i == count - 1 else {"id": header.get("id")}
        h["fragment"] = fragment
        out.append(encode(h, body[offset : offset + max_body]))
    return b"".join(out)


def _read_exact(stream: Reader, n: int) -> bytes:
    chunks: list[bytes] = []
    remaining = n
    while remaining > 0:
        chunk = stream.read(remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read(stream: Reader, max_body: int = MAX_MESSAGE) -> Frame | None:
    """Read one frame; None at a clean end of stream."""
    prefix = _read_exact(stream, PREFIX.size)
    if not prefix:
        return None
    if len(prefix) < PREFIX.size:
        raise FrameError(f"stream ended inside a frame prefix ({len(prefix)} of {PREFIX.size} bytes)")
    magic, n_header, n_body = PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise FrameError(f"frame magic {magic!r} is not {MAGIC!r}")
    if not 0 < n_header <= MAX_HEADER or n_body > max_body:
        raise FrameError(f"frame header {n_header} or body {n_body} bytes is over the limit")
    header = _read_exact(stream, n_header)
    body = _read_exact(stream, n_body)
    if len(header) < n_header or len(body) < n_body:
        raise FrameError("stream ended inside a frame")
    decoded = jsonio.loads(header, "frame header", FrameError)  # strict: a key twice, NaN, Infinity refused
    if not isinstance(decoded, dict):
        raise FrameError("frame header is not a JSON object")
    return Frame(decoded, body)


class Assembler:
    """Reassembles fragments in order; a gap, an overlap, a duplicate or a changing total is an error."""

    def __init__(self, max_message: int = MAX_MESSAGE) -> None:
        self.max_message = max_message
        self._parts: list[bytes] = []
        self._received = 0
        self._count = 0
        self._total = 0
        self._id: Any = None

    def add(self, frame: Frame) -> Frame | None:
        """The complete message, or None while fragments are missing."""
        fr = frame.header.get("fragment")
        if fr is None:
            if self._count:
                self._reset()
                raise FrameError(f"a message arrived while fragments of message {self._id!r} were expected")
            return frame
        try:
            index, count, offset, total = (int(fr[k]) for k in ("index", "count", "offset", "total"))
        except (KeyError, TypeError, ValueError) as exc:
            self._reset()
            raise FrameError(f"fragment needs integer index, count, offset and total: {fr!r}") from exc
        mid = frame.header.get("id")
        problem = None
        if total > self.max_message:
            problem = f"total {total} is over the limit of {self.max_message}"
        elif not 0 <= index < count:
            problem = f"index {index} is not in [0, {count})"
        elif not self._count:
            if index != 0:
                problem = f"starts at fragment {index}, fragment 0 is missing (gap)"
            else:
                self._count, self._total, self._id = count, total, mid
        elif mid != self._id:
            problem = f"interleaves with message {self._id!r}"
        elif count != self._count or total != self._total:
            problem = "count or total changed within the message"
        if problem is None:
            if offset < self._received:
                problem = (
                    f"offset {offset} overlaps the {self._received} bytes received (overlap or duplicate)"
                )
            elif offset > self._received:
                problem = f"offset {offset} leaves a gap after the {self._received} bytes received"
            elif offset + len(frame.body) > self._total:
                problem = f"runs past the total of {self._total} bytes"
        if problem:
            self._reset()
            raise FrameError(f"fragment of message {mid!r}: {problem}")
        self._parts.append(frame.body)
        self._received += len(frame.body)
        if index + 1 < self._count:
            if self._received == self._total:
                self._reset()
                raise FrameError(
                    f"fragment of message {mid!r}: the total was reached before the last fragment"
                )
            return None
        if self._received != self._total:
            received = self._received
            self._reset()
            raise FrameError(
                f"fragment of message {mid!r}: the last fragment ends at {received} of {total} bytes (gap)"
            )
        header = {k: v for k, v in frame.header.items() if k != "fragment"}
        body = b"".join(self._parts)
        self._reset()
        return Frame(header, body)

    def _reset(self) -> None:
        self._parts, self._received, self._count, self._total, self._id = [], 0, 0, 0, None
