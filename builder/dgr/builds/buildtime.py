"""`dgr bench`, build timing: what dgr costs on top of cmake + ninja (no-op, one patch edited, cold)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from dgr.builds import build, buildplan
from dgr.builds.cmake import Toolchain
from dgr.contracts import locks
from dgr.contracts.buildmanifest import BuildManifest
from dgr.core import jsonio, proc
from dgr.core.paths import Context
from dgr.errors import BuildError
from dgr.git import gitops


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _timed_build(env: Mapping[str, str], *args: str, what: str) -> tuple[float, str]:
    """`dgr build ARGS` as a user runs it, a new process: its seconds and what it printed."""
    start = time.perf_counter()
    result = proc.run(
        [sys.executable, "-m", "dgr", "build", *args], env=env, error=BuildError, what=what, timeout=3600
    )
    return time.perf_counter() - start, result.stdout


def measure(ctx: Context, quick: bool) -> dict[str, float | str]:
    """dgr build vs plain cmake + ninja of the same targets, in the same run."""
    out: dict[str, float | str] = {}
    manifest = build.run(ctx, buildplan.Request()).manifest
    env = {**os.environ, "DGR_REPO": str(ctx.repo.root), "DGR_CACHE_DIR": str(ctx.cache.root)}
    # the command as a user runs it: a new process that checks the digests and finds the build published
    noop_dgr = _time(lambda: proc.run([sys.executable, "-m", "dgr", "build"], env=env))
    build_dir = Path(manifest.build.build_dir)
    toolchain = Toolchain.find(locks.load_toolchain(ctx.repo.locks_dir))
    targets = list(manifest.build.targets)
    # the work tree is shared with the prefixes of the series (`dgr verify`), whose targets may be fewer (an
    # example that a later patch adds): the series is checked out and built there first, untimed
    _series_built(toolchain, manifest, targets)
    noop_ninja = _time(lambda: proc.run([toolchain.ninja, "-C", build_dir, *targets]))
    out |= {
        "noop_dgr_s": noop_dgr,
        "noop_ninja_s": noop_ninja,
        "noop_ratio": noop_dgr / max(noop_ninja, 1e-9),
    }
    if quick:
        return out
    out.update(edit_rebuild(ctx, toolchain, targets))
    # cold: dgr build --upstream-only in a fresh cache vs cmake + ninja of the same source and options
    with tempfile.TemporaryDirectory(prefix="dgr-bench-") as tmp:
        env = {**os.environ, "DGR_CACHE_DIR": str(Path(tmp) / "cache")}
        for name in ("downloads", "upstream"):
            src = ctx.cache.root / name
            if src.is_dir():
                shutil.copytree(src, Path(tmp) / "cache" / name, symlinks=True)
        cold_dgr, _ = _timed_build(env, "--upstream-only", what="cold dgr build failed")
        printed = proc.run([sys.executable, "-m", "dgr", "build", "--upstream-only", "--json"], env=env)
        baseline = BuildManifest.from_printed(
            jsonio.loads(printed.stdout, "the output of `dgr build --upstream-only --json`", BuildError),
            "dgr build --upstream-only --json",
        )
        src = Path(baseline.build.source_dir)
        plain = Path(tmp) / "plain"
        defs = [f"-D{k}={v}" for k, v in baseline.cmake_options.items() if "{" not in v]
        start = time.perf_counter()
        proc.run(
            [
                toolchain.cmake,
                "-S",
                src,
                "-B",
                plain,
                "-G",
                "Ninja",
                "-DCMAKE_BUILD_TYPE=Release",
                f"-DCMAKE_MAKE_PROGRAM={toolchain.ninja}",
                *defs,
            ],
            error=BuildError,
            what="plain cmake failed",
        )
        proc.run(
            [toolchain.ninja, "-C", plain, *baseline.build.targets],
            error=BuildError,
            what="plain ninja failed",
            timeout=3600,
        )
        cold_plain = time.perf_counter() - start
        out |= {"cold_dgr_s": cold_dgr, "cold_plain_s": cold_plain, "cold_ratio": cold_dgr / cold_plain}
        out["cold_note"] = (
            "dgr builds the worker too (a separate CMake project); the plain build does llama + ggml only"
        )
    return out


# an added line of layer-range.patch (in src/llama-context.cpp) and the edit made to it
EDIT_PATCH = "layer-range.patch"
EDIT_FROM = (
    "+    // a model without the output layer outputs the input of layer layer_end, "
    "see llama_get_embeddings_layer_inp()"
)
EDIT_TO = (
    "+    // a model without the output layer returns the input of layer layer_end, "
    "see llama_get_embeddings_layer_inp()"
)
# the same line edited otherwise: built first, untimed, so that the timed build starts from a work tree (the
# worker's included) that differs from it by that line alone, whatever `dgr verify` built there last
EDIT_WARM = (
    "+    // a model without the output layer gives the input of layer layer_end, "
    "see llama_get_embeddings_layer_inp()"
)


def _series_built(toolchain: Toolchain, manifest: BuildManifest, targets: list[str]) -> None:
    """The work tree of the published build checked out at the series' commit, and its targets built."""
    src = Path(manifest.build.source_dir)
    gitops.git(["checkout", "--quiet", "--force", "--detach", manifest.patched.commit], cwd=src)
    proc.run(
        [toolchain.ninja, "-C", manifest.build.build_dir, *targets],
        error=BuildError,
        what="ninja failed",
        timeout=3600,
    )


