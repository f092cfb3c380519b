"""`dgr bench [--json] [--quick] [--fuzz] [--out DIR]`: runs the measurements of dgr.verify.bench and the
build timing (dgr.builds.buildtime), writes bench.json, figures.md (the report) and memory.png, prints the
report.

`dgr bench --fuzz-only [--fuzz-seconds N] [--json]`: the fuzzing alone (what CI runs), without a build or a
measurement: the harness is built with clang against the pinned upstream's `vendor/` (read from the verified
upstream repository); prints the result (bench.json is not written); exit 1 on a finding."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dgr.builds import build, buildplan, buildtime, harness
from dgr.contracts import locks
from dgr.contracts.bench import BENCH_FORMAT, TARGETS, BenchModel, BenchResult, ModelBench
from dgr.contracts.upstreambench import Comparison, Rpc
from dgr.core import log
from dgr.core.fs import writable_dir, write_atomic
from dgr.core.paths import Context
from dgr.errors import EXIT_OK, BenchError, UsageError
from dgr.export import upstream_package
from dgr.git import gitops
from dgr.sources import model, upstream
from dgr.verify.bench import codec, fuzz, machine, memory, model_bench, quality, rpc, split
from dgr.verify.models import inventory

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
        print(fuzz_text(fuzzed))
    crashed(fuzzed)
    return EXIT_OK


def crashed(fuzzed: dict[str, Any] | None) -> None:
    """BenchError (exit 1) naming what libFuzzer found, when it found something."""
    if fuzzed is not None and fuzzed.get("crashes", 0):
        found = str(fuzzed.get("findings", "")) or "(no file written)"
        raise BenchError(
            f"the fuzzer found a crash (libFuzzer exit {fuzzed.get('exit_code')}): {found}",
            detail=str(fuzzed.get("tail", "")),
            hint=f"reproduce it with `{fuzzed.get('binary')} {found.split(', ')[0]}`",
        )


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    if args.fuzz_only:
        return fuzz_only(ctx, args)
    ran = harness.current(ctx.repo)  # what measures, read before it runs
    out_dir = Path(args.out) if args.out else ctx.cache.root / "bench"
    writable_dir(out_dir, "--out")  # before an hour of measuring, not after
    if args.fuzz:
        fuzz.compiler()  # likewise: a missing fuzzing compiler is said before the measurements
    if args.ctx < (needed := split.context_needed(args.quick)):
        raise UsageError(
            f"--ctx {args.ctx} is too small: the measurements need {needed} positions in one session",
            hint=f"give --ctx {needed} or more (the default, 1024, is what the README's figures use)",
        )
    built = build.run(ctx, buildplan.Request())
    bin_dir = built.path / "bin"
    models = locks.load_models(ctx.repo.locks_dir).all()  # the default model first
    model_path, *other_paths = model.fetch_all(ctx.cache, models)
    inv = inventory.read(model_path)
    with log.step("split cost, all ranges in one process"):
        in_process = split.in_process(bin_dir, model_path, inv.n_layer, args.quick, args.threads)
    with log.step("split cost, one worker process per range"):
        worker = bin_dir / "layer-worker"
        workers = split.workers(worker, model_path, inv.n_layer, args.quick, args.threads, args.ctx)
    with log.step("memory per range"):
        rows = memory.measure(worker, model_path, inv, args.quick, args.ctx)
    with log.step("bundle codec"):
        speeds = codec.measure(bin_dir, args.quick)
    with log.step("build timing"):
        timing = buildtime.measure(ctx, args.quick)
    fuzzed = None
    if args.fuzz:
        with log.step("fuzz the worker's decoders"):
            vendor = Path(built.manifest.build.source_dir) / "vendor"
            fuzzed = fuzz.run(ctx, vendor, args.fuzz_runs, args.fuzz_seconds)
    extra = (
        beside_upstream(ctx, bin_dir / "layer-worker", [model_path, *other_paths], inv.n_layer, args)
        if args.rpc
        else None
    )
    others = {
        lock.name: dataclasses.replace(
            model_bench(
                bin_dir,
                lock.name,
                path,
                args.quick,
                args.threads,
                args.ctx,
                out_dir / f"memory-{lock.name}.png",
            ),
            upstream_comparison=extra.others[i] if extra else None,
        )
        for i, (lock, path) in enumerate(zip(models[1:], other_paths, strict=True))
    }
    png = memory.chart(rows, out_dir / "memory.png", model_path.stem, args.ctx)
    result = BenchResult(
        format=BENCH_FORMAT,
        machine=machine(),
        quick=args.quick,
        inputs_digest=built.manifest.inputs_digest,
        model=BenchModel(file=model_path.name, n_layer=inv.n_layer, bytes=inv.n_bytes, name=models[0].name),
        hop_bytes_per_token=inv.n_embd * 4,
        in_process=in_process,
        workers=workers,
        memory=rows,
        codec=speeds,
        build=timing,
        fuzz=fuzzed,
        chart=str(png) if png else None,
        models=others,
        upstream_comparison=extra.comparison if extra else None,
        rpc=extra.rpc if extra else None,
        harness=ran,
    )
    data = (json.dumps(result.to_json(), indent=2) + "\n").encode()
    write_atomic(out_dir / "bench.json", data)
    write_atomic(out_dir / "figures.md", figures_md(result).encode())
    if args.json:
        sys.stdout.write(data.decode())
    else:
        print(report_text(result))
    log.info(f"results: {out_dir / 'bench.json'}" + (f", chart: {png}" if png else ""))
    crashed(fuzzed)
    diverged(result)
    return EXIT_OK


def diverged(result: BenchResult) -> None:
    """BenchError (exit 1) when a split of a model decoded other tokens than the whole model (or did not
    say): its speed is not that of the same computation. Raised after bench.json is written."""
    problems = [
        p
        for label, m in result.all_models().items()
        for p in split.token_problems(label, m.in_process, m.workers)
    ]
    if problems:
        raise BenchError(
            f"{len(problems)} split(s) decoded other tokens than the whole model: {problems[0]}",
            detail="\n".join(problems),
            hint="run `dgr verify --only boundary,kv`: a split that changes the tokens is a bug",
        )


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
            reps=3,
        )
    return BesideUpstream(comparison=comparisons[0], others=tuple(comparisons[1:]), rpc=Rpc.from_json(beside))


def upstream_lines(r: BenchResult) -> list[str]:
    """The `--rpc` figures as text lines (none without them)."""
    if r.rpc is None:
        return []
    lines = [""]
    for c in (m.upstream_comparison for m in r.all_models().values()):
        if c is None:
            continue
        kl = c.kl
        lines.append(
            f"{c.model_file}: llama-perplexity ({c.text}) unpatched {c.baseline.final:.4f}, patched "
            f"{c.patched.final:.4f}; KL divergence of the patched build {kl.patched.mean:.6f} "
            f"(max {kl.patched.max:.6f}, same top {kl.patched.same_top_percent:.3f} %), of the unpatched "
            f"against its own logits {kl.reference.mean:.6f} (max {kl.reference.max:.6f}): "
            f"{'met' if kl.met else 'MISSED'}"
        )
        lines.append(
            f"  llama-bench patched / unpatched, median (min-max, best) of {c.rounds} paired rounds: "
            + ", ".join(f"{b.test} {b.paired.text()}" for b in c.bench)
            + f"; target {c.target}: {'met' if c.met else 'MISSED'}"
        )
    lines.append("")
    header = "engine | processes | start | bytes before 1st token | TTFT s | prefill t/s | decode t/s | same"
    return lines + table(
        header,
        [
            f"{row.engine} | {row.processes} | {row.start} | "
            f"{row.wire_bytes_before_first_token / 2**20:.1f} MiB | {row.ttft_s:.2f} | "
            f"{row.prefill_tps:.1f} | {row.decode_tps:.1f} | {row.same_output} "
            f"({row.same_output_reps} of {r.rpc.reps or '?'})"
            for row in r.rpc.rows
        ],
    )


def table(header: str, rows: list[str]) -> list[str]:
    """A Markdown table: `header` and each row are cells joined by " | "."""
    rule = " | ".join("---" for _ in header.split(" | "))
    return [f"| {line} |" for line in (header, rule, *rows)]


def model_lines(m: ModelBench) -> list[str]:
    """The split cost and memory tables of one model."""
    lines = [
        "split cost: split tokens/s / whole tokens/s, the median of the paired rounds "
        "(min-max of the rounds, best-of)"
    ]
    lines.append("| shards | in-process prefill | in-process decode | workers prefill | workers decode |")
    lines.append("| --- | --- | --- | --- | --- |")
    for ip, wk in zip(m.in_process, m.workers, strict=True):
        pf = ", ".join(f"{p.tokens}: {p.ratio.text()}" for p in ip.prefill)
        wpf = ", ".join(f"{p.tokens}: {p.ratio.text()}" for p in wk.prefill)
        lines.append(f"| {ip.shards} | {pf} | {ip.decode.ratio.text()} | {wpf} | {wk.decode.ratio.text()} |")
    lines.append("")
    lines.append("worker processes, ms per decoded token (whole | each shard | a request doing no work)")
    for wk in m.workers:
        d = wk.decode
        if d.whole_step_ms is not None and d.round_trip_ms is not None:
            shards = " + ".join(f"{ms:.2f}" for ms in d.shard_step_ms)
            lines.append(f"- {wk.shards}: {d.whole_step_ms:.2f} | {shards} | {d.round_trip_ms:.3f}")
    lines.append("")
    lines.append("memory per range (mmap off, after the same prefill in every range)")
    return lines + table(
        "layers | owned | model bytes | KV bytes | peak RSS | RSS fraction",
        [
            f"[{row.layers[0]}, {row.layers[1]}) | {row.owned_fraction:.2f} | "
            f"{row.model_bytes / 2**20:.1f} MiB | {row.kv_bytes / 2**20:.1f} MiB | "
            f"{row.peak_rss / 2**20:.1f} MiB | {row.peak_rss_fraction:.2f}"
            for row in m.memory
        ],
    )


def target_lines(r: BenchResult) -> list[str]:
    """Every target over every model: the worst median ratio of each model, `met` only when all meet it."""
    s = r.summary()
    lines = ["targets (the worst median ratio of each model):"]
    for target, goal in TARGETS.items():
        worst = s.worst.get(target, {})
        each = ", ".join(f"{name} {v:.3f}" for name, v in worst.items()) or "not measured"
        lines.append(f"- {target} >= {goal}: {'met' if s.met[target] else 'MISSED'} ({each})")
    return lines


def fuzz_text(f: Mapping[str, Any]) -> str:
    if not f.get("ran"):
        return f"fuzz: not run ({f.get('reason', '')})"
    return (
        f"fuzz: {f.get('executions', 0)} executions in {f.get('seconds', 0)} s "
        f"({f.get('exec_per_s', 0)}/s), {f.get('crashes', 0)} crashes"
    )


def report_text(r: BenchResult) -> str:
    m = r.machine
    lines = [f"dgr bench {m.date} on {m.cpu} ({m.cores} cores){' (quick)' if r.quick else ''}"]
    for name, one in r.all_models().items():
        lines += ["", f"## {name}: {one.model.file}, {one.model.n_layer} layers", ""]
        lines += model_lines(one)
    cpp, py = r.codec["cpp"], r.codec["python"]
    lines.append("")
    lines.append(
        f"codec / memcpy: C++ {cpp.ratio_to_memcpy.text()} (best {cpp.codec_gbps:.2f} vs "
        f"{cpp.memcpy_gbps:.2f} GB/s); Python {py.ratio_to_memcpy.text()} (best {py.codec_gbps:.2f} vs "
        f"{py.memcpy_gbps:.2f} GB/s)"
    )
    b = {k: v for k, v in r.build.items() if isinstance(v, (int, float))}
    line = f"build: no-op dgr {b['noop_dgr_s']:.2f} s vs ninja {b['noop_ninja_s']:.2f} s"
    if "edit_dgr_s" in b:
        line += (
            f"; edited patch dgr {b['edit_dgr_s']:.0f} s vs ninja {b['edit_ninja_s']:.0f} s "
            f"({b['edit_ratio']:.2f}x)"
        )
    if "cold_dgr_s" in b:
        cold = f"{b['cold_dgr_s']:.0f} s vs plain {b['cold_plain_s']:.0f} s ({b['cold_ratio']:.2f}x)"
        line += f"; cold dgr {cold}"
    lines.append(line)
    if r.fuzz is not None:
        lines.append(fuzz_text(r.fuzz))
    lines += upstream_lines(r)
    lines.append("")
    lines += target_lines(r)
    return "\n".join(lines)


def figures_md(r: BenchResult) -> str:
    """`figures.md` beside bench.json: the report of the result, the one source of the bench figures the
    docs state (docs/bench/figures.md is the committed one; a test keeps it equal to the committed
    docs/bench/bench.json's)."""
    return (
        "# The figures of the last `dgr bench`\n\n"
        "Written by `dgr bench` from the `bench.json` beside it (every ratio: the median of paired rounds\n"
        "in alternating order, the spread min-max of the rounds, and the best-of); not edited by hand.\n\n"
        + report_text(r)
        + "\n"
    )
