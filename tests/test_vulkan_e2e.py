"""End to end on the Vulkan backend (Mesa's lavapipe when the machine has no GPU): `dgr build --backend
vulkan` with the Vulkan headers fetched from Debian by their locked sha256, then `dgr verify --backend
vulkan`: the architectures on the device (NMSE) with the offload test of test-llama-archs, and the real
models with n_gpu_layers over their ranges. `.github/workflows/vulkan.yml` installs the packages these need
and runs them (`pytest -m vulkan`)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
from dgr.contracts import expectations, locks
from dgr.contracts.archtable import ARCHS, ARCHS_SUMMARY
from dgr.core.paths import Cache
from dgr.errors import IntegrityError
from dgr.sources import debian

from tests.helpers import ROOT, run_dgr

pytestmark = [pytest.mark.e2e, pytest.mark.vulkan]


@pytest.fixture(scope="module")
def vulkan_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shared = os.environ.get("DGR_TEST_CACHE")
    return Path(shared) / "vulkan" if shared else tmp_path_factory.mktemp("vulkan-cache")


@pytest.fixture(scope="module")
def vulkan_report(vulkan_cache: Path) -> dict[str, Any]:
    env = {"DGR_REPO": str(ROOT), "DGR_CACHE_DIR": str(vulkan_cache)}
    built = run_dgr("build", "--backend", "vulkan", "--json", env=env, timeout=3600)
    assert built.returncode == 0, built.stderr[-3000:]
    assert json.loads(built.stdout)["path"].startswith(str(vulkan_cache))
    # measured on 2 cores: the archs sweep 51 min (other work beside it), the offload group 7 min (alone)
    ran = run_dgr("verify", "--backend", "vulkan", "--json", env=env, timeout=7200)
    assert ran.returncode in (0, 9), ran.stderr[-3000:]
    report: dict[str, Any] = json.loads(ran.stdout)
    return report


APART = ("device_failure", "upstream_failure", "not_compared")
"""The outcomes of a check counted apart: no pass, no failure (dgr.contracts.report.Check)."""


def test_the_vulkan_report_passes(vulkan_report: dict[str, Any]) -> None:
    # a device failure (the driver fails where the unpatched build's own test fails too, on the same device:
    # lavapipe on qwen3next's MoE) is counted apart; every other check passed or was listed with why
    failed = [
        f"{c['group']}/{c['name']}: {c['detail']}"
        for c in vulkan_report["checks"]
        if not c["passed"] and not any(c.get(k) for k in APART)
    ]
    assert failed == []
    assert vulkan_report["passed"] is True
    assert vulkan_report["groups"] == ["archs", "offload"]
    for group in vulkan_report["groups"]:
        assert any(c["passed"] for c in vulkan_report["checks"] if c["group"] == group), group


def test_the_architectures_run_on_the_device(vulkan_report: dict[str, Any]) -> None:
    archs = {c["name"]: c for c in vulkan_report["checks"] if c["group"] == ARCHS}
    check = archs.pop(ARCHS_SUMMARY)
    summary = check["figures"]
    assert check["passed"], check["detail"]
    floor = expectations.load(ROOT).archs.certified_at_least
    assert summary["failed"] == 0 and summary["certified"] >= floor == summary["certified_floor"]
    # each device failure was judged by the unpatched build's own test of the architecture on the device
    for arch, reason in summary.get("device_failure", {}).items():
        assert "(the unpatched build)" in reason and "too" in reason, (arch, reason)
        rows = [c for n, c in archs.items() if n.split("/")[0] == arch and c.get("device_failure")]
        assert rows and all(not c["passed"] for c in rows), arch
    # on a device other than the CPU the logits are compared by NMSE, not bit for bit
    certified = [c for c in archs.values() if c["figures"]["status"] == "certified"]
    assert certified and all("bit-identical" not in c["detail"] for c in certified)


def test_every_model_offloads_its_ranges(vulkan_report: dict[str, Any]) -> None:
    offload = [c for c in vulkan_report["checks"] if c["group"] == "offload"]
    for model in ("synth-untied", "smollm2", "gemma3"):
        configs = sorted(
            c["name"].removesuffix(f"/{model}") for c in offload if c["name"].endswith(f"/{model}")
        )
        # halves with none, some and all of each range's layers offloaded, thirds with some
        assert len(configs) == 4 and {"split-2-ngl-0", "split-2-ngl-all"} < set(configs), configs
    for c in offload:
        figures = c["figures"]
        # nothing offloaded: no weights on the device; every layer offloaded: every range has weights there
        if figures["n_gpu_layers"] == 0:
            assert figures["device_bytes"] == [0] * len(figures["ranges"])
        else:
            assert all(b > 0 for b in figures["device_bytes"])
        unsplit = {0: "unsplit-ngl-0", 999: "unsplit-ngl-all"}.get(figures["n_gpu_layers"])
        if unsplit:
            # the tokens and logits of a run with the same placement: the unsplit model wholly on one side
            assert figures["greedy_tokens_matching"] == 16 and figures["nmse"] <= 1e-4
            assert figures["compared_with"] == unsplit
        else:
            # layers on both sides: each range bit for bit against the unsplit model that places it alike
            per_range = figures["per_range"]
            assert [r["range"] for r in per_range] == figures["ranges"]
            assert all(r["compared_with"].startswith("unsplit-ngl-") and r["nmse"] == 0 for r in per_range)
            assert all(r["steps_bit_exact"] == 5 for r in per_range)
        # a weight of an offloaded layer kept in host memory only where the device cannot use it
        assert all(not t["device_supports"] for t in figures["host_kept"])


def test_a_deb_that_does_not_match_its_lock_is_not_cached(tmp_path: Path) -> None:
    lock = locks.load_toolchain(ROOT / "locks").backends["vulkan"].debs[0]
    cache = Cache(tmp_path / "cache")
    root = debian.fetch(cache, lock)
    assert (root / "usr" / "include" / "vulkan" / "vulkan.hpp").is_file()
    assert debian.fetch(cache, lock) == root  # cached: no second download
    wrong = dataclasses.replace(lock, sha256="0" * 64)
    with pytest.raises(IntegrityError, match="does not match the lock; nothing was cached"):
        debian.fetch(cache, wrong)
    assert not (cache.downloads / wrong.sha256).exists()
    assert [p.name for p in cache.downloads.iterdir()] == [lock.sha256]
