"""`dgr build`: verified inputs -> digest -> cached build, or apply + configure + ninja + publish.

The steps, in order (see README.md):
 1. verify the series and every patch against locks/patches.toml, before touching anything;
 2. compute the inputs digest; a published, intact `builds/<digest>` is a no-op;
 3. under the cache-wide build lock, check again, obtain the verified upstream,
    apply the series in a fresh temporary worktree (`git am`, fixed committer);
 4. move the persistent work tree to the patched commit (only changed files are
    touched), configure, and let ninja rebuild what changed;
 5. copy the artifacts to tmp/ and publish them by one rename.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dgr import apply, gitops, locks, log, patchfile
from dgr.buildcache import BuildStore
from dgr.cmake import CMakeProject, Compiler, Toolchain, compiler_at
from dgr.contracts import (
    AppliedPatch,
    BuildInfo,
    BuildManifest,
    BuildStatus,
    PatchedInfo,
    ToolchainInfo,
    UpstreamInfo,
)
from dgr.digest import sha256_canonical, sha256_file
from dgr.errors import BuildError, UsageError
from dgr.paths import Context
from dgr.upstream import obtain, select

INPUTS_FORMAT = 1
_BUILD_AND_TEST = re.compile(r"llama_build_and_test\s*\(([^)]*)\)")
_LIB_PATTERNS = ("libllama.so*", "libggml*.so*")
_TEST_LIB_PATTERN = "libllama-common.so*"
_COMPILER_STATE = "last-compiler.toml"


@dataclass(frozen=True)
class Request:
    upstream_only: bool = False
    mirror: Path | None = None
    upstream: str | None = None
    """A locked rebase target to build on instead of the pin (None: the pin)."""
    sanitize: tuple[str, ...] = ()
    """Sanitizers to build with: "address", "undefined" (llama.cpp, ggml and the worker)."""


@dataclass(frozen=True)
class Result:
    manifest: BuildManifest
    path: Path
    status: BuildStatus


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
    worker_files: dict[str, str]
    inputs: dict[str, Any]
    digest: str

    @property
    def targets(self) -> list[str]:
        return [*self.toolchain_lock.base_targets, *self.native_tests]

    @property
    def flavor(self) -> str:
        flavor = "upstream-only" if self.request.upstream_only else "patched"
        return flavor + "".join(f"+{s}" for s in self.request.sanitize)


def native_tests(patches: list[patchfile.Patch]) -> tuple[str, ...]:
    """Test targets the patches add with `llama_build_and_test(<file>.cpp [NAME n] ...)`."""
    found: list[str] = []
    for patch in patches:
        diff = patch.file("tests/CMakeLists.txt")
        if diff is None:
            continue
        added = "\n".join(line.split("#", 1)[0] for line in diff.added)
        for match in _BUILD_AND_TEST.finditer(added):
            args = match.group(1).split()
            if not args:
                continue
            name = args[args.index("NAME") + 1] if "NAME" in args[:-1] else Path(args[0]).stem
            found.append(name)
    return tuple(dict.fromkeys(found))


def _worker_files(ctx: Context) -> dict[str, str]:
    root = ctx.repo.worker_dir
    if not (root / "CMakeLists.txt").is_file():
        return {}
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def _prefix_map_flags(toolchain_lock: locks.ToolchainLock, worker: bool = False) -> str:
    """The prefix maps of a project: llama.cpp gets only its own trees, so that the place of the
    repository (the worker's sources) does not change its flags and recompile it."""
    maps = [m for m in toolchain_lock.prefix_maps if worker or "{worker_" not in m]
    return " ".join(f"-ffile-prefix-map={m}" for m in maps)


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


def _sanitizer_flags(sanitize: tuple[str, ...]) -> str:
    return f" -fsanitize={','.join(sanitize)} -fno-omit-frame-pointer" if sanitize else ""


def _sanitizer_optimization(toolchain_lock: locks.ToolchainLock, sanitize: tuple[str, ...]) -> dict[str, str]:
    """Sanitized builds compile at -O1, the level the sanitizers' documentation recommends: instrumented
    code at -O3 took twice as long to compile (llama-model.cpp: 55 s against 26 s) for no better check."""
    if not sanitize:
        return {}
    config = toolchain_lock.build_type.upper()
    return {f"CMAKE_C_FLAGS_{config}": "-O1 -DNDEBUG", f"CMAKE_CXX_FLAGS_{config}": "-O1 -DNDEBUG"}


def llama_definitions(
    toolchain_lock: locks.ToolchainLock, pin: locks.Pin, patches: int, sanitize: tuple[str, ...] = ()
) -> dict[str, str]:
    """The CMake -D definitions of the llama.cpp project, with {src}/{build}-style path templates.

    LLAMA_BUILD_COMMIT depends only on the pin and the series length, so that
    editing a patch recompiles only the files it changes.
    """
    flags = _prefix_map_flags(toolchain_lock)
    sanitizers = {
        f"{project}_SANITIZE_{name.upper()}": "ON" for name in sanitize for project in ("LLAMA", "GGML")
    }
    return {
        **toolchain_lock.cmake_options,
        **sanitizers,
        **_sanitizer_optimization(toolchain_lock, sanitize),
        "LLAMA_BUILD_COMMIT": f"{pin.short}-p{patches}" if patches else pin.short,
        "LLAMA_BUILD_NUMBER": "0",
        # ggml/CMakeLists.txt asks git for its own commit id unless git is "not found"
        "GIT_EXE": "GIT_EXE-NOTFOUND",
        "CMAKE_C_FLAGS": flags,
        "CMAKE_CXX_FLAGS": flags,
    }


def worker_definitions(toolchain_lock: locks.ToolchainLock, sanitize: tuple[str, ...] = ()) -> dict[str, str]:
    """The worker project links the llama.cpp build and runs from the published bin/ ($ORIGIN)."""
    flags = _prefix_map_flags(toolchain_lock, worker=True) + _sanitizer_flags(sanitize)
    return {
        "LLAMA_SOURCE_DIR": "{src}",
        "LLAMA_BINARY_DIR": "{build}",
        "CMAKE_C_FLAGS": flags,
        "CMAKE_CXX_FLAGS": flags,
        "CMAKE_BUILD_WITH_INSTALL_RPATH": "ON",
        "CMAKE_INSTALL_RPATH": "$ORIGIN",
        "CMAKE_EXE_LINKER_FLAGS": "-Wl,-rpath-link,{build}/bin" + _sanitizer_flags(sanitize),
        **_sanitizer_optimization(toolchain_lock, sanitize),
    }


def _render(definitions: dict[str, str], paths: dict[str, Path]) -> dict[str, str]:
    rendered = {}
    for key, value in definitions.items():
        for name, path in paths.items():
            value = value.replace(f"{{{name}}}", str(path))
        rendered[key] = value
    return rendered


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
            parsed = [patchfile.load(ref.path) for ref in patch_refs]
            log.detail(f"{len(patch_refs)} patch(es), all digests match")
    toolchain_lock = locks.load_toolchain(repo.locks_dir)
    toolchain = Toolchain.find(toolchain_lock)
    tests = native_tests(parsed)
    # the worker is built for the baseline too: it detects the API of the tree it builds against
    worker = _worker_files(ctx)
    lock_files = [repo.locks_dir / "upstream.toml", repo.locks_dir / "toolchain.toml"]
    if not request.upstream_only:
        lock_files.append(repo.manifest_file)
    inputs: dict[str, Any] = {
        "format": INPUTS_FORMAT,
        "upstream_only": request.upstream_only,
        "upstream": {"commit": pin.commit, "tree": pin.tree},
        "locks": {repo.rel(path).removeprefix("locks/"): path.read_text() for path in lock_files},
        "series": "" if request.upstream_only else repo.series_file.read_text(),
        "patches": [[ref.name, ref.sha256] for ref in patch_refs],
        "worker": worker,
        "toolchain": toolchain.identity(),
        "cmake_options": llama_definitions(toolchain_lock, pin, len(patch_refs), request.sanitize),
        "worker_options": worker_definitions(toolchain_lock, request.sanitize) if worker else {},
        "targets": [*toolchain_lock.base_targets, *tests],
    }
    return Plan(
        request=request,
        upstream_lock=upstream_lock,
        pin=pin,
        sources=sources,
        toolchain_lock=toolchain_lock,
        toolchain=toolchain,
        patches=tuple(patch_refs),
        native_tests=tests,
        worker_files=worker,
        inputs=inputs,
        digest=sha256_canonical(inputs),
    )


def run(ctx: Context, request: Request) -> Result:
    the_plan = plan(ctx, request)
    store = BuildStore(ctx.cache)
    log.info(f"inputs digest {the_plan.digest} ({the_plan.flavor})")
    if cached := store.lookup(the_plan.digest):
        log.info(f"cached: {store.path(the_plan.digest)} is up to date, nothing to build")
        return Result(cached, store.path(the_plan.digest), "cached")
    with store.locked():
        if cached := store.lookup(the_plan.digest):
            log.info(f"cached: another build published {store.path(the_plan.digest)} while this one waited")
            return Result(cached, store.path(the_plan.digest), "cached")
        ctx.cache.clean_stale_tmp()
        built = _build(ctx, the_plan, store)
    return Result(built, store.path(the_plan.digest), "built")


def _build(ctx: Context, plan: Plan, store: BuildStore) -> BuildManifest:
    pin = plan.pin
    with log.step(f"obtain upstream {pin.short}"):
        upstream = obtain(ctx.cache, pin, plan.sources, plan.request.mirror)
    identity = gitops.Identity.from_locks(plan.toolchain_lock, pin)
    with ctx.cache.tmpdir(f"apply-{plan.digest[:12]}") as tmp:
        applied = apply.apply_series(upstream.repo, pin.commit, list(plan.patches), identity, tmp)
    log.info(f"patched commit {applied.commit} tree {applied.tree}")
    work_key = sha256_canonical(
        {
            "commit": pin.commit,
            "toolchain": plan.inputs["locks"]["toolchain.toml"],
            "compilers": plan.toolchain.identity(),
            "flavor": plan.flavor,
        }
    )[:20]
    work = ctx.cache.work / work_key
    src, build_dir, worker_build = work / "src", work / "build", work / "worker"
    worker_src = work / "worker-src"
    with log.step(f"check out {applied.commit[:12]} in {src}"):
        _checkout(upstream.repo, src, applied.commit)
    _warn_if_compiler_changed(ctx.cache.state / _COMPILER_STATE, plan.toolchain)
    paths = {"src": src, "build": build_dir, "worker_src": worker_src, "worker_build": worker_build}
    env = {"SOURCE_DATE_EPOCH": str(pin.epoch)}
    llama = CMakeProject(
        plan.toolchain,
        src,
        build_dir,
        plan.toolchain_lock.build_type,
        _render(plan.inputs["cmake_options"], paths),
        env,
    )
    with log.step(f"configure llama.cpp in {build_dir}"):
        llama.configure()
    with log.step(f"ninja {' '.join(plan.targets)}"):
        llama.build_targets(plan.targets)
    worker: CMakeProject | None = None
    if plan.worker_files:
        # built from a copy in the work tree: where the repository lives changes neither the flags nor the
        # timestamps the worker build sees
        _sync_tree(ctx.repo.worker_dir, worker_src, plan.worker_files)
        worker = CMakeProject(
            plan.toolchain,
            worker_src,
            worker_build,
            plan.toolchain_lock.build_type,
            _render(plan.inputs["worker_options"], paths),
            env,
        )
        with log.step(f"configure and build the worker ({ctx.repo.rel(ctx.repo.worker_dir)})"):
            worker.configure()
            worker.build_targets([])
    compilers = _compilers_used(llama)

    def fill(staging: Path) -> BuildManifest:
        final_bin = store.path(plan.digest) / "bin"
        _collect(staging / "bin", build_dir / "bin", plan, worker)
        tests = _native_test_files(staging, llama, plan.native_tests, build_dir / "bin", final_bin)
        return _manifest(plan, upstream.source, applied, compilers, src, build_dir, tests)

    with log.step(f"publish {store.path(plan.digest)}"):
        published = store.publish(plan.digest, fill)
    locks.write_toml(
        ctx.cache.state / _COMPILER_STATE, {"cc": compilers["cc"].version, "cxx": compilers["cxx"].version}
    )
    return published


def _sync_tree(source: Path, dest: Path, files: dict[str, str]) -> None:
    """Make `dest` hold exactly `files` (relative path -> sha256) from `source`; unchanged files keep their
    timestamps, so that ninja rebuilds only what changed."""
    for rel, digest in files.items():
        target = dest / rel
        if target.is_file() and sha256_file(target) == digest:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source / rel, target)
    for path in sorted(dest.rglob("*"), reverse=True):
        rel = path.relative_to(dest).as_posix()
        if path.is_file() and rel not in files:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def _checkout(repo: Path, src: Path, commit: str) -> None:
    """Bring the persistent work tree to `commit`, touching only files that differ."""
    if (src / ".git").exists():
        # we hold the build lock: an index.lock here was left by an interrupted build
        index_lock = gitops.out(
            ["rev-parse", "--path-format=absolute", "--git-path", "index.lock"], cwd=src, check=False
        )
        if index_lock:
            Path(index_lock).unlink(missing_ok=True)
        moved = gitops.git(["checkout", "--quiet", "--force", "--detach", commit], cwd=src, check=False)
        if moved.returncode == 0:
            gitops.git(["clean", "-fdxq"], cwd=src)
            return
        log.warn(f"work tree {src} is unusable ({moved.stderr.strip()}); recreating it (full rebuild)")
    shutil.rmtree(src, ignore_errors=True)
    gitops.git(["worktree", "prune"], cwd=repo)
    src.parent.mkdir(parents=True, exist_ok=True)
    gitops.git(["worktree", "add", "--quiet", "--detach", src, commit], cwd=repo)


