"""A model cut into the files its layer ranges need (`dgr parts`), written with the `gguf` package
(llama.cpp's gguf-py: GGUFReader reads the model, one GGUFWriter writes each file), in upstream's split
format cut at layer boundaries (dgr.contracts.parts says which files a range needs; docs/DESIGN.md,
"Decisions", why).

Every KV and tensor of the model is kept byte for byte (type, shape, data, alignment; the tensors in the
model's order within each file), and checked so before anything is published: the first file's metadata
begins with the model's own bytes, each tensor's bytes are the model's. Nothing depends on the machine or
the time, so the same model gives the same files everywhere. The parts are written into a temporary
directory beside the destination and published by one rename: a destination holds the whole set with its
manifest, or nothing new.

Each file also says what it was cut from, under keys of its own (`part.`, which no key of llama.cpp nor an
architecture name begins with; llama.cpp ignores keys it does not know): `KEY_SOURCE`, the model file's
SHA-256, and `KEY_HOLDS`, what the file holds, with the layers [`KEY_BEGIN`, `KEY_END`) of a file of
layers. `origin` reads them back.

A range runs from its parts (`dgr generate --parts`, the boundary group of `dgr verify`) out of a directory
of its own that holds only the files it needs (`ModelParts`, `stage_range`), checked every time the range is
started (`check_range`); the parts themselves are kept in the cache as `dgr parts` keeps them
(`ensure_cached`) and held to locks/parts.toml (`PartsStore`, for the locked models of a verify run)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import mmap
import os
import re
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import gguf
from gguf.gguf_writer import SHARD_NAME_FORMAT

from dgr.contracts.modellock import GGUF_FILE_RE
from dgr.contracts.parts import (
    FORMAT,
    HOLDS,
    MANIFEST,
    Holds,
    PartFile,
    PartsLock,
    PartsManifest,
    PartsRecord,
    PartsSource,
    part_name,
    prefix_of,
    read_manifest,
)
from dgr.core import log
from dgr.core.digest import SHA256_RE, sha256_file
from dgr.core.fs import publish_dir, remove_dir
from dgr.errors import ConfigError, DgrError, IntegrityError, UsageError
from dgr.verify.models import gguffile, inventory

KEY_PREFIX = "part."
KEY_SOURCE = "part.source.sha256"
"""string: the SHA-256 (64 lowercase hex digits) of the whole GGUF file the part was cut from."""
KEY_HOLDS = "part.holds"
"""string: what the file holds: metadata, input, layers, output or other (dgr.contracts.parts.Holds)."""
KEY_BEGIN = "part.layers.begin"
KEY_END = "part.layers.end"
"""uint32, only with `part.holds = "layers"`: the file holds every tensor of the layers [begin, end)."""
SPLIT_NO = gguf.Keys.Split.LLM_KV_SPLIT_NO
SPLIT_COUNT = gguf.Keys.Split.LLM_KV_SPLIT_COUNT
SPLIT_TENSORS = gguf.Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT
ALIGNMENT = gguf.Keys.General.ALIGNMENT
HEADER_BYTES = 24
"""magic, version, tensor count, metadata count: where the metadata of a GGUF file begins."""

# llama.cpp's classification of the tensors that belong to no layer (src/llama-arch.cpp at the pin:
# LLM_TENSOR_NAMES and LLM_TENSOR_INFOS), by name: a range holds its input tensors when it begins at
# layer 0 and its output tensors when it ends at the last layer (llm_tensor_is_held in
# src/llama-model-loader.cpp). A name llama.cpp gives two classes (`token_embd_norm`: repeating, and
# LFM2's output norm) and every name it does not classify go to the file every range needs.
# tests/test_parts.py compares these with the pinned tree.
INPUT_TENSORS = frozenset(
    {
        "masked_embd_centroids",
        "masked_embd_ordering",
        "per_layer_token_embd",
        "position_embd",
        "token_embd",
        "token_types",
    }
)
OUTPUT_TENSORS = frozenset(
    {
        "altup_proj",
        "altup_unembd_proj",
        "cls",
        "cls.norm",
        "cls.output",
        "conf_proj",
        "d2t",
        "dec.output_norm",
        "decision.field_norm",
        "decision.hidden_norm",
        "decision.option_norm",
        "decision.option_summary_norm",
        "decision.proj_global",
        "decision.proj_memory",
        "decision.proj_option_context",
        "decision.proj_option_lexical",
        "decision.proj_option_question",
        "decision.proj_question",
        "decision.scales",
        "decision.scorer",
        "decision.scorer_out",
        "dense_2",
        "dense_3",
        "enc.output_norm",
        "fc",
        "markov_w1",
        "markov_w2",
        "nextn.post_projection",
        "output",
        "output_hc_base",
        "output_hc_down",
        "output_hc_fn",
        "output_hc_norm",
        "output_hc_scale",
        "output_hc_up",
        "output_norm",
        "output_res_score",
        "selector_hidden",
        "selector_predecessor",
        "selector_successor",
    }
)
TIED_HEAD = "output.weight"
"""Without it, llama.cpp reads `token_embd.weight` (an input tensor) as the output head."""
_LAYER = re.compile(r"^blk\.(\d+)\.")
HINT = "give a complete GGUF model file of one piece (a single .gguf, not a split or a part)"


def classify(name: str, n_layer: int) -> tuple[Holds, int | None]:
    """Where the tensor `name` of a model of `n_layer` layers goes: ("layers", N) for `blk.N.*` with N a
    layer, ("input" | "output", None) by llama.cpp's classification, else ("other", None)."""
    if (m := _LAYER.match(name)) and int(m.group(1)) < n_layer:
        return "layers", int(m.group(1))
    base = name.rpartition(".")[0] or name
    for candidate in (name, base):
        if candidate in INPUT_TENSORS:
            return "input", None
        if candidate in OUTPUT_TENSORS:
            return "output", None
    return "other", None


