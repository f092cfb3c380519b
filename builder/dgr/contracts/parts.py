"""The parts of a model (`dgr parts`): the manifest written beside them (`parts.toml`) and their record in the
repository (`locks/parts.toml`), both read by the one strict decoder (dgr.contracts.convert: a value of the
wrong type, a missing key and an unknown key are problems naming the key path; every problem listed) and
written with tomli-w.

A model of `n_layer` layers is cut, in upstream's split format (the files `<prefix>-0000k-of-0000N.gguf` of
llama.cpp's gguf-split, `split.no`, `split.count`, `split.tensors.count`), at layer boundaries: the first file
holds the metadata and no tensor, then one file holds the input tensors, one file each layer, one the output
tensors and one any other tensor (one that belongs to no layer and is neither input nor output). So one set of
files serves every split, and a machine fetches only the files of its range: `PartsManifest.files_for` says
which, from the manifest alone (see docs/DESIGN.md, "Decisions")."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import tomli_w

from dgr.contracts import convert
from dgr.contracts.modellock import GGUF_FILE_RE
from dgr.core.digest import SHA256_RE
from dgr.core.fs import write_atomic
from dgr.errors import ConfigError, IntegrityError, UsageError

MANIFEST = "parts.toml"
"""The manifest's name in a directory of parts."""
LOCK = "parts.toml"
"""The record of the locked models' parts, in locks/."""
FORMAT: Literal[1] = 1

Holds = Literal["metadata", "input", "layers", "output", "other"]
HOLDS: tuple[Holds, ...] = get_args(Holds)

PART_NAME_RE = re.compile(
    r"^(?P<prefix>[A-Za-z0-9][A-Za-z0-9._+-]*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$"
)

Sha256 = Annotated[str, convert.matches(SHA256_RE, "a 64-hex sha256")]
_SIZE = convert.Rule(lambda v: v > 0, "", "expected the file's size in bytes, a positive integer")
_COUNT = convert.Rule(lambda v: v >= 0, "", "expected a count, an integer of at least 0")
_LAYER = convert.Rule(lambda v: v >= 0, "", "expected a layer index, an integer of at least 0")


def part_name(prefix: str, index: int, count: int) -> str:
    """The name of file `index` (from 0) of `count`, as llama.cpp's gguf-split and `llama_split_path` name it
    (`<prefix>-00001-of-00033.gguf`)."""
    return f"{prefix}-{index + 1:05d}-of-{count:05d}.gguf"


def prefix_of(source_file: str) -> str:
    """The prefix of the parts of the GGUF file `source_file`: its name without `.gguf`."""
    return source_file.removesuffix(".gguf")


@dataclass(frozen=True)
class PartFile(convert.TomlTable):
    """One file of the parts: its name, what it holds, its size and SHA-256, how many tensors; the layers
    [layer_begin, layer_end) for a file that holds layers (only then)."""

    name: Annotated[str, convert.matches(PART_NAME_RE, "a part's name (<prefix>-0000k-of-0000N.gguf)")]
    holds: Holds
    size: Annotated[int, _SIZE]
    sha256: Sha256
    tensors: Annotated[int, _COUNT]
    layer_begin: Annotated[int, _LAYER] | None = field(default=None, metadata=convert.OMIT_NONE)
    layer_end: Annotated[int, _LAYER] | None = field(default=None, metadata=convert.OMIT_NONE)

    @property
    def what(self) -> str:
        """What it holds, in words: `layer 3`, `layers [3, 6)`, `input`, ..."""
        if self.holds != "layers" or self.layer_begin is None or self.layer_end is None:
            return self.holds
        if self.layer_end == self.layer_begin + 1:
            return f"layer {self.layer_begin}"
        return f"layers [{self.layer_begin}, {self.layer_end})"


@dataclass(frozen=True)
class PartsSource(convert.TomlTable):
    """The GGUF file the parts were cut from."""

    file: Annotated[str, convert.matches(GGUF_FILE_RE, "a .gguf file name")]
    size: Annotated[int, _SIZE]
    sha256: Sha256
    n_layer: Annotated[int, convert.POSITIVE]
    tied_head: bool
    """The model has no `output.weight`: llama.cpp reads the token embeddings (an input tensor) as the output
    head (TENSOR_DUPLICATED), so the range that holds the output needs the input file too."""


