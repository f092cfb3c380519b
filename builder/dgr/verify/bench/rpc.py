"""Layer ranges beside upstream's own distributed engine, the RPC backend, on one machine over loopback
(`dgr bench --rpc`; the `rpc` key of bench.json, read back by dgr.export.measured):

(a) the whole model through 2 and 3 local `ggml-rpc-server` processes (`-c`: their local tensor cache, the
    best setup RPC has), driven by upstream's `llama-completion --rpc ... -ngl 99 -ts 1,1[,1]`: a first start
    with an empty tensor cache and a later start with the cache filled, reported separately;
(b) a chain of 2 and 3 processes that each load one range of layers from the local file (`layer-worker`,
    dgr.verify.wire.pipeline), each sending its hidden state on to the next itself (`forward`), the last one
    sampling (greedy: its argmax) where RPC's head does, and the whole model in one such process for
    reference.

Per run: the bytes that cross process boundaries before the first token and per decoded token, the peak RSS
of every process, the time to the first token (from starting the head, or the range processes, to the first
generated token), prefill and decode tokens/s, and whether the tokens are those of the whole model.

How bytes are counted: for RPC, the received bytes of the loopback interface (/proc/net/dev, `lo`), read
before the head starts, when its first token arrives and when it exits: every byte the head and the servers
exchange, TCP/IP headers included (and any other loopback traffic of the machine meanwhile). For the ranges,
the processes talk over pipes: the bytes of every request and reply frame (header and body) between the
supervising process and the ranges, counted as they are sent and read, and of every frame a range sends on to
the next one, counted by the range as it writes it (`timing`: `forwarded_bytes`).
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from dgr.contracts.paired import Paired
from dgr.core import proc
from dgr.errors import BenchError
from dgr.verify.bench import paired
from dgr.verify.bench.quality import tool_env
from dgr.verify.models import inventory, prompts
from dgr.verify.wire import frames
from dgr.verify.wire.client import OMP_ENV
from dgr.verify.wire.pipeline import Pipeline

SPLITS = (2, 3)
DECODE_TOKENS = 32
REPS = 7
"""Paired rounds of `dgr bench --rpc`: each starts every configuration anew (about 20 s a round here)."""
PORT_BASE = 50152
HEAD = "llama-completion"
SERVER = "ggml-rpc-server"
WIRE_METHOD = (
    "RPC: received bytes of the loopback interface (/proc/net/dev, lo), TCP/IP headers included, read before "
    "the head starts, at its first token and when it exits. Layer ranges: the bytes of every request and "
    "reply frame between the supervising process and the range processes, and of every frame a range sends "
    "on to the next one (pipes), prefixes, headers and bodies."
)


def loopback_bytes() -> int:
    """Bytes received on the loopback interface since boot."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[0])
    raise BenchError("/proc/net/dev has no loopback interface (lo)")


def peak_rss(pid: int) -> int:
    """VmHWM of a running process, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise BenchError(f"/proc/{pid}/status has no VmHWM")


def _frame_size(header: dict[str, Any], body: bytes) -> int:
    return frames.PREFIX.size + len(json.dumps(header, separators=(",", ":")).encode()) + len(body)


class CountingPipeline(Pipeline):
    """A Pipeline that counts the bytes of every frame it sends to and reads from its range processes
    (`wire_bytes`); `forwarded_bytes` asks the ranges for those of the frames they sent on to the next one."""

    wire_bytes = 0

    def _call(self, index: int, op: str, body: bytes = b"", **fields: Any) -> Any:
        reply = super()._call(index, op, body, **fields)
        self.wire_bytes += _frame_size({"id": 0, "op": op, **fields}, body)
        self.wire_bytes += _frame_size(reply.header, reply.body)
        return reply

    def _forwarded(
        self, op: str, release: str | None, **fields: Any
    ) -> tuple[Any, list[dict[str, Any]], float]:
        reply, trail, seconds = super()._forwarded(op, release, **fields)
        self.wire_bytes += _frame_size({"id": 0, "op": op, "forward": len(self.workers) - 1, **fields}, b"")
        self.wire_bytes += _frame_size(reply.header, reply.body)
        return reply, trail, seconds

    def forwarded_bytes(self) -> int:
        """The bytes of the frames the ranges sent on to the next one since the last call (their `timing`,
        which this resets)."""
        return sum(int(w.request("timing").header["forwarded_bytes"]) for w in self.workers)

    def __enter__(self) -> CountingPipeline:
        return self


def _ranges_run(
    worker: Path, model: Path, split: list[tuple[int, int]], prompt: list[int], n: int, threads: int
) -> tuple[dict[str, Any], list[int]]:
    start = time.perf_counter()
    with CountingPipeline(
        worker, model, split, threads=threads, n_ctx=512, max_sessions=1, forward=True
    ) as pipe:
        prefill_start = time.perf_counter()
        # the last range samples (greedy: the argmax), as the head does for RPC: no logits cross a process
        first = pipe.prefill("rpc-bench", 1, prompt, logits="argmax")
        ttft = time.perf_counter() - start
        prefill_s = time.perf_counter() - prefill_start
        supervised = pipe.wire_bytes
        before_first = supervised + pipe.forwarded_bytes()
        tokens = [first.argmax[-1]]
        decode_start = time.perf_counter()
        for j in range(n - 1):
            step = pipe.step("rpc-bench", 1, len(prompt) + j, [tokens[-1]], logits="argmax")
            tokens.append(step.argmax[-1])
        decode_s = time.perf_counter() - decode_start
        per_token = (pipe.wire_bytes - supervised + pipe.forwarded_bytes()) / max(n - 1, 1)
        rss = [int(w.request("memory").header["peak_rss"]) for w in pipe.workers]
    procs = [
        {"role": "range", "what": f"layers [{b}, {e})", "peak_rss": r}
        for (b, e), r in zip(split, rss, strict=True)
    ]
    row = {
        "engine": "ranges" if len(split) > 1 else "whole",
        "processes": len(split),
        "start": "cold",
        "wire_bytes_before_first_token": before_first,
        "wire_bytes_per_token": per_token,
        "ttft_s": ttft,
        "prefill_tps": len(prompt) / prefill_s,
        "decode_tps": (n - 1) / decode_s,
        "procs": procs,
    }
    return row, tokens


def _wait_listening(port: int, server: subprocess.Popen[bytes], deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if server.poll() is not None:
            raise BenchError(f"{SERVER} on port {port} exited with {server.returncode} before it listened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise BenchError(f"{SERVER} on port {port} did not listen within {deadline_s:.0f} s")


def _perf(stderr: str, what: str) -> float:
    """tokens/s of llama_perf's `prompt eval time` or `eval time` line."""
    line = re.compile(rf":\s+{what} time =.*\(.*ms per (?:token|run),\s*([0-9.]+) tokens per second\)")
    for text in stderr.splitlines():
        if match := line.search(text):
            return float(match.group(1))
    raise BenchError(f"{HEAD} printed no `{what} time` line", detail=stderr[-2000:])


