"""`dgr manifest`: rewrite locks/patches.toml (and the manifest of every port) from the series and the
patches (atomic writes)."""

from __future__ import annotations

import argparse

from dgr.core import log
from dgr.core.paths import Context
from dgr.errors import EXIT_OK
from dgr.series import patchmanifest


def run(args: argparse.Namespace) -> int:
    main = Context.discover().repo
    for repo in [main, *(main.for_port(p) for p in main.ports())]:
        computed = patchmanifest.compute(repo)
        data = patchmanifest.serialize(computed, repo)
        if repo.manifest_file.is_file() and repo.manifest_file.read_bytes() == data:
            log.info(f"{repo.rel(repo.manifest_file)} is up to date ({len(computed.patches)} patch(es))")
        else:
            patchmanifest.write(repo, computed)
            log.info(f"wrote {repo.rel(repo.manifest_file)} ({len(computed.patches)} patch(es))")
        print(repo.manifest_file)
    return EXIT_OK