@dataclass(frozen=True)
class PartsManifest(convert.TomlTable):
    """`parts.toml`: the source, and every file of the parts in order (the first holds the metadata)."""

    format: Literal[1]
    writer: str
    """The library that wrote the parts and its version (`gguf 0.19.0`)."""
    source: PartsSource
    files: Annotated[tuple[PartFile, ...], convert.AT_LEAST_ONE]

    @property
    def n_layer(self) -> int:
        return self.source.n_layer

    @property
    def first(self) -> PartFile:
        """The file a loader is given (split.no 0): the metadata."""
        return self.files[0]

    def needs(self, part: PartFile, begin: int, end: int) -> bool:
        """Whether the range [begin, end) needs the file `part`: the metadata and any other tensor always,
        the input for the range that begins at 0 (and, with a tied head, for the one that ends at the last
        layer), the output for the range that ends there, and the layers the range overlaps."""
        last = end == self.n_layer
        if part.holds == "input":
            return begin == 0 or (self.source.tied_head and last)
        if part.holds == "output":
            return last
        if part.holds == "layers":
            assert part.layer_begin is not None and part.layer_end is not None
            return part.layer_begin < end and begin < part.layer_end
        return True  # metadata, other

    def files_for(self, begin: int, end: int) -> tuple[PartFile, ...]:
        """The files the range [begin, end) needs, in order (the metadata first); UsageError when the range is
        not one of this model's."""
        if not 0 <= begin < end <= self.n_layer:
            raise UsageError(
                f"[{begin}, {end}) is not a layer range of {self.source.file}, which has "
                f"{self.n_layer} layers",
                hint=f"give BEGIN < END within [0, {self.n_layer}]",
            )
        return tuple(p for p in self.files if self.needs(p, begin, end))

    def bytes_for(self, begin: int, end: int) -> int:
        """The bytes a machine that runs [begin, end) stores: the size of the files it needs."""
        return sum(p.size for p in self.files_for(begin, end))

    def problems(self, where: str) -> list[str]:
        """What is wrong across the fields: the names (`part_name` of the source's prefix, in order), the
        metadata first and alone without tensors, the layers of `layers` files only, tiling [0, n_layer) in
        order, at most one file each of input, output, other."""
        found: list[str] = []
        prefix, count = prefix_of(self.source.file), len(self.files)
        seen: dict[str, int] = {}
        expect = 0
        for i, p in enumerate(self.files):
            at = f"{where}.files[{i}]"
            if p.name != part_name(prefix, i, count):
                found.append(f"{at}.name: {p.name} is not {part_name(prefix, i, count)}")
            if (i == 0) != (p.holds == "metadata"):
                found.append(
                    f"{at}.holds: {p.holds!r}: the first file holds the metadata, and only the first"
                )
            if p.holds == "metadata" and p.tensors:
                found.append(f"{at}.tensors: the metadata file holds no tensor, found {p.tensors}")
            has_layers = p.layer_begin is not None or p.layer_end is not None
            if p.holds != "layers":
                if has_layers:
                    found.append(f"{at}: layer_begin and layer_end belong to a file that holds layers only")
                if p.holds in seen and p.holds != "metadata":
                    found.append(f"{at}.holds: {p.holds!r} is also files[{seen[p.holds]}]")
                seen.setdefault(p.holds, i)
                continue
            if p.layer_begin is None or p.layer_end is None:
                found.append(f"{at}: a file that holds layers needs layer_begin and layer_end")
                continue
            if p.layer_begin != expect or not p.layer_begin < p.layer_end <= self.n_layer:
                found.append(
                    f"{at}: layers [{p.layer_begin}, {p.layer_end}) do not follow layer {expect} "
                    f"within the {self.n_layer} layers"
                )
            expect = max(expect, p.layer_end)
        if expect != self.n_layer:
            found.append(f"{where}.files: the layers end at {expect}, the source has {self.n_layer}")
        return found

    @staticmethod
    def parse(data: Any, where: str) -> PartsManifest:
        """The manifest `data` (a decoded TOML document); ConfigError listing every problem."""
        try:
            manifest = convert.from_json(PartsManifest, data, where)
        except ConfigError as exc:
            raise _invalid(where, convert.problems(exc)) from None
        if found := manifest.problems(where):
            raise _invalid(where, found)
        return manifest

    def dumps(self) -> bytes:
        """The bytes of `parts.toml`: what tomli-w writes (the same manifest, the same bytes)."""
        return tomli_w.dumps(self.to_toml()).encode()


def _invalid(where: str, problems: list[str]) -> ConfigError:
    return ConfigError(
        f"{where}: invalid ({len(problems)} problem{'s' if len(problems) > 1 else ''}): {problems[0]}",
        detail="\n".join(problems) if len(problems) > 1 else None,
        hint="write the parts again (`dgr parts`); the manifest is written by dgr, not by hand",
    )


def _read_toml(path: Path, missing: str, hint: str) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(missing, expected=str(path), actual="missing", hint=hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: unreadable ({exc})", hint=hint) from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}", hint=hint) from exc


def read_manifest(directory: Path) -> PartsManifest:
    """The manifest of the parts in `directory`; ConfigError (exit 8) when it is missing or invalid."""
    path = directory / MANIFEST
    hint = "write the parts again with `dgr parts` (a directory of parts has its parts.toml)"
    return PartsManifest.parse(_read_toml(path, f"{directory} has no {MANIFEST}", hint), str(path))