def _rpc_run(
    tools: Path,
    env: dict[str, str],
    model: Path,
    n_servers: int,
    threads: int,
    prompt: str,
    n: int,
    cache: Path,
    start: str,
) -> tuple[dict[str, Any], str]:
    ports = [PORT_BASE + i for i in range(n_servers)]
    run_env = {**OMP_ENV, **os.environ, **env, "LLAMA_CACHE": str(cache)}
    servers: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []
    try:
        for port in ports:
            log_file = tempfile.TemporaryFile()  # noqa: SIM115 - closed in finally
            logs.append(log_file)
            cmd: list[str | Path] = [
                tools / SERVER,
                "-H",
                "127.0.0.1",
                "-p",
                str(port),
                "-t",
                str(threads),
                "-c",
            ]
            servers.append(proc.spawn(cmd, env=run_env, stderr=log_file))
        for port, server in zip(ports, servers, strict=True):
            _wait_listening(port, server)
        head_err = tempfile.TemporaryFile()  # noqa: SIM115 - closed in finally
        logs.append(head_err)
        args = head_args(model, ports, threads, prompt, n)
        before = loopback_bytes()
        t0 = time.perf_counter()
        head = proc.spawn([tools / HEAD, *args], env=run_env, stderr=head_err)
        assert head.stdin is not None and head.stdout is not None
        head.stdin.close()
        out = bytearray()
        first_s = first_bytes = None
        fd = head.stdout.fileno()
        while True:
            ready, _, _ = select.select([fd], [], [], 600)
            if not ready:
                head.kill()
                raise BenchError(f"{HEAD} over RPC produced nothing for 600 s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            if first_s is None and chunk.strip():
                first_s, first_bytes = time.perf_counter() - t0, loopback_bytes() - before
            out += chunk
        _, status, usage = os.wait4(head.pid, 0)
        head.returncode = os.waitstatus_to_exitcode(status)
        after = loopback_bytes() - before
        head_err.seek(0)
        stderr = head_err.read().decode(errors="replace")
        if head.returncode != 0 or first_s is None or first_bytes is None:
            raise BenchError(
                f"{HEAD} over {n_servers} RPC server(s) failed (exit code {head.returncode})",
                detail=stderr[-3000:],
            )
        rss = [peak_rss(s.pid) for s in servers]
    finally:
        for server in servers:
            proc.stop(server)
            for stream in (server.stdin, server.stdout):
                if stream is not None:
                    stream.close()
        for f in logs:
            f.close()
    procs = [{"role": "head", "what": HEAD, "peak_rss": usage.ru_maxrss * 1024}]
    procs += [
        {"role": "server", "what": f"{SERVER} :{p}", "peak_rss": r} for p, r in zip(ports, rss, strict=True)
    ]
    row = {
        "engine": "rpc",
        "processes": n_servers,
        "start": start,
        "wire_bytes_before_first_token": first_bytes,
        "wire_bytes_per_token": (after - first_bytes) / max(n - 1, 1),
        "ttft_s": first_s,
        "prefill_tps": _perf(stderr, "prompt eval"),
        "decode_tps": _perf(stderr, "eval"),
        "procs": procs,
    }
    return row, out.decode(errors="replace")


def head_args(model: Path | str, ports: list[int], threads: int, prompt: str, n: int) -> list[str]:
    """The arguments of `llama-completion` over RPC: every layer on the servers, in equal parts, greedy."""
    return [
        "-m",
        str(model),
        "--rpc",
        ",".join(f"127.0.0.1:{p}" for p in ports),
        "-ngl",
        "99",
        "-ts",
        ",".join("1" for _ in ports),
        "-t",
        str(threads),
        "-p",
        prompt,
        "-n",
        str(n),
        "--temp",
        "0",
        "-no-cnv",
        "--no-display-prompt",
        "--no-warmup",
        "--simple-io",
    ]


def measure(
    worker: Path,
    tools: Path,
    model: Path,
    n_layer: int,
    threads: int,
    build_dir: Path | None = None,
    splits: tuple[int, ...] = SPLITS,
    n_decode: int = DECODE_TOKENS,
    reps: int = REPS,
) -> dict[str, Any]:
    """(a) and (b) side by side, with the same prompt, threads and decoded tokens: `reps` rounds, each of the
    whole model, then per k of RPC k (first start, then later start) and ranges k in alternating order (RPC
    first in even rounds). `rows`: the round fastest to the first token of each configuration; `paired`:
    ranges k / RPC k later start, per round (dgr.contracts.paired); `same_output` holds only if the output of
    every repetition is the whole model's."""
    env = tool_env(tools, HEAD, build_dir) | tool_env(tools, SERVER, build_dir)
    text = prompts.LONG
    with Pipeline(worker, model, [(0, n_layer)], threads=threads, n_ctx=512, max_sessions=1) as whole:
        prompt = whole.tokenize(text)
    best: dict[tuple[str, int, str], dict[str, Any]] = {}
    same: dict[tuple[str, int, str], list[bool]] = {}

    def keep(row: dict[str, Any], same_output: bool) -> None:
        """Per configuration, the repetition with the shortest time to the first token, and whether each
        repetition's output was the whole model's."""
        key = (row["engine"], row["processes"], row["start"])
        same.setdefault(key, []).append(same_output)
        if key not in best or row["ttft_s"] < best[key]["ttft_s"]:
            best[key] = row

    reference: list[int] = []
    reference_text = ""
    # per number of processes, the (RPC later start, ranges) rows of each round
    rounds: dict[int, list[tuple[dict[str, Any], dict[str, Any]]]] = {k: [] for k in splits}
    with tempfile.TemporaryDirectory(prefix="rpc-cache-") as tmp:
        cache = Path(tmp) / "cache"

        def rpc_side(k: int) -> dict[str, Any]:
            shutil.rmtree(cache, ignore_errors=True)  # the first start: an empty tensor cache
            for start in ("first", "later"):
                row, out = _rpc_run(tools, env, model, k, threads, text, n_decode, cache, start)
                keep(row, out.strip() == reference_text.strip())
            return row

        def ranges_side(k: int) -> dict[str, Any]:
            row, tokens = _ranges_run(worker, model, inventory.split(n_layer, k), prompt, n_decode, threads)
            keep(row, tokens == reference)
            return row

        for r in range(reps):
            row, tokens = _ranges_run(worker, model, [(0, n_layer)], prompt, n_decode, threads)
            if not reference:
                reference = tokens
                with Pipeline(worker, model, [(0, n_layer)], threads=threads, n_ctx=512, max_sessions=1) as w:
                    reference_text = w.detokenize(reference)
            keep(row, tokens == reference)
            for k in splits:
                sides = (rpc_side, ranges_side)
                got: dict[int, dict[str, Any]] = {}
                for side in paired.order(r):  # neither side always runs first
                    got[side] = sides[side](k)
                rounds[k].append((got[0], got[1]))
    order = [("whole", 1, "cold")] + [
        key for k in splits for key in (("ranges", k, "cold"), ("rpc", k, "first"), ("rpc", k, "later"))
    ]
    rows = [best[key] | {"same_output": all(same[key]), "same_output_reps": sum(same[key])} for key in order]
    return {
        "model": {"file": model.name, "n_layer": n_layer},
        "threads": threads,
        "prompt": text,
        "prompt_tokens": len(prompt),
        "decode_tokens": n_decode,
        "head_args": head_args(
            model.name, [PORT_BASE + i for i in range(max(splits))], threads, text, n_decode
        ),
        "server_args": ["-H", "127.0.0.1", "-p", str(PORT_BASE), "-t", str(threads), "-c"],
        "wire_method": WIRE_METHOD,
        "reps": reps,
        "reference_output": reference_text,
        "rows": rows,
        "paired": [
            {
                "processes": k,
                "prefill": Paired.of([(a["prefill_tps"], b["prefill_tps"]) for a, b in rounds[k]]).to_json(),
                "decode": Paired.of([(a["decode_tps"], b["decode_tps"]) for a, b in rounds[k]]).to_json(),
            }
            for k in splits
        ],
    }