def _warn_if_compiler_changed(state: Path, toolchain: Toolchain) -> None:
    try:
        last = tomllib.loads(state.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return
    for key, now in (("cc", toolchain.cc), ("cxx", toolchain.cxx)):
        if last.get(key) and last[key] != now.version:
            log.warn(
                f"the {key} compiler changed since the last build: was {last[key]!r}, now {now.version!r}"
            )


def _compilers_used(project: CMakeProject) -> dict[str, Compiler]:
    """The compilers CMake actually found (CMakeCache.txt), with their `--version` line."""
    found = {}
    for key, cache_key, probed in (
        ("cc", "CMAKE_C_COMPILER", project.toolchain.cc),
        ("cxx", "CMAKE_CXX_COMPILER", project.toolchain.cxx),
    ):
        path = project.cache_value(cache_key)
        found[key] = compiler_at(path) if path and Path(path).resolve() != Path(probed.path) else probed
    return found


def _copy(src: Path, dest_dir: Path) -> None:
    dest_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest_dir / src.name, follow_symlinks=False)


def _is_executable(path: Path) -> bool:
    if path.is_symlink() or not path.is_file() or not os.access(path, os.X_OK):
        return False
    with path.open("rb") as fh:
        return fh.read(4) == b"\x7fELF" and ".so" not in path.name


