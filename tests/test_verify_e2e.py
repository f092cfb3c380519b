"""End-to-end for the patch series: the real series built in its own cache, `dgr verify` on every locked
model (SmolLM2 and Gemma 3) and the synthetic fixtures, `dgr generate` on both, and the published worker fed
bad input (marker e2e, slow)."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from dgr.contracts import expectations
from dgr.contracts.report import GROUPS
from dgr.errors import ShardFailedError, WorkerRequestError
from dgr.verify.bench import rpc
from dgr.verify.checks.upstream import NOT_RUN
from dgr.verify.models import inventory, prompts
from dgr.verify.wire import bundle, frames
from dgr.verify.wire.client import ContextParams, Worker
from dgr.verify.wire.pipeline import BatchStep, Pipeline

from tests.helpers import ROOT, run_dgr

pytestmark = pytest.mark.e2e

# the ctest of the first patch (every layer input captured), and the one the second patch adds (ranges)
LAYER_INPUTS = "test-llama-archs-layer-inputs"
NATIVE_TESTS = {LAYER_INPUTS, "test-llama-archs-layer-ranges"}
EXAMPLE_TEST = "test-layer-range"
"""The test of the example the last patch adds (examples/layer-range): a random model split in two."""
# upstream's test that writes the model directory (fixture generate-models), which the range test reads from
# layer-range-mmap.patch on
GENERATE_MODELS = "test-generate-models"


@pytest.fixture(scope="session")
def real_cache(series_cache: Path) -> Path:
    return series_cache


def dgr(cache: Path, *args: str) -> Any:
    # a cold `dgr verify` builds the baseline and every prefix of the series: over 30 min on 2 cores
    return run_dgr(*args, env={"DGR_REPO": str(ROOT), "DGR_CACHE_DIR": str(cache)}, timeout=3600)


@pytest.fixture(scope="session")
def real_build(real_cache: Path) -> dict[str, Any]:
    result = dgr(real_cache, "build", "--json")
    assert result.returncode == 0, result.stderr
    manifest: dict[str, Any] = json.loads(result.stdout)
    return manifest


@pytest.fixture(scope="session")
def verify_run(real_cache: Path, real_build: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    junit = tmp_path_factory.mktemp("junit") / "verify.xml"
    result = dgr(real_cache, "verify", "--json", "--junit", str(junit))
    report = json.loads(result.stdout) if result.stdout.strip() else {}
    return result, report, junit


def checks_of(report: dict[str, Any], group: str) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"] if c["group"] == group}


def test_build_holds_the_native_tests_and_the_worker(real_build: dict[str, Any]) -> None:
    assert set(real_build["build"]["native_tests"]) >= NATIVE_TESTS | {EXAMPLE_TEST}
    assert "bin/layer-worker" in real_build["artifacts"]
    assert "bin/llama-layer-range" in real_build["artifacts"]
    assert len(real_build["patches"]) == 6


APART = ("device_failure", "upstream_failure", "not_compared")
"""The outcomes of a check counted apart: no pass, no failure (dgr.contracts.report.Check)."""


def failed_checks(report: dict[str, Any]) -> list[str]:
    return [
        f"{c['group']}/{c['name']}: {c['detail']}"
        for c in report.get("checks", [])
        if not c["passed"] and not any(c.get(k) for k in APART)
    ]


def test_verify_passes_every_check(verify_run: Any) -> None:
    result, report, _ = verify_run
    assert result.returncode == 0 and report["passed"], (
        "\n".join(failed_checks(report)) or result.stderr[-3000:]
    )
    assert report["groups"] == list(GROUPS)
    # every group has a passed check (a group of checks counted apart alone is no pass)
    for group in GROUPS:
        assert any(c["passed"] for c in checks_of(report, group).values()), group


def test_native_tests_ran_from_ctest(verify_run: Any) -> None:
    native = checks_of(verify_run[1], "native")
    # a check a test skipped here (mlock, where the process may not lock the model) is listed apart
    skipped = {n for n in native if "/skipped-" in n}
    # the example, beside its CTest entry on a random model, splits each locked model in two
    examples = {f"llama-layer-range/{m}" for m in ("smollm2", "gemma3")}
    assert set(native) - skipped == NATIVE_TESTS | {GENERATE_MODELS, EXAMPLE_TEST} | examples
    assert all(native[n]["figures"]["steps"] == 9 for n in examples)
    assert all(c["evidence"] == "native test" and c["passed"] for n, c in native.items() if n not in skipped)
    assert all(native[n].get("not_compared") and native[n]["detail"].startswith("skipped: ") for n in skipped)


def test_upstreams_own_suite_passes_on_the_patched_build_where_it_passes_on_the_baseline(
    verify_run: Any,
) -> None:
    upstream = checks_of(verify_run[1], "upstream")
    assert len([n for n in upstream if n.startswith("main/")]) >= 40
    assert {n.split("/")[0] for n in upstream} == {"main", "model@smollm2", "model@gemma3"}
    # a test that does not pass is one that fails on the baseline too, never one the series broke, and the
    # series declares each one of them, with why (series/verify.toml)
    declared = expectations.load(ROOT)
    both = {n: c for n, c in upstream.items() if c["figures"]["baseline"] != "pass" and not c["passed"]}
    undeclared = sorted(n for n in both if declared.why_upstream_fails(n.split("/", 1)[1]) is None)
    assert undeclared == [], "\n\n".join(f"{n}: {both[n]['detail']}" for n in undeclared)
    assert all(c["passed"] or c.get("upstream_failure") for c in upstream.values())
    for name, c in both.items():
        assert c.get("upstream_failure") and "declared in series/verify.toml: " in c["detail"], name
    # four sequences in parallel on a real model, the download fixture replaced by the locked model; the
    # baseline runs only the tests that do not pass on the patched build
    assert upstream["main/test-thread-safety"]["figures"] == {"baseline": NOT_RUN, "patched": "pass"}
    # the CTest entries the series registers for its own programs are the native group's, not run
    # again here; every test of the group is one the baseline has too
    assert not {f"main/{n}" for n in NATIVE_TESTS | {EXAMPLE_TEST}} & set(upstream)
    assert not [n for n, c in upstream.items() if c["figures"]["baseline"] == "absent"]
    assert all((c["figures"]["baseline"] == NOT_RUN) == c["passed"] for c in upstream.values())


def test_every_prefix_of_the_series_builds_and_passes_its_own_tests(verify_run: Any) -> None:
    series = checks_of(verify_run[1], "series")
    assert sorted(series) == [f"prefix-{k}" for k in range(1, 7)]
    assert all(c["passed"] for c in series.values())
    digests = {c["figures"]["inputs_digest"] for c in series.values()}
    assert len(digests) == 6  # each prefix is a build of its own
    # the first patch changes no behaviour (its graphs are compared with upstream's) and registers the test
    # that every layer input can be captured; the later prefixes run both tests
    assert series["prefix-1"]["figures"]["tests"] == {LAYER_INPUTS: True}
    for k in (2, 3):
        assert series[f"prefix-{k}"]["figures"]["tests"] == dict.fromkeys(NATIVE_TESTS, True)
    for k in (4, 5):
        assert series[f"prefix-{k}"]["figures"]["tests"] == dict.fromkeys(
            NATIVE_TESTS | {GENERATE_MODELS}, True
        )
    # the example splits a random model of test-generate-models
    assert series["prefix-6"]["figures"]["tests"] == dict.fromkeys(
        NATIVE_TESTS | {GENERATE_MODELS, EXAMPLE_TEST}, True
    )


def test_every_architecture_is_certified_refused_at_load_or_without_a_model(verify_run: Any) -> None:
    archs = checks_of(verify_run[1], "archs")
    summary = archs.pop("every-architecture")
    figures = summary["figures"]
    assert summary["passed"] and figures["failed"] == 0, summary["detail"]
    # every architecture of llama.cpp's arch list has a row
    assert (
        figures["architectures"] >= 150 and len({n.split("/")[0] for n in archs}) == figures["architectures"]
    )
    # at least the architectures the series declares are certified
    floor = expectations.load(ROOT).archs.certified_at_least
    assert figures["certified"] >= floor == figures["certified_floor"]
    # a row without a model compared nothing: listed with its reason, not passed; every other row passed
    no_model = {n: c for n, c in archs.items() if c["figures"]["status"] == "no-model"}
    assert no_model and all(
        c.get("not_compared") and not c["passed"] and c["detail"] for c in no_model.values()
    )
    assert len(no_model) == figures["no-model"]
    assert all(c["passed"] for n, c in archs.items() if n not in no_model)
    assert archs["llama/dense"]["figures"]["status"] == "certified"
    assert archs["gemma3/dense"]["figures"]["status"] == "certified"
    # a range of these would compute something else (state carried between layers, token ids read by the
    # layers): they are not opted in and refuse a range at load
    for name in ("rwkv7/dense", "arwkv7/dense", "cogvlm/dense", "glm-dsa/moe", "graniteswitch/dense"):
        assert archs[name]["figures"]["status"] == "refused", name
        assert archs[name]["figures"]["reason"] == "not opted in, refused at load", name


def test_the_graph_group_lists_the_variants_it_did_not_compare(verify_run: Any) -> None:
    graphs = checks_of(verify_run[1], "graph")
    summary = graphs.pop("every-architecture")["figures"]
    listed = {n for n, c in graphs.items() if c.get("not_compared")}
    # a variant built in neither tree is listed with the error, never passed; every other one is equal
    assert listed == set(summary["not_built"])
    assert all(not graphs[n]["passed"] and "built in neither tree" in graphs[n]["detail"] for n in listed)
    assert all(c["passed"] for n, c in graphs.items() if n not in listed)
    assert summary["compared"] == summary["equal"] == len(graphs) - len(listed) >= 100


MODELS = {"smollm2": 30, "gemma3": 18}
"""The locked models and their layer counts."""


def test_every_conformance_group_ran_on_every_model(verify_run: Any) -> None:
    report = verify_run[1]
    for group in ("ownership", "boundary", "kv"):
        for part in ("fixtures", *MODELS):
            assert f"{group}/{part}" in report["durations_s"], (group, part)
        for model in MODELS:
            assert any(name.endswith(f"/{model}") for name in checks_of(report, group)), (group, model)


def test_ownership_figures(verify_run: Any) -> None:
    own = checks_of(verify_run[1], "ownership")
    for label, n_layer in {"synth-untied": 30, "synth-tied": 30, **MODELS}.items():
        for k in sorted({1, 2, 3, 6, n_layer}):
            c = own[f"split-{k}/{label}"]
            assert c["passed"] and c["figures"]["max_buffer_deviation"] <= 0.01
    for model, n_layer in MODELS.items():
        assert own[f"split-{n_layer}/{model}"]["figures"]["tied_head_holders"] == 2
        rss = own[f"peak-rss-per-range/{model}"]["figures"]
        assert abs(rss["slope"] - 1) <= 0.05 and rss["middle_ratio"] <= 0.45
        assert own[f"invalid-ranges/{model}"]["figures"]["refused"] == 6
    # Gemma 3's head is its 262k-token embeddings: the first and the last third hold most of the model
    assert own["peak-rss-per-range/gemma3"]["figures"]["head_ratio"] > 0.7


def test_boundary_figures(verify_run: Any) -> None:
    bnd = checks_of(verify_run[1], "boundary")
    for model, n_layer in MODELS.items():
        for k in (2, 3, 6, n_layer):
            c = bnd[f"prefill-split-{k}/{model}"]
            assert c["figures"]["bit_exact"] and c["figures"]["max_abs_diff"] == 0.0, (model, k)
        assert bnd[f"no-range-vs-upstream/{model}"]["figures"]["bit_identical"]
        assert bnd[f"no-range-vs-upstream/{model}"]["figures"]["state_identical"]
        assert bnd[f"generate-3-workers/{model}"]["figures"]["matching_tokens"] == [64, 64, 64]
        assert bnd[f"refusals/{model}"]["figures"]["refused"] == 7
    for name, c in bnd.items():
        if name.startswith("prefill-split-"):
            assert c["figures"]["bit_exact"] and c["figures"]["max_abs_diff"] == 0.0, name


def test_kv_figures(verify_run: Any) -> None:
    kv = checks_of(verify_run[1], "kv")
    for model, n_layer in MODELS.items():
        assert kv[f"interleaved-4-sessions/{model}"]["figures"]["matching_tokens"] == [64] * 4
        kv_bytes = kv[f"kv-bytes-per-shard/{model}"]["figures"]
        assert kv_bytes["max_deviation"] <= 0.01 and len(kv_bytes["layer_kv_bytes"]) == n_layer
        assert kv[f"truncate-then-continue/{model}"]["figures"]["first_logits_max_abs_diff"] == 0.0
        assert kv[f"release-evict-miss-epoch/{model}"]["figures"]["reprefill_identical"]
        refused = kv[f"state-recipes/{model}"]["figures"]["refused"]
        assert set(refused) == {"layers", "cache_type", "missing", "model"}
    fail = kv["worker-failure/smollm2"]["figures"]  # the supervisor's check: on the default model
    assert fail["killed_shard"] == 1 and fail["hung_shard"] == 1
    assert fail["hung_detected_s"] <= fail["deadline_s"] + 2
    assert "worker-failure/gemma3" not in kv


def test_report_is_kept_and_junit_written(verify_run: Any, real_cache: Path) -> None:
    _, report, junit = verify_run
    assert (real_cache / "reports" / f"{report['inputs_digest']}.json").is_file()
    suite = ET.parse(junit).getroot()
    assert int(suite.get("tests", "0")) == len(report["checks"])
    assert int(suite.get("failures", "-1")) == 0


PACKAGE_FILES = {
    "DISCUSSION.md",
    "MANIFEST.sha256",
    "README.md",
    "REPRODUCE.md",
    "range-diff.txt",
    *(f"PR-{n}.{ext}" for n in range(1, 7) for ext in ("bundle", "md")),
    *(
        f"rules/{name}"
        for name in (
            "README.md",
            "requirements.txt",
            "rewrite.py",
            "cppsyntax.py",
            "layerloop.py",
            "layer-inputs.skip",
            "layer-range-archs.txt",
        )
    ),
}


def test_export_upstream_renders_the_package_of_the_real_series(
    verify_run: Any, real_cache: Path, tmp_path: Path
) -> None:
    """The third command users run dgr for, as they run it: after `dgr build` and `dgr verify` of the real
    series, `dgr export-upstream` with the committed bench of the same inputs renders the package (its lints
    on the real range-diff against the previous pin, the real report and the real bench included)."""
    assert verify_run[0].returncode == 0, verify_run[0].stderr[-3000:]
    out = tmp_path / "package"
    bench = ROOT / "docs" / "bench" / "bench.json"
    result = dgr(real_cache, "export-upstream", "--bench", str(bench), "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr[-5000:]
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert written == PACKAGE_FILES
    # the range-diff is against the previous pin of the series' history, not "no previous pin"
    assert "previous pin: " in (out / "range-diff.txt").read_text()
    manifest = dict(
        reversed(line.split("  ", 1)) for line in (out / "MANIFEST.sha256").read_text().splitlines()
    )
    assert set(manifest) == PACKAGE_FILES - {"MANIFEST.sha256"}


def test_generate_matches_unsplit(real_cache: Path, real_build: dict[str, Any]) -> None:
    result = dgr(real_cache, "generate", "--split", "0:7,7:19,19:30", "-n", "12", "--json", "The sky is")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["matches_unsplit"] and len(out["tokens"]) == 12 and out["text"]
    assert out["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_generate_gemma_by_name_matches_unsplit(real_cache: Path, real_build: dict[str, Any]) -> None:
    """Gemma 3 by its lock name, through three workers of uneven ranges (one of sliding-window layers only)
    and by default (three equal ranges), token for token the unsplit model's."""
    for split in (["--split", "0:4,4:11,11:18"], []):
        result = dgr(real_cache, "generate", "--model", "gemma3", *split, "-n", "16", "--json", "The sky is")
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["model"] == "gemma-3-270m-q4_k_m.gguf"
        assert out["matches_unsplit"] and out["tokens"] == out["unsplit_tokens"] and len(out["tokens"]) == 16
        assert out["split"] == ([[0, 4], [4, 11], [11, 18]] if split else [[0, 6], [6, 12], [12, 18]])


