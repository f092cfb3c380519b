"""What the checks run against: the worker binary of a build, the locked model, a directory for fixtures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dgr.contracts import REAL_MODEL, SYNTHETIC, Evidence
from dgr.verify import synth


@dataclass(frozen=True)
class Env:
    worker: Path  # layer-worker of the build under test
    model: Path  # the locked real model (SmolLM2-135M-Instruct Q4_1)
    fixtures: Path  # where synthetic models are written
    threads: int = 2
    baseline_worker: Path | None = None  # layer-worker built against the unpatched upstream
    sanitized: bool = False  # the build runs under ASan/UBSan: process memory is mostly the sanitizers'

    def synth(self, spec: synth.SynthSpec) -> Path:
        return synth.ensure(spec, self.fixtures)

    def llama_models(self) -> list[tuple[Path, Evidence, str]]:
        """(path, evidence, label) of the dense-Llama models every split check runs on: the synthetic
        fixtures (untied and tied output) and the locked real model."""
        return [
            (self.synth(synth.LLAMA_UNTIED), SYNTHETIC, "synth-untied"),
            (self.synth(synth.LLAMA_TIED), SYNTHETIC, "synth-tied"),
            (self.model, REAL_MODEL, "smollm2"),
        ]