def _collect(dest: Path, llama_bin: Path, plan: Plan, worker: CMakeProject | None) -> None:
    patterns = [*_LIB_PATTERNS, *((_TEST_LIB_PATTERN,) if plan.native_tests else ())]
    for pattern in patterns:
        for lib in sorted(llama_bin.glob(pattern)):
            _copy(lib, dest)
    for test in plan.native_tests:
        exe = llama_bin / test
        if not _is_executable(exe):
            raise BuildError(
                f"native test {test} was not built at {exe}",
                hint="check the patch's tests/CMakeLists.txt entry",
            )
        _copy(exe, dest)
    if worker is not None:
        exes = worker.executables()
        if not exes:
            raise BuildError(f"the worker project {worker.source} defines no executable")
        for exe in exes:
            if not _is_executable(exe):
                raise BuildError(f"the worker executable {exe} was not built")
            _copy(exe, dest)


def _native_test_files(
    staging: Path, llama: CMakeProject, names: tuple[str, ...], work_bin: Path, final_bin: Path
) -> list[dict[str, Any]]:
    """CTestTestfile.cmake and tests.json for the patch-added tests, pointing at the final bin/."""
    if not names:
        return []
    tests = []
    for test in llama.tests():
        if test["name"] not in names:
            continue
        command = [
            str(final_bin / Path(c).name) if Path(c).parent == work_bin else c for c in test["command"]
        ]
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        workdir = props.get("WORKING_DIRECTORY", ".")
        tests.append(
            {
                "name": test["name"],
                "command": command,
                "working_directory": str(final_bin.parent) if workdir == "." else workdir,
                "labels": props.get("LABELS", []),
            }
        )
    lines = ["# Generated by dgr build: the native tests added by the patch series."]
    for t in tests:
        args = " ".join(f"[==[{c}]==]" for c in t["command"])
        lines.append(f"add_test([==[{t['name']}]==] {args})")
        labels = ";".join(t["labels"])
        lines.append(
            f"set_tests_properties([==[{t['name']}]==] PROPERTIES "
            f"WORKING_DIRECTORY [==[{t['working_directory']}]==] LABELS [==[{labels}]==])"
        )
    (staging / "CTestTestfile.cmake").write_text("\n".join(lines) + "\n")
    (staging / "tests.json").write_text(json.dumps(tests, indent=2) + "\n")
    return tests


