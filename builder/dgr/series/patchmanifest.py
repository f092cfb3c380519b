"""The patch manifest locks/patches.toml: compute it, verify it, rewrite it."""

from __future__ import annotations

from dataclasses import dataclass

import tomli_w

from dgr.contracts.locks import PatchManifest, load_manifest_file
from dgr.core.digest import sha256_bytes, sha256_file
from dgr.core.fs import write_atomic
from dgr.core.paths import Repo
from dgr.errors import ConfigError, IntegrityError
from dgr.series import order as series

REFRESH_HINT = (
    "if the change is intended, run `dgr manifest` (or `dgr export-patches`) and commit the result; "
    "otherwise restore the file with `git checkout -- {file}`"
)


@dataclass(frozen=True)
class Mismatch:
    file: str
    expected: str | None
    """The digest recorded in locks/patches.toml (None: not recorded)."""
    actual: str | None
    """The digest of the file on disk (None: the file does not exist)."""

    def describe(self) -> str:
        if self.expected is None:
            return f"{self.file}: not recorded in locks/patches.toml (actual sha256 {self.actual})"
        if self.actual is None:
            return (
                f"{self.file}: recorded in locks/patches.toml (sha256 {self.expected}) but not in the series"
            )
        return f"{self.file}: expected sha256 {self.expected}, actual {self.actual}"


def _labels(repo: Repo) -> tuple[str, str, str]:
    """How messages name the series file, the patches directory and the manifest of `repo`."""
    return repo.rel(repo.series_file), repo.rel(repo.patches_dir), repo.rel(repo.manifest_file)


def compute(repo: Repo) -> PatchManifest:
    """The manifest of the current series and the patches it names (missing file: ConfigError)."""
    text = _read_series_bytes(repo)
    order = series.parse(text.decode(), repo.series_file)
    patches: dict[str, str] = {}
    for entry in order.entries:
        if entry.name in patches:
            raise ConfigError(
                f"{repo.rel(repo.series_file)}:{entry.line}: names {entry.name} a second time",
                hint="keep one line per patch (`dgr check` lists every problem)",
            )
        path = repo.patches_dir / entry.name
        if not path.is_file():
            raise ConfigError(
                f"{repo.rel(repo.series_file)}:{entry.line}: names {entry.name}, "
                f"which is not in {repo.rel(repo.patches_dir)}/",
                hint="restore the patch file or remove the line from the series",
            )
        patches[entry.name] = sha256_file(path)
    return PatchManifest(sha256_bytes(text), patches)


def _read_series_bytes(repo: Repo) -> bytes:
    try:
        return repo.series_file.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(f"{repo.rel(repo.series_file)}: series file missing") from exc


def compare(locked: PatchManifest, actual: PatchManifest, repo: Repo) -> list[Mismatch]:
    """Every difference between the locked and the actual manifest, series first."""
    series_label, patches_label, _ = _labels(repo)
    found: list[Mismatch] = []
    if locked.series_sha256 != actual.series_sha256:
        found.append(Mismatch(series_label, locked.series_sha256, actual.series_sha256))
    for name, digest in actual.patches.items():
        if locked.patches.get(name) != digest:
            found.append(Mismatch(f"{patches_label}/{name}", locked.patches.get(name), digest))
    found.extend(
        Mismatch(f"{patches_label}/{name}", digest, None)
        for name, digest in locked.patches.items()
        if name not in actual.patches
    )
    return found


def verify(repo: Repo) -> PatchManifest:
    """Check the series and every patch against its manifest; IntegrityError on any difference."""
    series_label, _, manifest_label = _labels(repo)
    locked = load_manifest_file(repo.manifest_file)
    series_digest = sha256_bytes(_read_series_bytes(repo))
    if series_digest != locked.series_sha256:
        # checked before the series is even parsed: a flipped byte may have renamed a patch
        raise IntegrityError(
            f"{series_label} does not match {manifest_label}",
            expected=locked.series_sha256,
            actual=series_digest,
            hint=REFRESH_HINT.format(file=series_label),
        )
    actual = compute(repo)
    mismatches = compare(locked, actual, repo)
    if mismatches:
        first = mismatches[0]
        raise IntegrityError(
            f"{first.file} does not match {manifest_label}"
            + (f" (and {len(mismatches) - 1} more)" if len(mismatches) > 1 else ""),
            expected=first.expected,
            actual=first.actual,
            detail="\n".join(m.describe() for m in mismatches),
            hint=REFRESH_HINT.format(file=first.file),
        )
    return actual


def serialize(manifest: PatchManifest, repo: Repo | None = None) -> bytes:
    """The exact bytes of the manifest file for `manifest` (tomli-w, deterministic)."""
    series_file = "series/series" if repo is None else repo.rel(repo.series_file)
    return tomli_w.dumps(manifest.to_toml(series_file)).encode()


def write(repo: Repo, manifest: PatchManifest) -> None:
    repo.manifest_file.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(repo.manifest_file, serialize(manifest, repo))
