"""The lock files under locks/: dataclasses, validation, atomic TOML writes.

Read with tomllib, written with tomli-w. Validation collects every problem
(with the key path) instead of stopping at the first, so that `dgr check` can
list them all; loaders raise one ConfigError carrying that list.
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

import tomli_w

from dgr.core.digest import GIT_OID_RE, SHA256_RE
from dgr.core.fs import write_atomic
from dgr.errors import ConfigError

VERSION_RE = re.compile(r"^\d+(\.\d+)*([a-z0-9.+-]*)?$")
SourceKind = Literal["mirror", "pypi-sdist", "git"]
SOURCE_KINDS: tuple[SourceKind, ...] = get_args(SourceKind)
UPSTREAM_DATE = "upstream.commit_date"
T = TypeVar("T")


# --------------------------------------------------------------------------- reading helpers


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; a missing or unparsable file is a ConfigError (exit 8)."""
    try:
        text = path.read_text()
    except FileNotFoundError as exc:
        raise ConfigError(
            f"{path}: lock file missing", hint="restore it with `git checkout -- locks/`"
        ) from exc
    except OSError as exc:
        raise ConfigError(f"{path}: unreadable: {exc}") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid TOML: {exc}", hint="fix the syntax or restore the file"
        ) from exc


def dumps(data: dict[str, Any]) -> bytes:
    """The bytes of a lock file for `data`: what tomli-w writes (the committed files are exactly that)."""
    return tomli_w.dumps(data).encode()


def write_toml(path: Path, data: dict[str, Any]) -> None:
    """Write `data` with tomli-w to a temporary file, then rename it into place."""
    write_atomic(path, dumps(data))


class _Fields:
    """Typed access to a TOML table that records problems instead of raising."""

    def __init__(self, data: Any, where: str, problems: list[str]) -> None:
        self.where = where
        self.problems = problems
        if not isinstance(data, dict):
            problems.append(f"{where}: expected a table")
            data = {}
        self.data: dict[str, Any] = data

    def _problem(self, key: str, message: str) -> None:
        self.problems.append(f"{self.where}.{key}: {message}")

    def text(self, key: str, pattern: re.Pattern[str] | None = None, what: str = "") -> str:
        value = self.data.get(key)
        if value is None:
            self._problem(key, "missing")
            return ""
        if not isinstance(value, str):
            self._problem(key, f"expected a string, found {type(value).__name__}")
            return ""
        if pattern is not None and not pattern.match(value):
            self._problem(key, f"{value!r} is not {what or pattern.pattern}")
        return value

    def oid(self, key: str) -> str:
        return self.text(key, GIT_OID_RE, "a 40-hex git object id")

    def sha256(self, key: str) -> str:
        return self.text(key, SHA256_RE, "a 64-hex sha256")

    def version(self, key: str) -> str:
        return self.text(key, VERSION_RE, "a version number")

    def date(self, key: str) -> dt.datetime:
        value = self.data.get(key)
        if not isinstance(value, dt.datetime) or value.tzinfo is None:
            self._problem(key, "expected a TOML date-time with a UTC offset, e.g. 2026-08-16T14:53:13+02:00")
            return dt.datetime.fromtimestamp(0, dt.UTC)
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            self._problem(key, "expected a non-empty list of strings")
            return ()
        return tuple(value)

    def table(self, key: str, *, optional: bool = False) -> _Fields:
        value = self.data.get(key)
        if value is None and optional:
            value = {}
        elif value is None:
            self._problem(key, "missing table")
            value = {}
        return _Fields(value, f"{self.where}.{key}", self.problems)


def _raise_if(path: Path, problems: list[str]) -> None:
    if problems:
        raise ConfigError(
            f"{path}: invalid lock ({len(problems)} problem{'s' if len(problems) > 1 else ''})",
            detail="\n".join(problems),
            hint="fix the lock file; `dgr check` lists every problem",
        )


# --------------------------------------------------------------------------- upstream.toml


