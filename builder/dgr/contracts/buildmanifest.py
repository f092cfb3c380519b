"""The build manifest: `builds/<digest>/manifest.toml`, what was built from which inputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dgr.contracts.fields import (
    mapping,
    string_map,
    strings,
    typed,
)

BuildStatus = Literal["built", "cached"]


@dataclass(frozen=True, kw_only=True)
class BuildInfo:
    inputs_digest: str
    upstream_only: bool
    targets: tuple[str, ...]
    native_tests: tuple[str, ...]
    worker: bool
    """The build has the worker (verify/worker/ exists)."""
    source_dir: str
    build_dir: str

    def to_json(self) -> dict[str, Any]:
        return {
            "inputs_digest": self.inputs_digest,
            "upstream_only": self.upstream_only,
            "targets": list(self.targets),
            "native_tests": list(self.native_tests),
            "worker": self.worker,
            "source_dir": self.source_dir,
            "build_dir": self.build_dir,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> BuildInfo:
        d = mapping(data, where)
        return cls(
            inputs_digest=typed(d, "inputs_digest", str, where),
            upstream_only=typed(d, "upstream_only", bool, where),
            targets=strings(d, "targets", where),
            native_tests=strings(d, "native_tests", where),
            worker=typed(d, "worker", bool, where),
            source_dir=typed(d, "source_dir", str, where),
            build_dir=typed(d, "build_dir", str, where),
        )


@dataclass(frozen=True, kw_only=True)
class UpstreamInfo:
    repo: str
    commit: str
    tree: str
    source: str
    """Where the verified upstream came from (the cache's note)."""

    def to_json(self) -> dict[str, Any]:
        return {"repo": self.repo, "commit": self.commit, "tree": self.tree, "source": self.source}

    @classmethod
    def from_json(cls, data: Any, where: str) -> UpstreamInfo:
        d = mapping(data, where)
        return cls(**{k: typed(d, k, str, where) for k in ("repo", "commit", "tree", "source")})


@dataclass(frozen=True, kw_only=True)
class PatchedInfo:
    commit: str
    tree: str

    def to_json(self) -> dict[str, Any]:
        return {"commit": self.commit, "tree": self.tree}

    @classmethod
    def from_json(cls, data: Any, where: str) -> PatchedInfo:
        d = mapping(data, where)
        return cls(commit=typed(d, "commit", str, where), tree=typed(d, "tree", str, where))


@dataclass(frozen=True, kw_only=True)
class AppliedPatch:
    name: str
    sha256: str
    commit: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256, "commit": self.commit}

    @classmethod
    def from_json(cls, data: Any, where: str) -> AppliedPatch:
        d = mapping(data, where)
        return cls(**{k: typed(d, k, str, where) for k in ("name", "sha256", "commit")})


@dataclass(frozen=True, kw_only=True)
class ToolchainInfo:
    cmake: str
    ninja: str
    cc: str
    cc_path: str
    cxx: str
    cxx_path: str

    def to_json(self) -> dict[str, Any]:
        return {
            "cmake": self.cmake,
            "ninja": self.ninja,
            "cc": self.cc,
            "cc_path": self.cc_path,
            "cxx": self.cxx,
            "cxx_path": self.cxx_path,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> ToolchainInfo:
        d = mapping(data, where)
        keys = ("cmake", "ninja", "cc", "cc_path", "cxx", "cxx_path")
        return cls(**{k: typed(d, k, str, where) for k in keys})


@dataclass(frozen=True, kw_only=True)
class BuildManifest:
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
        data: dict[str, Any] = {
            "build": self.build.to_json(),
            "upstream": self.upstream.to_json(),
            "patched": self.patched.to_json(),
            "patches": [p.to_json() for p in self.patches],
            "toolchain": self.toolchain.to_json(),
            "inputs": dict(self.inputs),
            "cmake_options": dict(self.cmake_options),
            "source_date_epoch": self.source_date_epoch,
        }
        if self.artifacts or self.links:
            data["artifacts"] = dict(self.artifacts)
            data["links"] = dict(self.links)
        return data

    @classmethod
    def from_json(cls, data: Any, where: str = "build manifest") -> BuildManifest:
        d = mapping(data, where)
        patches = typed(d, "patches", list, where)
        return cls(
            build=BuildInfo.from_json(d.get("build"), f"{where}.build"),
            upstream=UpstreamInfo.from_json(d.get("upstream"), f"{where}.upstream"),
            patched=PatchedInfo.from_json(d.get("patched"), f"{where}.patched"),
            patches=tuple(AppliedPatch.from_json(p, f"{where}.patches[{i}]") for i, p in enumerate(patches)),
            toolchain=ToolchainInfo.from_json(d.get("toolchain"), f"{where}.toolchain"),
            inputs=string_map(d, "inputs", where),
            cmake_options=string_map(d, "cmake_options", where),
            source_date_epoch=typed(d, "source_date_epoch", int, where),
            artifacts=string_map(d, "artifacts", where),
            links=string_map(d, "links", where),
        )