@dataclass(frozen=True)
class Group:
    """The tensors of one file, in the model's order, and what it holds."""

    holds: Holds
    tensors: tuple[str, ...]
    layer: int | None = None


def plan(tensors: Sequence[str], n_layer: int) -> tuple[Group, ...]:
    """The files of a model whose tensors are `tensors` (in its order): the metadata, the input, one per
    layer (every layer, also one without tensors, so that layer N is always the same file), the output and
    the other tensors (these three only when the model has such tensors)."""
    by: dict[tuple[Holds, int | None], list[str]] = {}
    for name in tensors:
        by.setdefault(classify(name, n_layer), []).append(name)
    groups = [Group("metadata", ())]
    if ("input", None) in by:
        groups.append(Group("input", tuple(by[("input", None)])))
    groups += [Group("layers", tuple(by.get(("layers", il), ())), il) for il in range(n_layer)]
    groups += [Group(h, tuple(by[(h, None)])) for h in ("output", "other") if (h, None) in by]
    return tuple(groups)


def writer_version() -> str:
    """The library that writes the parts, as the manifest records it."""
    return f"gguf {importlib.metadata.version('gguf')}"


# --------------------------------------------------------------------------- reading a part's origin


@dataclass(frozen=True)
class Origin:
    """What a part says it was cut from (its `part.*` keys) and its place in the split (`split.*`)."""

    path: Path
    source_sha256: str
    holds: Holds
    layers: tuple[int, int] | None
    """[begin, end) of a file of layers; None otherwise."""
    split_no: int
    split_count: int

    @property
    def what(self) -> str:
        if self.layers is None:
            return self.holds
        begin, end = self.layers
        return f"layer {begin}" if end == begin + 1 else f"layers [{begin}, {end})"


def origin(path: Path) -> Origin:
    """The `part.*` and `split.*` keys of the part at `path`, read by the strict header reader (a file cut
    short or corrupt: ConfigError, exit 8, naming the offset); ConfigError naming the key when one is missing
    or not of its type (a GGUF file that is not a part written by `dgr parts`)."""
    return origin_of(path, gguffile.read(path).metadata)


def origin_of(path: Path, metadata: dict[str, Any]) -> Origin:
    """`origin` of a header's metadata already read."""

    def value(key: str, kind: type) -> Any:
        found = metadata.get(key)
        if not isinstance(found, kind) or isinstance(found, bool):
            problem = "it is missing" if key not in metadata else f"{found!r} is not a {kind.__name__}"
            raise ConfigError(
                f"{path}: not a part of a model: metadata {key}: {problem}",
                hint="give a file written by `dgr parts` (its keys: docs/reference.md, `dgr parts`)",
            )
        return found

    sha = value(KEY_SOURCE, str)
    holds = value(KEY_HOLDS, str)
    bad = None
    if not SHA256_RE.match(sha):
        bad = f"{KEY_SOURCE}: {sha!r} is not a 64-hex sha256"
    elif holds not in HOLDS:
        bad = f"{KEY_HOLDS}: {holds!r} is not one of {', '.join(HOLDS)}"
    if bad:
        raise ConfigError(f"{path}: not a part of a model: metadata {bad}", hint="write the parts again")
    layers = (value(KEY_BEGIN, int), value(KEY_END, int)) if holds == "layers" else None
    return Origin(path, sha, cast(Holds, holds), layers, value(SPLIT_NO, int), value(SPLIT_COUNT, int))


