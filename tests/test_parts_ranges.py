"""A range run from its parts (dgr.verify.models.parts: `ModelParts`, `stage_range`, `check_range`,
`PartsStore`): each range loads from a directory of its own that holds only the files it needs (hard links
of the model's parts, and their manifest), checked where the range is started (`Pipeline`, given a model per
range, resolves every range before any worker starts; `dgr generate --parts`); bad input is refused with its
exit code and leaves no range directory: a file the range needs missing, another part in its place, a part of
another model, a part cut short (exit 8, the offset), a part whose sha256 differs from locks/parts.toml
(exit 3). Also: the boundary group's comparison of a split run from the parts with the whole file's
(`parts_verdict`), the workers of a chain loading at the same time, and locks/parts.toml in the harness.

Unit tests, on the small synthetic models of tests/test_parts.py and a fake worker (a Python script that
speaks the worker's frames); tests/test_parts_e2e.py runs the real worker."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from dgr.builds import harness
from dgr.cli import main
from dgr.commands import generate
from dgr.contracts import parts as records
from dgr.contracts.parts import PartsLock, PartsManifest, PartsRecord
from dgr.contracts.report import SYNTHETIC
from dgr.core.digest import sha256_file
from dgr.core.paths import Repo
from dgr.errors import ConfigError, IntegrityError
from dgr.verify.checks import boundary
from dgr.verify.checks.boundary import RangeRun
from dgr.verify.models import gguffile
from dgr.verify.models import parts as cutter
from dgr.verify.models.env import Env, RealModel
from dgr.verify.wire.pipeline import Pipeline

from tests.helpers import ROOT
from tests.test_parts import cut, layer_part, make_model, repo_locking


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return make_model(tmp_path / "tiny.gguf")


@pytest.fixture
def fake_repo(tmp_path: Path, tiny: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository that locks `tiny` as its default model (tests/test_parts.py)."""
    return repo_locking(tmp_path, tiny, monkeypatch)


# --------------------------------------------------------------------------- a range's own directory


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, PartsManifest]:
    """The parts of a 3-layer model with a tied head: metadata, input, 3 layers, output, other."""
    out = tmp_path / "parts"
    return out, cut(make_model(tmp_path / "m.gguf"), out)


def opened(written: tuple[Path, PartsManifest], scratch: Path) -> cutter.ModelParts:
    directory, manifest = written
    return cutter.ModelParts(directory, manifest, scratch)


def test_a_range_loads_from_a_directory_of_only_its_files(
    written: tuple[Path, PartsManifest], tmp_path: Path
) -> None:
    """The first range holds the metadata, the input (the token embeddings), its layers and the other
    tensors; the last one, of a tied head, the input too; each file a hard link of the part (no byte copied),
    the first file what the loader is given."""
    directory, manifest = written
    parts = opened(written, tmp_path / "scratch")
    for begin, end in ((0, 2), (2, 3), (1, 2), (0, 3)):
        r = parts.range(begin, end)
        assert r.directory == tmp_path / "scratch" / f"{begin}-{end}"
        names = {p.name for p in manifest.files_for(begin, end)}
        assert {p.name for p in r.directory.iterdir()} == names | {records.MANIFEST}
        assert r.first == r.directory / manifest.first.name and parts.model_for(begin, end) == r.first
        assert r.bytes == sum(p.size for p in manifest.files_for(begin, end)) < manifest.source.size + 4096
        for name in names:
            assert (r.directory / name).stat().st_ino == (directory / name).stat().st_ino
    middle = {p.what for p in parts.range(1, 2).files}
    assert middle == {"metadata", "layer 1", "other"}
    assert {p.what for p in parts.range(2, 3).files} == {"metadata", "input", "layer 2", "output", "other"}


def test_a_range_of_a_directory_with_only_its_files_is_staged_from_it(
    written: tuple[Path, PartsManifest], tmp_path: Path
) -> None:
    """A machine that fetched only the files of its range has what the range needs: the others may be
    missing."""
    directory, manifest = written
    fetched = tmp_path / "fetched"
    fetched.mkdir()
    for name in [records.MANIFEST, *(p.name for p in manifest.files_for(1, 2))]:
        shutil.copy(directory / name, fetched / name)
    parts = cutter.ModelParts.open(fetched, manifest.source.sha256, None, tmp_path / "scratch")
    assert parts.range(1, 2).first.is_file()
    with pytest.raises(ConfigError, match=r"missing: the range \[0, 1\) needs it \(it holds input of the"):
        parts.range(0, 1)
    assert not (tmp_path / "scratch" / "0-1").exists()