def edit_rebuild(ctx: Context, toolchain: Toolchain, targets: list[str]) -> dict[str, float | str]:
    """A comment edited in one patch: `dgr build` of a copy of the repository (sharing the cache, so the work
    tree is incremental), then plain ninja for the same change back in the same work tree. Both start from
    a work tree one line away, built: the prefixes of the series (`dgr verify`) share it, and the worker a
    prefix build left behind would otherwise be rebuilt inside the timed build (50 s instead of 15 s)."""
    manifest = build.run(ctx, buildplan.Request()).manifest
    _series_built(toolchain, manifest, targets)
    with tempfile.TemporaryDirectory(prefix="dgr-bench-repo-") as tmp:
        copy = Path(tmp)
        shutil.copy(ctx.repo.root / "pyproject.toml", copy)
        for name in ("series", "patches", "locks"):
            shutil.copytree(ctx.repo.root / name, copy / name)
        shutil.copytree(ctx.repo.worker_dir, copy / "verify" / "worker")
        patch = copy / "patches" / EDIT_PATCH
        text = patch.read_text()
        if EDIT_FROM not in text:
            return {"edit_note": f"{EDIT_PATCH} no longer has the line the benchmark edits"}
        env = {**os.environ, "DGR_REPO": str(copy), "DGR_CACHE_DIR": str(ctx.cache.root)}
        dgr_s = 0.0
        for line in (EDIT_WARM, EDIT_TO):
            patch.write_text(text.replace(EDIT_FROM, line, 1))
            proc.run([sys.executable, "-m", "dgr", "manifest"], env=env)
            dgr_s, printed = _timed_build(env, "--json", what="dgr build of the edited series failed")
            # the edited series is not the user's: its published build goes again
            shutil.rmtree(
                jsonio.loads(printed, "the output of `dgr build --json`", BuildError)["path"],
                ignore_errors=True,
            )
    # the work tree now holds the edited file: put the original back and let ninja rebuild the same files
    start = time.perf_counter()
    _series_built(toolchain, manifest, targets)
    ninja_s = time.perf_counter() - start
    return {
        "edit_dgr_s": dgr_s,
        "edit_ninja_s": ninja_s,
        "edit_ratio": dgr_s / ninja_s,
        "edit": f"{EDIT_PATCH}: one comment line of src/llama-context.cpp",
    }
