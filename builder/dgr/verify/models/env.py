"""What the checks run against: the worker binary of a build, the locked real models, a directory for
fixtures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dgr.contracts.report import SYNTHETIC, Evidence
from dgr.verify.models import inventory, synth
from dgr.verify.models.parts import PartsStore


@dataclass(frozen=True)
class RealModel:
    """A locked model: its name in locks/model.toml (the label of its checks), its file and inventory."""

    name: str
    path: Path
    inv: inventory.Inventory

    @staticmethod
    def read(name: str, path: Path) -> RealModel:
        return RealModel(name, path, inventory.read(path))

    @property
    def n_layer(self) -> int:
        return self.inv.n_layer

    def split(self, k: int) -> list[tuple[int, int]]:
        """The model's layers in `k` ranges of (nearly) equal size."""
        return inventory.split(self.inv.n_layer, k)

    @property
    def whole(self) -> list[tuple[int, int]]:
        return [(0, self.inv.n_layer)]


@dataclass(frozen=True)
class Env:
    worker: Path  # layer-worker of the build under test
    models: tuple[RealModel, ...]  # the locked real models, the default one first
    fixtures: Path  # where synthetic models are written
    threads: int = 2
    baseline_worker: Path | None = None  # layer-worker built against the unpatched upstream
    sanitized: bool = False  # the build runs under ASan/UBSan: process memory is mostly the sanitizers'
    device: str | None = (
        None  # the GPU device of the build the checks offload to (ggml's name), None: CPU only
    )
    parts: PartsStore | None = None
    """The parts of the locked models (`dgr parts`), each range run from its own directory of them (the
    boundary group's `parts-split-<k>` checks); None: no check runs a model from its parts."""

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("the checks need at least one real model")

    @property
    def default(self) -> RealModel:
        """The lock's default model: the checks that do not depend on the model run on it alone."""
        return self.models[0]

    def synth(self, spec: synth.SynthSpec) -> Path:
        return synth.ensure(spec, self.fixtures)

    def synthetic_models(self) -> list[tuple[Path, Evidence, str]]:
        """(path, evidence, label) of the synthetic dense-Llama fixtures every split check runs on besides
        the real models: untied and tied output."""
        return [
            (self.synth(synth.LLAMA_UNTIED), SYNTHETIC, "synth-untied"),
            (self.synth(synth.LLAMA_TIED), SYNTHETIC, "synth-tied"),
        ]