def test_a_range_directory_is_checked_every_time_the_range_starts(
    written: tuple[Path, PartsManifest], tmp_path: Path
) -> None:
    """A file the range needs that is gone from its directory after it was made is named with the range
    (exit 8), and so is another layer's part in its place: what it holds and what the place holds."""
    _, manifest = written
    parts = opened(written, tmp_path / "scratch")
    r = parts.range(0, 2)
    (r.directory / layer_part(manifest, 1).name).unlink()
    with pytest.raises(ConfigError) as missing:
        parts.model_for(0, 2)
    assert missing.value.exit_code == 8
    assert missing.value.what == (
        f"{r.directory / layer_part(manifest, 1).name}: missing: the range [0, 2) needs it (it holds layer 1 "
        f"of the parts in {r.directory})"
    )
    # layer 2's part under layer 1's name
    shutil.copy(parts.directory / layer_part(manifest, 2).name, r.directory / layer_part(manifest, 1).name)
    with pytest.raises(ConfigError) as other:
        parts.model_for(0, 2)
    assert other.value.exit_code == 8
    assert other.value.what == (
        f"{r.directory / layer_part(manifest, 1).name}: holds layer 2, where {layer_part(manifest, 1).name} "
        "holds layer 1"
    )


def test_a_part_of_another_model_in_a_range_is_refused_naming_both(
    written: tuple[Path, PartsManifest], tmp_path: Path
) -> None:
    _, manifest = written
    theirs = cut(make_model(tmp_path / "b.gguf", seed=7), tmp_path / "b")
    parts = opened(written, tmp_path / "scratch")
    r = parts.range(1, 2)
    name = layer_part(manifest, 1).name
    (r.directory / name).unlink()
    shutil.copy(tmp_path / "b" / layer_part(theirs, 1).name, r.directory / name)
    with pytest.raises(IntegrityError) as raised:
        parts.model_for(1, 2)
    assert raised.value.exit_code == 3
    assert raised.value.what == f"{r.directory / name}: a part of another model (part.source.sha256)"
    assert raised.value.expected == f"a part of the model with sha256 {manifest.source.sha256}"
    assert raised.value.actual == f"a part of the model with sha256 {theirs.source.sha256}"
    # the parts of another model altogether
    with pytest.raises(IntegrityError, match=r"the parts of another model \(b\.gguf\)") as whole:
        cutter.ModelParts.open(tmp_path / "b", manifest.source.sha256, None, tmp_path / "s2")
    assert whole.value.actual == f"the parts of the model with sha256 {theirs.source.sha256}"


def test_a_truncated_part_in_a_range_is_exit_8_naming_the_offset(
    written: tuple[Path, PartsManifest], tmp_path: Path
) -> None:
    directory, manifest = written
    part = layer_part(manifest, 2)
    header = gguffile.read(directory / part.name)
    last = header.tensors[-1]
    end = header.data_offset + last.offset + last.n_bytes
    (directory / part.name).write_bytes((directory / part.name).read_bytes()[: end - 10])
    parts = opened(written, tmp_path / "scratch")
    with pytest.raises(ConfigError) as raised:
        parts.range(2, 3)
    assert raised.value.exit_code == 8
    at = header.data_offset + last.offset
    assert raised.value.what.startswith(
        f"{directory / part.name}: not a valid GGUF file: at byte {at}, tensor `{last.name}`"
    )
    assert not (tmp_path / "scratch" / "2-3").exists()  # no range directory is left
    assert parts.range(0, 2).first.is_file()  # a range that does not need it


