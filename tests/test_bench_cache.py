"""Where `dgr bench` keeps its results in the cache: each kind of run (full, `--quick`) of each inputs digest
in an entry of its own, so that a quick run never replaces the full one that `dgr status` and
`export-upstream` read. The measurements are fakes (this is about where the result goes, not its figures)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from dgr.builds import buildplan
from dgr.cli import main
from dgr.commands import bench as bench_command
from dgr.contracts import locks
from dgr.contracts.bench import BenchResult, ModelBench
from dgr.contracts.upstreambench import Comparison, Rpc
from dgr.core.paths import Context
from dgr.export import measured

from tests.export_upstream.support import bench_data
from tests.test_verify_bench import RESULT


def fake_measurements(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, digest: str) -> None:
    """Every measurement of `dgr bench --rpc` replaced by fixed figures; a quick run's build timing has the
    no-op build only, as the real one has."""
    built = SimpleNamespace(
        path=tmp_path / "build",
        manifest=SimpleNamespace(inputs_digest=digest, build=SimpleNamespace(source_dir=str(tmp_path))),
    )
    monkeypatch.setattr("dgr.builds.build.run", lambda *a, **k: built)
    monkeypatch.setattr(
        "dgr.sources.model.fetch_all", lambda cache, models: [tmp_path / m.file for m in models]
    )
    keys = ("model", "hop_bytes_per_token", "in_process", "workers", "memory", "parts")
    figures = {k: RESULT[k] for k in keys}

    def model_bench(bin_dir: Path, name: str, path: Path, *rest: Any) -> ModelBench:
        return ModelBench.from_json(figures | {"model": figures["model"] | {"name": name}})

    monkeypatch.setattr(bench_command, "model_bench", model_bench)
    codec = BenchResult.from_json(RESULT).codec
    monkeypatch.setattr("dgr.verify.bench.codec.measure", lambda bin_dir, quick: codec)
    full = {
        "noop_dgr_s": 0.2,
        "noop_ninja_s": 0.05,
        "cold_dgr_s": 330.0,
        "cold_plain_s": 280.0,
        "cold_ratio": 1.18,
    }
    monkeypatch.setattr(
        "dgr.builds.buildtime.measure",
        lambda ctx, quick: {k: v for k, v in full.items() if not quick or k.startswith("noop")},
    )
    upstream = bench_data(digest)
    comparison = Comparison.from_json(upstream["upstream_comparison"])

    def beside_upstream(ctx: Context, *a: Any) -> bench_command.BesideUpstream:
        return bench_command.BesideUpstream(
            comparison=comparison, others=(comparison,), rpc=Rpc.from_json(upstream["rpc"])
        )

    monkeypatch.setattr(bench_command, "beside_upstream", beside_upstream)


def test_a_quick_run_after_a_full_one_leaves_the_full_one_in_place_and_read(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = Context.discover()
    digest = buildplan.plan(ctx, buildplan.Request()).digest
    fake_measurements(monkeypatch, tmp_path, digest)
    assert main(["bench", "--rpc"]) == 0
    full = ctx.cache.bench_entry(digest, quick=False) / "bench.json"
    written = full.read_bytes()
    assert json.loads(written)["quick"] is False and "cold_dgr_s" in json.loads(written)["build"]
    assert main(["bench", "--rpc", "--quick"]) == 0
    quick = ctx.cache.bench_entry(digest, quick=True) / "bench.json"
    assert quick != full and json.loads(quick.read_text())["quick"] is True
    assert "cold_dgr_s" not in json.loads(quick.read_text())["build"]
    # the full result is where it was, unchanged, and it is the one status and export-upstream read
    assert full.read_bytes() == written
    assert (full.parent / "figures.md").is_file() and (quick.parent / "figures.md").is_file()
    assert measured.full_result(ctx.cache, digest) == full
    capsys.readouterr()
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bench"] == "current (`dgr bench --rpc` of these inputs)"
    got = measured.load(
        full, digest, bench_command.harness.current(ctx.repo), locks.load_models(ctx.repo.locks_dir)
    )
    assert got.quick is False and got.path == full


def test_a_quick_run_alone_is_no_bench_for_status(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = Context.discover()
    digest = buildplan.plan(ctx, buildplan.Request()).digest
    fake_measurements(monkeypatch, tmp_path, digest)
    assert main(["bench", "--rpc", "--quick"]) == 0
    capsys.readouterr()
    assert main(["status", "--json"]) == 0
    bench = json.loads(capsys.readouterr().out)["bench"]
    assert bench.startswith("missing: there is no bench result")
    assert bench.endswith("(there is a --quick one of these inputs: a quick run is no full bench)")


def test_out_keeps_the_result_where_it_is_asked(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = Context.discover()
    digest = buildplan.plan(ctx, buildplan.Request()).digest
    fake_measurements(monkeypatch, tmp_path, digest)
    assert main(["bench", "--quick", "--out", str(tmp_path / "here")]) == 0
    assert json.loads((tmp_path / "here" / "bench.json").read_text())["quick"] is True
    assert not ctx.cache.bench.exists()