# --------------------------------------------------------------------------- writing


def _kv_fields(source: Path, reader: gguf.GGUFReader) -> list[tuple[str, Any, Any, Any]]:
    """(key, value, type, item type) of every KV of the model, in its order, as gguf's own
    gguf_new_metadata.py copies them; ConfigError naming a key the gguf package cannot write again (an
    empty array, an array of arrays)."""
    out = []
    array = gguf.GGUFValueType.ARRAY
    for f in reader.fields.values():
        if f.name.startswith("GGUF."):  # the reader's pseudo-fields: version, counts
            continue
        kind = f.types[0]
        sub = f.types[-1] if kind == array else None
        value = f.contents()
        if kind == array and (len(f.types) > 2 or sub == array or not value):
            raise ConfigError(
                f"{source}: metadata {f.name}: "
                + ("an empty array" if not value else "an array of arrays")
                + f", which {writer_version()} cannot write again",
                hint="cut a model without it, or write the parts with a gguf package that can",
            )
        out.append((f.name, value, kind, sub))
    return out


def _write_file(
    path: Path,
    kvs: Sequence[tuple[str, Any, Any, Any]],
    tensors: Sequence[Any],
    alignment: int,
    endianess: Any,
) -> None:
    """One GGUF file with the KVs `kvs` in order and the reader's tensors `tensors`, their bytes as read."""
    writer = gguf.GGUFWriter(path, arch="")  # no architecture key of its own: every key is from `kvs`
    writer.data_alignment = alignment
    for key, val, kind, sub in kvs:
        writer.add_key_value(key, val, kind, sub_type=sub)
    for t in tensors:
        writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type, tensor_endianess=endianess)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()  # also on a failure: the file is closed before its directory is removed


def _own_kvs(sha: str, group: Group, no: int, count: int, n_tensors: int) -> list[tuple[str, Any, Any, Any]]:
    """The keys of a part beyond the model's: upstream's split keys (as gguf-split writes them: u16, u16,
    i32), then what it was cut from."""
    v = gguf.GGUFValueType
    kvs = [
        (SPLIT_NO, no, v.UINT16, None),
        (SPLIT_COUNT, count, v.UINT16, None),
        (SPLIT_TENSORS, n_tensors, v.INT32, None),
        (KEY_SOURCE, sha, v.STRING, None),
        (KEY_HOLDS, group.holds, v.STRING, None),
    ]
    if group.layer is not None:
        kvs += [(KEY_BEGIN, group.layer, v.UINT32, None), (KEY_END, group.layer + 1, v.UINT32, None)]
    return kvs


def _refuse_source(path: Path, header: gguffile.Header) -> None:
    """A model that is already one file of a split, or a part, is not cut again."""
    for key in (SPLIT_COUNT, SPLIT_NO, KEY_SOURCE):
        if key in header.metadata:
            raise ConfigError(
                f"{path}: is one file of a split model or a part already (it has the metadata key {key})",
                hint="give the whole model in one file (`llama-gguf-split --merge` joins a split)",
            )