def test_parts_that_differ_from_the_lock_are_exit_3_and_nothing_is_published(
    written: tuple[Path, PartsManifest], tmp_path: Path
) -> None:
    directory, manifest = written
    wrong = PartsRecord.of("m", manifest)
    name = layer_part(manifest, 0).name
    wrong = PartsRecord("m", wrong.source_sha256, {**wrong.files, name: "e" * 64})
    with pytest.raises(IntegrityError) as raised:
        cutter.ModelParts.open(directory, manifest.source.sha256, wrong, tmp_path / "scratch")
    assert raised.value.exit_code == 3
    assert raised.value.what == f"{directory}/{name}: its sha256 differs from locks/parts.toml (m)"
    assert (raised.value.expected, raised.value.actual) == ("e" * 64, layer_part(manifest, 0).sha256)
    # into the cache: nothing is published
    cache = tmp_path / "cache"
    with pytest.raises(IntegrityError, match=r"differs from locks/parts\.toml"):
        cutter.ensure_cached(cache, tmp_path / "m.gguf", manifest.source.sha256, wrong)
    assert list((cache / cutter.CACHE_DIR).iterdir()) == []
    found, again = cutter.ensure_cached(cache, tmp_path / "m.gguf", manifest.source.sha256, None)
    assert found == cutter.cache_dir(cache, manifest.source.sha256) and again == manifest
    with pytest.raises(IntegrityError, match=r"differs from locks/parts\.toml"):
        cutter.ensure_cached(cache, tmp_path / "m.gguf", manifest.source.sha256, wrong)


def test_a_range_directory_with_another_manifest_is_refused(
    written: tuple[Path, PartsManifest], tmp_path: Path
) -> None:
    _, manifest = written
    parts = opened(written, tmp_path / "scratch")
    r = parts.range(0, 1)
    data = (r.directory / records.MANIFEST).read_text()
    (r.directory / records.MANIFEST).unlink()
    (r.directory / records.MANIFEST).write_text(data.replace(f"size = {manifest.source.size}", "size = 1"))
    with pytest.raises(
        IntegrityError, match=r"parts\.toml: not the manifest of the parts the range \[0, 1\)"
    ):
        parts.model_for(0, 1)


