"""A strict reader of a GGUF file's header: the metadata the checks read and every tensor's name, type and
bytes, with every length, count, type and offset checked against the file before it is used.

A file cut or corrupted at any offset is a ConfigError (exit 8) naming the file, the byte offset and the
field that is wrong (the first megabyte of Gemma 3: `at byte 971, metadata 20 `tokenizer.ggml.tokens`
(array length): 262144 items do not fit in the 999021 bytes left`), never an IndexError from inside a
reader. The tensor data is not read: only that every tensor lies inside the file. The layout is upstream's
`ggml/include/gguf.h` (versions 2 and 3, little-endian); the sizes of the tensor types come from `gguf`
(GGML_QUANT_SIZES). Also fast: 0.1 s for Gemma 3's header, where `gguf.GGUFReader`, which makes a numpy
view of each of its 262,144 tokens, took 44 s."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from dgr.errors import ConfigError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_DEPTH = 4
"""Arrays of arrays nest at most this deep."""
HINT = "give a complete GGUF model file (a download cut short, or a file that is not a model?)"

# value type -> struct format of a scalar (8: string, 9: array, read otherwise)
_SCALARS: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    type: int
    offset: int
    """From the start of the data section."""
    n_bytes: int


@dataclass(frozen=True)
class Header:
    version: int
    metadata: dict[str, Any]
    """Every scalar and string value by key (arrays are checked, not kept)."""
    tensors: tuple[Tensor, ...]
    infos_offset: int
    """Where the tensor infos begin (after the metadata)."""
    data_offset: int


class _Cursor:
    """Reads little-endian fields of `buf` from `pos`, each checked against the end of the file."""

    def __init__(self, buf: Any, size: int, path: Path) -> None:
        self.buf, self.size, self.path, self.pos = buf, size, path, 0

    def fail(self, field: str, problem: str, at: int | None = None) -> ConfigError:
        where = self.pos if at is None else at
        return ConfigError(
            f"{self.path}: not a valid GGUF file: at byte {where}, {field}: {problem}",
            detail=f"the file has {self.size} bytes",
            hint=HINT,
        )

    def need(self, n: int, field: str) -> int:
        if n > self.size - self.pos:
            raise self.fail(field, f"needs {n} bytes, the file ends {self.size - self.pos} bytes later")
        at = self.pos
        self.pos += n
        return at

    def u32(self, field: str) -> int:
        value: int = _U32.unpack_from(self.buf, self.need(4, field))[0]
        return value

    def u64(self, field: str) -> int:
        value: int = _U64.unpack_from(self.buf, self.need(8, field))[0]
        return value

    def count(self, field: str, item_bytes: int) -> int:
        """A u64 count of items of at least `item_bytes` each, that the rest of the file can hold."""
        at = self.pos
        n = self.u64(field)
        if n * item_bytes > self.size - self.pos:
            raise self.fail(field, f"{n} items do not fit in the {self.size - self.pos} bytes left", at)
        return n

    def raw_string(self, field: str) -> bytes:
        n = self.count(f"{field} (string length)", 1)
        at = self.need(n, field)
        return bytes(self.buf[at : at + n])

    def string(self, field: str) -> str:
        at = self.pos
        raw = self.raw_string(field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(field, f"not UTF-8 ({exc.reason} at character {exc.start})", at) from exc

    def skip_strings(self, n: int, field: str) -> None:
        buf, size, pos = self.buf, self.size, self.pos
        unpack = _U64.unpack_from
        for i in range(n):
            if pos + 8 > size:
                self.pos = pos
                self.need(8, f"{field} item {i} (string length)")
            length = unpack(buf, pos)[0]
            if length > size - pos - 8:
                self.pos = pos
                raise self.fail(f"{field} item {i}", f"a string of {length} bytes runs past the end")
            pos += 8 + length
        self.pos = pos

    def value(self, kind: int, field: str, depth: int = 0) -> Any:
        """A value of type `kind`: scalars and strings returned, arrays checked and skipped (None)."""
        if kind in _SCALARS:
            fmt = _SCALARS[kind]
            return struct.unpack_from(fmt, self.buf, self.need(struct.calcsize(fmt), field))[0]
        if kind == _STRING:
            return self.string(field)
        if kind != _ARRAY:
            raise self.fail(field, f"unknown value type {kind}", self.pos - 4)
        if depth >= MAX_DEPTH:
            raise self.fail(field, f"arrays nested more than {MAX_DEPTH} deep")
        at = self.pos
        item = self.u32(f"{field} (array item type)")
        if item in _SCALARS:
            width = struct.calcsize(_SCALARS[item])
            n = self.count(f"{field} (array length)", width)
            self.need(n * width, field)
        elif item == _STRING:
            self.skip_strings(self.count(f"{field} (array length)", 8), field)
        elif item == _ARRAY:
            for i in range(self.count(f"{field} (array length)", 12)):
                self.value(_ARRAY, f"{field} item {i}", depth + 1)
        else:
            raise self.fail(f"{field} (array item type)", f"unknown value type {item}", at)
        return None


def _tensor_bytes(cur: _Cursor, kind: int, shape: tuple[int, ...], field: str, at: int) -> int:
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    except (ValueError, KeyError) as exc:
        raise cur.fail(field, f"unknown tensor type {kind}", at) from exc
    n = 1
    for d in shape:
        n *= d
    if shape and shape[0] % block:
        raise cur.fail(field, f"{shape[0]} elements per row are not whole blocks of {block}", at)
    return n // block * type_size


def parse(buf: Any, size: int, path: Path) -> Header:
    """The header of the GGUF file whose first `size` bytes are `buf` (the whole file: its tensors must lie
    within it); ConfigError naming `path`, the offset and the field at the first thing that is wrong."""
    cur = _Cursor(buf, size, path)
    at = cur.need(4, "magic")
    if bytes(buf[at : at + 4]) != MAGIC:
        raise cur.fail("magic", f"{bytes(buf[at : at + 4])!r} is not {MAGIC!r}", at)
    version = cur.u32("version")
    if version not in VERSIONS:
        raise cur.fail("version", f"{version} is not one of {', '.join(map(str, VERSIONS))}", 4)
    n_tensors = cur.count("tensor count", 8 + 4 + 4 + 8)
    n_kv = cur.count("metadata count", 8 + 4)
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        at = cur.pos
        key = cur.string(f"metadata {i} (key)")
        if key in metadata:
            raise cur.fail(f"metadata {i} `{key}`", "the key comes twice", at)
        kind = cur.u32(f"metadata {i} `{key}` (type)")
        metadata[key] = cur.value(kind, f"metadata {i} `{key}`")
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    power_of_two = isinstance(alignment, int) and alignment > 0 and not alignment & (alignment - 1)
    if isinstance(alignment, bool) or not power_of_two:
        raise cur.fail("general.alignment", f"{alignment!r} is not a power of two")
    infos_offset = cur.pos
    infos: list[tuple[str, tuple[int, ...], int, int, int]] = []
    names: set[str] = set()
    for i in range(n_tensors):
        at = cur.pos
        name = cur.string(f"tensor {i} (name)")
        field = f"tensor {i} `{name}`"
        if name in names:
            raise cur.fail(field, "the name comes twice", at)
        names.add(name)
        n_dims = cur.u32(f"{field} (dimensions)")
        if not 1 <= n_dims <= MAX_DIMS:
            raise cur.fail(f"{field} (dimensions)", f"{n_dims} is not in [1, {MAX_DIMS}]", cur.pos - 4)
        shape = tuple(cur.u64(f"{field} (dimension {d})") for d in range(n_dims))
        kind = cur.u32(f"{field} (type)")
        offset = cur.u64(f"{field} (offset)")
        infos.append((name, shape, kind, offset, at))
    data_offset = -(-cur.pos // alignment) * alignment
    tensors = []
    for name, shape, kind, offset, at in infos:
        field = f"tensor `{name}`"
        n_bytes = _tensor_bytes(cur, kind, shape, field, at)
        if offset % alignment:
            raise cur.fail(field, f"its data offset {offset} is not a multiple of {alignment}", at)
        if data_offset + offset + n_bytes > size:
            raise cur.fail(
                field,
                f"its {n_bytes} bytes at {data_offset + offset} run past the end of the file",
                data_offset + offset,
            )
        tensors.append(Tensor(name, shape, kind, offset, n_bytes))
    return Header(version, metadata, tuple(tensors), infos_offset, data_offset)


def read(path: Path) -> Header:
    """The header of the GGUF file at `path` (see `parse`); ConfigError when it cannot be read."""
    try:
        with path.open("rb") as fh:
            size = path.stat().st_size
            if size == 0:
                return parse(b"", 0, path)
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return parse(buf, size, path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror or exc})", hint=HINT) from exc
