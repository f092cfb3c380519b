"""`dgr bench [--json] [--quick] [--fuzz] [--out DIR]`: runs the measurements of dgr.verify.bench and the
build timing (dgr.buildtime), writes bench.json and memory.png, prints the report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dgr import build, buildtime, locks, log, model
from dgr.errors import EXIT_OK, DgrError
from dgr.fs import write_atomic
from dgr.paths import Context
from dgr.verify import inventory
from dgr.verify.bench import BENCH_FORMAT, codec, fuzz, machine, memory, split, summarize


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    result: dict[str, Any] = {"format": BENCH_FORMAT, "machine": machine(), "quick": args.quick}
    built = build.run(ctx, build.Request())
    bin_dir = built.path / "bin"
    model_path = model.fetch(ctx.cache, locks.load_model(ctx.repo.locks_dir))
    inv = inventory.read(model_path)
    result["inputs_digest"] = built.manifest["build"]["inputs_digest"]
    result["model"] = {"file": model_path.name, "n_layer": inv.n_layer, "bytes": inv.n_bytes}
    result["hop_bytes_per_token"] = inv.n_embd * 4
    with log.step("split cost, all ranges in one process"):
        result["in_process"] = split.in_process(bin_dir, model_path, inv.n_layer, args.quick, args.threads)
    with log.step("split cost, one worker process per range"):
        result["workers"] = split.workers(
            bin_dir / "layer-worker", model_path, inv.n_layer, args.quick, args.threads
        )
    with log.step("memory per range"):
        result["memory"] = memory.measure(bin_dir / "layer-worker", model_path, inv, args.quick)
    with log.step("bundle codec"):
        result["codec"] = codec.measure(bin_dir, args.quick)
    with log.step("build timing"):
        result["build"] = buildtime.measure(ctx, args.quick)
    if args.fuzz:
        with log.step("fuzz the worker's decoders"):
            result["fuzz"] = fuzz.run(ctx, Path(built.manifest["build"]["source_dir"]), args.fuzz_runs)
    result["summary"] = summarize(result)

    out_dir = Path(args.out) if args.out else ctx.cache.root / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    png = memory.chart(result["memory"], out_dir / "memory.png")
    result["chart"] = str(png) if png else None
    data = (json.dumps(result, indent=2) + "\n").encode()
    write_atomic(out_dir / "bench.json", data)
    if args.json:
        sys.stdout.write(data.decode())
    else:
        print(report_text(result))
    log.info(f"results: {out_dir / 'bench.json'}" + (f", chart: {png}" if png else ""))
    fuzz_failed = args.fuzz and result["fuzz"].get("crashes", 0) > 0
    if fuzz_failed:
        raise DgrError("the fuzzer found a crash", detail=result["fuzz"]["tail"])
    return EXIT_OK


def report_text(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [
        f"dgr bench {m['date']} on {m['cpu']} ({m['cores']} cores){' (quick)' if r['quick'] else ''}",
        "",
    ]
    lines.append("split cost (ratio = split tokens/s / whole tokens/s)")
    lines.append("| shards | in-process prefill | in-process decode | workers prefill | workers decode |")
    lines.append("| --- | --- | --- | --- | --- |")
    for ip, wk in zip(r["in_process"], r["workers"], strict=True):
        pf = ", ".join(f"{p['tokens']}: {p['ratio']:.3f}" for p in ip["prefill"])
        wpf = ", ".join(f"{p['tokens']}: {p['ratio']:.3f}" for p in wk["prefill"])
        lines.append(
            f"| {ip['shards']} | {pf} | {ip['decode']['ratio']:.3f} | {wpf} | {wk['decode']['ratio']:.3f} |"
        )
    lines.append("")
    lines.append("worker processes, ms per decoded token (whole | each shard | a request doing no work)")
    for wk in r["workers"]:
        d = wk["decode"]
        if "shard_step_ms" in d:
            shards = " + ".join(f"{ms:.2f}" for ms in d["shard_step_ms"])
            lines.append(f"- {wk['shards']}: {d['whole_step_ms']:.2f} | {shards} | {d['round_trip_ms']:.3f}")
    lines.append("")
    lines.append("memory per range (mmap off)")
    lines.append("| layers | owned | model bytes | KV bytes | peak RSS | RSS fraction |")
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for row in r["memory"]:
        lines.append(
            f"| [{row['layers'][0]}, {row['layers'][1]}) | {row['owned_fraction']:.2f} | "
            f"{row['model_bytes'] / 2**20:.1f} MiB | {row['kv_bytes'] / 2**20:.1f} MiB | "
            f"{row['peak_rss'] / 2**20:.1f} MiB | {row['peak_rss_fraction']:.2f} |"
        )
    c = r["codec"]
    lines.append("")
    lines.append(
        f"codec: C++ {c['cpp']['codec_gbps']:.2f} GB/s vs memcpy {c['cpp']['memcpy_gbps']:.2f} "
        f"({c['cpp']['ratio_to_memcpy']:.2f}x); Python {c['python']['codec_gbps']:.2f} GB/s vs "
        f"{c['python']['memcpy_gbps']:.2f} ({c['python']['ratio_to_memcpy']:.2f}x)"
    )
    b = r["build"]
    lines.append(
        f"build: no-op dgr {b['noop_dgr_s']:.2f} s vs ninja {b['noop_ninja_s']:.2f} s"
        + (
            f"; edited patch dgr {b['edit_dgr_s']:.0f} s vs ninja {b['edit_ninja_s']:.0f} s "
            f"({b['edit_ratio']:.2f}x)"
            if "edit_dgr_s" in b
            else ""
        )
        + (
            f"; cold dgr {b['cold_dgr_s']:.0f} s vs plain {b['cold_plain_s']:.0f} s ({b['cold_ratio']:.2f}x)"
            if "cold_dgr_s" in b
            else ""
        )
    )
    if "fuzz" in r:
        f = r["fuzz"]
        lines.append(
            f"fuzz: {f.get('executions', 0)} executions, {f.get('crashes', 0)} crashes"
            if f["ran"]
            else f"fuzz: not run ({f['reason']})"
        )
    s = r["summary"]
    lines.append("")
    lines.append("targets: " + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in s["met"].items()))
    return "\n".join(lines)