def test_what_was_read_of_a_file_is_read_again_only_when_it_changed(
    written: tuple[Path, PartsManifest], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A range's files are hard links of the parts: the check reads each file once per run; a file written
    since (another inode or size) is read again."""
    _, manifest = written
    hashed: list[str] = []
    real = sha256_file

    def counting(path: Path) -> str:
        hashed.append(path.name)
        return real(path)

    monkeypatch.setattr("dgr.verify.models.parts.sha256_file", counting)
    parts = opened(written, tmp_path / "scratch")
    parts.range(0, 3)
    parts.range(0, 3)
    parts.range(1, 2)
    assert sorted(hashed) == sorted(p.name for p in manifest.files)
    victim = parts.range(1, 2).directory / layer_part(manifest, 1).name
    data = victim.read_bytes()
    victim.unlink()
    victim.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # a new file: other bytes, the same size
    with pytest.raises(IntegrityError, match="its sha256 differs"):
        parts.range(1, 2)
    assert hashed.count(victim.name) == 2


# --------------------------------------------------------------------------- the parts of a verify run


def test_the_store_writes_the_parts_once_holds_them_to_the_lock_and_removes_the_ranges(
    tmp_path: Path,
) -> None:
    model = make_model(tmp_path / "m.gguf")
    sha = sha256_file(model)
    manifest = cut(model, tmp_path / "reference")
    lock = PartsLock({"m": PartsRecord.of("m", manifest)})
    cache, scratch = tmp_path / "cache", tmp_path / "cache" / "tmp" / "verify-parts.1"
    store = cutter.PartsStore(cache, scratch, lock, {"m": (model, sha), "n": (model, sha)})
    parts = store.of("m")
    assert parts.directory == cutter.cache_dir(cache, sha) and parts.manifest == manifest
    assert store.of("m") is parts
    assert parts.range(0, 1).directory == scratch / "m" / "0-1"
    # a model without a record is refused, and so again without trying once more
    with pytest.raises(ConfigError, match=r"locks/parts\.toml has no parts of n") as first:
        store.of("n")
    with pytest.raises(ConfigError) as second:
        store.of("n")
    assert (
        second.value is first.value
        and first.value.hint == "write and record them: `dgr parts --model n --lock`"
    )
    store.close()
    assert not scratch.exists() and cutter.check(parts.directory) == manifest


# --------------------------------------------------------------------------- a chain started from parts

FAKE_WORKER = """#!{python}
# a layer-worker that answers `load` only once all {n} workers of the chain have asked to load
import os, sys, time
from pathlib import Path
from dgr.verify.wire import frames

marks = Path(os.environ["FAKE_MARKS"])
out = sys.stdout.buffer
while (frame := frames.read(sys.stdin.buffer)) is not None:
    h = frame.header
    reply = {{"id": h["id"], "ok": True}}
    if h["op"] == "load":
        (marks / str(os.getpid())).write_text(h["model"])
        deadline = time.monotonic() + 3
        while len(list(marks.iterdir())) < {n} and time.monotonic() < deadline:
            time.sleep(0.01)
        reply |= {{"n_layer": 4, "layer_begin": h["layer_begin"], "layer_end": h["layer_end"], "n_ctx": 64,
                   "n_batch": 64, "max_sessions": 1, "loading": len(list(marks.iterdir()))}}
    out.write(frames.encode(reply))
    out.flush()
    if h["op"] == "shutdown":
        break
"""


def fake_worker(tmp_path: Path, n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    script = tmp_path / "layer-worker"
    script.write_text(FAKE_WORKER.format(python=sys.executable, n=n))
    script.chmod(0o755)
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("FAKE_MARKS", str(marks))
    return script, marks


def test_the_workers_of_a_chain_load_at_the_same_time_each_its_range_s_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load is mostly one thread: the chain sends every worker its `load` before it reads any reply, so
    on N cores N load at once. Each loads the file the model function gives for its range."""
    worker, marks = fake_worker(tmp_path, 3, monkeypatch)
    split = [(0, 1), (1, 2), (2, 4)]
    with Pipeline(worker, lambda b, e: tmp_path / f"range-{b}-{e}.gguf", split, timeout=20) as pipe:
        assert [info["loading"] for info in pipe.info] == [3, 3, 3]
        assert [(i["layer_begin"], i["layer_end"]) for i in pipe.info] == split
    assert sorted(p.read_text() for p in marks.iterdir()) == [
        str(tmp_path / f"range-{b}-{e}.gguf") for b, e in split
    ]


def test_a_range_refused_at_its_check_starts_no_worker(
    written: tuple[Path, PartsManifest], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, manifest = written
    worker, marks = fake_worker(tmp_path, 2, monkeypatch)
    parts = opened(written, tmp_path / "scratch")
    parts.range(2, 3)
    (parts.range(2, 3).directory / manifest.files_for(2, 3)[-1].name).unlink()  # the other tensors' file

    def no_worker(*args: object, **kwargs: object) -> None:
        raise AssertionError("a worker was started")

    monkeypatch.setattr("dgr.core.proc.spawn", no_worker)
    with pytest.raises(ConfigError, match=r"missing: the range \[2, 3\) needs it \(it holds other"):
        Pipeline(worker, parts.model_for, [(0, 2), (2, 3)])
    assert list(marks.iterdir()) == []
    with pytest.raises(ValueError, match="a model given per range needs the ranges"):
        Pipeline(worker, parts.model_for, None)


# --------------------------------------------------------------------------- the boundary group's comparison


def ranges_of(parts: cutter.ModelParts, split: list[tuple[int, int]]) -> list[cutter.RangeParts]:
    return [parts.range(b, e) for b, e in split]


def run_of(begin: int, end: int, *, state: bytes = b"\x01\x02\x03", identity: str = "a" * 16) -> RangeRun:
    info: dict[str, Any] = {
        "n_layer": 3,
        "layer_begin": begin,
        "layer_end": end,
        "partial": (begin, end) != (0, 3),
        "has_tok_embd": begin == 0,
        "has_output_norm": end == 3,
        "has_output": end == 3,
        "n_tensors": 2,
        "n_bytes": 300,
        "tensors": [[f"blk.{begin}.attn_q.weight", 100], [f"blk.{begin}.ffn_up.weight", 200]],
        "buffer_size": 4096,
        "memory": {"kv_bytes": 1024 * (end - begin)},
        "identity": identity,
    }
    header = boundary.STATE_MAGIC + identity.encode() + f"[{begin:06d},{end:06d})".encode()
    return RangeRun(info, header + state)


def test_a_split_from_the_parts_equal_to_the_whole_file_s_passes_with_its_storage_figures(
    written: tuple[Path, PartsManifest], tmp_path: Path
) -> None:
    _, manifest = written
    split = [(0, 2), (2, 3)]
    ranges = ranges_of(opened(written, tmp_path / "s"), split)
    logits = np.arange(12, dtype=np.float32).reshape(2, 6)
    whole = [run_of(b, e) for b, e in split]
    # the model's identity leaves out the keys of the files (split.*, part.*): the same from the parts
    from_parts = [run_of(b, e) for b, e in split]
    problems, figures = boundary.parts_verdict(ranges, logits, logits.copy(), whole, from_parts)
    assert problems == []
    assert figures["logits_bit_exact"] and figures["states_bit_exact"] and figures["ownership_equal"]
    assert figures["kv_bytes_equal"] and figures["identity"] == [{"whole_file": "a" * 16, "parts": "a" * 16}]
    assert figures["ranges"] == [[0, 2], [2, 3]] and figures["whole_file_bytes"] == manifest.source.size
    assert figures["range_bytes"] == [manifest.bytes_for(b, e) for b, e in split]
    assert figures["range_files"] == [len(manifest.files_for(b, e)) for b, e in split]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("logits", "the logits from the parts differ from the whole file's (max abs diff 0.5)"),
        (
            "state",
            "[2, 3): the saved state from the parts (aaaaaaaaaaaaaaaa [000002,000003), 3 bytes) is not the "
            "whole file's",
        ),
        (
            "layers",
            "[2, 3): the saved state from the parts (aaaaaaaaaaaaaaaa [000002,000004), 3 bytes) is not the "
            "whole file's",
        ),
        (
            "identity",
            "[2, 3): identity is 'bbbbbbbbbbbbbbbb' from the parts, 'aaaaaaaaaaaaaaaa' from the whole",
        ),
        ("has_output", "[2, 3): has_output is False from the parts, True from the whole file"),
        ("tensor", "[2, 3): from the parts it holds other tensors: extra or of other bytes ['blk.2.ffn_up"),
        ("kv", "[2, 3): 2048 bytes of KV cache from the parts, 1024 from the whole file"),
        ("no state", "[2, 3): a state of 0 bytes that does not begin with b'LWS1' and its header"),
    ],
)
def test_a_split_from_the_parts_that_differs_fails_naming_what(
    written: tuple[Path, PartsManifest], tmp_path: Path, change: str, problem: str
) -> None:
    split = [(0, 2), (2, 3)]
    ranges = ranges_of(opened(written, tmp_path / "s"), split)
    logits = np.zeros((2, 6), dtype=np.float32)
    whole = [run_of(b, e) for b, e in split]
    last = run_of(2, 3)
    if change == "logits":
        out = logits.copy()
        out[1, 3] = 0.5
    else:
        out = logits
    if change == "state":
        last = run_of(2, 3, state=b"\x01\x02\x04")
    elif change == "layers":
        last = RangeRun(last.info, last.state.replace(b"[000002,000003)", b"[000002,000004)"))
    elif change == "has_output":
        last.info["has_output"] = False
    elif change == "tensor":
        last.info["tensors"][1][1] = 201
    elif change == "kv":
        last.info["memory"]["kv_bytes"] = 2048
    elif change == "no state":
        last = RangeRun(last.info, b"")
    elif change == "identity":
        last.info["identity"] = "b" * 16
    problems, figures = boundary.parts_verdict(ranges, logits, out, whole, [run_of(0, 2), last])
    assert len(problems) == 1 and problems[0].startswith(problem), problems
    flags = ("logits_bit_exact", "states_bit_exact", "ownership_equal", "kv_bytes_equal")
    assert sum(not figures[f] for f in flags) == 1


