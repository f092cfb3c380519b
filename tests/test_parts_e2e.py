"""End to end: a range of a real model run from its parts by the published worker (marker e2e). Each range
loads from a directory that holds only the files it needs (dgr.verify.models.parts.ModelParts), as a machine
that fetched its range's files holds them: the logits, the saved states and the ownership of a split equal
the same split's from the whole file, bit for bit; `dgr generate --parts` gives the unsplit model's tokens,
and refuses a range whose directory lacks a file it needs. A part written with the `gguf` package directly,
not by dgr (SmolLM2's layers 10 to 29 and its tied head in one file, the case of issue 47), loads as its
range [10, 30) and computes what the whole file computes.

These need the loader of the series to accept a split whose files that hold none of the range's tensors are
missing, and a file without the tensors of the layers outside its range (issue 47, item 1)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import gguf
import platformdirs
import pytest
from dgr.builds import buildcache, buildplan
from dgr.contracts import locks
from dgr.contracts import parts as records
from dgr.core.paths import Cache, Context, Repo
from dgr.errors import NetworkError
from dgr.sources import model as model_source
from dgr.verify.checks import boundary
from dgr.verify.models import inventory, prompts
from dgr.verify.models import parts as cutter
from dgr.verify.wire.client import ContextParams, Worker
from dgr.verify.wire.pipeline import Pipeline

from tests.helpers import ROOT, run_dgr

pytestmark = pytest.mark.e2e

USER_CACHE = Path(os.environ.get("DGR_CACHE_DIR") or platformdirs.user_cache_dir("dgr"))
"""Read at import, before the autouse fixture gives each test its own cache."""


@pytest.fixture(scope="module")
def published(series_cache: Path) -> tuple[Path, Path]:
    """(the cache, its build of the current inputs): published already in the session's cache of the real
    series (tests/conftest.py) or the user's cache, found as `dgr status` finds it; else built in the
    session's cache with `dgr build --json` (which tests/test_verify_e2e.py then finds built)."""
    for root in (series_cache, USER_CACHE):
        if not root.is_dir():
            continue
        ctx = Context(Repo(ROOT), Cache(root))
        digest = buildplan.plan(ctx, buildplan.Request()).digest
        store = buildcache.BuildStore(ctx.cache)
        if store.lookup(digest) is not None:
            return root, store.path(digest)
    env = {"DGR_REPO": str(ROOT), "DGR_CACHE_DIR": str(series_cache)}
    result = run_dgr("build", "--json", env=env, timeout=3600)
    assert result.returncode == 0, result.stderr
    return series_cache, Path(json.loads(result.stdout)["path"])


@pytest.fixture(scope="module")
def smollm2(published: tuple[Path, Path]) -> tuple[Path, str]:
    """SmolLM2's file and sha256: from the build's cache when there, else fetched into it."""
    lock = locks.load_models(ROOT / "locks").get("smollm2")
    try:
        return model_source.fetch(Cache(published[0]), lock), lock.sha256
    except NetworkError as exc:
        pytest.skip(f"SmolLM2 is not cached and cannot be fetched: {exc.what}")


def worker_of(published: tuple[Path, Path]) -> Path:
    return published[1] / "bin" / "layer-worker"


def test_a_split_run_from_only_its_files_is_the_whole_file_s_bit_for_bit(
    published: tuple[Path, Path], smollm2: tuple[Path, str], tmp_path: Path
) -> None:
    """Thirds of SmolLM2 (the last one holding the tied head: it needs the input file too), each from its own
    directory of parts: the prefill's logits, each range's ownership, KV bytes and saved state are those of
    the same split from the whole file."""
    path, sha = smollm2
    record = records.load_lock(ROOT / "locks").get("smollm2")
    directory, manifest = cutter.ensure_cached(published[0], path, sha, record)
    parts = cutter.ModelParts(directory, manifest, tmp_path / "ranges")
    split = inventory.split(manifest.n_layer, 3)
    ranges = [parts.range(b, e) for b, e in split]
    assert all(r.bytes < manifest.source.size for r in ranges)
    worker = worker_of(published)
    with Pipeline(worker, path, split) as whole:
        tokens = whole.tokenize(prompts.LONG)[: boundary.PREFILL_TOKENS]
        ref = whole.step(boundary.PREFILL_SESSION, 1, 0, tokens, logits="all").logits
        ref_runs = boundary.ran(whole)
    with Pipeline(worker, parts.model_for, split) as from_parts:
        out = from_parts.step(boundary.PREFILL_SESSION, 1, 0, tokens, logits="all").logits
        runs = boundary.ran(from_parts)
    problems, figures = boundary.parts_verdict(ranges, ref, out, ref_runs, runs)
    assert problems == [], problems
    assert figures["logits_bit_exact"] and figures["states_bit_exact"] and figures["ownership_equal"]


