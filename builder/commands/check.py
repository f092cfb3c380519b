"""`dgr check [--json]`: exit 0 when clean, 7 with findings, 8 when something cannot be read."""

from __future__ import annotations

import argparse
import json

from dgr import lint
from dgr.errors import EXIT_OK, LintError
from dgr.paths import Context


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    findings = lint.check(ctx.repo)
    if args.json:
        print(json.dumps({"ok": not findings, "findings": [f.to_json() for f in findings]}, indent=2))
    else:
        for finding in findings:
            print(finding.render())
        print(f"dgr check: {len(findings)} problem(s)" if findings else "dgr check: clean")
    return LintError.exit_code if findings else EXIT_OK