def cut(source: Path, staging: Path, sha256: str) -> PartsManifest:
    """Write the parts of the model file `source` (whose SHA-256 is `sha256`) and their manifest into the
    empty directory `staging`; checked against the model before returning (IntegrityError when the gguf
    package wrote anything else than the model's own bytes)."""
    if not GGUF_FILE_RE.match(source.name):
        raise ConfigError(
            f"{source}: the parts are named after the model file, and {source.name!r} is no name of a "
            "GGUF file (letters, digits, `.`, `_`, `+`, `-`, ending in .gguf)",
            hint="rename the file (or link it) under such a name",
        )
    header = gguffile.read(source)  # strict: a broken model is exit 8 naming the offset
    _refuse_source(source, header)
    model = inventory.of_header(source, header)
    groups = plan([t.name for t in header.tensors], model.n_layer)
    assert sorted(n for g in groups for n in g.tensors) == sorted(t.name for t in header.tensors)
    count = len(groups)
    if count > 0xFFFF:
        raise ConfigError(f"{source}: {count} parts do not fit {SPLIT_COUNT}, a u16", hint=HINT)
    alignment = int(header.metadata.get(ALIGNMENT, gguffile.DEFAULT_ALIGNMENT))
    prefix = prefix_of(source.name)
    names = [part_name(prefix, i, count) for i in range(count)]
    assert names[-1] == SHARD_NAME_FORMAT.format(prefix, count, count)
    with log.step(f"read {source.name}"):
        reader = gguf.GGUFReader(source)
        kvs = _kv_fields(source, reader)
        tensors = {t.name: t for t in reader.tensors}
    alignment_kv = [kv for kv in kvs if kv[0] == ALIGNMENT]
    with log.step(f"write {count} parts of {source.name} (gguf {writer_version().split()[-1]})"):
        for i, (group, name) in enumerate(zip(groups, names, strict=True)):
            own = _own_kvs(sha256, group, i, count, len(header.tensors))
            # the first file has every key of the model; the others their own and the alignment, which a
            # loader reads from each file
            file_kvs = [*kvs, *own] if i == 0 else [*alignment_kv, *own]
            _write_file(
                staging / name, file_kvs, [tensors[n] for n in group.tensors], alignment, reader.endianess
            )
    del reader, tensors  # the maps of the model
    with log.step("check the parts against the model"):
        files = _check_faithful(source, header, staging, names, groups, sha256)
    manifest = PartsManifest(
        format=FORMAT,
        writer=writer_version(),
        source=PartsSource(
            file=source.name,
            size=source.stat().st_size,
            sha256=sha256,
            n_layer=model.n_layer,
            tied_head=TIED_HEAD not in model.tensors,
        ),
        files=files,
    )
    assert not manifest.problems(MANIFEST), manifest.problems(MANIFEST)
    (staging / MANIFEST).write_bytes(manifest.dumps())
    return manifest


@contextlib.contextmanager
def _mapped(path: Path) -> Iterator[Any]:
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        yield buf


def _same_bytes(x: Any, at_x: int, y: Any, at_y: int, n: int, chunk: int = 1 << 24) -> bool:
    """Whether the `n` bytes of `x` from `at_x` are those of `y` from `at_y` (compared a chunk at a time: a
    large tensor is not copied whole)."""
    return all(
        x[at_x + i : at_x + min(i + chunk, n)] == y[at_y + i : at_y + min(i + chunk, n)]
        for i in range(0, n, chunk)
    )


def _check_faithful(
    source: Path,
    header: gguffile.Header,
    staging: Path,
    names: Sequence[str],
    groups: Sequence[Group],
    sha256: str,
) -> tuple[PartFile, ...]:
    """Each part as the model has it (else IntegrityError naming the part and what differs): the first one's
    metadata begins with the model's metadata bytes; each holds its group's tensors in order, each of the
    model's type, shape and bytes, at the model's alignment; its own keys say what it holds. Returns the
    manifest's entries (size, SHA-256)."""
    src_tensors = {t.name: t for t in header.tensors}
    out = []

    def differs(name: str, what: str) -> IntegrityError:
        return IntegrityError(
            f"{name}: the part written by {writer_version()} differs from {source.name}: {what}; "
            "nothing was published",
            hint="a change of the gguf package? pin the version that writes the model's own bytes",
        )

    with _mapped(source) as src:
        model_kv = bytes(src[HEADER_BYTES : header.infos_offset])
        for i, (name, group) in enumerate(zip(names, groups, strict=True)):
            path = staging / name
            part = gguffile.read(path)
            with _mapped(path) as buf:
                if i == 0 and bytes(buf[HEADER_BYTES : HEADER_BYTES + len(model_kv)]) != model_kv:
                    raise differs(name, "its metadata does not begin with the model's metadata bytes")
                if part.metadata.get(ALIGNMENT) != header.metadata.get(ALIGNMENT):
                    raise differs(name, f"its alignment is not the model's ({ALIGNMENT})")
                if tuple(t.name for t in part.tensors) != group.tensors:
                    raise differs(name, "it does not hold the tensors of its group in the model's order")
                for t in part.tensors:
                    s = src_tensors[t.name]
                    if (t.type, t.shape) != (s.type, s.shape):
                        raise differs(name, f"tensor {t.name}: type or shape is not the model's")
                    a, b = part.data_offset + t.offset, header.data_offset + s.offset
                    if not _same_bytes(buf, a, src, b, t.n_bytes):
                        raise differs(name, f"tensor {t.name}: its bytes are not the model's")
            said = origin_of(path, part.metadata)
            layers = None if group.layer is None else (group.layer, group.layer + 1)
            if (said.source_sha256, said.holds, said.layers, said.split_no, said.split_count) != (
                sha256,
                group.holds,
                layers,
                i,
                len(names),
            ):
                raise differs(name, f"its keys say {said.what} of part {said.split_no}")
            out.append(
                PartFile(
                    name=name,
                    holds=group.holds,
                    size=path.stat().st_size,
                    sha256=sha256_file(path),
                    tensors=len(group.tensors),
                    layer_begin=None if layers is None else layers[0],
                    layer_end=None if layers is None else layers[1],
                )
            )
    return tuple(out)


