"""`dgr build`: print where the artifacts are (or, with --json, the build manifest)."""

from __future__ import annotations

import argparse
import json

from dgr.builds import build, buildplan
from dgr.contracts.buildmanifest import PRINTED
from dgr.core.paths import Context
from dgr.errors import EXIT_OK, UsageError


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    request = buildplan.Request(
        upstream_only=args.upstream_only,
        mirror=args.mirror,
        upstream=args.upstream,
        sanitize=buildplan.parse_sanitizers(args.sanitize),
        prefix=args.prefix,
        tools=args.tools,
        backend=args.backend,
    )
    if args.prefix is not None and args.upstream_only:
        raise UsageError("--prefix applies to the series, not to --upstream-only builds")
    result = build.run(ctx, request, args.jobs)
    if args.json:
        printed = dict(zip(PRINTED, (str(result.path), result.status), strict=True))
        report = {**result.manifest.to_json(), **printed}
        print(json.dumps(report, indent=2))
    else:
        print(result.path)
    return EXIT_OK
