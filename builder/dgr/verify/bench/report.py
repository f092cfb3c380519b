"""What `dgr bench` writes and prints of a result (dgr.contracts.bench): `bench.json`, the text report and
`figures.md`, the report beside bench.json that is the one source of the bench figures the docs state.

Every label says what its figure is: a ratio is the median of paired rounds (beside it the spread min-max of
the rounds and the best-of), a build time is one run of each side, an RPC row is the repetition fastest to
the first token, and ranges against RPC are paired alternating rounds."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dgr.contracts.bench import TARGETS, BenchResult, ModelBench, PartsFigures


def bench_json(r: BenchResult) -> str:
    """`bench.json`: the result and its summary, indented, with a final newline."""
    return json.dumps(r.to_json(), indent=2) + "\n"


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
    lines.append(
        "| shards | in-process prefill | in-process decode | workers prefill | workers decode | "
        "workers decode, forwarded | forwarded / relayed |"
    )
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for ip, wk in zip(m.in_process, m.workers, strict=True):
        pf = ", ".join(f"{p.tokens}: {p.ratio.text()}" for p in ip.prefill)
        wpf = ", ".join(f"{p.tokens}: {p.ratio.text()}" for p in wk.prefill)
        fwd = wk.forwarded.ratio.text() if wk.forwarded else "-"
        gain = wk.forwarded_gain.text() if wk.forwarded_gain else "-"
        cells = (str(ip.shards), pf, ip.decode.ratio.text(), wpf, wk.decode.ratio.text(), fwd, gain)
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("worker processes, ms per decoded token (whole | each shard | a request doing no work)")
    for wk in m.workers:
        d = wk.decode
        if d.whole_step_ms is not None and d.round_trip_ms is not None:
            shards = " + ".join(f"{ms:.2f}" for ms in d.shard_step_ms)
            lines.append(f"- {wk.shards}: {d.whole_step_ms:.2f} | {shards} | {d.round_trip_ms:.3f}")
    lines.extend(parts_lines(m))
    lines.extend(batched_lines(m))
    lines.append("")
    lines.append("memory per range (mmap off, after the same prefill in every range)")
    lines += table(
        "layers | owned | model bytes | KV bytes | peak RSS | RSS fraction",
        [
            f"[{row.layers[0]}, {row.layers[1]}) | {row.owned_fraction:.2f} | "
            f"{row.model_bytes / 2**20:.1f} MiB | {row.kv_bytes / 2**20:.1f} MiB | "
            f"{row.peak_rss / 2**20:.1f} MiB | {row.peak_rss_fraction:.2f}"
            for row in m.memory
        ],
    )
    return lines + from_parts_lines(m.parts)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def from_parts_lines(p: PartsFigures) -> list[str]:
    """Each range of 2, 3 and 5 ranges from its parts against from the whole file: the bytes a machine
    stores, the load time (paired rounds), the peak RSS of its worker with mmap on and off."""
    rows = [
        f"{s.shards} | [{r.layers[0]}, {r.layers[1]}) | {r.files} of {p.files} | {_mib(r.part_bytes)} | "
        f"{r.part_bytes / p.whole_bytes:.2f} | {r.load_whole_s:.3f} s | {r.load_parts_s:.3f} s | "
        f"{r.load.text()} | {_mib(r.peak_rss_whole_mmap)} | {_mib(r.peak_rss_parts_mmap)} | "
        f"{_mib(r.peak_rss_whole_no_mmap)} | {_mib(r.peak_rss_parts_no_mmap)}"
        for s in p.splits
        for r in s.ranges
    ]
    return [
        "",
        f"each range from its parts (only the files it needs) against from the whole file "
        f"({_mib(p.whole_bytes)}, what every machine stores without the parts): stored, its files' bytes and "
        f"their fraction of the whole file; load, worker start to model loaded (mmap on), the fastest of "
        f"{p.rounds} paired round{'s' if p.rounds != 1 else ''} of each, and loads/s from the parts / from "
        f"the whole file, the median (min-max, best-of); peak RSS of the range's worker after a "
        f"{p.prefill_tokens}-token prefill (n_ctx {p.n_ctx}), mmap on and off",
        *table(
            "shards | layers | files | stored | of the whole | load whole | load parts | parts / whole | "
            "RSS mmap whole | RSS mmap parts | RSS no mmap whole | RSS no mmap parts",
            rows,
        ),
    ]


def batched_lines(m: ModelBench) -> list[str]:
    """Several sessions in one batch per step through the ranges, against the whole model with the same
    sessions; none when the result has no such figures."""
    if not m.batched:
        return []
    return [
        "",
        "sessions decoding together (one step of each per request), one worker per range: tokens/s of all "
        "sessions, split / whole with the same sessions, the median of the paired rounds",
        *table(
            "shards | sessions | whole tokens/s | split tokens/s | ratio | same tokens | "
            "whole batched = alone | forwarded tokens/s | forwarded ratio | forwarded / relayed",
            [
                f"{b.shards} | {b.sessions} | {b.speed.whole_tps:.1f} | {b.speed.split_tps:.1f} | "
                f"{b.speed.ratio.text()} | {b.speed.same_tokens} | {b.same_as_alone} | "
                + (
                    f"{b.forwarded.split_tps:.1f} | {b.forwarded.ratio.text()} | "
                    + (b.forwarded_gain.text() if b.forwarded_gain else "-")
                    if b.forwarded
                    else "- | - | -"
                )
                for b in m.batched
            ],
        ),
    ]


PARTS_HEADER = (
    "shards | stage | step | wait | read | parse | process | output | write | reused | pipes + supervisor"
)


def parts_lines(m: ModelBench) -> list[str]:
    """Where a decoded token's time goes in each worker (the fastest round of each side), beside the whole
    model's worker in the same rounds; none when the result has no such figures."""
    rows = []
    for wk in m.workers:
        d = wk.decode
        if d.whole_parts is None:
            continue
        for stage, p in [("whole", d.whole_parts), *((f"{i + 1}", p) for i, p in enumerate(d.shard_parts))]:
            cells = (p.step_ms, p.wait_ms, p.read_ms, p.parse_ms, p.process_ms, p.output_ms, p.write_ms)
            rows.append(
                f"{wk.shards} | {stage} | "
                + " | ".join(f"{ms:.3f}" for ms in cells)
                + f" | {p.graphs_reused:.2f} | {p.transport_ms:.3f}"
            )
    if not rows:
        return []
    return [
        "",
        "where a decoded token's time goes, ms per token in each side's fastest round: the supervisor's "
        "request (step), and the worker's own account of it (wait: the other stages' turn; process: "
        "llama_process, the graph built or reused and computed; reused: the fraction of requests that "
        "reused the graph); the rest of the step is the pipes (the reply written and read) and the "
        "supervisor; a worker's write can end after the supervisor has read the reply",
        *table(PARTS_HEADER, rows),
    ]