def staging_beside(destination: Path) -> Path:
    """The temporary directory the parts of `destination` are written into: a hidden sibling (the same file
    system: published by one rename) named by this process."""
    return destination.parent / f".{destination.name}.{os.getpid()}.partial"


def _sweep(destination: Path) -> None:
    """Remove the staging of `destination` left by a process that no longer runs (killed hard)."""
    for entry in destination.parent.glob(f".{destination.name}.*.partial"):
        pid = entry.name.removeprefix(f".{destination.name}.").removesuffix(".partial")
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process starts its staging afresh
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write(
    source: Path, destination: Path, sha256: str, *, record: PartsRecord | None = None
) -> PartsManifest:
    """Write the parts of `source` (SHA-256 `sha256`) to `destination` (which must not exist, or be an empty
    directory), all or nothing: into `staging_beside(destination)`, checked against the model and against
    `record` (its lock: IntegrityError naming the first part that differs and both digests), then published
    by one rename. On any failure (Ctrl-C, a full disk: ConfigError, exit 8) the staging is removed and
    nothing is published."""
    staging = staging_beside(destination)
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        _sweep(destination)
        staging.mkdir()
        manifest = cut(source, staging, sha256)
        if record is not None:
            record.check(manifest, str(destination))
        publish_dir(staging, destination, replace=False)
        # replace=False keeps a destination that another process filled meanwhile: it must be these parts
        if read_manifest(destination) != manifest:
            raise ConfigError(
                f"{destination}: other files appeared there while the parts were written; nothing was "
                "published",
                hint="write the parts to a new directory (--out DIR)",
            )
    except OSError as exc:
        raise ConfigError(
            f"cannot write the parts of {source.name} in {destination.parent}: "
            f"{exc.strerror or exc}; nothing was published",
            hint=f"free about {source.stat().st_size} bytes there (the parts take about the model's size), "
            "or write them elsewhere with --out DIR",
        ) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


# --------------------------------------------------------------------------- checking written parts


class FileFacts:
    """The SHA-256 and the `part.*` keys of part files, each read once: kept by the file's identity on disk
    (device, inode, size, modification time), so that a hard link of a file already read (a range's own
    directory, `stage_range`) costs a stat, and a file written since is read again. Meant for one run over
    files it holds: a file changed in place to the same size within the file system's timestamp resolution
    would go unseen."""

    def __init__(self) -> None:
        self._sha256: dict[tuple[int, int, int, int], str] = {}
        self._origin: dict[tuple[int, int, int, int], Origin] = {}

    @staticmethod
    def _key(path: Path) -> tuple[int, int, int, int]:
        st = path.stat()
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def sha256(self, path: Path) -> str:
        key = self._key(path)
        if key not in self._sha256:
            self._sha256[key] = sha256_file(path)
        return self._sha256[key]

    def origin(self, path: Path) -> Origin:
        """`origin(path)`, read once per file (a failure is not kept: it is raised again next time)."""
        key = self._key(path)
        if key not in self._origin:
            self._origin[key] = origin(path)
        return dataclasses.replace(self._origin[key], path=path)


def check_file(directory: Path, part: PartFile, source_sha256: str, facts: FileFacts | None = None) -> None:
    """The part `part` of the manifest in `directory` is there and is what the manifest says, checked in this
    order: its header, read by the strict reader (a file cut short in its header or a tensor: ConfigError,
    exit 8, naming the offset and the field); its keys (`check_origin`: cut from another model, exit 3, or
    another part in its place, exit 8, both named); its size (cut short in the padding after its last tensor:
    exit 8 naming the byte where it ends); its bytes (other than recorded: IntegrityError, exit 3, naming the
    file and both digests). `facts`: what was read of these files already in this run."""
    facts = facts or FileFacts()
    path = directory / part.name
    if not path.is_file():
        raise ConfigError(
            f"{path}: missing (it holds {part.what} of the parts in {directory})",
            hint="fetch it with the others (parts.toml lists them), or write the parts again",
        )
    check_origin(facts.origin(path), source_sha256, part)
    size = path.stat().st_size
    if size < part.size:
        raise ConfigError(
            f"{path}: not a complete part: it ends at byte {size}, its record in {MANIFEST} has "
            f"{part.size} bytes",
            hint="fetch it again, or write the parts again",
        )
    actual = facts.sha256(path)
    if actual != part.sha256:
        raise IntegrityError(
            f"{path}: its sha256 differs from {directory / MANIFEST}",
            expected=part.sha256,
            actual=actual,
            hint="fetch it again, or write the parts again (`dgr parts`)",
        )


