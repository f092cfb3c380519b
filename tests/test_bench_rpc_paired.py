"""`dgr bench --rpc`: layer ranges against the RPC backend in paired alternating rounds (issue U): the
order of the runs in each round and the ratios, with the processes replaced by fakes that say when
they ran."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dgr.contracts.upstreambench import Rpc
from dgr.verify.bench import rpc


class _FakePipeline:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> _FakePipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def tokenize(self, text: str) -> list[int]:
        return [1, 2, 3]

    def detokenize(self, tokens: list[int]) -> str:
        return "out"


def _row(engine: str, k: int, start: str, tps: float) -> dict[str, Any]:
    return {
        "engine": engine,
        "processes": k,
        "start": start,
        "wire_bytes_before_first_token": 1,
        "wire_bytes_per_token": 1.0,
        "ttft_s": 1.0 / tps,
        "prefill_tps": 2 * tps,
        "decode_tps": tps,
        "procs": [{"role": "head", "what": "x", "peak_rss": 1}],
    }


def test_ranges_and_rpc_alternate_and_their_ratio_is_per_round(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[str] = []
    speed = iter(range(1, 1000))

    def ranges_run(worker: Path, model: Path, ranges: list[tuple[int, int]], *args: Any) -> tuple[Any, ...]:
        k = len(ranges)
        runs.append("whole" if k == 1 else f"ranges{k}")
        return _row("whole" if k == 1 else "ranges", k, "cold", 10.0 * next(speed)), [7]

    def rpc_run(tools: Path, env: Any, model: Path, k: int, *args: Any) -> tuple[Any, ...]:
        start = args[-1]
        runs.append(f"rpc{k}-{start}")
        return _row("rpc", k, start, float(next(speed))), "out"

    monkeypatch.setattr(rpc, "Pipeline", _FakePipeline)
    monkeypatch.setattr(rpc, "_ranges_run", ranges_run)
    monkeypatch.setattr(rpc, "_rpc_run", rpc_run)
    monkeypatch.setattr(rpc, "tool_env", lambda *a: {})
    got = rpc.measure(Path("w"), Path("t"), Path("m.gguf"), 30, 2, splits=(2,), reps=3)

    # round 0: RPC first, round 1: ranges first, round 2: RPC first
    assert runs == [
        *("whole", "rpc2-first", "rpc2-later", "ranges2"),
        *("whole", "ranges2", "rpc2-first", "rpc2-later"),
        *("whole", "rpc2-first", "rpc2-later", "ranges2"),
    ]
    result = Rpc.from_json(got)
    (p,) = result.paired
    assert p.processes == 2
    # the speeds in call order: round 0 whole 1, rpc first 2, later 3, ranges 4; round 1 whole 5, ranges 6,
    # rpc first 7, later 8; round 2 whole 9, rpc 10 and 11, ranges 12 (ranges are 10 times the counter)
    assert p.decode.rounds == pytest.approx((40 / 3, 60 / 8, 120 / 11))
    assert p.prefill.rounds == p.decode.rounds
    assert p.decode.median == pytest.approx(120 / 11)
    assert [r.same_output for r in result.rows] == [True, True, True, True]
