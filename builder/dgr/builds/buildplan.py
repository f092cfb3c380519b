"""Steps 1 and 2 of `dgr build`: what a build depends on, known before any tree is touched.

The series and every patch are verified against their manifest first (before anything is parsed or
built); then the inputs digest is computed over the canonical JSON of everything the build depends on
(see docs/DESIGN.md, "Inputs digest"), with the CMake definitions of dgr.cmakedefs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from dgr.builds.cmake import Toolchain
from dgr.builds.cmakedefs import llama_definitions, worker_definitions
from dgr.contracts import locks
from dgr.contracts.backend import Backend
from dgr.core import log
from dgr.core.digest import sha256_canonical, sha256_file
from dgr.core.paths import Context
from dgr.errors import UsageError
from dgr.git import apply
from dgr.series import patchfile
from dgr.sources.upstream import select

INPUTS_FORMAT = 4
"""2: the upstream as commit, tree and date (not the text of locks/upstream.toml), no manifest text;
3: the series as the patches in order (names and digests), not the text of the order file (its comments);
4: `upstream_tests`, whether the build also builds the executables of upstream's own tests."""
# tests/CMakeLists.txt: `llama_build_and_test(<file>.cpp [NAME n] ...)` builds a target and registers its
# test, `llama_test(<target> [NAME n] ...)` registers a test of a target built otherwise
_NATIVE_TEST = re.compile(r"\b(llama_build_and_test|llama_test)\s*\(([^)]*)\)")
# examples/<name>/CMakeLists.txt (as upstream's eval-callback does): `add_test(NAME n COMMAND <target> ...)`
_EXAMPLE_TEST = re.compile(r"\badd_test\s*\(\s*NAME\s+([\w.-]+)\s+COMMAND\s+([\w.-]+)")
_EXAMPLE_CMAKE = re.compile(r"examples/[^/]+/CMakeLists\.txt")


@dataclass(frozen=True)
class Request:
    upstream_only: bool = False
    mirror: Path | None = None
    upstream: str | None = None
    """A locked rebase target to build on instead of the pin (None: the pin)."""
    sanitize: tuple[str, ...] = ()
    """Sanitizers to build with: "address", "undefined" (llama.cpp, ggml and the worker)."""
    prefix: int | None = None
    """Build the first `prefix` patches of the series only (None: all of it)."""
    tools: bool = False
    """Also build upstream's tools (locks/toolchain.toml [toolchain.tools]): perplexity, bench, RPC server."""
    backend: Backend = "cpu"
    """A GPU backend to build besides the CPU's (locks/toolchain.toml [toolchain.backends.NAME])."""
    upstream_tests: bool = False
    """Also build every executable upstream's own CTest tests run (tests/CMakeLists.txt), in the work build
    dir where the `upstream` group of `dgr verify` runs them; never for a prefix of the series. `dgr build`
    does not: they are not part of what it publishes."""
    only_tests: tuple[str, ...] | None = None
    """With `upstream_tests`: only the executables of these tests (by CTest name; None: of every test; `()`:
    none, the tree only configured, so that CTest lists its tests). No part of the inputs digest: only a work
    build takes it, which publishes nothing."""

    @property
    def gpu_backends(self) -> tuple[str, ...]:
        return () if self.backend == "cpu" else (self.backend,)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Everything the build depends on, known before any tree is touched."""

    request: Request
    upstream_lock: locks.UpstreamLock
    pin: locks.Pin
    sources: tuple[locks.Source, ...]
    toolchain_lock: locks.ToolchainLock
    toolchain: Toolchain
    patches: tuple[apply.PatchRef, ...]
    native_tests: tuple[str, ...]
    """The CTest names of the tests the patches add."""
    native_targets: tuple[str, ...]
    """The executables those tests run."""
    test_patches: Mapping[str, str] = field(default_factory=dict)
    """The patch that declares each of those tests, by test name."""
    tool_targets: tuple[str, ...] = ()
    """Upstream's tools, for `--tools` builds."""
    worker_files: dict[str, str]
    inputs: dict[str, Any]
    digest: str

    @property
    def upstream_tests(self) -> bool:
        """The build also builds the executables of upstream's own tests (found after configure: every
        executable a registered CTest test runs); the inputs digest holds this flag, and the tree and the
        options that decide those targets."""
        return bool(self.inputs["upstream_tests"])

    @property
    def targets(self) -> list[str]:
        return [*self.toolchain_lock.base_targets, *self.native_targets, *self.tool_targets]

    @property
    def flavor(self) -> str:
        flavor = "upstream-only" if self.request.upstream_only else "patched"
        return (
            flavor
            + "".join(f"+{s}" for s in self.request.sanitize)
            + ("+tools" if self.request.tools else "")
            + "".join(f"+{b}" for b in self.request.gpu_backends)
        )


def native_test_targets(patches: list[patchfile.Patch]) -> tuple[tuple[str, str], ...]:
    """(test name, target) of every test the patches add to tests/CMakeLists.txt, then of every test they add
    to the CMakeLists.txt of an example (a test of the example's executable)."""
    found: list[tuple[str, str]] = []
    for patch in patches:
        diff = patch.file("tests/CMakeLists.txt")
        added = "\n".join(line.split("#", 1)[0] for line in diff.added) if diff else ""
        for match in _NATIVE_TEST.finditer(added):
            args = match.group(2).split()
            if not args:
                continue
            target = Path(args[0]).stem if match.group(1) == "llama_build_and_test" else args[0]
            name = args[args.index("NAME") + 1] if "NAME" in args[:-1] else target
            found.append((name, target))
        for example in (f for f in patch.files if _EXAMPLE_CMAKE.fullmatch(f.path)):
            added = "\n".join(line.split("#", 1)[0] for line in example.added)
            found += [(m.group(1), m.group(2)) for m in _EXAMPLE_TEST.finditer(added)]
    return tuple(dict.fromkeys(found))