@dataclass(frozen=True)
class SdistRef:
    """A PyPI sdist that carries llama.cpp as a git repository under `subdir`."""

    package: str
    version: str
    filename: str
    sha256: str
    subdir: str

    @property
    def spec(self) -> str:
        return f"pypi:{self.package}=={self.version}"

    @staticmethod
    def parse(fields: _Fields) -> SdistRef:
        return SdistRef(
            package=fields.text("package"),
            version=fields.version("version"),
            filename=fields.text("filename"),
            sha256=fields.sha256("sha256"),
            subdir=fields.text("subdir"),
        )

    def to_toml(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "version": self.version,
            "filename": self.filename,
            "sha256": self.sha256,
            "subdir": self.subdir,
        }


@dataclass(frozen=True)
class Source:
    """One way to obtain the upstream commit, tried in lock order."""

    kind: SourceKind
    url: str = ""
    sdist: SdistRef | None = None

    def to_toml(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind}
        if self.url:
            data["url"] = self.url
        if self.sdist:
            data.update(self.sdist.to_toml())
        return data


@dataclass(frozen=True)
class Pin:
    """A llama.cpp commit with its tree id and committer date."""

    commit: str
    tree: str
    commit_date: dt.datetime

    @property
    def short(self) -> str:
        return self.commit[:7]

    @property
    def epoch(self) -> int:
        return int(self.commit_date.timestamp())

    @property
    def git_date(self) -> str:
        """The date in git's raw `<epoch> <+hhmm>` form (for GIT_COMMITTER_DATE)."""
        offset = self.commit_date.utcoffset() or dt.timedelta(0)
        minutes = int(offset.total_seconds()) // 60
        sign = "+" if minutes >= 0 else "-"
        return f"{self.epoch} {sign}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"


@dataclass(frozen=True)
class RebaseTarget:
    """A named alternative upstream (`dgr rebase-check --onto NAME`), verified like the pin."""

    name: str
    sdist: SdistRef
    pin: Pin
    port: str | None = None
    """The port of the series to this upstream (series/ports/<port>), if there is one."""


@dataclass(frozen=True)
class UpstreamLock:
    repo: str
    pin: Pin
    sources: tuple[Source, ...]
    rebase_targets: dict[str, RebaseTarget] = field(default_factory=dict)

    @staticmethod
    def parse(data: dict[str, Any], where: str, problems: list[str]) -> UpstreamLock:
        top = _Fields(data, where, problems)
        up = top.table("upstream")
        pin = Pin(up.oid("commit"), up.oid("tree"), up.date("commit_date"))
        sources: list[Source] = []
        raw_sources = up.data.get("sources")
        if not isinstance(raw_sources, list) or not raw_sources:
            problems.append(f"{where}.upstream.sources: expected a non-empty array of tables")
            raw_sources = []
        for i, raw in enumerate(raw_sources):
            src = _Fields(raw, f"{where}.upstream.sources[{i}]", problems)
            kind = src.text("kind")
            if kind == "mirror":
                sources.append(Source("mirror"))
            elif kind == "pypi-sdist":
                sources.append(Source("pypi-sdist", sdist=SdistRef.parse(src)))
            elif kind == "git":
                sources.append(Source("git", url=src.text("url")))
            elif kind:
                problems.append(f"{src.where}.kind: {kind!r} is not one of {', '.join(SOURCE_KINDS)}")
        targets: dict[str, RebaseTarget] = {}
        rebase = top.table("rebase", optional=True).table("targets", optional=True)
        for name in rebase.data:
            t = rebase.table(name)
            sdist = SdistRef.parse(t)
            port = t.data.get("port")
            if port is not None and (not isinstance(port, str) or not port or "/" in port):
                problems.append(f"{t.where}.port: expected a port name (a file in series/ports/)")
                port = None
            targets[name] = RebaseTarget(
                name, sdist, Pin(t.oid("commit"), t.oid("tree"), t.date("commit_date")), port
            )
            if sdist.package and name != sdist.spec:
                problems.append(f"{t.where}: the name must be {sdist.spec!r} (package and version)")
        return UpstreamLock(up.text("repo"), pin, tuple(sources), targets)

    def to_toml(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "upstream": {
                "repo": self.repo,
                "commit": self.pin.commit,
                "tree": self.pin.tree,
                "commit_date": self.pin.commit_date,
                "sources": [s.to_toml() for s in self.sources],
            }
        }
        if self.rebase_targets:
            data["rebase"] = {
                "targets": {
                    name: {
                        **t.sdist.to_toml(),
                        "commit": t.pin.commit,
                        "tree": t.pin.tree,
                        "commit_date": t.pin.commit_date,
                        **({"port": t.port} if t.port else {}),
                    }
                    for name, t in self.rebase_targets.items()
                }
            }
        return data