FAKE_CHAIN = """#!{python}
# a layer-worker of a model of 3 layers and 8 tokens: its logits are a function of the positions (plus one
# from the parts, with FAKE_DIFFER set); it notes each file it loads and what that file's directory holds
import json, os, struct, sys
from pathlib import Path
from dgr.verify.wire import frames

out, held = sys.stdout.buffer, None
while (frame := frames.read(sys.stdin.buffer)) is not None:
    h = frame.header
    reply, body = {{"id": h["id"], "ok": True}}, b""
    if h["op"] == "load":
        model, held = Path(h["model"]), (h["layer_begin"], h["layer_end"])
        parts = "-00001-of-" in model.name
        listing = sorted(p.name for p in model.parent.iterdir())
        with open(os.environ["FAKE_LOG"], "a") as log:
            log.write(json.dumps([str(model), held, listing]) + "\\n")
        b, e = held
        reply |= {{"n_layer": 3, "layer_begin": b, "layer_end": e, "partial": held != (0, 3),
                   "has_tok_embd": b == 0, "has_output_norm": e == 3, "has_output": e == 3, "n_tensors": 1,
                   "n_bytes": 64, "tensors": [[f"blk.{{b}}.attn_q.weight", 64]], "buffer_size": 64,
                   "memory": {{"kv_bytes": 100 * (e - b)}}, "identity": "m" * 16,
                   "n_ctx": 1024, "n_batch": 512, "max_sessions": 4}}
        differ = parts and "FAKE_DIFFER" in os.environ
    elif h["op"] == "decode":
        n = h["n_tokens"]
        logits = [float(i + h["pos"] + (1 if differ else 0)) for i in range(n * 8)]
        reply |= {{"argmax": [7] * n, "n_vocab": 8, "evicted": []}}
        body = struct.pack(f"<{{n * 8}}f", *logits) if held[1] == 3 else b"bundle"
    elif h["op"] == "state_save":
        body = b"LWS1" + b"m" * 16 + ("[%06d,%06d)" % held).encode() + b"kv"
    out.write(frames.encode(reply, body))
    out.flush()
    if h["op"] == "shutdown":
        break
"""