def build_line(build: Mapping[str, Any]) -> str:
    """The build timing: every figure is one run of each side (no rounds, no spread), and says so."""
    b = {k: v for k, v in build.items() if isinstance(v, (int, float))}
    line = f"build, 1 run each: no-op dgr {b['noop_dgr_s']:.2f} s vs ninja {b['noop_ninja_s']:.2f} s"
    if "edit_dgr_s" in b:
        line += (
            f"; edited patch dgr {b['edit_dgr_s']:.0f} s vs ninja {b['edit_ninja_s']:.0f} s "
            f"({b['edit_ratio']:.2f}x)"
        )
    if "cold_dgr_s" in b:
        cold = f"{b['cold_dgr_s']:.0f} s vs plain {b['cold_plain_s']:.0f} s ({b['cold_ratio']:.2f}x)"
        line += f"; cold dgr {cold}"
    return line


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
    reps = f"{r.rpc.reps} repetitions" if r.rpc.reps else "the repetitions"
    lines += [
        "",
        f"the RPC backend beside layer ranges, each row the one of {reps} fastest to the first token",
    ]
    header = "engine | processes | start | bytes before 1st token | TTFT s | prefill t/s | decode t/s | same"
    if r.rpc.paired:
        n = len(r.rpc.paired[0].decode.rounds)
        lines.append(
            f"layer ranges / RPC (later start), median (min-max, best) of {n} paired alternating rounds:"
        )
        lines += [
            f"  {p.processes} processes: prefill {p.prefill.text()}, decode {p.decode.text()}"
            for p in r.rpc.paired
        ]
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
    """What `dgr bench` prints: every model's tables, the codec, the build, the fuzzing, the comparisons
    with upstream and the targets."""
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
    lines.append(build_line(r.build))
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