def check_origin(said: Origin, source_sha256: str, part: PartFile) -> None:
    """The keys of a part against what it should be: IntegrityError (exit 3) when it was cut from another
    model, ConfigError (exit 8) when it holds other tensors than `part` (named both ways)."""
    if said.source_sha256 != source_sha256:
        raise IntegrityError(
            f"{said.path}: a part of another model ({KEY_SOURCE})",
            expected=f"a part of the model with sha256 {source_sha256}",
            actual=f"a part of the model with sha256 {said.source_sha256}",
            hint="give the parts of one model together",
        )
    layers = (
        None if part.layer_begin is None or part.layer_end is None else (part.layer_begin, part.layer_end)
    )
    if (said.holds, said.layers) != (part.holds, layers):
        raise ConfigError(
            f"{said.path}: holds {said.what}, where {part.name} holds {part.what}",
            hint="a part renamed or put in another's place: fetch it again",
        )


def check(directory: Path, facts: FileFacts | None = None) -> PartsManifest:
    """The manifest of the parts in `directory`, each of its files checked (`check_file`)."""
    manifest = read_manifest(directory)
    for part in manifest.files:
        check_file(directory, part, manifest.source.sha256, facts)
    return manifest


def files_for_range(
    directory: Path,
    begin: int,
    end: int,
    *,
    model_sha256: str | None = None,
    facts: FileFacts | None = None,
) -> list[Path]:
    """The files of the parts in `directory` that the range [begin, end) needs, each checked (`check_file`;
    a file the range does not need may be missing, one it needs that is missing is named with the range),
    the first one (the metadata: what a loader is given) first; `model_sha256`: the parts must be of that
    model (IntegrityError naming both otherwise)."""
    manifest = read_manifest(directory)
    if model_sha256 is not None and model_sha256 != manifest.source.sha256:
        raise IntegrityError(
            f"{directory}: the parts of another model ({manifest.source.file})",
            expected=f"the parts of the model with sha256 {model_sha256}",
            actual=f"the parts of the model with sha256 {manifest.source.sha256}",
            hint="give the directory of this model's parts",
        )
    needed = manifest.files_for(begin, end)
    for part in needed:
        if not (directory / part.name).is_file():
            raise ConfigError(
                f"{directory / part.name}: missing: the range [{begin}, {end}) needs it (it holds "
                f"{part.what} of the parts in {directory})",
                hint="fetch it with the others the range needs (`dgr parts --split` lists them), or write "
                "the parts again",
            )
        check_file(directory, part, manifest.source.sha256, facts)
    return [directory / p.name for p in needed]


def check_directory(directory: Path, sha256: str, what: str, facts: FileFacts | None = None) -> PartsManifest:
    """The manifest of the parts at `directory`, which must be those of the model `sha256` and nothing else
    (UsageError naming `what`), each part checked (`check_file`)."""
    manifest = read_manifest(directory)
    hint = f"give a new or empty directory, or remove {directory}"
    if manifest.source.sha256 != sha256:
        raise UsageError(
            f"{what}: holds the parts of another model ({manifest.source.file}, sha256 "
            f"{manifest.source.sha256})",
            hint=hint,
        )
    known = {MANIFEST, *(p.name for p in manifest.files)}
    if extra := sorted(p.name for p in directory.iterdir() if p.name not in known):
        raise UsageError(
            f"{what}: holds files that are not parts of this model: {', '.join(extra[:5])}"
            + (f" and {len(extra) - 5} more" if len(extra) > 5 else ""),
            hint=hint,
        )
    for part in manifest.files:
        check_file(directory, part, sha256, facts)
    log.info(f"{directory}: the parts of {manifest.source.file} are there and check")
    return manifest


# --------------------------------------------------------------------------- the parts in the cache

CACHE_DIR = "parts"
"""The parts of a model in the cache: `<cache>/parts/<sha256 of the model file>/`."""


def cache_dir(cache_root: Path, sha256: str) -> Path:
    """Where the parts of the model file `sha256` are kept in the cache at `cache_root`."""
    return cache_root / CACHE_DIR / sha256


def cached(destination: Path, sha256: str, facts: FileFacts | None = None) -> PartsManifest | None:
    """The parts at `destination` in the cache, checked, or None when there are none: nothing there, an
    empty directory, or anything that does not check (other files, parts that do not check: removed, with a
    warning, to be written again)."""
    if not destination.exists() or (destination.is_dir() and not any(destination.iterdir())):
        return None
    try:
        return check_directory(destination, sha256, str(destination), facts)
    except (ConfigError, IntegrityError, UsageError) as exc:
        log.warn(f"the cached parts {destination} do not check ({exc.what}); writing them again")
        remove_dir(destination)
        return None