def long_prompt() -> str:
    """About 2,000 tokens of SmolLM2's tokenizer: four chunks of the workers' n_batch (512)."""
    return " ".join([prompts.LONG] * 26)


def test_generate_prefills_a_long_prompt_in_chunks(real_cache: Path, real_build: dict[str, Any]) -> None:
    """A prompt of several batches goes through three workers chunk by chunk and gives exactly the tokens
    of the unsplit model, which is prefilled the same way."""
    result = dgr(
        real_cache,
        "generate",
        "--split",
        "0:10,10:20,20:30",
        "--ctx",
        "4096",
        "-n",
        "8",
        "--json",
        long_prompt(),
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert len(out["prompt_tokens"]) > 3 * 512
    assert "prefilled in 4 chunk(s) of at most 512" in result.stderr
    assert out["matches_unsplit"] and out["tokens"] == out["unsplit_tokens"] and len(out["tokens"]) == 8


def test_generate_refuses_a_prompt_longer_than_the_context(
    real_cache: Path, real_build: dict[str, Any]
) -> None:
    result = dgr(real_cache, "generate", "--ctx", "1024", "-n", "8", long_prompt())
    assert result.returncode == 2, result.stderr
    assert re.search(r"the prompt has \d{4} tokens and -n asks for 8 more: \d{4} positions", result.stderr)
    assert (
        "the context holds 1024 (--ctx 1024)" in result.stderr and "raise --ctx to at least" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_generate_refuses_a_split_that_does_not_tile(real_cache: Path, real_build: dict[str, Any]) -> None:
    result = dgr(real_cache, "generate", "--split", "0:10,12:30", "x")
    assert result.returncode == 2
    assert "does not tile" in result.stderr


@pytest.fixture(scope="session")
def worker_bin(real_cache: Path, real_build: dict[str, Any]) -> Path:
    return Path(real_build["path"]) / "bin" / "layer-worker"


def test_worker_survives_garbage_on_its_transport(worker_bin: Path, real_cache: Path) -> None:
    """Garbage, an oversized frame and a broken header are each answered with an error; the session the
    worker held before goes on as if nothing happened."""
    model = next((real_cache / "models").glob("*/SmolLM2-*.gguf"))
    with Worker(worker_bin, "garbage") as w:
        w.load(model, context=ContextParams())
        first = w.request("decode", tokens=[1, 2, 3], session="s", epoch=1, pos=0, n_tokens=3).header
        w.send_raw(b"this is not a frame" * 10)
        assert w.read_reply("garbage").header["error"]["code"] == "bad_frame"
        w.send_raw(frames.encode({"id": 5, "op": "hello"})[:4] + struct.pack("<IQ", 10, 1 << 40))
        assert w.read_reply("oversized").header["error"]["code"] == "frame_too_large"
        w.send_raw(frames.PREFIX.pack(frames.MAGIC, 12, 0) + b"{broken json")
        assert w.read_reply("bad json").header["error"]["code"] == "bad_request"
        assert w.request("hello").header["protocol"] == 1
        after = w.request(
            "decode", tokens=[first["argmax"][0]], session="s", epoch=1, pos=3, n_tokens=1
        ).header
        assert after["n_pos"] == 4
    with Worker(worker_bin, "clean") as w:
        w.load(model, context=ContextParams())
        w.request("decode", tokens=[1, 2, 3], session="s", epoch=1, pos=0, n_tokens=3)
        clean = w.request(
            "decode", tokens=[first["argmax"][0]], session="s", epoch=1, pos=3, n_tokens=1
        ).header
    assert after["argmax"] == clean["argmax"]


def test_worker_decoder_refuses_malformed_bundles(worker_bin: Path, real_cache: Path) -> None:
    model = next((real_cache / "models").glob("*/SmolLM2-*.gguf"))
    with Worker(worker_bin, "head") as head, Worker(worker_bin, "tail") as tail:
        for w, (b, e) in ((head, (0, 15)), (tail, (15, 30))):
            w.load(model, (b, e), context=ContextParams())
        fields = {"session": "s", "epoch": 1, "pos": 0, "n_tokens": 3}
        good = head.request("decode", tokens=[1, 2, 3], **fields).body
        decoded = bundle.decode(good)
        meta = dict(decoded.meta)
        res = decoded.tensor("residual")
        cases = {
            "truncated": good[:-7],
            "trailing": good + b"\0" * 4,
            "unknown version": bundle.encode({**meta, "version": "2"}, decoded.tensors),
            "non-finite": bundle.encode(meta, {"residual": ("F32", res * float("nan"))}),
            "n_tokens": bundle.encode({**meta, "n_tokens": "4"}, decoded.tensors),
            "unknown dtype": good.replace(b'"dtype":"F32"', b'"dtype":"F64"', 1),
        }
        for name, data in cases.items():
            with pytest.raises(WorkerRequestError) as info:
                tail.request("decode", data, **fields)
            assert info.value.code in ("bad_bundle", "bundle_mismatch"), name
        reply = tail.request("decode", good, **fields)
        assert len(reply.header["argmax"]) == 1


def test_bench_quick_reports_every_key(real_cache: Path, real_build: dict[str, Any], tmp_path: Path) -> None:
    result = dgr(real_cache, "bench", "--quick", "--json", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert {
        "machine",
        "in_process",
        "workers",
        "memory",
        "codec",
        "build",
        "summary",
        "hop_bytes_per_token",
    } <= set(out)
    assert [r["shards"] for r in out["in_process"]] == [2, 3, 5] == [r["shards"] for r in out["workers"]]
    assert all(r["decode"]["same_tokens"] for r in out["in_process"] + out["workers"])
    for row in out["workers"]:
        step = row["decode"]
        # one figure per worker of the chain; the round trip that does no work is below any real step
        assert len(step["shard_step_ms"]) == row["shards"]
        assert 0 < step["round_trip_ms"] < min(step["shard_step_ms"]) < step["whole_step_ms"]
        # where each worker's step went: its parts up to the reply fit in the step the supervisor timed (its
        # write can end after the supervisor read the reply)
        parts = [step["whole_parts"], *step["shard_parts"]]
        assert len(parts) == row["shards"] + 1
        for part in parts:
            inside = sum(part[k] for k in ("read_ms", "parse_ms", "process_ms", "output_ms"))
            assert 0 < part["process_ms"] < inside < part["step_ms"] and part["write_ms"] > 0
            assert part["graphs_reused"] > 0.5
    # sessions decoding together through 2 and 3 ranges, each with the whole model's tokens
    assert [(b["shards"], b["sessions"]) for b in out["batched"]] == [(2, 4), (3, 4)]
    assert all(b["speed"]["same_tokens"] and b["same_as_alone"] for b in out["batched"])
    assert out["codec"]["cpp"]["codec_gbps"] > 0 and "zero_copy_decode" not in out["codec"]["cpp"]
    assert out["memory"][0]["layers"] == [0, 30] and out["memory"][1]["peak_rss_fraction"] < 1
    assert (tmp_path / "bench.json").is_file() and (tmp_path / "memory.png").read_bytes()[:4] == b"\x89PNG"
    assert out["model"]["name"] == "smollm2" and set(out["models"]) == {"gemma3"}
    gemma = out["models"]["gemma3"]
    assert gemma["model"]["n_layer"] == 18 and gemma["hop_bytes_per_token"] == 640 * 4
    assert [r["shards"] for r in gemma["in_process"]] == [2, 3, 5] == [r["shards"] for r in gemma["workers"]]
    assert all(r["decode"]["same_tokens"] for r in gemma["in_process"] + gemma["workers"])
    assert [r["layers"] for r in gemma["memory"]] == [[0, 18], [6, 12]]
    assert gemma["memory"][1]["peak_rss_fraction"] < 0.5  # a middle third holds neither end of the head
    assert (tmp_path / "memory-gemma3.png").read_bytes()[:4] == b"\x89PNG"
    # each range of 2, 3 and 5 ranges from the files of its parts against from the whole file, both models:
    # no range stores the whole file, a middle range stores a small share of it
    for figures, n_layer in ((out["parts"], 30), (gemma["parts"], 18)):
        assert [s["shards"] for s in figures["splits"]] == [2, 3, 5]
        for s in figures["splits"]:
            assert [tuple(r["layers"]) for r in s["ranges"]] == inventory.split(n_layer, s["shards"])
            for r in s["ranges"]:
                assert 0 < r["part_bytes"] < figures["whole_bytes"]
                assert r["load_parts_s"] > 0 and r["load_whole_s"] > 0 and r["load"]["median"] > 0
                assert min(v for k, v in r.items() if k.startswith("peak_rss_")) > 0
        middle = figures["splits"][2]["ranges"][2]
        assert middle["part_bytes"] < figures["whole_bytes"] / 4


def test_worker_answers_the_argmax_without_the_logits(worker_bin: Path, real_cache: Path) -> None:
    """`logits: argmax` gives the argmax of the last token, as `last` does, and no logits."""
    model = next((real_cache / "models").glob("*/SmolLM2-*.gguf"))
    with Worker(worker_bin, "whole") as w:
        w.load(model, context=ContextParams())
        fields = {"epoch": 1, "pos": 0, "n_tokens": 3, "tokens": [1, 2, 3]}
        last = w.request("decode", session="a", logits="last", **fields)
        alone = w.request("decode", session="b", logits="argmax", **fields)
        with pytest.raises(WorkerRequestError, match="none, last, all or argmax"):
            w.request("decode", session="c", logits="max", **fields)
    assert alone.header["argmax"] == last.header["argmax"] and len(last.header["argmax"]) == 1
    assert len(last.body) == 4 * last.header["n_vocab"] and alone.body == b""


def test_the_unsplit_model_gives_the_input_of_a_range(worker_bin: Path, real_cache: Path) -> None:
    """`layer_inp`: the unsplit model (no range asked) gives the hidden state entering a layer; the range that
    starts there, given it, computes the unsplit model's logits bit for bit (the offload group's
    reference)."""
    model = next((real_cache / "models").glob("*/SmolLM2-*.gguf"))
    fields = {"epoch": 1, "pos": 0, "n_tokens": 4, "tokens": [1, 2, 3, 4]}
    with Worker(worker_bin, "whole") as whole, Worker(worker_bin, "[20, 30)") as tail:
        whole.load(model, None, context=ContextParams(), layer_inp=[20])
        tail.load(model, (20, 30), context=ContextParams())
        hidden = whole.request("decode", session="a", layer_inp=20, logits="none", **fields)
        want = whole.request("decode", session="b", logits="all", **fields)
        assert bundle.decode(hidden.body).meta["layer_end"] == "20"
        rest = {k: v for k, v in fields.items() if k != "tokens"}
        got = tail.request("decode", hidden.body, session="a", logits="all", **rest)
        assert len(got.body) == len(want.body) == 4 * 4 * want.header["n_vocab"]
        assert got.body == want.body
        with pytest.raises(WorkerRequestError, match="layer_inp 10 is not a layer_inp of the load"):
            whole.request("decode", session="c", layer_inp=10, logits="none", **fields)
        with pytest.raises(WorkerRequestError, match="logits must be none"):
            whole.request("decode", session="c", layer_inp=20, logits="last", **fields)
        with pytest.raises(
            WorkerRequestError, match=r"layer_inp 20 is not a layer after the first of \[20, 30\)"
        ):
            tail.load(model, (20, 30), context=ContextParams(), layer_inp=[20])


def test_sessions_decode_together_through_ranges_as_alone(worker_bin: Path, real_cache: Path) -> None:
    """Three sessions decoding together (`decode_batch`) through two ranges give each session the tokens of
    the whole model decoding it alone; a refused batch changes no session."""
    model = next((real_cache / "models").glob("*/SmolLM2-*.gguf"))
    prompts_ = [[1, 2, 3], [4, 5, 6, 7], [8, 9]]
    with Pipeline(worker_bin, model, None, max_sessions=4) as whole:
        alone = [whole.generate(f"a{i}", 1, p, 6) for i, p in enumerate(prompts_)]
    with Pipeline(worker_bin, model, [(0, 12), (12, 30)], max_sessions=4) as split:
        tokens = [[split.step(f"s{i}", 1, 0, p).argmax[-1]] for i, p in enumerate(prompts_)]
        # refused, and nothing changes: a session twice, a session not cached, a wrong position
        for bad in (
            [BatchStep("s0", 1, 3, [1]), BatchStep("s0", 1, 3, [1])],
            [BatchStep("s0", 1, 3, [1]), BatchStep("nobody", 1, 3, [1])],
            [BatchStep("s0", 1, 3, [1]), BatchStep("s1", 1, 3, [1])],
        ):
            with pytest.raises(WorkerRequestError):
                split.step_batch(bad)
        for j in range(5):
            steps = [
                BatchStep(f"s{i}", 1, len(p) + j, [t[-1]])
                for i, (p, t) in enumerate(zip(prompts_, tokens, strict=True))
            ]
            for t, token in zip(tokens, split.step_batch(steps).argmax, strict=True):
                t.append(token)
        sessions = split.workers[1].request("sessions").header["sessions"]
    assert tokens == alone
    assert sorted((s["session"], s["n_pos"]) for s in sessions) == [("s0", 8), ("s1", 9), ("s2", 7)]


def test_ranges_that_forward_decode_as_the_supervisor_relays(worker_bin: Path, real_cache: Path) -> None:
    """`forward`: each range sends its hidden state on to the next itself and the last replies, with the trail
    of the others' replies. The tokens, the logits and the sessions' positions are those of the relayed
    chain; a refusal on the way names the range that refused; a range that dies is named, the others release
    the session."""
    model = next((real_cache / "models").glob("*/SmolLM2-*.gguf"))
    split = [(0, 10), (10, 20), (20, 30)]
    prompt = [1, 2, 3, 4, 5]
    with (
        Pipeline(worker_bin, model, split) as relayed,
        Pipeline(worker_bin, model, split, forward=True) as fwd,
    ):
        assert fwd.forward and not relayed.forward
        assert fwd.generate("g", 1, prompt, 8) == relayed.generate("g", 1, prompt, 8)
        for w in fwd.workers:
            w.request("timing")  # from here
        want = relayed.step("a", 1, 0, prompt, logits="all")
        got = fwd.step("a", 1, 0, prompt, logits="all")
        assert got.logits.tobytes() == want.logits.tobytes() and got.argmax == want.argmax
        # each range counts the bytes it sent on (`timing`): one frame (a 16-byte prefix, the request's
        # header, the bundle the relayed range replies with) per forwarded step; the last sends nothing on
        sent = [int(w.request("timing").header["forwarded_bytes"]) for w in fwd.workers]
        body = (
            relayed.workers[0].request("decode", session="z", epoch=1, pos=0, n_tokens=5, tokens=prompt).body
        )
        body1 = relayed.workers[1].request("decode", body, session="z", epoch=1, pos=0, n_tokens=5).body
        assert 16 + len(body) < sent[0] < 16 + len(body) + 1024
        assert 16 + len(body1) < sent[1] < 16 + len(body1) + 1024
        assert sent[2] == 0 and len(body) == len(body1) > 5 * 576 * 4
        for w in relayed.workers[:2]:
            w.request("release", session="z")
        assert len(got.seconds) == 1 and got.evicted == [[], [], []]
        steps = [BatchStep("a", 1, 5, [got.argmax[-1]])]
        assert fwd.step_batch(steps).argmax == relayed.step_batch(steps).argmax
        assert [w.request("sessions").header["sessions"] for w in fwd.workers] == [
            w.request("sessions").header["sessions"] for w in relayed.workers
        ]
        # the second range refuses: a session it does not have (released there alone)
        fwd.workers[1].request("release", session="a")
        with pytest.raises(WorkerRequestError, match=r"shard1\[10,20\): decode: cache_miss"):
            fwd.step("a", 1, 6, [1])
        # refused before anything changes: forward from the last range, a negative forward
        with pytest.raises(WorkerRequestError, match="holds the last layer"):
            fwd.workers[2].request("decode", b"", session="x", epoch=1, pos=0, n_tokens=1, forward=1)
        with pytest.raises(WorkerRequestError, match="forward must not be negative"):
            fwd.workers[0].request("decode", session="x", epoch=1, pos=0, n_tokens=1, tokens=[1], forward=-1)
        # a worker started without --next-fd cannot forward
        with pytest.raises(WorkerRequestError, match="without --next-fd"):
            relayed.workers[0].request(
                "decode", session="x", epoch=1, pos=0, n_tokens=1, tokens=[1], forward=1
            )
        # the middle range dies: it is named, and the first releases the session
        fwd.step("b", 1, 0, prompt)
        fwd.workers[1].proc.kill()
        fwd.workers[1].proc.wait()
        with pytest.raises(ShardFailedError, match=r"shard 1 \(layers \[10, 20\)\)"):
            fwd.step("b", 1, 5, [1])
        assert "b" not in {s["session"] for s in fwd.workers[0].request("sessions").header["sessions"]}


def test_the_rpc_bench_counts_the_frames_ranges_send_on(worker_bin: Path, real_cache: Path) -> None:
    """`dgr bench --rpc`'s ranges forward: their bytes per decoded token are the whole model's and one frame
    of the hidden state per hop, counted by the ranges that send them on; the last range samples (argmax), so
    no logits cross a pipe; the tokens are the whole model's."""
    model = next((real_cache / "models").glob("*/SmolLM2-*.gguf"))
    prompt = list(range(1, 11))
    splits = {1: [(0, 30)], 2: [(0, 15), (15, 30)], 3: [(0, 10), (10, 20), (20, 30)]}
    runs = {k: rpc._ranges_run(worker_bin, model, split, prompt, 6, 2) for k, split in splits.items()}
    assert runs[2][1] == runs[3][1] == runs[1][1]
    per_token = {k: row["wire_bytes_per_token"] for k, (row, _) in runs.items()}
    first = {k: row["wire_bytes_before_first_token"] for k, (row, _) in runs.items()}
    hidden = 576 * 4  # one token's hidden state, float32
    assert per_token[1] < 1024  # a step and its argmax, no logits
    for k in (2, 3):
        hops = k - 1
        assert hops * hidden < per_token[k] - per_token[1] < hops * (hidden + 1024)
        assert hops * len(prompt) * hidden < first[k] - first[1] < hops * (len(prompt) * hidden + 2048)


@pytest.mark.parametrize("value", ["99", "abc", "1", "-3"])
def test_worker_refuses_a_next_fd_that_is_not_an_open_descriptor(worker_bin: Path, value: str) -> None:
    """`--next-fd` must name an open file descriptor above 2 (stdin, stdout and stderr are the protocol's):
    anything else is a usage error naming it, before the worker serves anything."""
    result = subprocess.run(
        [str(worker_bin), "--next-fd", value], input=b"", capture_output=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert f"--next-fd {value} is not an open file descriptor above 2" in result.stderr.decode()


def test_worker_times_its_decode_requests(worker_bin: Path, real_cache: Path) -> None:
    """`timing` accounts for the decode requests since the last one (a refused one and other ops do not
    count), then starts over; one-token steps after the first reuse the compute graph."""
    model = next((real_cache / "models").glob("*/SmolLM2-*.gguf"))
    with Worker(worker_bin, "head") as head, Worker(worker_bin, "tail") as tail:
        head.load(model, (0, 15), context=ContextParams())
        tail.load(model, (15, 30), context=ContextParams())
        fields = {"session": "s", "epoch": 1, "n_tokens": 1}
        token = 1
        for pos in range(5):
            body = head.request("decode", tokens=[token], pos=pos, **fields).body
            token = tail.request("decode", body, pos=pos, **fields).header["argmax"][0]
            head.request("sessions")
        with pytest.raises(WorkerRequestError):
            head.request("decode", tokens=[token], pos=99, **fields)
        timings = [w.request("timing").header for w in (head, tail)]
        again = head.request("timing").header
    for t in timings:
        assert t["n_requests"] == 5 and t["graphs_reused"] == 4
        assert all(
            t[k] > 0 for k in ("wait_us", "read_us", "parse_us", "process_us", "output_us", "write_us")
        )
        assert t["process_us"] > t["parse_us"] + t["output_us"]
    # the tail waits while the head computes (its wait starts when the write of its reply ends, which can be
    # after the supervisor has read the reply and sent the head the next step: a busy machine showed it)
    assert timings[1]["wait_us"] + timings[1]["write_us"] > timings[0]["process_us"]
    assert again["n_requests"] == 0 and again["process_us"] == 0


def test_worker_sets_no_model_parameter_unless_asked(worker_bin: Path, real_cache: Path) -> None:
    """Without a range (and without `mmap`) the worker loads with llama_model_default_params() as they are,
    which is what `no-range-vs-upstream` compares with upstream; asking for the whole range sets them."""
    model = next((real_cache / "models").glob("*/SmolLM2-*.gguf"))
    with Worker(worker_bin, "defaults") as w:
        plain = w.load(model, None)
        ranged = w.load(model, (0, 30))
        unmapped = w.load(model, None, mmap=False)
    assert plain["default_params"] is True
    assert (plain["layer_begin"], plain["layer_end"]) == (0, 30)
    assert ranged["default_params"] is False
    assert unmapped["default_params"] is False


def test_every_split_ran_from_the_parts_as_from_the_whole_file(verify_run: Any) -> None:
    """Issue 47: every split of both models, and the whole model as one range, from the parts, each range
    from a directory of only its files: bit for bit the whole file's logits, states and ownership; a range
    of a split stores less than the whole file."""
    bnd = checks_of(verify_run[1], "boundary")
    for model, n_layer in MODELS.items():
        for k in (1, 2, 3, 6, n_layer):
            f = bnd[f"parts-split-{k}/{model}"]["figures"]
            assert bnd[f"parts-split-{k}/{model}"]["passed"], (model, k)
            assert f["logits_bit_exact"] and f["states_bit_exact"] and f["ownership_equal"], (model, k)
            assert f["kv_bytes_equal"] and f["max_abs_diff"] == 0.0, (model, k)
            assert len(f["range_bytes"]) == k and (k == 1 or max(f["range_fraction"]) < 1), (model, k)
