"""`dgr bench [--json] [--quick] [--fuzz]`: what a layer split costs, measured side by side in one run.

- split: prefill (64 and 512 tokens) and decode tokens/s of the whole model vs 2, 3 and 5 ranges, (a) all
  ranges in one process (`layer-bench split`), (b) one worker process per range over pipes; ratios to whole;
- memory: model bytes, KV bytes and peak RSS per range vs its owned fraction, and a PNG chart;
- codec: bundle encode + decode GB/s vs memcpy of the same bytes (C++ worker codec and Python codec);
- build: cold `dgr build`, no-op and a rebuild after editing one patch, each beside a plain cmake + ninja
  build of the same targets (skipped by --quick);
- fuzz (--fuzz): the worker's decoders under libFuzzer for at least 1,000,000 executions.

Every ratio is taken from measurements interleaved in the same run (whole, split, whole, split, ...), best of
the repetitions, so a noisy machine affects both sides alike. The JSON keys are documented in README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from builder import build, gitops, locks, log, model, proc
from builder.cmake import Toolchain
from builder.errors import BuildError, DgrError
from builder.locks import write_atomic
from builder.paths import Context
from verify import bundle, inventory, prompts
from verify.client import OMP_ENV, Worker
from verify.pipeline import Pipeline

BENCH_FORMAT = 1
SPLITS = (2, 3, 5)
TARGETS = {"in_process_prefill": 0.97, "in_process_decode": 0.97, "workers_decode": 0.90, "codec": 0.5}


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def _run_json(cmd: list[str | Path], env: dict[str, str]) -> Any:
    result = proc.run(cmd, env=env, error=BuildError, what=f"{Path(str(cmd[0])).name} failed")
    return json.loads(result.stdout)


def in_process(
    bin_dir: Path, model_path: Path, n_layer: int, quick: bool, threads: int
) -> list[dict[str, Any]]:
    """(a) all ranges in one process."""
    out = []
    env = {**OMP_ENV, **os.environ}
    for k in SPLITS:
        split = ",".join(f"{b}:{e}" for b, e in inventory.split(n_layer, k))
        res = _run_json(
            [
                bin_dir / "layer-bench",
                "split",
                "--model",
                model_path,
                "--split",
                split,
                "--threads",
                str(threads),
                "--prefill",
                "64" if quick else "64,512",
                "--decode",
                "8" if quick else "32",
                "--reps",
                "1" if quick else "5",
            ],
            env,
        )
        res["shards"] = k
        out.append(res)
    return out


def _time(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _prefill_s(pipe: Pipeline, tokens: list[int], session: str) -> float:
    start = time.perf_counter()
    pipe.step(session, 1, 0, tokens)
    return time.perf_counter() - start


def _decode_s(pipe: Pipeline, prompt: list[int], n: int, session: str) -> tuple[float, list[int]]:
    """Seconds for n greedy single-token steps after the prompt, and the tokens."""
    tokens = [pipe.step(session, 1, 0, prompt).argmax[-1]]
    start = time.perf_counter()
    for j in range(n):
        tokens.append(pipe.step(session, 1, len(prompt) + j, [tokens[-1]]).argmax[-1])
    return time.perf_counter() - start, tokens


def workers(worker: Path, model_path: Path, n_layer: int, quick: bool, threads: int) -> list[dict[str, Any]]:
    """(b) one worker process per range, bundles over pipes."""
    reps = 1 if quick else 5
    n_decode = 8 if quick else 32
    prefills = (64,) if quick else (64, 512)
    out = []
    # one session at a time, with the whole context: room for the 512-token prefill
    opts = {"threads": threads, "n_ctx": 1024, "max_sessions": 1}
    with Pipeline(worker, model_path, [(0, n_layer)], **opts) as whole:
        text_tokens = whole.tokenize(prompts.LONG * 8)
        for k in SPLITS:
            with Pipeline(worker, model_path, inventory.split(n_layer, k), **opts) as split:
                row: dict[str, Any] = {"shards": k, "prefill": []}
                for n in prefills:
                    tokens = (text_tokens * (n // len(text_tokens) + 1))[:n]
                    best = [float("inf"), float("inf")]
                    for r in range(reps):
                        for i, pipe in enumerate((whole, split)):
                            best[i] = min(best[i], _prefill_s(pipe, tokens, f"p{n}-{r}"))
                    row["prefill"].append(
                        {
                            "tokens": n,
                            "whole_tps": n / best[0],
                            "split_tps": n / best[1],
                            "ratio": best[0] / best[1],
                        }
                    )
                best = [float("inf"), float("inf")]
                same = True
                for r in range(reps):
                    runs = [_decode_s(pipe, text_tokens[:16], n_decode, f"d{r}") for pipe in (whole, split)]
                    best = [min(b, t) for b, (t, _) in zip(best, runs, strict=True)]
                    same = same and runs[0][1] == runs[1][1]
                row["decode"] = {
                    "tokens": n_decode,
                    "whole_tps": n_decode / best[0],
                    "split_tps": n_decode / best[1],
                    "ratio": best[0] / best[1],
                    "same_tokens": same,
                }
                out.append(row)
    return out


def memory(worker: Path, model_path: Path, inv: inventory.Inventory, quick: bool) -> list[dict[str, Any]]:
    """Model bytes, KV bytes and peak RSS (mmap off, fresh process, after a 64-token prefill) per range."""
    n = inv.n_layer
    ranges = [(0, n), (10, 11), (10, 13), (10, 15), (10, 20), (5, 25), (0, 10), (20, n)]
    if quick:
        ranges = [(0, n), (10, 20)]
    out = []
    for begin, end in ranges:
        with Worker(worker, f"mem[{begin},{end})") as w:
            rep = w.request(
                "load",
                model=str(model_path),
                layer_begin=begin,
                layer_end=end,
                mmap=False,
                context=True,
                n_ctx=1024,
                max_sessions=1,
            ).header
            tokens = w.request("tokenize", text=prompts.LONG).header["tokens"][:64] if begin == 0 else None
            if tokens is not None:
                w.request("decode", tokens=tokens, session="m", epoch=1, pos=0, n_tokens=len(tokens))
            mem = w.request("memory").header
        owned = inv.expected(begin, end)
        out.append(
            {
                "layers": [begin, end],
                "owned_layers": end - begin,
                "owned_fraction": (end - begin) / n,
                "owned_tensor_bytes": inv.bytes_of(owned),
                "model_bytes": rep["buffer_size"],
                "model_fraction": rep["buffer_size"] / inv.n_bytes,
                "kv_bytes": mem["kv_bytes"],
                "peak_rss": mem["peak_rss"],
            }
        )
    whole = out[0]
    for row in out:
        row["kv_fraction"] = row["kv_bytes"] / whole["kv_bytes"]
        row["peak_rss_fraction"] = row["peak_rss"] / whole["peak_rss"]
    return out


def chart(rows: list[dict[str, Any]], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warn("matplotlib is not installed: no chart (pip install -e '.[bench]')")
        return None
    middle = sorted(
        (r for r in rows if (r["layers"][0] > 0 and r["layers"][1] < 30) or r["layers"] == [0, 30]),
        key=lambda r: r["owned_layers"],
    )
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    x = [r["owned_layers"] for r in middle]
    for key, label in (("model_bytes", "model buffers"), ("kv_bytes", "KV cache"), ("peak_rss", "peak RSS")):
        ax.plot(x, [r[key] / 2**20 for r in middle], marker="o", label=label)
    ax.set_xlabel("owned layers (ranges without the embeddings; 30 = whole model)")
    ax.set_ylabel("MiB")
    ax.set_title("SmolLM2-135M Q4_1: memory of a layer range (mmap off, n_ctx 1024)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(
        path,
        metadata={"Software": None, "CreationDate": None} if path.suffix == ".pdf" else {"Software": None},
    )
    plt.close(fig)
    return path


def codec(bin_dir: Path, quick: bool) -> dict[str, Any]:
    """Encode + decode of a 512-token residual bundle vs memcpy of the same bytes, C++ and Python."""
    reps = 20 if quick else 200
    cpp = _run_json(
        [bin_dir / "layer-bench", "codec", "--tokens", "512", "--n-embd", "576", "--reps", str(reps)], {}
    )
    residual = np.random.default_rng(0).standard_normal((512, 576)).astype(np.float32)
    meta = {
        "model": "0" * 16,
        "n_layer": "30",
        "layer_begin": "0",
        "layer_end": "10",
        "session": "b",
        "epoch": "1",
        "pos": "0",
        "n_tokens": "512",
    }
    best_codec = best_copy = float("inf")
    sink = np.empty_like(residual)
    for _ in range(reps):
        t0 = time.perf_counter()
        data = bundle.encode(meta, {"residual": ("F32", residual)})
        np.copyto(sink, bundle.decode(data).tensor("residual"))
        t1 = time.perf_counter()
        staged = residual.copy()
        np.copyto(sink, staged)
        t2 = time.perf_counter()
        best_codec, best_copy = min(best_codec, t1 - t0), min(best_copy, t2 - t1)
    gb = residual.nbytes / 1e9
    py = {
        "bytes": residual.nbytes,
        "reps": reps,
        "codec_gbps": gb / best_codec,
        "memcpy_gbps": gb / best_copy,
        "ratio_to_memcpy": best_copy / best_codec,
        "zero_copy_decode": True,
    }
    return {"cpp": cpp, "python": py}


def fuzz(ctx: Context, source_dir: Path, runs: int) -> dict[str, Any]:
    """Build the libFuzzer harness of the worker's decoders with clang and run it."""
    clang = shutil.which("clang++") or shutil.which("clang++-14")
    if clang is None:
        return {"ran": False, "reason": "clang++ not found (apt-get install clang-14 libclang-rt-14-dev)"}
    work = ctx.cache.root / "fuzz"
    work.mkdir(parents=True, exist_ok=True)
    worker_dir = ctx.repo.worker_dir
    binary = work / "fuzz_decoders"
    proc.run(
        [
            clang,
            "-std=c++17",
            "-O1",
            "-g",
            "-fsanitize=fuzzer,address,undefined",
            "-fno-sanitize-recover=undefined",
            f"-I{worker_dir}",
            f"-I{source_dir / 'vendor'}",
            worker_dir / "fuzz_decoders.cpp",
            worker_dir / "bundle.cpp",
            worker_dir / "frame.cpp",
            "-o",
            binary,
        ],
        error=BuildError,
        what="cannot build the fuzz harness",
    )
    corpus = work / "corpus"
    corpus.mkdir(exist_ok=True)
    sample = bundle.encode(
        {"model": "0" * 16, "n_tokens": "2", "session": "s", "epoch": "1", "pos": "0"},
        {"residual": ("F32", np.ones((2, 4), np.float32))},
    )
    from verify import frames

    (corpus / "seed-bundle").write_bytes(sample)
    (corpus / "seed-frames").write_bytes(frames.encode_message({"id": 1, "op": "decode"}, sample, 64))
    start = time.monotonic()
    result = proc.run(
        [binary, f"-runs={runs}", "-max_len=4096", "-timeout=10", "-print_final_stats=1", corpus],
        check=False,
        timeout=3600,
    )
    seconds = time.monotonic() - start
    stats = dict(re.findall(r"^stat::(\w+):\s+(\d+)", result.stderr, re.M))
    crashed = result.returncode != 0
    return {
        "ran": True,
        "runs_requested": runs,
        "executions": int(stats.get("number_of_executed_units", 0)),
        "seconds": round(seconds, 1),
        "exec_per_s": int(stats.get("average_exec_per_sec", 0)),
        "crashes": int(crashed),
        "exit_code": result.returncode,
        "tail": result.stderr[-1500:] if crashed else "",
    }