# --------------------------------------------------------------------------- toolchain.toml


@dataclass(frozen=True)
class ToolchainLock:
    cmake: str
    ninja: str
    generator: str
    build_type: str
    base_targets: tuple[str, ...]
    cmake_options: dict[str, str]
    tools_targets: tuple[str, ...]
    """What `dgr build --tools` builds besides: upstream's tools (perplexity, bench, the RPC server)."""
    tools_cmake_options: dict[str, str]
    prefix_maps: tuple[str, ...]
    source_date_epoch: str
    committer_name: str
    committer_email: str
    committer_date: str

    @staticmethod
    def parse(data: dict[str, Any], where: str, problems: list[str]) -> ToolchainLock:
        top = _Fields(data, where, problems)
        tc = top.table("toolchain")
        options = tc.table("cmake_options")
        tools = tc.table("tools")
        tools_options = tools.table("cmake_options")
        for table in (options, tools_options):
            for key, value in table.data.items():
                if not isinstance(value, str):
                    problems.append(f'{table.where}.{key}: expected a string (e.g. "ON")')
        repro = top.table("reproducibility")
        git_am = repro.table("git_am")
        lock = ToolchainLock(
            cmake=tc.version("cmake"),
            ninja=tc.version("ninja"),
            generator=tc.text("generator"),
            build_type=tc.text("build_type"),
            base_targets=tc.strings("base_targets"),
            cmake_options={k: v for k, v in options.data.items() if isinstance(v, str)},
            tools_targets=tools.strings("targets"),
            tools_cmake_options={k: v for k, v in tools_options.data.items() if isinstance(v, str)},
            prefix_maps=repro.strings("prefix_maps"),
            source_date_epoch=repro.text("source_date_epoch"),
            committer_name=git_am.text("committer_name"),
            committer_email=git_am.text("committer_email"),
            committer_date=git_am.text("committer_date"),
        )
        if lock.generator and lock.generator != "Ninja":
            problems.append(f'{tc.where}.generator: only "Ninja" is supported, found {lock.generator!r}')
        if lock.source_date_epoch and lock.source_date_epoch != UPSTREAM_DATE:
            problems.append(f"{repro.where}.source_date_epoch: only {UPSTREAM_DATE!r} is supported")
        if lock.committer_date and lock.committer_date != UPSTREAM_DATE:
            problems.append(f"{git_am.where}.committer_date: only {UPSTREAM_DATE!r} is supported")
        for entry in lock.prefix_maps:
            if "=" not in entry:
                problems.append(f"{repro.where}.prefix_maps: {entry!r} is not OLD=NEW")
        return lock

    def to_toml(self, *, tools: bool = True) -> dict[str, Any]:
        """The lock as written; without the tools table for what builds without them (their digest)."""
        toolchain: dict[str, Any] = {
            "cmake": self.cmake,
            "ninja": self.ninja,
            "generator": self.generator,
            "build_type": self.build_type,
            "base_targets": list(self.base_targets),
            "cmake_options": dict(self.cmake_options),
        }
        if tools:
            toolchain["tools"] = {
                "targets": list(self.tools_targets),
                "cmake_options": dict(self.tools_cmake_options),
            }
        return {
            "toolchain": toolchain,
            "reproducibility": {
                "source_date_epoch": self.source_date_epoch,
                "prefix_maps": list(self.prefix_maps),
                "git_am": {
                    "committer_name": self.committer_name,
                    "committer_email": self.committer_email,
                    "committer_date": self.committer_date,
                },
            },
        }


