"""`dgr bench [--json] [--quick] [--fuzz] [--out DIR]`: runs the measurements of dgr.verify.bench and the
build timing (dgr.builds.buildtime), writes bench.json, figures.md (the report) and memory.png, prints the
report. Without --out they go to the cache entry of the inputs and the kind of run
(`bench/<inputs-digest>/full/`, `quick/` for --quick): a quick run never replaces a full one.

`dgr bench --fuzz-only [--fuzz-seconds N] [--json]`: the fuzzing alone (what CI runs), without a build or a
measurement: the harness is built with clang against the pinned upstream's `vendor/` (read from the verified
upstream repository); prints the result (bench.json is not written); exit 1 on a finding."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from dgr.builds import build, buildplan, buildtime, harness
from dgr.contracts import convert, locks
from dgr.contracts import parts as parts_records
from dgr.contracts.bench import BENCH_FORMAT, BenchResult, ModelBench
from dgr.contracts.upstreambench import Comparison, Rpc
from dgr.core import log
from dgr.core.fs import writable_dir, write_atomic
from dgr.core.paths import Context
from dgr.errors import EXIT_OK, UsageError
from dgr.export import upstream_package
from dgr.git import gitops
from dgr.sources import model, upstream
from dgr.verify.bench import codec, fuzz, machine, model_bench, quality, report, rpc, split
from dgr.verify.models.parts import ModelParts, PartsStore

FUZZ_VENDOR = "vendor/nlohmann"
"""What the decoders include of upstream's tree (nlohmann/json)."""


def fuzz_only(ctx: Context, args: argparse.Namespace) -> int:
    """`--fuzz-only`: the decoders under libFuzzer for `--fuzz-seconds` (or `--fuzz-runs`), nothing else."""
    fuzz.compiler()
    pin, sources = upstream.select(locks.load_upstream(ctx.repo.locks_dir), None)
    got = upstream.obtain(ctx.cache, pin, sources)
    vendor = ctx.cache.root / "fuzz" / "vendor"
    listed = gitops.out(["ls-tree", "-r", "--name-only", pin.commit, "--", FUZZ_VENDOR], cwd=got.repo)
    for name in listed.splitlines():
        text = gitops.file_at(got.repo, pin.commit, name)
        write_atomic(vendor / Path(name).relative_to("vendor"), text.encode(errors="surrogateescape"))
    with log.step("fuzz the worker's decoders"):
        fuzzed = fuzz.run(ctx, vendor, args.fuzz_runs, args.fuzz_seconds)
    if args.json:
        print(json.dumps(fuzzed, indent=2))
    else:
        print(report.fuzz_text(fuzzed))
    fuzz.judge(fuzzed)
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    if args.fuzz_only:
        return fuzz_only(ctx, args)
    ran = harness.current(ctx.repo)  # what measures, read before it runs
    if args.out:
        writable_dir(args.out, "--out")  # before an hour of measuring, not after
    if args.fuzz:
        fuzz.compiler()  # likewise: a missing fuzzing compiler is said before the measurements
    if args.ctx < (needed := split.context_needed(args.quick)):
        raise UsageError(
            f"--ctx {args.ctx} is too small: the measurements need {needed} positions in one session",
            hint=f"give --ctx {needed} or more (the default, 1024, is what the README's figures use)",
        )
    parts_lock = parts_records.load_lock(ctx.repo.locks_dir)  # a bad lock before anything is built
    built = build.run(ctx, buildplan.Request())
    bin_dir = built.path / "bin"
    # the cache keeps a quick result apart from the full one of the same inputs (which status and export read)
    out_dir = Path(args.out) if args.out else ctx.cache.bench_entry(built.manifest.inputs_digest, args.quick)
    out_dir.mkdir(parents=True, exist_ok=True)
    models = locks.load_models(ctx.repo.locks_dir).all()  # the default model first
    model_path, *other_paths = model.fetch_all(ctx.cache, models)

    def measured(name: str, path: Path, chart: str, parts: PartsStore) -> ModelBench:
        def parts_of() -> ModelParts:
            return parts.of(name)

        return model_bench(bin_dir, name, path, args.quick, args.threads, args.ctx, out_dir / chart, parts_of)

    # each model's parts: checked in the cache (written there when missing) and held to locks/parts.toml;
    # each range loads from a directory of its own under tmp/, removed at the end
    with ctx.cache.tmpdir("bench-parts") as scratch:
        sources = {m.name: (p, m.sha256) for m, p in zip(models, [model_path, *other_paths], strict=True)}
        parts = PartsStore(ctx.cache.root, scratch, parts_lock, sources)
        default = measured(models[0].name, model_path, "memory.png", parts)
        alone = [
            measured(lock.name, path, f"memory-{lock.name}.png", parts)
            for lock, path in zip(models[1:], other_paths, strict=True)
        ]
    with log.step("bundle codec"):
        speeds = codec.measure(bin_dir, args.quick)
    with log.step("build timing"):
        timing = buildtime.measure(ctx, args.quick)
    fuzzed = None
    if args.fuzz:
        with log.step("fuzz the worker's decoders"):
            vendor = Path(built.manifest.build.source_dir) / "vendor"
            fuzzed = fuzz.run(ctx, vendor, args.fuzz_runs, args.fuzz_seconds)
    extra = None
    if args.rpc:
        paths = [model_path, *other_paths]
        extra = beside_upstream(ctx, bin_dir / "layer-worker", paths, default.model.n_layer, args)
    others = {
        lock.name: dataclasses.replace(one, upstream_comparison=extra.others[i] if extra else None)
        for i, (lock, one) in enumerate(zip(models[1:], alone, strict=True))
    }
    default = dataclasses.replace(default, upstream_comparison=extra.comparison if extra else None)
    result = BenchResult(
        **convert.fields_of(ModelBench, default),  # the default model's keys are at the top
        format=BENCH_FORMAT,
        machine=machine(),
        quick=args.quick,
        inputs_digest=built.manifest.inputs_digest,
        codec=speeds,
        build=timing,
        fuzz=fuzzed,
        models=others,
        rpc=extra.rpc if extra else None,
        harness=ran,
    )
    data = report.bench_json(result)
    write_atomic(out_dir / "bench.json", data.encode())
    write_atomic(out_dir / "figures.md", report.figures_md(result).encode())
    if args.json:
        sys.stdout.write(data)
    else:
        print(report.report_text(result))
    chart = f", chart: {default.chart}" if default.chart else ""
    log.info(f"results: {out_dir / 'bench.json'}{chart}")
    fuzz.judge(fuzzed)
    split.diverged(result)
    return EXIT_OK


