"""The measurements `dgr export-upstream` renders, read back from `bench.json` (written by `dgr bench --rpc`):

- `upstream_comparison`: llama-perplexity and llama-bench of the unpatched and the patched upstream (no range
  set), the same model and text;
- `rpc`: the whole model through upstream's RPC backend (local `ggml-rpc-server` processes) beside a chain of
  processes that each load one range of layers.

Only a result measured on the inputs being exported (its `inputs_digest`), by the current harness (its
`harness`: dgr.contracts.harness) and with locked models (the model of every comparison is one of
locks/model.toml) is accepted; anything else is a VerifyError (exit 9), as a missing verify report is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dgr.contracts.bench import Machine
from dgr.contracts.harness import Harness
from dgr.contracts.modellock import ModelLock, ModelsLock
from dgr.contracts.upstreambench import Comparison, Rpc
from dgr.core.digest import sha256_bytes
from dgr.core.fs import read_or_refuse
from dgr.core.paths import Cache
from dgr.errors import ConfigError, StaleError, VerifyError

__all__ = ["BENCH_HINT", "Comparison", "Measured", "Rpc", "full_result", "load"]

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
    model: ModelLock
    """The locked model of `comparison` (the README's commands download it from its wheels)."""
    rpc: Rpc
    others: tuple[Comparison, ...] = ()
    """The other locked models' perplexity and llama-bench (`models.<name>.upstream_comparison`)."""


def full_result(cache: Cache, digest: str) -> Path:
    """The bench.json of the full `dgr bench` of the inputs `digest` in the cache (never a --quick one's)."""
    return cache.bench_entry(digest, quick=False) / "bench.json"


def load(path: Path, digest: str, harness: Harness, models: ModelsLock) -> Measured:
    """The bench result at `path`, if it measured the inputs `digest` with `--rpc`, by `harness` (the current
    one) and with the locked `models`; VerifyError otherwise."""
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
        recorded = data.get("harness")
        changed = (
            Harness.from_json(recorded, f"{path}.harness").changes(harness)
            if recorded is not None
            else ["it does not record the harness that measured (a result of an older dgr)"]
        )
        if changed:
            raise StaleError(
                f"the bench result {path} is stale: the harness or the model lock changed since it ran",
                detail="\n".join(f"- {c}" for c in changed),
                hint=BENCH_HINT,
            )
        machine = Machine.from_json(data.get("machine"), f"{path}.machine")
        others = data.get("models", {})
        if not isinstance(others, dict):
            raise ConfigError(f"{path}.models: expected an object, found {type(others).__name__}")
        comparison = Comparison.from_json(data["upstream_comparison"])
        measured = Measured(
            path=path,
            sha256=sha256_bytes(raw),
            date=machine.date,
            cpu=machine.cpu,
            cores=machine.cores,
            quick=data.get("quick") is True,
            comparison=comparison,
            model=_locked(path, comparison, models.all()),
            rpc=Rpc.from_json(data["rpc"]),
            others=tuple(
                Comparison.from_json(m["upstream_comparison"], f"models.{name}.upstream_comparison")
                for name, m in others.items()
                if isinstance(m, dict) and "upstream_comparison" in m
            ),
        )
        for other in measured.others:
            _locked(path, other, models.all())
        return measured
    except ValueError as exc:
        raise VerifyError(f"{path} is not valid JSON ({exc})", hint=BENCH_HINT) from exc
    except ConfigError as exc:
        raise VerifyError(f"{path} is not a bench result with --rpc: {exc.what}", hint=BENCH_HINT) from exc


def _locked(path: Path, comparison: Comparison, candidates: Sequence[ModelLock]) -> ModelLock:
    """The locked model (of `candidates`) that `comparison` measured; VerifyError naming both when none."""
    found = next((m for m in candidates if m.sha256 == comparison.model_sha256), None)
    if found is None:
        raise VerifyError(
            f"the bench result {path} compared {comparison.model_file} with upstream, which is not a "
            "model of locks/model.toml",
            expected=" or ".join(f"{m.file} (sha256 {m.sha256})" for m in candidates),
            actual=f"{comparison.model_file} (sha256 {comparison.model_sha256})",
            hint=BENCH_HINT,
        )
    return found