# --------------------------------------------------------------------------- model.toml

MODEL_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*$")
GGUF_FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.gguf$")
WHEEL_FILE_RE = re.compile(r"^[A-Za-z0-9_.+-]+-[^-/]+(-[^-/]+)?-[^-/]+-[^-/]+-[^-/]+\.whl$")


def _is_member_path(path: str) -> bool:
    """A relative path inside a zip file, without `..` or empty parts."""
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and all(p not in ("", ".", "..") for p in parts)


@dataclass(frozen=True)
class ModelWheel:
    """One wheel on PyPI and the member of it that holds the model file (or, in order, one part of it)."""

    package: str
    version: str
    wheel: str
    wheel_sha256: str
    member: str

    @staticmethod
    def parse(fields: _Fields) -> ModelWheel:
        wheel = ModelWheel(
            package=fields.text("package"),
            version=fields.version("version"),
            wheel=fields.text("wheel", WHEEL_FILE_RE, "a wheel file name (NAME-VERSION-PY-ABI-PLATFORM.whl)"),
            wheel_sha256=fields.sha256("wheel_sha256"),
            member=fields.text("member"),
        )
        if wheel.member and not _is_member_path(wheel.member):
            fields.problems.append(
                f"{fields.where}.member: {wheel.member!r} is not a relative path in the wheel"
            )
        return wheel

    def to_toml(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "version": self.version,
            "wheel": self.wheel,
            "wheel_sha256": self.wheel_sha256,
            "member": self.member,
        }


@dataclass(frozen=True)
class ModelLock:
    """A locked model: the GGUF file (`file`, its SHA-256 and size) and the wheels whose members, in order,
    concatenate to it (one wheel holds a small model whole; a large one is split into chunk wheels)."""

    name: str
    file: str
    sha256: str
    size: int
    wheels: tuple[ModelWheel, ...]

    @property
    def filename(self) -> str:
        return self.file

    @property
    def _single(self) -> ModelWheel:
        """The wheel of a model held whole by one wheel (what export-upstream's reproduce steps name)."""
        if len(self.wheels) != 1:
            raise ValueError(f"model {self.name} is assembled from {len(self.wheels)} wheels, not one")
        return self.wheels[0]

    @property
    def package(self) -> str:
        return self._single.package

    @property
    def version(self) -> str:
        return self._single.version

    @property
    def wheel(self) -> str:
        return self._single.wheel

    @property
    def member(self) -> str:
        return self._single.member

    @staticmethod
    def parse(name: str, fields: _Fields) -> ModelLock:
        problems = fields.problems
        if not MODEL_NAME_RE.match(name):
            problems.append(f"{fields.where}: the name {name!r} is not lowercase letters, digits, - and _")
        file = fields.text("file", GGUF_FILE_RE, "a .gguf file name")
        size = fields.data.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            problems.append(f"{fields.where}.size: expected the file's size in bytes, a positive integer")
            size = 0
        raw = fields.data.get("wheels")
        if not isinstance(raw, list) or not raw:
            problems.append(f"{fields.where}.wheels: expected a non-empty array of tables")
            raw = []
        wheels = tuple(
            ModelWheel.parse(_Fields(w, f"{fields.where}.wheels[{i}]", problems)) for i, w in enumerate(raw)
        )
        seen: dict[str, int] = {}
        for i, w in enumerate(wheels):
            if w.wheel and w.wheel in seen:
                problems.append(
                    f"{fields.where}.wheels[{i}].wheel: {w.wheel} is also wheels[{seen[w.wheel]}]"
                )
            seen.setdefault(w.wheel, i)
        return ModelLock(name=name, file=file, sha256=fields.sha256("sha256"), size=size, wheels=wheels)

    def to_toml(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "sha256": self.sha256,
            "size": self.size,
            "wheels": [w.to_toml() for w in self.wheels],
        }