def _write_range_with_gguf(source: Path, out: Path, begin: int, end: int) -> None:
    """The model at `source` written again with the gguf package alone: every KV, and only the tensors of the
    layers [begin, end) with the output norm and, the head being tied, the token embeddings, as a user of
    gguf-py would write them."""
    reader = gguf.GGUFReader(source)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    writer = gguf.GGUFWriter(out, arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == gguf.Keys.General.ARCHITECTURE:
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    keep = {f"blk.{i}." for i in range(begin, end)}
    for t in reader.tensors:
        if t.name in ("token_embd.weight", "output_norm.weight") or any(t.name.startswith(k) for k in keep):
            writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_part_written_with_the_gguf_package_loads_as_its_range(
    published: tuple[Path, Path], smollm2: tuple[Path, str], tmp_path: Path
) -> None:
    """The case of issue 47's "Why": SmolLM2's layers 10 to 29 and its tied head written by gguf.GGUFWriter
    (74.4 of 96.6 MB) load as [10, 30): the tensors and the flags of the whole file's [10, 30), the same
    model identity (every KV is the model's), and fed the head's bundle, the same logits bit for bit."""
    path, _ = smollm2
    part = tmp_path / "smollm2-layers-10-30.gguf"
    _write_range_with_gguf(path, part, 10, 30)
    assert part.stat().st_size < 0.8 * path.stat().st_size
    worker = worker_of(published)
    context = ContextParams(n_ctx=256, max_sessions=1)
    with (
        Worker(worker, "head") as head,
        Worker(worker, "tail-whole") as whole,
        Worker(worker, "tail-part") as tail,
    ):
        head.load(path, (0, 10), context=context)
        want = whole.load(path, (10, 30), context=context)
        got = tail.load(part, (10, 30), context=context)
        for key in (*boundary.OWNERSHIP_FIELDS, "identity"):
            assert got[key] == want[key], key
        assert sorted(map(tuple, got["tensors"])) == sorted(map(tuple, want["tensors"]))
        tokens = head.request("tokenize", text=prompts.GENERATION[0]).header["tokens"]
        fields: dict[str, Any] = {
            "session": "s",
            "epoch": 1,
            "pos": 0,
            "n_tokens": len(tokens),
            "logits": "all",
        }
        bundle = head.request("decode", tokens=tokens, **fields).body
        a = whole.request("decode", bundle, **fields)
        b = tail.request("decode", bundle, **fields)
    assert a.header["argmax"] == b.header["argmax"]
    assert a.body == b.body  # the logits, bit for bit


def test_generate_from_the_parts_gives_the_unsplit_model_s_tokens(published: tuple[Path, Path]) -> None:
    env = {"DGR_REPO": str(ROOT), "DGR_CACHE_DIR": str(published[0])}
    args = ["generate", "--model", "smollm2", "--split", "0:10,10:30", "--parts", "-n", "8", "--json"]
    result = run_dgr(*args, prompts.GENERATION[0], env=env, timeout=900)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["matches_unsplit"] and out["tokens"] == out["unsplit_tokens"] and len(out["tokens"]) == 8
    assert [(r["begin"], r["end"]) for r in out["parts"]["ranges"]] == [(0, 10), (10, 30)]
    assert all(r["bytes"] < r["whole_bytes"] for r in out["parts"]["ranges"])
    assert not leftovers(published[0])


def test_generate_refuses_a_range_whose_directory_lacks_a_file(
    published: tuple[Path, Path], smollm2: tuple[Path, str], tmp_path: Path
) -> None:
    """A machine that fetched the files of [10, 30) only cannot run [0, 10): exit 8 naming the first file
    it lacks, what it holds and the range, before any worker starts."""
    path, sha = smollm2
    record = records.load_lock(ROOT / "locks").get("smollm2")
    directory, manifest = cutter.ensure_cached(published[0], path, sha, record)
    fetched = tmp_path / "fetched"
    fetched.mkdir()
    for name in [records.MANIFEST, *(p.name for p in manifest.files_for(10, 30))]:
        shutil.copy(directory / name, fetched / name)
    env = {"DGR_REPO": str(ROOT), "DGR_CACHE_DIR": str(published[0])}
    args = ["generate", "--model", "smollm2", "--split", "0:10,10:30", "--parts-dir", str(fetched), "-n", "4"]
    result = run_dgr(*args, "Hi", env=env, timeout=900)
    assert result.returncode == 8, result.stderr
    missing = next(p for p in manifest.files_for(0, 10) if not (fetched / p.name).exists())
    assert missing.what == "layer 0"  # the input is there: the tied head of [10, 30) needs it
    said = f"{fetched / missing.name}: missing: the range [0, 10) needs it (it holds layer 0 of the parts in"
    assert said in result.stderr
    assert "Traceback" not in result.stderr
    assert not leftovers(published[0])


def leftovers(cache: Path) -> list[str]:
    """The range directories of `dgr generate --parts` left in the cache's tmp/ (none after a run)."""
    tmp = cache / "tmp"
    return [p.name for p in tmp.iterdir() if p.name.startswith("generate-parts.")] if tmp.is_dir() else []
