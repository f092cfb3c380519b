"""`dgr build`: verified inputs -> digest -> cached build, or apply + configure + ninja + publish.

The steps, in order (see README.md):
 1. verify the series and every patch against locks/patches.toml, before touching anything, and
 2. compute the inputs digest (both dgr.builds.buildplan); a published, intact `builds/<digest>` is a no-op;
 3. under the cache-wide build lock, check again, obtain the verified upstream,
    apply the series in a fresh temporary worktree (`git am`, fixed committer);
 4. move the persistent work tree to the patched commit (only changed files are
    touched), configure, and let ninja rebuild what changed;
 5. copy the artifacts to tmp/ (dgr.builds.artifacts: bin/, the CTest file, the manifest) and publish them by
    one rename (dgr.builds.buildcache).
"""

from __future__ import annotations

import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from dgr.builds import artifacts, backends
from dgr.builds.buildcache import BuildStore
from dgr.builds.buildplan import Plan, Request, plan
from dgr.builds.cmake import CMakeProject, Compiler, CompilerCache, Toolchain, compiler_at
from dgr.builds.cmakedefs import render
from dgr.contracts import locks
from dgr.contracts.buildmanifest import BuildManifest, BuildStatus
from dgr.core import log
from dgr.core.digest import sha256_canonical, sha256_file
from dgr.core.paths import Context
from dgr.git import apply, gitops
from dgr.sources import debian
from dgr.sources.upstream import obtain

_COMPILER_STATE = "last-compiler.toml"


@dataclass(frozen=True)
class BuildOutcome:
    manifest: BuildManifest
    path: Path
    status: BuildStatus


def run(ctx: Context, request: Request, jobs: int | None = None) -> BuildOutcome:
    """Build (or find in the cache) what `request` asks for; `jobs`: ninja's -j (no part of the digest)."""
    the_plan = plan(ctx, request)
    store = BuildStore(ctx.cache)
    log.info(f"inputs digest {the_plan.digest} ({the_plan.flavor})")
    if cached := store.lookup(the_plan.digest):
        log.info(f"cached: {store.path(the_plan.digest)} is up to date, nothing to build")
        return BuildOutcome(cached, store.path(the_plan.digest), "cached")
    with store.locked():
        if cached := store.lookup(the_plan.digest):
            log.info(f"cached: another build published {store.path(the_plan.digest)} while this one waited")
            return BuildOutcome(cached, store.path(the_plan.digest), "cached")
        ctx.cache.clean_stale_tmp()
        built = _build(ctx, the_plan, store, jobs)
    return BuildOutcome(built, store.path(the_plan.digest), "built")


def work_build(ctx: Context, request: Request, jobs: int | None = None) -> Path:
    """The work build dir of what `request` asks for, brought back to its commit and built: what the last
    `dgr build` of another series or prefix in the same work tree changed is rebuilt (nothing, when the last
    build there was this one). Upstream's own tests run there (the `upstream` group of `dgr verify`): they
    read the source tree (models/) beside it. Another build may move the tree once this returns."""
    the_plan = plan(ctx, request)
    store = BuildStore(ctx.cache)
    with store.locked():
        ctx.cache.clean_stale_tmp()
        return _prepare(ctx, the_plan, jobs).build_dir


@dataclass(frozen=True)
class _Prepared:
    """A work tree checked out at the patched commit and built: what step 5 publishes."""

    upstream_source: str
    applied: apply.Applied
    src: Path
    build_dir: Path
    llama: CMakeProject
    worker: CMakeProject | None