@pytest.mark.parametrize("differ", [False, True])
def test_the_boundary_group_runs_every_split_from_the_parts_after_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, differ: bool
) -> None:
    """With a model's parts, the split prefills run the whole model and every split again from the parts,
    each right after the same split from the whole file, each range from its own directory of only its
    files; a parts run whose logits differ fails its check, and only it."""
    model = make_model(tmp_path / "m.gguf")
    manifest = cut(model, tmp_path / "parts")
    parts = cutter.ModelParts(tmp_path / "parts", manifest, tmp_path / "ranges")
    script = tmp_path / "layer-worker"
    script.write_text(FAKE_CHAIN.format(python=sys.executable))
    script.chmod(0o755)
    log = tmp_path / "loads.jsonl"
    monkeypatch.setenv("FAKE_LOG", str(log))
    if differ:
        monkeypatch.setenv("FAKE_DIFFER", "1")
    env = Env(worker=script, models=(RealModel.read("m", model),), fixtures=tmp_path)
    checks = boundary.check_prefill_splits(env, model, SYNTHETIC, "m", lambda: parts)
    names = [c.name for c in checks]
    assert names == [
        "parts-split-1/m",
        "prefill-split-2/m",
        "parts-split-2/m",
        "prefill-split-3/m",
        "parts-split-3/m",
    ]
    assert [c.passed for c in checks] == [not differ, True, not differ, True, not differ]
    if differ:
        assert checks[0].detail.startswith("the logits from the parts differ from the whole file's")
    else:
        assert all(c.figures["states_bit_exact"] and c.figures["ownership_equal"] for c in checks[::2])
    loads = [json.loads(line) for line in log.read_text().splitlines()]
    from_parts = [(Path(m), tuple(r), names) for m, r, names in loads if "-00001-of-" in Path(m).name]
    assert sorted(r for _, r, _ in from_parts) == sorted([(0, 3), (0, 2), (2, 3), (0, 1), (1, 2), (2, 3)])
    for path, (b, e), listing in from_parts:
        assert path.parent == tmp_path / "ranges" / f"{b}-{e}"
        assert listing == sorted([records.MANIFEST, *(p.name for p in manifest.files_for(b, e))])


def test_a_verify_run_gives_the_boundary_group_each_locked_model_s_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = make_model(tmp_path / "m.gguf")
    lock = PartsLock({"m": PartsRecord.of("m", cut(model, tmp_path / "reference"))})
    store = cutter.PartsStore(
        tmp_path / "cache", tmp_path / "scratch", lock, {"m": (model, sha256_file(model))}
    )
    given: list[Any] = []

    def prefill_splits(env: Env, path: Path, evidence: str, label: str, parts: Any = None) -> list[Any]:
        given.append((label, parts() if parts is not None else None))
        return []

    monkeypatch.setattr(boundary, "check_prefill_splits", prefill_splits)
    monkeypatch.setattr(boundary, "MODEL_CHECKS", ())
    m = RealModel.read("m", model)
    boundary.run_model(Env(worker=tmp_path / "w", models=(m,), fixtures=tmp_path, parts=store), m)
    boundary.run_model(Env(worker=tmp_path / "w", models=(m,), fixtures=tmp_path), m)
    assert given == [("m", store.of("m")), ("m", None)]


