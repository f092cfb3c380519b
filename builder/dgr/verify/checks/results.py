"""The results of checks kept by what they ran (`<cache>/results/<key>.json`), so that a `dgr verify` after an
edit that changes no binary runs none of those checks again.

A check's result is a function of the bytes it runs and of what it reads: the executables and libraries of
a build (the SHA-256 of every published artifact, or of every file of a work build's bin/), the models, the
harness (the checks' own code and the worker's sources, dgr.contracts.harness) and series/verify.toml. The
builds are reproducible (libllama is byte-identical across clean caches, and a comment edited in a patch
gives the same objects), so the key of a result is the digest of those, and a result is kept only when it
passed (a check passed, none failed). The report names every part it took from here (`Report.reused`).
Timings and memory figures of a kept result are those of the run that made it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgr.contracts import convert
from dgr.contracts.report import Check, Counts
from dgr.core import jsonio
from dgr.core.digest import sha256_canonical, sha256_file
from dgr.core.fs import write_atomic
from dgr.errors import ConfigError

_NOT_BINARIES = ("CTestTestfile.cmake", "tests.json", "manifest.toml")
"""Files of a published build that name its own directory (the CTest file, its tests) or its inputs (the
manifest): their content is taken with the directory replaced, or not at all."""


def build_digest(root: Path, artifacts: Mapping[str, str]) -> dict[str, str]:
    """What a published build at `root` runs: the SHA-256 of every artifact (the manifest's), and the CTest
    file and tests.json with `root` replaced by a placeholder (they name the executables by their path)."""
    out = {rel: sha for rel, sha in artifacts.items() if Path(rel).name not in _NOT_BINARIES}
    for name in _NOT_BINARIES[:2]:
        path = root / name
        if path.is_file():
            text = path.read_text(errors="replace").replace(str(root), "{build}")
            out[name] = sha256_canonical(text)
    return out


def files_digest(directory: Path, files: Iterable[Path] | None = None) -> dict[str, str]:
    """The SHA-256 of every file under `directory` (or of `files`), by path relative to it; links are read
    through (an executable's soname link and its library are one file)."""
    chosen = sorted(files if files is not None else (p for p in directory.rglob("*") if p.is_file()))
    return {p.relative_to(directory).as_posix(): sha256_file(p) for p in chosen}


@dataclass(frozen=True, kw_only=True)
class KeptResult(convert.Record):
    """`results/<key>.json`: the checks of one part of a verify run, and what the part left for the others
    (the output of each native test, which the archs group reads)."""

    key: str
    inputs: Mapping[str, Any]
    checks: tuple[Check, ...]
    outputs: Mapping[str, str] = field(default_factory=dict)


@dataclass
class ResultStore:
    """The kept results of one dgr cache, for one harness. `used` names the parts a run took from here."""

    root: Path
    harness: str
    """The digest of the harness (dgr.contracts.harness.Harness.digest)."""
    used: dict[str, str] = field(default_factory=dict)
    """Part -> key of every part taken from the store in this run."""

    def key(self, inputs: Mapping[str, Any]) -> str:
        return sha256_canonical({"harness": self.harness, **inputs})

    def get(self, key: str) -> KeptResult | None:
        path = self.root / f"{key}.json"
        if not path.is_file():
            return None
        try:
            kept = KeptResult.from_json(jsonio.loads(path.read_bytes(), str(path)), str(path))
        except ConfigError:
            path.unlink(missing_ok=True)  # a result of another dgr, or broken: run the part again
            return None
        return kept if kept.key == key else None

    def put(
        self, key: str, inputs: Mapping[str, Any], checks: list[Check], outputs: Mapping[str, str]
    ) -> None:
        """Keep a passing result (a check passed, none failed); anything else is run again next time."""
        if not Counts.of(checks).ok:
            return
        kept = KeptResult(key=key, inputs=inputs, checks=tuple(checks), outputs=dict(outputs))
        data = (json.dumps(kept.to_json(), indent=1, sort_keys=True) + "\n").encode()
        write_atomic(self.root / f"{key}.json", data)

    def run(
        self,
        part: str,
        inputs: Mapping[str, Any],
        run: Callable[[], tuple[list[Check], Mapping[str, str]]],
    ) -> tuple[list[Check], dict[str, str]]:
        """The checks of `part` (and the outputs it leaves) for `inputs`: kept ones, else `run()`'s, kept
        when they pass."""
        key = self.key(inputs)
        kept = self.get(key)
        if kept is not None:
            self.used[part] = key
            return list(kept.checks), dict(kept.outputs)
        checks, outputs = run()
        self.put(key, inputs, checks, outputs)
        return checks, dict(outputs)