def ensure_cached(
    cache_root: Path,
    source: Path,
    sha256: str,
    record: PartsRecord | None,
    facts: FileFacts | None = None,
) -> tuple[Path, PartsManifest]:
    """The parts of the model file `source` (SHA-256 `sha256`) in the cache, as `dgr parts` keeps them: found
    there and checked, or written (`write`, all or nothing); held to `record` (their entry in
    locks/parts.toml: IntegrityError, exit 3, naming the first part that differs and both digests)."""
    destination = cache_dir(cache_root, sha256)
    manifest = cached(destination, sha256, facts)
    if manifest is None:
        manifest = write(source, destination, sha256, record=record)
        log.info(f"wrote {len(manifest.files)} parts of {source.name} to {destination}")
    elif record is not None:
        record.check(manifest, str(destination))
    return destination, manifest


# --------------------------------------------------------------------------- a range started from its parts


@dataclass(frozen=True)
class RangeParts:
    """The directory a range [begin, end) loads from: the files of the parts it needs (the metadata first)
    and the manifest, nothing else."""

    begin: int
    end: int
    directory: Path
    files: tuple[PartFile, ...]
    whole_bytes: int
    """The size of the whole model file the parts were cut from."""

    @property
    def first(self) -> Path:
        """What the loader is given: the first file, which holds the metadata and names the others."""
        return self.directory / self.files[0].name

    @property
    def bytes(self) -> int:
        """What a machine that runs the range stores: the size of its files (the manifest not counted)."""
        return sum(p.size for p in self.files)


def check_range(
    directory: Path,
    begin: int,
    end: int,
    *,
    model_sha256: str,
    manifest: PartsManifest | None = None,
    facts: FileFacts | None = None,
) -> RangeParts:
    """The check where a range is started from its own directory of parts: the directory's manifest (the one
    given, when given: the parts as checked against locks/parts.toml, else IntegrityError) is of the model
    `model_sha256`, and every file the range needs is there and is that file (`files_for_range`: one that
    is missing, another part in its place, a part of another model, one cut short or with other bytes is
    refused, naming the file and the range)."""
    found = read_manifest(directory)
    if manifest is not None and found != manifest:
        raise IntegrityError(
            f"{directory / MANIFEST}: not the manifest of the parts the range [{begin}, {end}) was given",
            expected=f"the parts of {manifest.source.file} as checked ({len(manifest.files)} files)",
            actual=f"the parts of {found.source.file} ({len(found.files)} files), recorded otherwise",
            hint="a range's directory is made by dgr: run the command again",
        )
    files_for_range(directory, begin, end, model_sha256=model_sha256, facts=facts)
    return RangeParts(begin, end, directory, found.files_for(begin, end), found.source.size)


def _link(source: Path, target: Path) -> None:
    """`target` a hard link of `source`, or a symbolic link where there can be none (another file system)."""
    try:
        os.link(source, target)
    except OSError:
        target.symlink_to(source.resolve())


def stage_range(
    parts: Path,
    begin: int,
    end: int,
    target: Path,
    *,
    model_sha256: str,
    manifest: PartsManifest | None = None,
    facts: FileFacts | None = None,
) -> RangeParts:
    """The directory `target` (made afresh) holding only what the range [begin, end) needs of the parts in
    `parts`: its files, checked there first (`files_for_range`), and the manifest, linked (hard links: no
    byte is copied); then checked as a range starts from it (`check_range`). On a failure `target` is
    removed."""
    files = files_for_range(parts, begin, end, model_sha256=model_sha256, facts=facts)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    try:
        for source in (parts / MANIFEST, *files):
            _link(source, target / source.name)
        return check_range(target, begin, end, model_sha256=model_sha256, manifest=manifest, facts=facts)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


