"""The measurements `dgr export-upstream` renders, read back from `bench.json` (written by `dgr bench --rpc`):

- `upstream_comparison`: llama-perplexity and llama-bench of the unpatched and the patched upstream (no range
  set), the same model and text;
- `rpc`: the whole model through upstream's RPC backend (local `ggml-rpc-server` processes) beside a chain of
  processes that each load one range of layers.

Only a result measured on the inputs being exported is accepted (its `inputs_digest`); anything else is a
VerifyError (exit 9), as a missing verify report is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dgr.contracts.bench import Machine
from dgr.contracts.upstreambench import Comparison, Rpc
from dgr.core.digest import sha256_bytes
from dgr.core.fs import read_or_refuse
from dgr.errors import ConfigError, VerifyError

__all__ = ["BENCH_HINT", "Comparison", "Measured", "Rpc", "load"]

BENCH_HINT = "run `dgr bench --rpc` for the current inputs, then `dgr export-upstream` again"


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What `dgr bench --rpc` measured for the inputs being exported."""

    path: Path
    sha256: str
    date: str
    cpu: str
    cores: int | None
    quick: bool
    comparison: Comparison
    """The default model's."""
    rpc: Rpc
    others: tuple[Comparison, ...] = ()
    """The other locked models' perplexity and llama-bench (`models.<name>.upstream_comparison`)."""


def load(path: Path, digest: str) -> Measured:
    """The bench result at `path`, if it measured the inputs `digest` with `--rpc`; VerifyError otherwise."""
    absent = "there is no bench result with the comparisons upstream asks for (perplexity, llama-bench, RPC)"
    raw = read_or_refuse(path, absent, BENCH_HINT, VerifyError)
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected an object, found {type(data).__name__}")
        measured_digest = data.get("inputs_digest")
        if measured_digest != digest:
            raise VerifyError(
                "the bench result measured other inputs than the ones being exported",
                expected=f"inputs {digest}",
                actual=f"inputs {measured_digest} ({path})",
                hint=BENCH_HINT,
            )
        missing = [k for k in ("upstream_comparison", "rpc") if k not in data]
        if missing:
            raise VerifyError(
                f"{path} has no {' and no '.join(missing)}: it was measured without --rpc", hint=BENCH_HINT
            )
        machine = Machine.from_json(data.get("machine"), f"{path}.machine")
        models = data.get("models", {})
        if not isinstance(models, dict):
            raise ConfigError(f"{path}.models: expected an object, found {type(models).__name__}")
        return Measured(
            path=path,
            sha256=sha256_bytes(raw),
            date=machine.date,
            cpu=machine.cpu,
            cores=machine.cores,
            quick=data.get("quick") is True,
            comparison=Comparison.from_json(data["upstream_comparison"]),
            rpc=Rpc.from_json(data["rpc"]),
            others=tuple(
                Comparison.from_json(m["upstream_comparison"], f"models.{name}.upstream_comparison")
                for name, m in models.items()
                if isinstance(m, dict) and "upstream_comparison" in m
            ),
        )
    except ValueError as exc:
        raise VerifyError(f"{path} is not valid JSON ({exc})", hint=BENCH_HINT) from exc
    except ConfigError as exc:
        raise VerifyError(f"{path} is not a bench result with --rpc: {exc.what}", hint=BENCH_HINT) from exc