def declared_tests(patches: list[tuple[str, patchfile.Patch]]) -> dict[str, str]:
    """The patch (its name) that declares each test the patches add, by test name."""
    return {test: name for name, patch in patches for test, _ in native_test_targets([patch])}


def native_tests(patches: list[patchfile.Patch]) -> tuple[str, ...]:
    """The CTest names of the tests the patches add."""
    return tuple(name for name, _ in native_test_targets(patches))


def _worker_files(ctx: Context) -> dict[str, str]:
    root = ctx.repo.worker_dir
    if not (root / "CMakeLists.txt").is_file():
        return {}
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


SANITIZERS = ("address", "undefined")


def parse_sanitizers(text: str | None) -> tuple[str, ...]:
    """`address,undefined` -> ("address", "undefined"); UsageError on anything else."""
    if not text:
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in SANITIZERS]
    if unknown or not names:
        raise UsageError(
            f"unknown sanitizer(s) in --sanitize {text!r}", hint=f"choose from {', '.join(SANITIZERS)}"
        )
    return tuple(n for n in SANITIZERS if n in names)


def plan(ctx: Context, request: Request) -> Plan:
    """Steps 1 and 2: verify the manifest (before anything else) and compute the inputs digest."""
    upstream_lock = locks.load_upstream(ctx.repo.locks_dir)
    pin, sources = select(upstream_lock, request.upstream)
    # on a rebase target with a port of the series, the port is built
    target = upstream_lock.rebase_targets.get(request.upstream or "")
    repo = ctx.repo.for_port(target.port if target else None)
    patch_refs: list[apply.PatchRef] = []
    parsed: list[patchfile.Patch] = []
    if not request.upstream_only:
        with log.step(f"verify series and patches against {repo.rel(repo.manifest_file)}"):
            patch_refs = apply.verified_series(repo)
            log.detail(f"{len(patch_refs)} patch(es), all digests match")
        if request.prefix is not None:
            if not 1 <= request.prefix <= len(patch_refs):
                raise UsageError(
                    f"--prefix {request.prefix}: the series has {len(patch_refs)} patch(es)",
                    hint=f"choose a prefix in [1, {len(patch_refs)}]",
                )
            patch_refs = patch_refs[: request.prefix]
        parsed = [patchfile.load(ref.path) for ref in patch_refs]
    toolchain_lock = locks.load_toolchain(repo.locks_dir)
    for backend in request.gpu_backends:
        if backend not in toolchain_lock.backends:
            raise UsageError(
                f"--backend {backend}: {repo.rel(repo.locks_dir / 'toolchain.toml')} has no "
                f"[toolchain.backends.{backend}] table",
                hint=f"add its CMake options there, e.g. [toolchain.backends.{backend}.cmake_options]",
            )
    toolchain = Toolchain.find(toolchain_lock)
    tests = native_test_targets(parsed)
    targets = tuple(dict.fromkeys(target for _, target in tests))
    tools = tuple(t for t in toolchain_lock.tools_targets if t not in targets) if request.tools else ()
    # the worker is built for the baseline too: it detects the API of the tree it builds against
    worker = _worker_files(ctx)
    # What the build depends on, and nothing of the bookkeeping around it: of locks/upstream.toml only the
    # upstream built on (its date is SOURCE_DATE_EPOCH and the committer date), not its sources or the
    # other targets; of the manifest nothing beyond the series and patch digests (it was just checked to
    # match them), not where the files live. So a port verified on its target (`--upstream`) and the same
    # series once `dgr pin` made it the series of the pin have one inputs digest, and one report.
    inputs: dict[str, Any] = {
        "format": INPUTS_FORMAT,
        "upstream_only": request.upstream_only,
        "upstream": {"commit": pin.commit, "tree": pin.tree, "commit_date": pin.commit_date.isoformat()},
        "locks": {
            "toolchain.toml": tomli_w.dumps(
                toolchain_lock.to_toml(tools=request.tools, backends=request.gpu_backends)
            )
        },
        "patches": [[ref.name, ref.sha256] for ref in patch_refs],
        "worker": worker,
        "toolchain": toolchain.identity(),
        "cmake_options": llama_definitions(
            toolchain_lock, pin, len(patch_refs), request.sanitize, request.tools, request.gpu_backends
        ),
        "worker_options": worker_definitions(toolchain_lock, request.sanitize) if worker else {},
        "targets": [*toolchain_lock.base_targets, *targets, *tools],
        "upstream_tests": request.upstream_tests and request.prefix is None,
    }
    return Plan(
        request=request,
        upstream_lock=upstream_lock,
        pin=pin,
        sources=sources,
        toolchain_lock=toolchain_lock,
        toolchain=toolchain,
        patches=tuple(patch_refs),
        native_tests=tuple(name for name, _ in tests),
        native_targets=targets,
        test_patches=declared_tests(
            [(ref.name, patch) for ref, patch in zip(patch_refs, parsed, strict=True)]
        ),
        tool_targets=tools,
        worker_files=worker,
        inputs=inputs,
        digest=sha256_canonical(inputs),
    )