class ModelParts:
    """The parts of one model for one run (`dgr verify`, `dgr generate --parts`), checked before a range uses
    them, and the directory each range loads from: `<scratch>/<begin>-<end>/`, only the files it needs (as a
    machine that fetched its range's files holds them), made once per run and checked every time a range is
    started from it (`model_for`)."""

    def __init__(
        self, directory: Path, manifest: PartsManifest, scratch: Path, facts: FileFacts | None = None
    ) -> None:
        self.directory = directory
        self.manifest = manifest
        self.scratch = scratch
        self.facts = facts or FileFacts()
        self._staged: set[tuple[int, int]] = set()

    @staticmethod
    def open(
        directory: Path,
        sha256: str,
        record: PartsRecord | None,
        scratch: Path,
        facts: FileFacts | None = None,
    ) -> ModelParts:
        """The parts at `directory` (as `dgr parts` writes them; it may hold only the files of some ranges)
        of the model file `sha256` (IntegrityError naming both otherwise), held to `record`, their entry in
        locks/parts.toml, when there is one (exit 3 naming the first part that differs); each file is
        checked when a range that needs it is started."""
        manifest = read_manifest(directory)
        if manifest.source.sha256 != sha256:
            raise IntegrityError(
                f"{directory}: the parts of another model ({manifest.source.file})",
                expected=f"the parts of the model with sha256 {sha256}",
                actual=f"the parts of the model with sha256 {manifest.source.sha256}",
                hint="give the directory of this model's parts",
            )
        if record is not None:
            record.check(manifest, str(directory))
        return ModelParts(directory, manifest, scratch, facts)

    @property
    def sha256(self) -> str:
        """The SHA-256 of the model file the parts were cut from."""
        return self.manifest.source.sha256

    def range(self, begin: int, end: int) -> RangeParts:
        """The directory of the range [begin, end), made on first use, checked (`check_range`)."""
        target = self.scratch / f"{begin}-{end}"
        args: dict[str, Any] = {"model_sha256": self.sha256, "manifest": self.manifest, "facts": self.facts}
        if (begin, end) in self._staged:
            return check_range(target, begin, end, **args)
        staged = stage_range(self.directory, begin, end, target, **args)
        self._staged.add((begin, end))
        return staged

    def model_for(self, begin: int, end: int) -> Path:
        """The file the worker of [begin, end) loads: the first file of the range's own directory, checked."""
        return self.range(begin, end).first


class PartsStore:
    """The parts of the locked models for one `dgr verify`: for each, when a check first asks, found in the
    cache and checked, or written there (`ensure_cached`: `dgr parts`'s writer and place), and held to its
    entry in locks/parts.toml (a model without one is refused: `dgr parts --lock` records it); the range
    directories under `scratch/<name>/`. A failure is kept and raised again to every later check."""

    def __init__(
        self, cache_root: Path, scratch: Path, lock: PartsLock, sources: dict[str, tuple[Path, str]]
    ) -> None:
        """`sources`: each locked model's file and SHA-256, by name."""
        self.cache_root = cache_root
        self.scratch = scratch
        self.lock = lock
        self.sources = sources
        self.facts = FileFacts()
        self._opened: dict[str, ModelParts | DgrError] = {}

    def close(self) -> None:
        """Remove the range directories (the parts in the cache stay)."""
        shutil.rmtree(self.scratch, ignore_errors=True)

    def of(self, name: str) -> ModelParts:
        """The parts of the locked model `name`, checked (or written) on first use."""
        if name not in self._opened:
            try:
                self._opened[name] = self._open(name)
            except DgrError as exc:
                self._opened[name] = exc
        found = self._opened[name]
        if isinstance(found, DgrError):
            raise found
        return found

    def _open(self, name: str) -> ModelParts:
        source, sha256 = self.sources[name]
        record = self.lock.get(name)
        if record is None:
            raise ConfigError(
                f"locks/parts.toml has no parts of {name}: the checks run the parts as recorded",
                hint=f"write and record them: `dgr parts --model {name} --lock`",
            )
        directory, manifest = ensure_cached(self.cache_root, source, sha256, record, self.facts)
        return ModelParts(directory, manifest, self.scratch / name, self.facts)


# --------------------------------------------------------------------------- figures

STORAGE_SPLITS = (2, 3, 5)
"""The splits whose storage per machine `dgr bench` reports: halves, thirds, fifths."""


@dataclass(frozen=True)
class RangeStorage:
    """What one machine of a split stores: the files of its range against the whole model file."""

    begin: int
    end: int
    files: int
    part_bytes: int
    whole_bytes: int

    @property
    def fraction(self) -> float:
        return self.part_bytes / self.whole_bytes


def storage(manifest: PartsManifest, k: int) -> tuple[RangeStorage, ...]:
    """Per range of `k` (nearly) equal ranges (inventory.split), the files it needs and their bytes, against
    the size of the whole model file."""
    out = []
    for begin, end in inventory.split(manifest.n_layer, k):
        needed = manifest.files_for(begin, end)
        out.append(RangeStorage(begin, end, len(needed), sum(p.size for p in needed), manifest.source.size))
    return tuple(out)
