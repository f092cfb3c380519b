"""The build manifest: `builds/<digest>/manifest.toml`, what was built from which inputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Self

from dgr.contracts import convert
from dgr.errors import ConfigError

BuildStatus = Literal["built", "cached"]


@dataclass(frozen=True, kw_only=True)
class BuildInfo(convert.Record):
    inputs_digest: str
    upstream_only: bool
    targets: tuple[str, ...]
    native_tests: tuple[str, ...]
    worker: bool
    """The build has the worker (verify/worker/ exists)."""
    source_dir: str
    build_dir: str


@dataclass(frozen=True, kw_only=True)
class UpstreamInfo(convert.Record):
    repo: str
    commit: str
    tree: str
    source: str
    """Where the verified upstream came from (the cache's note)."""


@dataclass(frozen=True, kw_only=True)
class PatchedInfo(convert.Record):
    commit: str
    tree: str


@dataclass(frozen=True, kw_only=True)
class AppliedPatch(convert.Record):
    name: str
    sha256: str
    commit: str


@dataclass(frozen=True, kw_only=True)
class ToolchainInfo(convert.Record):
    cmake: str
    ninja: str
    cc: str
    cc_path: str
    cxx: str
    cxx_path: str


@dataclass(frozen=True, kw_only=True)
class BuildManifest(convert.Record):
    """`builds/<digest>/manifest.toml`: what was built from which inputs, and the SHA-256 of every artifact.

    `dgr build --json` prints it (with `path` and `status`); its `inputs` hold a digest per component of
    the inputs, so two manifests show which input made a rebuild necessary."""

    build: BuildInfo
    upstream: UpstreamInfo
    patched: PatchedInfo
    patches: tuple[AppliedPatch, ...]
    toolchain: ToolchainInfo
    inputs: Mapping[str, str]
    cmake_options: Mapping[str, str]
    source_date_epoch: int
    artifacts: Mapping[str, str] = field(default_factory=dict)
    """Relative path -> sha256 of every published file (filled when the build is published)."""
    links: Mapping[str, str] = field(default_factory=dict)
    """Relative path -> target of every published symbolic link."""

    @property
    def inputs_digest(self) -> str:
        return self.build.inputs_digest

    def to_json(self) -> dict[str, Any]:
        data = convert.to_json(self)
        if not (self.artifacts or self.links):
            # a manifest before publishing has neither
            del data["artifacts"], data["links"]
        return data

    @classmethod
    def from_json(cls, data: Any, where: str = "build manifest") -> Self:
        return convert.from_json(cls, data, where)

    @classmethod
    def from_printed(cls, data: Any, where: str = "dgr build --json") -> Self:
        """The manifest in what `dgr build --json` prints: the manifest's keys and `PRINTED`."""
        fields = convert.mapping(data, where)
        missing = [k for k in PRINTED if k not in fields]
        if missing:
            raise ConfigError(f"{where}: no {' and no '.join(missing)}: not the output of `dgr build --json`")
        return cls.from_json({k: v for k, v in fields.items() if k not in PRINTED}, where)


PRINTED = ("path", "status")
"""What `dgr build --json` prints beside the manifest: the build's directory and whether it was built."""