def _build(ctx: Context, plan: Plan, store: BuildStore, jobs: int | None = None) -> BuildManifest:
    prepared = _prepare(ctx, plan, jobs)
    src, build_dir, llama, worker = prepared.src, prepared.build_dir, prepared.llama, prepared.worker
    compilers = _compilers_used(llama)

    def fill(staging: Path) -> BuildManifest:
        final_bin = store.path(plan.digest) / "bin"
        artifacts.collect(staging / "bin", build_dir / "bin", plan, worker)
        declared = {name: plan.test_patches.get(name, "a patch") for name in plan.native_tests}
        tests = artifacts.native_test_files(staging, llama, declared, build_dir / "bin", final_bin)
        return artifacts.manifest(
            plan, prepared.upstream_source, prepared.applied, compilers, src, build_dir, tests
        )

    with log.step(f"publish {store.path(plan.digest)}"):
        published = store.publish(plan.digest, fill)
    locks.write_toml(
        ctx.cache.state / _COMPILER_STATE, {"cc": compilers["cc"].version, "cxx": compilers["cxx"].version}
    )
    return published


def _prepare(ctx: Context, plan: Plan, jobs: int | None = None) -> _Prepared:
    """Steps 3 and 4: the series applied, the work tree at its commit, configured and built."""
    for backend in plan.request.gpu_backends:
        backends.require_build(backend)  # before any tree is touched
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
    for backend in plan.request.gpu_backends:
        for deb in plan.toolchain_lock.backends[backend].debs:
            paths[deb.template] = debian.fetch(ctx.cache, deb)
    env = {"SOURCE_DATE_EPOCH": str(pin.epoch)}
    compiler_cache = compiler_cache_of(ctx, plan.toolchain)
    compiler_cache.zero()

    def project(source: Path, build: Path, options: str) -> CMakeProject:
        """The CMake project of `source` built in `build`, with the plan's definitions `options`."""
        definitions = render(plan.inputs[options], paths)
        return CMakeProject(
            plan.toolchain, source, build, plan.toolchain_lock.build_type, definitions, env, compiler_cache
        )

    llama = project(src, build_dir, "cmake_options")
    with log.step(f"configure llama.cpp in {build_dir}"):
        llama.configure()
    with log.step(f"ninja {' '.join(plan.targets)}"):
        llama.build_targets(plan.targets, jobs)
    if plan.upstream_tests:
        # known once configured: the executables of the tests CMake registers (tests/CMakeLists.txt)
        executables = artifacts.upstream_test_executables(build_dir)
        only = plan.request.only_tests
        tests = sorted({exe for name, exe in executables.items() if only is None or name in only})
        with log.step(f"ninja the {len(tests)} executables of upstream's own tests"):
            failed = llama.build_what_builds(tests, jobs)
        if failed:
            # upstream's own test that does not build here (test-chat includes tools/ headers that
            # LLAMA_BUILD_TOOLS=OFF leaves out): CTest finds no executable and the test fails, on the
            # baseline as on the patched build, where the `upstream` group compares them
            log.warn(f"{len(failed)} of upstream's test executables do not build: {', '.join(failed)}")
    worker: CMakeProject | None = None
    if plan.worker_files:
        # built from a copy in the work tree: where the repository lives changes neither the flags nor the
        # timestamps the worker build sees
        _sync_tree(ctx.repo.worker_dir, worker_src, plan.worker_files)
        worker = project(worker_src, worker_build, "worker_options")
        with log.step(f"configure and build the worker ({ctx.repo.rel(ctx.repo.worker_dir)})"):
            worker.configure()
            worker.build_targets([], jobs)
    hits, misses = compiler_cache.counts()
    log.info(f"compiler cache: {hits} of {hits + misses} compilations found in {compiler_cache.dir}")
    return _Prepared(upstream.source, applied, src, build_dir, llama, worker)


def compiler_cache_of(ctx: Context, toolchain: Toolchain) -> CompilerCache:
    """The compiler cache of this dgr cache (every build of it, the work trees of every flavor included)."""
    return CompilerCache(toolchain.ccache, ctx.cache.root / "ccache", ctx.cache.root)


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
        if (own := gitops.git_dir(src)) is not None:
            (own / "index.lock").unlink(missing_ok=True)
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
