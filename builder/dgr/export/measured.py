"""The measurements `dgr export-upstream` renders, read back from `bench.json` (written by `dgr bench --rpc`):

- `upstream_comparison`: llama-perplexity and llama-bench of the unpatched and the patched upstream (no range
  set), the same model and text;
- `rpc`: the whole model through upstream's RPC backend (local `ggml-rpc-server` processes) beside a chain of
  processes that each load one range of layers;
- `parts` of every model: each range of 2, 3 and 5 ranges from the files that hold only its tensors against
  from the whole file (the bytes a machine stores, the load, the peak RSS).

Only a result measured on the inputs being exported (its `inputs_digest`), by the current harness (its
`harness`: dgr.contracts.harness) and with locked models (the model of every comparison is one of
locks/model.toml) is accepted; anything else is a VerifyError (exit 9), as a missing verify report is. A file
that is not what `dgr bench` writes (not strict JSON, or no `BenchResult`: an unknown key, a value of the
wrong type, a `summary` its measurements do not give) is a ConfigError (exit 8) naming the file and the key,
for `dgr status` and `dgr export-upstream --bench FILE` alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dgr.contracts import convert
from dgr.contracts.bench import BenchModel, BenchResult, PartsFigures
from dgr.contracts.harness import Harness
from dgr.contracts.modellock import ModelLock, ModelsLock
from dgr.contracts.upstreambench import Comparison, Rpc
from dgr.core import jsonio
from dgr.core.digest import sha256_bytes
from dgr.core.fs import read_or_refuse
from dgr.core.paths import Cache
from dgr.errors import ConfigError, StaleError, VerifyError

__all__ = ["BENCH_HINT", "Comparison", "FromParts", "Measured", "Rpc", "full_result", "load"]

BENCH_HINT = "run `dgr bench --rpc` for the current inputs, then `dgr export-upstream` again"


@dataclass(frozen=True, kw_only=True)
class FromParts:
    """One model's ranges run from the files that hold only their tensors against from the whole file."""

    model: BenchModel
    figures: PartsFigures


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
    parts: tuple[FromParts, ...] = ()
    """Every model's ranges from its parts, the default model first (`parts`, `models.<name>.parts`)."""


def full_result(cache: Cache, digest: str) -> Path:
    """The bench.json of the full `dgr bench` of the inputs `digest` in the cache (never a --quick one's)."""
    return cache.bench_entry(digest, quick=False) / "bench.json"


def load(path: Path, digest: str, harness: Harness, models: ModelsLock) -> Measured:
    """The bench result at `path`, if it measured the inputs `digest` with `--rpc`, by `harness` (the current
    one) and with the locked `models`; VerifyError (exit 9) otherwise, StaleError when another harness
    measured. It is read as `dgr bench` wrote it: through the strict decoder (dgr.core.jsonio: a key twice,
    NaN or Infinity refused) and as a whole `BenchResult` (an unknown key, a value of the wrong type, a
    `summary` its measurements do not give refused), each a ConfigError (exit 8) naming the file and the key.
    Which inputs and which harness measured are read first: a result of other inputs or of another dgr is
    missing or stale, whatever else it holds."""
    absent = "there is no bench result with the comparisons upstream asks for (perplexity, llama-bench, RPC)"
    raw = read_or_refuse(path, absent, BENCH_HINT, VerifyError)
    try:
        data = convert.mapping(jsonio.loads(raw, str(path)), str(path))
        measured_digest = data.get("inputs_digest")
        if measured_digest != digest:
            raise VerifyError(
                "the bench result measured other inputs than the ones being exported",
                expected=f"inputs {digest}",
                actual=f"inputs {measured_digest} ({path})",
                hint=BENCH_HINT,
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
        result = BenchResult.from_json(data, str(path))
    except ConfigError as exc:
        what = f"not a bench result of `dgr bench`: {exc.what}"  # its `where` names the file and the key
        raise ConfigError(what, detail=exc.detail, hint=BENCH_HINT) from exc
    if result.upstream_comparison is None or result.rpc is None:
        parts = {"upstream_comparison": result.upstream_comparison, "rpc": result.rpc}
        missing = [key for key, part in parts.items() if part is None]
        raise VerifyError(
            f"{path} has no {' and no '.join(missing)}: it was measured without --rpc", hint=BENCH_HINT
        )
    comparison = result.upstream_comparison
    measured = Measured(
        path=path,
        sha256=sha256_bytes(raw),
        date=result.machine.date,
        cpu=result.machine.cpu,
        cores=result.machine.cores,
        quick=result.quick,
        comparison=comparison,
        model=_locked(path, comparison, models.all()),
        rpc=result.rpc,
        others=tuple(
            m.upstream_comparison for m in result.models.values() if m.upstream_comparison is not None
        ),
        parts=tuple(FromParts(model=m.model, figures=m.parts) for m in result.all_models().values()),
    )
    for other in measured.others:
        _locked(path, other, models.all())
    return measured


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