@dataclasses.dataclass(frozen=True)
class BesideUpstream:
    """What `--rpc` measured: the default model's comparison with upstream, the other models', the RPC run."""

    comparison: Comparison
    others: tuple[Comparison, ...]
    rpc: Rpc


def beside_upstream(
    ctx: Context, worker: Path, model_paths: list[Path], n_layer: int, args: argparse.Namespace
) -> BesideUpstream:
    """`--rpc`: upstream's tools (`dgr build --tools`, unpatched and patched): perplexity and llama-bench
    before and after (`upstream_comparison` of the default model, the first; `others`, one per other
    model), and the RPC backend beside layer ranges on the default model (`rpc`)."""
    model_path = model_paths[0]
    plan = buildplan.plan(ctx, buildplan.Request())
    patched = build.run(ctx, buildplan.Request(tools=True))
    baseline = build.run(ctx, buildplan.Request(tools=True, upstream_only=True))
    names = [p.name for p in plan.patches]
    config = upstream_package.load_config(ctx.repo.root / "upstream-package" / "package.toml", names)
    text_name = config.upstream.perplexity_text
    got = upstream.obtain(ctx.cache, plan.pin, plan.sources)
    dirs = (Path(baseline.manifest.build.build_dir), Path(patched.manifest.build.build_dir))
    with tempfile.TemporaryDirectory(prefix="dgr-bench-") as tmp:
        text = Path(tmp) / Path(text_name).name
        text.write_text(gitops.file_at(got.repo, plan.pin.commit, text_name), errors="surrogateescape")
        comparisons = []
        for path in model_paths:
            with log.step(f"perplexity and llama-bench of {path.name}, unpatched and patched ({text_name})"):
                comparisons.append(
                    quality.compare(
                        baseline.path / "bin",
                        patched.path / "bin",
                        path,
                        text,
                        text_name,
                        args.threads,
                        5,
                        dirs,
                    )
                )
    with log.step("the RPC backend beside layer ranges (loopback)"):
        beside = rpc.measure(
            worker,
            baseline.path / "bin",
            model_path,
            n_layer,
            args.threads,
            dirs[0],
            reps=rpc.REPS,
        )
    return BesideUpstream(comparison=comparisons[0], others=tuple(comparisons[1:]), rpc=Rpc.from_json(beside))