# --------------------------------------------------------------------------- dgr generate --parts


class RangePipeline:
    """A chain that records the file each range was given (the real Pipeline resolves them before any worker
    starts) and what that range's directory held; its tokens equal the unsplit run's."""

    runs: ClassVar[list[list[tuple[int, int]]]] = []
    loaded: ClassVar[dict[tuple[int, int], tuple[Path, set[str]]]] = {}

    def __init__(self, worker: Path, model: Any, split: list[tuple[int, int]], **kwargs: Any) -> None:
        for begin, end in split:
            path = model(begin, end) if callable(model) else model
            RangePipeline.loaded[(begin, end)] = (path, {p.name for p in path.parent.iterdir()})
        RangePipeline.runs.append(split)
        self.capacity, self.n_batch = 2048, 512

    def __enter__(self) -> RangePipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    @property
    def head(self) -> Any:
        return type(
            "Head", (), {"request": lambda _, op, **f: type("R", (), {"header": {"eos": 0, "eot": -1}})}
        )()

    def tokenize(self, text: str, chat: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def detokenize(self, tokens: list[int]) -> str:
        return " there"

    def generate(self, session: str, epoch: int, tokens: list[int], n: int, stop: set[int]) -> list[int]:
        return [5, 6, 7]


@pytest.fixture
def fake_chain(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    RangePipeline.runs, RangePipeline.loaded = [], {}
    monkeypatch.setattr(generate, "Pipeline", RangePipeline)
    monkeypatch.setattr(
        "dgr.builds.build.run", lambda ctx, request: type("B", (), {"path": tmp_path / "b"})()
    )


def leftovers() -> list[str]:
    """The range directories of `dgr generate` left in the cache's tmp/ (none, after a run or a refusal)."""
    tmp = Path(os.environ["DGR_CACHE_DIR"]) / "tmp"
    return sorted(p.name for p in tmp.iterdir()) if tmp.is_dir() else []


def test_generate_parts_runs_each_range_from_its_own_directory(
    fake_repo: Path, tiny: Path, fake_chain: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["generate", "--parts", "--split", "0:1,1:3", "--json", "Hi"]) == 0
    out = json.loads(capsys.readouterr().out)
    manifest_dir = cutter.cache_dir(Path(os.environ["DGR_CACHE_DIR"]), sha256_file(tiny))
    manifest = records.read_manifest(manifest_dir)
    for begin, end in ((0, 1), (1, 3)):
        path, held = RangePipeline.loaded[(begin, end)]
        assert path.name == manifest.first.name and path.parent.name == f"{begin}-{end}"
        assert held == {p.name for p in manifest.files_for(begin, end)} | {records.MANIFEST}
    assert RangePipeline.runs == [[(0, 1), (1, 3)], [(0, 3)]]  # then the unsplit model, from its file
    assert out["matches_unsplit"] is True
    assert out["parts"]["directory"] == str(manifest_dir) and out["parts"]["files"] == len(manifest.files)
    assert [(r["begin"], r["end"], r["bytes"]) for r in out["parts"]["ranges"]] == [
        (0, 1, manifest.bytes_for(0, 1)),
        (1, 3, manifest.bytes_for(1, 3)),
    ]
    assert all(r["whole_bytes"] == tiny.stat().st_size for r in out["parts"]["ranges"])
    assert main(["generate", "--parts", "--split", "0:1,1:3", "Hi"]) == 0
    said = capsys.readouterr().out.splitlines()
    part, whole = manifest.bytes_for(0, 1), tiny.stat().st_size
    assert said[-3:-1] == [
        f"from the parts in {manifest_dir}:",
        f"[0, 1): 4 of 7 files, {part} of the whole file's {whole} bytes ({100 * part / whole:.1f} %)",
    ]
    assert leftovers() == []


@pytest.fixture
def parts_dir(fake_repo: Path, tiny: Path, tmp_path: Path) -> tuple[Path, PartsManifest]:
    """The parts of the repository's model `tiny`, recorded in its locks/parts.toml."""
    manifest = cut(tiny, tmp_path / "fetched")
    records.write_lock(fake_repo / "locks", PartsLock({"tiny": PartsRecord.of("tiny", manifest)}))
    return tmp_path / "fetched", manifest


def damage(kind: str, directory: Path, manifest: PartsManifest, tmp_path: Path) -> None:
    victim = directory / layer_part(manifest, 1).name
    if kind == "missing":
        victim.unlink()
    elif kind == "other layer":
        shutil.copy(directory / layer_part(manifest, 2).name, victim)
    elif kind == "other model":
        theirs = cut(make_model(tmp_path / "b.gguf", seed=9), tmp_path / "b")
        shutil.copy(tmp_path / "b" / layer_part(theirs, 1).name, victim)
    elif kind == "other model's parts":
        shutil.rmtree(directory)
        cut(make_model(tmp_path / "b.gguf", seed=9), directory)
    elif kind == "truncated":
        header = gguffile.read(victim)
        victim.write_bytes(victim.read_bytes()[: header.data_offset + 1])
    elif kind == "other bytes":
        data = bytearray(victim.read_bytes())
        data[-100] ^= 0xFF
        victim.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("kind", "code", "message"),
    [
        (
            "missing",
            8,
            "-00004-of-00007.gguf: missing: the range [0, 3) needs it (it holds layer 1 of the parts",
        ),
        (
            "other layer",
            8,
            "-00004-of-00007.gguf: holds layer 2, where tiny-00004-of-00007.gguf holds layer 1",
        ),
        ("other model", 3, "-00004-of-00007.gguf: a part of another model (part.source.sha256)"),
        ("other model's parts", 3, "fetched: the parts of another model (b.gguf)"),
        ("truncated", 8, "-00004-of-00007.gguf: not a valid GGUF file: at byte"),
        ("other bytes", 3, "-00004-of-00007.gguf: its sha256 differs from"),
    ],
)
def test_generate_refuses_parts_that_do_not_check_before_any_worker_starts(
    parts_dir: tuple[Path, PartsManifest],
    fake_chain: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    code: int,
    message: str,
) -> None:
    directory, manifest = parts_dir
    damage(kind, directory, manifest, tmp_path)
    assert main(["generate", "--parts-dir", str(directory), "--split", "0:3", "Hi"]) == code
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err
    assert RangePipeline.runs == [] and leftovers() == []


def test_generate_refuses_parts_that_differ_from_the_lock(
    parts_dir: tuple[Path, PartsManifest],
    fake_repo: Path,
    fake_chain: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    directory, manifest = parts_dir
    record = PartsRecord.of("tiny", manifest)
    name = layer_part(manifest, 0).name
    records.write_lock(
        fake_repo / "locks",
        PartsLock({"tiny": PartsRecord("tiny", record.source_sha256, {**record.files, name: "f" * 64})}),
    )
    assert main(["generate", "--parts-dir", str(directory), "Hi"]) == 3
    err = capsys.readouterr().err
    assert f"dgr: integrity: {directory}/{name}: its sha256 differs from locks/parts.toml (tiny)" in err
    # the cache's parts are held to the lock too: none is published
    assert main(["generate", "--parts", "Hi"]) == 3
    assert "its sha256 differs from locks/parts.toml (tiny)" in capsys.readouterr().err
    assert not any((Path(os.environ["DGR_CACHE_DIR"]) / cutter.CACHE_DIR).iterdir())
    assert RangePipeline.runs == [] and leftovers() == []
    assert main(["generate", "--parts-dir", str(directory / "nosuch"), "Hi"]) == 8
    assert "--parts-dir" in capsys.readouterr().err


# --------------------------------------------------------------------------- the harness


def test_locks_parts_toml_is_part_of_the_harness(tmp_path: Path) -> None:
    """A report of checks that ran the parts of other records is stale: the harness holds the lock."""
    assert harness.PARTS_LOCK in harness.current(Repo(ROOT)).files
    (tmp_path / "locks").mkdir()
    lock = tmp_path / harness.PARTS_LOCK
    assert harness.PARTS_LOCK not in harness.current(Repo(tmp_path)).files
    lock.write_bytes((ROOT / harness.PARTS_LOCK).read_bytes())
    before = harness.current(Repo(tmp_path))
    lock.write_text(lock.read_text().replace('source_sha256 = "b', 'source_sha256 = "c', 1))
    assert before.changes(harness.current(Repo(tmp_path))) == [f"changed: {harness.PARTS_LOCK}"]