# --------------------------------------------------------------------------- locks/parts.toml


@dataclass(frozen=True)
class _PartsTable:
    """A locked model's parts as written (`[models.NAME]`): the source's SHA-256 and each file's."""

    source_sha256: Sha256
    files: Annotated[Mapping[str, Sha256], convert.AT_LEAST_ONE]


@dataclass(frozen=True)
class _PartsLockFile:
    models: Mapping[str, _PartsTable] = field(default_factory=dict)


@dataclass(frozen=True)
class PartsRecord:
    """The parts of one locked model: the SHA-256 of the model file and of every part, by name, in order."""

    name: str
    source_sha256: str
    files: dict[str, str]

    @staticmethod
    def of(name: str, manifest: PartsManifest) -> PartsRecord:
        return PartsRecord(name, manifest.source.sha256, {p.name: p.sha256 for p in manifest.files})

    def check(self, manifest: PartsManifest, where: str) -> None:
        """IntegrityError (exit 3) unless `manifest` has exactly these files with these digests, naming the
        first file that differs and both digests; `where` is the directory of the parts."""
        hint = (
            f"if the gguf package now writes other bytes on purpose, review and record them: "
            f"`dgr parts --model {self.name} --lock`; otherwise remove {where} and write it again"
        )
        if manifest.source.sha256 != self.source_sha256:
            raise IntegrityError(
                f"{where}: the parts of another model file than locks/parts.toml's {self.name}",
                expected=f"source sha256 {self.source_sha256}",
                actual=f"source sha256 {manifest.source.sha256}",
                hint=hint,
            )
        written = {p.name: p.sha256 for p in manifest.files}
        for name in dict.fromkeys([*self.files, *written]):
            if self.files.get(name) != written.get(name):
                raise IntegrityError(
                    f"{where}/{name}: its sha256 differs from locks/parts.toml ({self.name})",
                    expected=self.files.get(name, "no such part"),
                    actual=written.get(name, "no such part"),
                    hint=hint,
                )


@dataclass(frozen=True)
class PartsLock:
    """`locks/parts.toml`: the parts of the locked models, by the name of the model in locks/model.toml."""

    models: dict[str, PartsRecord]

    @staticmethod
    def parse(data: Any, where: str) -> PartsLock:
        """The lock `data`; ConfigError listing every problem (each part's name is checked too)."""
        try:
            doc = convert.from_json(_PartsLockFile, data, where)
        except ConfigError as exc:
            raise _invalid_lock(where, convert.problems(exc)) from None
        found = [
            f"{where}.models.{model}.files: {name!r} is not a part's name (<prefix>-0000k-of-0000N.gguf)"
            for model, table in doc.models.items()
            for name in table.files
            if not PART_NAME_RE.match(name)
        ]
        if found:
            raise _invalid_lock(where, found)
        return PartsLock({n: PartsRecord(n, t.source_sha256, dict(t.files)) for n, t in doc.models.items()})

    def get(self, name: str) -> PartsRecord | None:
        return self.models.get(name)

    def by_source(self, sha256: str) -> PartsRecord | None:
        """The record of the model file with this SHA-256 (a path given in place of a name)."""
        return next((r for r in self.models.values() if r.source_sha256 == sha256), None)

    def with_record(self, record: PartsRecord) -> PartsLock:
        return PartsLock({**self.models, record.name: record})

    def to_toml(self) -> dict[str, Any]:
        return {
            "models": {
                n: {"source_sha256": r.source_sha256, "files": dict(r.files)} for n, r in self.models.items()
            }
        }


def _invalid_lock(where: str, problems: list[str]) -> ConfigError:
    return ConfigError(
        f"{where}: invalid lock ({len(problems)} problem{'s' if len(problems) > 1 else ''}): {problems[0]}",
        detail="\n".join(problems) if len(problems) > 1 else None,
        hint="fix it, or write it again: `dgr parts --model NAME --lock` for each model",
    )


def load_lock(locks_dir: Path) -> PartsLock:
    """`locks/parts.toml` (a repository without one records no parts); ConfigError when it is invalid."""
    path = locks_dir / LOCK
    if not path.exists():
        return PartsLock({})
    hint = "restore it with `git checkout -- locks/parts.toml`, or write it with `dgr parts --lock`"
    return PartsLock.parse(_read_toml(path, f"{path}: lock file missing", hint), LOCK)


def write_lock(locks_dir: Path, lock: PartsLock) -> None:
    """Write `locks/parts.toml` with tomli-w, atomically."""
    write_atomic(locks_dir / LOCK, tomli_w.dumps(lock.to_toml()).encode())