def build_timing(ctx: Context, quick: bool) -> dict[str, Any]:
    """dgr build vs plain cmake + ninja of the same targets, in the same run."""
    out: dict[str, Any] = {}
    manifest = build.run(ctx, build.Request()).manifest
    env = {**os.environ, "DGR_REPO": str(ctx.repo.root), "DGR_CACHE_DIR": str(ctx.cache.root)}
    # the command as a user runs it: a new process that checks the digests and finds the build published
    out["noop_dgr_s"] = _time(lambda: proc.run([sys.executable, "-m", "builder.cli", "build"], env=env))
    build_dir = Path(manifest["build"]["build_dir"])
    toolchain = Toolchain.find(locks.load_toolchain(ctx.repo.locks_dir))
    targets = manifest["build"]["targets"]
    out["noop_ninja_s"] = _time(lambda: proc.run([toolchain.ninja, "-C", build_dir, *targets]))
    out["noop_ratio"] = out["noop_dgr_s"] / max(out["noop_ninja_s"], 1e-9)
    if quick:
        return out
    out.update(edit_rebuild(ctx, toolchain, build_dir, targets))
    # cold: dgr build --upstream-only in a fresh cache vs cmake + ninja of the same source and options
    with tempfile.TemporaryDirectory(prefix="dgr-bench-") as tmp:
        env = {**os.environ, "DGR_CACHE_DIR": str(Path(tmp) / "cache")}
        for name in ("downloads", "upstream"):
            src = ctx.cache.root / name
            if src.is_dir():
                shutil.copytree(src, Path(tmp) / "cache" / name, symlinks=True)
        start = time.perf_counter()
        proc.run(
            [sys.executable, "-m", "builder.cli", "build", "--upstream-only"],
            env=env,
            error=BuildError,
            what="cold dgr build failed",
            timeout=3600,
        )
        out["cold_dgr_s"] = time.perf_counter() - start
        baseline = json.loads(
            proc.run(
                [sys.executable, "-m", "builder.cli", "build", "--upstream-only", "--json"], env=env
            ).stdout
        )
        src = Path(baseline["build"]["source_dir"])
        plain = Path(tmp) / "plain"
        defs = [f"-D{k}={v}" for k, v in baseline["cmake_options"].items() if "{" not in v]
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
            [toolchain.ninja, "-C", plain, *baseline["build"]["targets"]],
            error=BuildError,
            what="plain ninja failed",
            timeout=3600,
        )
        out["cold_plain_s"] = time.perf_counter() - start
        out["cold_ratio"] = out["cold_dgr_s"] / out["cold_plain_s"]
        out["cold_note"] = (
            "dgr builds the worker too (a separate CMake project); the plain build does llama + ggml only"
        )
    return out