@dataclass(frozen=True)
class ModelsLock:
    """Every locked model by name, in lock order; `default` is the one a command uses unless told."""

    default: str
    models: dict[str, ModelLock]

    @property
    def names(self) -> tuple[str, ...]:
        """The names, the default first, then in lock order."""
        return (self.default, *(n for n in self.models if n != self.default))

    def all(self) -> tuple[ModelLock, ...]:
        return tuple(self.models[n] for n in self.names)

    def get(self, name: str | None = None) -> ModelLock:
        """The model `name` (the default if None); ConfigError naming the locked ones if it is not locked."""
        key = self.default if name is None else name
        if key not in self.models:
            raise ConfigError(
                f"no model {key!r} in locks/model.toml",
                hint=f"choose one of {', '.join(self.names)}",
            )
        return self.models[key]

    @staticmethod
    def parse(data: dict[str, Any], where: str, problems: list[str]) -> ModelsLock:
        top = _Fields(data, where, problems)
        default = top.text("default")
        table = top.table("models")
        if not table.data:
            problems.append(f"{table.where}: expected at least one model")
        models = {name: ModelLock.parse(name, table.table(name)) for name in table.data}
        if default and table.data and default not in models:
            problems.append(f"{where}.default: {default!r} is not a model of [models] ({', '.join(models)})")
        for key in sorted(set(data) - {"default", "models"}):
            problems.append(f"{where}.{key}: unknown key (expected default and [models.NAME])")
        return ModelsLock(default=default, models=models)

    def to_toml(self) -> dict[str, Any]:
        return {"default": self.default, "models": {n: m.to_toml() for n, m in self.models.items()}}


# --------------------------------------------------------------------------- patches.toml


@dataclass(frozen=True)
class PatchManifest:
    """SHA-256 of the series file and of every patch, keyed by file name."""

    series_sha256: str
    patches: dict[str, str]

    @staticmethod
    def parse(data: dict[str, Any], where: str, problems: list[str]) -> PatchManifest:
        top = _Fields(data, where, problems)
        series = top.table("series")
        table = top.table("patches", optional=True)
        patches: dict[str, str] = {}
        for name in table.data:
            patches[name] = table.sha256(name)
        return PatchManifest(series.sha256("sha256"), patches)

    def to_toml(self, series_file: str = "series/series") -> dict[str, Any]:
        return {
            "series": {"file": series_file, "sha256": self.series_sha256},
            "patches": dict(self.patches),
        }


# --------------------------------------------------------------------------- all locks


Parser = Callable[[dict[str, Any], str, list[str]], Any]

LOCK_FILES: dict[str, tuple[str, Parser]] = {
    "upstream": ("upstream.toml", UpstreamLock.parse),
    "toolchain": ("toolchain.toml", ToolchainLock.parse),
    "model": ("model.toml", ModelsLock.parse),
    "patches": ("patches.toml", PatchManifest.parse),
}


def problems_in(path: Path, parse: Parser) -> list[str]:
    """Validation problems of one lock file (raises ConfigError when it cannot be read)."""
    problems: list[str] = []
    parse(read_toml(path), path.name, problems)
    return problems


def _load(path: Path, parse: Callable[[dict[str, Any], str, list[str]], T]) -> T:
    problems: list[str] = []
    value = parse(read_toml(path), path.name, problems)
    _raise_if(path, problems)
    return value


def load_upstream(locks_dir: Path) -> UpstreamLock:
    return _load(locks_dir / "upstream.toml", UpstreamLock.parse)


def load_toolchain(locks_dir: Path) -> ToolchainLock:
    return _load(locks_dir / "toolchain.toml", ToolchainLock.parse)


def load_models(locks_dir: Path) -> ModelsLock:
    return _load(locks_dir / "model.toml", ModelsLock.parse)


def load_model(locks_dir: Path, name: str | None = None) -> ModelLock:
    """The locked model `name`, the default one if None."""
    return load_models(locks_dir).get(name)


def load_manifest_file(path: Path) -> PatchManifest:
    return _load(path, PatchManifest.parse)
