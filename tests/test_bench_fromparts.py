"""Each range from its parts against from the whole file (dgr.verify.bench.fromparts), with fake workers: the
ranges of every split and the bytes each stores (from the manifest), the loads in paired rounds in
alternating order, the peak RSS of each side with mmap on and off, the hidden state each range is fed, and a
range that holds other tensors from its parts refused."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from dgr.contracts.parts import PartFile, PartsManifest, PartsSource, part_name
from dgr.errors import BenchError
from dgr.verify.bench import fromparts, memory
from dgr.verify.models import inventory

N_LAYER = 6
WHOLE = Path("/models/m.gguf")
SIZES = {"metadata": 100, "input": 1000, "layers": 200, "output": 500}


def manifest() -> PartsManifest:
    """The parts of a 6-layer model: metadata, input, one file per layer, output (sizes `SIZES`)."""
    holds = ["metadata", "input", *["layers"] * N_LAYER, "output"]
    files = tuple(
        PartFile(
            name=part_name("m", i, len(holds)),
            holds=h,  # type: ignore[arg-type]
            size=SIZES[h],
            sha256="0" * 64,
            tensors=0 if h == "metadata" else 1,
            layer_begin=i - 2 if h == "layers" else None,
            layer_end=i - 1 if h == "layers" else None,
        )
        for i, h in enumerate(holds)
    )
    source = PartsSource(file="m.gguf", size=3000, sha256="1" * 64, n_layer=N_LAYER, tied_head=False)
    return PartsManifest(format=1, writer="gguf 0.19.0", source=source, files=files)


class FakeParts:
    """What `measure` uses of ModelParts: the manifest, and the first file of a range's own directory."""

    def __init__(self) -> None:
        self.manifest = manifest()

    def model_for(self, begin: int, end: int) -> Path:
        return Path(f"/parts/{begin}-{end}/m-00001-of-00009.gguf")


def side_of(model: Path) -> str:
    return "whole" if model == WHOLE else "parts"


class Fakes:
    """Fake workers: each load takes the seconds of `load_s` for its side (and records its order), each peak
    RSS run records the hidden state it was fed and hands on `out:<side>:<begin>`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, other_tensors: tuple[int, int] | None = None) -> None:
        self.loads: list[tuple[str, tuple[int, int]]] = []
        self.fed: dict[tuple[str, bool, tuple[int, int]], bytes] = {}
        self.other_tensors = other_tensors
        self.round: dict[tuple[str, tuple[int, int]], int] = {}
        monkeypatch.setattr(memory, "prefill_tokens", lambda worker, model: [1] * 64)
        monkeypatch.setattr(fromparts, "_load", self.load)
        monkeypatch.setattr(fromparts, "_peak_rss", self.peak_rss)

    def load(self, worker: Path, model: Path, layers: tuple[int, int], name: str) -> tuple[float, Any]:
        side = side_of(model)
        self.loads.append((side, layers))
        r = self.round[side, layers] = self.round.get((side, layers), -1) + 1
        # the parts load in 0.1 s, the whole file in 0.1 s and then 0.2 s in round 1: ratios 1.0, 2.0, 1.0
        seconds = 0.2 if side == "whole" and r == 1 else 0.1
        tensors = [["blk.0.attn_q.weight", 10]]
        if side == "parts" and layers == self.other_tensors:
            tensors = [["blk.0.attn_k.weight", 10]]
        return seconds, tensors

    def peak_rss(
        self,
        worker: Path,
        model: Path,
        layers: tuple[int, int],
        mmap: bool,
        context: Any,
        tokens: Sequence[int],
        hidden: bytes,
        name: str,
    ) -> tuple[int, bytes]:
        side = side_of(model)
        assert len(tokens) == 64 and context.n_ctx == 512
        self.fed[side, mmap, layers] = hidden
        rss = (1 if side == "whole" else 2) * (10 if mmap else 20) * 2**20 + layers[0]
        return rss, f"out:{side}:{layers[0]}".encode()


def test_every_range_of_every_split_from_its_parts_against_the_whole_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fakes = Fakes(monkeypatch)
    figures = fromparts.measure(Path("layer-worker"), WHOLE, FakeParts(), quick=False, ctx=512)  # type: ignore[arg-type]
    assert (figures.files, figures.whole_bytes, figures.rounds) == (9, 3000, fromparts.ROUNDS)
    assert (figures.prefill_tokens, figures.n_ctx) == (64, 512)
    assert [s.shards for s in figures.splits] == [2, 3, 5]
    for s in figures.splits:
        assert [r.layers for r in s.ranges] == inventory.split(N_LAYER, s.shards)
    # what a machine stores: the metadata, its layers, the input at the start, the output at the end
    [first, last] = figures.splits[0].ranges
    assert (first.files, first.part_bytes) == (5, 100 + 1000 + 3 * 200)
    assert (last.files, last.part_bytes) == (5, 100 + 3 * 200 + 500)
    assert [r.part_bytes for r in figures.splits[2].ranges] == [1500, 300, 300, 300, 800]
    # loads in paired rounds, whole first in even rounds and parts first in odd ones
    mine = [side for side, layers in fakes.loads if layers == (0, 3)]
    assert mine == ["whole", "parts", "parts", "whole"] * (fromparts.ROUNDS // 2) + ["whole", "parts"]
    assert first.load_whole_s == first.load_parts_s == 0.1
    assert first.load.rounds == (1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0)  # loads/s parts / whole
    assert first.load.median == 1.0 and first.load.high == 2.0
    # the peak RSS of each side, mmap on and off
    assert (first.peak_rss_whole_mmap, first.peak_rss_parts_mmap) == (10 * 2**20, 20 * 2**20)
    assert (first.peak_rss_whole_no_mmap, first.peak_rss_parts_no_mmap) == (20 * 2**20, 40 * 2**20)
    # a range after layer 0 is fed what the range before it handed on, from the same side
    for side in ("whole", "parts"):
        for mmap in (True, False):
            assert fakes.fed[side, mmap, (0, 2)] == b""
            assert fakes.fed[side, mmap, (2, 4)] == f"out:{side}:0".encode()
            assert fakes.fed[side, mmap, (4, 6)] == f"out:{side}:2".encode()


def test_quick_loads_each_side_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = Fakes(monkeypatch)
    figures = fromparts.measure(Path("layer-worker"), WHOLE, FakeParts(), quick=True, ctx=512)  # type: ignore[arg-type]
    assert figures.rounds == fromparts.QUICK_ROUNDS == 1
    assert len(fakes.loads) == 2 * 10  # one round of both sides, 2 + 3 + 5 ranges


def test_a_range_that_holds_other_tensors_from_its_parts_fails_the_bench(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Fakes(monkeypatch, other_tensors=(2, 4))
    with pytest.raises(BenchError) as info:
        fromparts.measure(Path("layer-worker"), WHOLE, FakeParts(), quick=True, ctx=512)  # type: ignore[arg-type]
    assert "m.gguf [2, 4): from its parts the range holds other tensors than from the whole file" in str(
        info.value.what
    )
    assert "blk.0.attn_k.weight, blk.0.attn_q.weight" in info.value.what