# an added line of boundary-tensors.patch (in src/llama-context.cpp) and the edit made to it
EDIT_PATCH = "boundary-tensors.patch"
EDIT_FROM = (
    "+    // a partial model without the output layer outputs the input of the layer that follows its range"
)
EDIT_TO = (
    "+    // a partial model without the output layer returns the input of the layer that follows its range"
)


def edit_rebuild(ctx: Context, toolchain: Toolchain, build_dir: Path, targets: list[str]) -> dict[str, Any]:
    """A comment edited in one patch: `dgr build` of a copy of the repository (sharing the cache, so the work
    tree is incremental), then plain ninja for the same change back in the same work tree."""
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
        patch.write_text(text.replace(EDIT_FROM, EDIT_TO, 1))
        env = {**os.environ, "DGR_REPO": str(copy), "DGR_CACHE_DIR": str(ctx.cache.root)}
        proc.run([sys.executable, "-m", "builder.cli", "manifest"], env=env)
        start = time.perf_counter()
        edited = proc.run(
            [sys.executable, "-m", "builder.cli", "build", "--json"],
            env=env,
            error=BuildError,
            what="dgr build of the edited series failed",
            timeout=3600,
        )
        dgr_s = time.perf_counter() - start
        # the edited series is not the user's: its published build goes again
        shutil.rmtree(json.loads(edited.stdout)["path"], ignore_errors=True)
    # the work tree now holds the edited file: put the original back and let ninja rebuild the same files
    manifest = build.run(ctx, build.Request()).manifest
    src = Path(manifest["build"]["source_dir"])
    gitops.git(["checkout", "--quiet", "--force", "--detach", manifest["patched"]["commit"]], cwd=src)
    start = time.perf_counter()
    proc.run(
        [toolchain.ninja, "-C", build_dir, *targets], error=BuildError, what="ninja failed", timeout=3600
    )
    ninja_s = time.perf_counter() - start
    return {
        "edit_dgr_s": dgr_s,
        "edit_ninja_s": ninja_s,
        "edit_ratio": dgr_s / ninja_s,
        "edit": f"{EDIT_PATCH}: one comment line of src/llama-context.cpp",
    }


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    ip = result.get("in_process", [])
    wk = result.get("workers", [])
    cc = result.get("codec", {}).get("cpp", {})
    s: dict[str, Any] = {}
    if ip:
        s["in_process_prefill_min_ratio"] = min(p["ratio"] for r in ip for p in r["prefill"])
        s["in_process_decode_min_ratio"] = min(r["decode"]["ratio"] for r in ip)
    if wk:
        s["workers_prefill_min_ratio"] = min(p["ratio"] for r in wk for p in r["prefill"])
        s["workers_decode_min_ratio"] = min(r["decode"]["ratio"] for r in wk)
    if cc:
        s["codec_ratio_to_memcpy"] = cc["ratio_to_memcpy"]
    s["targets"] = TARGETS
    s["met"] = {
        "in_process_prefill": s.get("in_process_prefill_min_ratio", 0) >= TARGETS["in_process_prefill"],
        "in_process_decode": s.get("in_process_decode_min_ratio", 0) >= TARGETS["in_process_decode"],
        "workers_decode": s.get("workers_decode_min_ratio", 0) >= TARGETS["workers_decode"],
        "codec": s.get("codec_ratio_to_memcpy", 0) >= TARGETS["codec"],
    }
    return s


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    result: dict[str, Any] = {"format": BENCH_FORMAT, "machine": machine(), "quick": args.quick}
    built = build.run(ctx, build.Request())
    bin_dir = built.path / "bin"
    model_path = model.fetch(ctx.cache, locks.load_model(ctx.repo.locks_dir))
    inv = inventory.read(model_path)
    result["inputs_digest"] = built.manifest["build"]["inputs_digest"]
    result["model"] = {"file": model_path.name, "n_layer": inv.n_layer, "bytes": inv.n_bytes}
    n_embd = 576
    result["hop_bytes_per_token"] = n_embd * 4
    with log.step("split cost, all ranges in one process"):
        result["in_process"] = in_process(bin_dir, model_path, inv.n_layer, args.quick, args.threads)
    with log.step("split cost, one worker process per range"):
        result["workers"] = workers(
            bin_dir / "layer-worker", model_path, inv.n_layer, args.quick, args.threads
        )
    with log.step("memory per range"):
        result["memory"] = memory(bin_dir / "layer-worker", model_path, inv, args.quick)
    with log.step("bundle codec"):
        result["codec"] = codec(bin_dir, args.quick)
    with log.step("build timing"):
        result["build"] = build_timing(ctx, args.quick)
    if args.fuzz:
        with log.step("fuzz the worker's decoders"):
            result["fuzz"] = fuzz(ctx, Path(built.manifest["build"]["source_dir"]), args.fuzz_runs)
    result["summary"] = summarize(result)

    out_dir = Path(args.out) if args.out else ctx.cache.root / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    png = chart(result["memory"], out_dir / "memory.png")
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
    return 0


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