def _manifest(
    plan: Plan,
    source: str,
    applied: apply.Applied,
    compilers: dict[str, Compiler],
    src: Path,
    build_dir: Path,
    tests: list[dict[str, Any]],
) -> BuildManifest:
    commits = dict(applied.commits)
    return BuildManifest(
        build=BuildInfo(
            inputs_digest=plan.digest,
            upstream_only=plan.request.upstream_only,
            targets=tuple(plan.targets),
            native_tests=tuple(t["name"] for t in tests),
            worker=bool(plan.worker_files),
            source_dir=str(src),
            build_dir=str(build_dir),
        ),
        upstream=UpstreamInfo(
            repo=plan.upstream_lock.repo, commit=plan.pin.commit, tree=plan.pin.tree, source=source
        ),
        patched=PatchedInfo(commit=applied.commit, tree=applied.tree),
        patches=tuple(
            AppliedPatch(name=ref.name, sha256=ref.sha256, commit=commits[ref.name]) for ref in plan.patches
        ),
        toolchain=ToolchainInfo(
            cmake=plan.toolchain.cmake_version,
            ninja=plan.toolchain.ninja_version,
            cc=compilers["cc"].version,
            cc_path=compilers["cc"].path,
            cxx=compilers["cxx"].version,
            cxx_path=compilers["cxx"].path,
        ),
        inputs={key: sha256_canonical(value) for key, value in sorted(plan.inputs.items())},
        cmake_options=plan.inputs["cmake_options"],
        source_date_epoch=plan.pin.epoch,
    )
