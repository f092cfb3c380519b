"""`dgr check [--json] [--no-style]`: exit 0 when clean, 7 with findings, 8 when something cannot be read.

Besides the series, the patches and the locks, it applies the series (and every port) on its upstream and
runs `git diff --check` and `git clang-format` on the commit of each patch (dgr.maintain.style), and the
rewrite rule of each generated patch on the tree it applies to (dgr.maintain.rules), unless --no-style. The
files each patch touches are checked against the paths of its concern (upstream-package/package.toml), as
`dgr export-upstream` checks them before it renders the package."""

from __future__ import annotations

import argparse
import json

from dgr.core.paths import Context
from dgr.errors import EXIT_OK, LintError
from dgr.export import export
from dgr.maintain import lint, rules, style

CONCERN_HINT = (
    "add the path to the patch's [[concerns]] paths in upstream-package/package.toml, or move the change "
    "to the patch whose concern it is"
)


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    findings = lint.check(ctx.repo)
    if not findings:
        findings += [
            lint.LintFinding(f"patches/{f.patch}", "package", f.problem, CONCERN_HINT)
            for f in export.concern_findings(ctx.repo)
        ]
    if not args.no_style and not findings:
        for view in [ctx.repo, *(ctx.repo.for_port(p) for p in ctx.repo.ports())]:
            findings += [
                lint.LintFinding(
                    view.rel(view.patches_dir / f.patch) if f.patch else "locks/upstream.toml",
                    f.kind,
                    f.problem,
                    style.FIX_HINT if f.kind == "style" else rules.REGENERATE_HINT,
                )
                for f in style.check(ctx, view, args.mirror)
            ]
    if args.json:
        print(json.dumps({"ok": not findings, "findings": [f.to_json() for f in findings]}, indent=2))
    else:
        for finding in findings:
            print(finding.render())
        print(f"dgr check: {len(findings)} problem(s)" if findings else "dgr check: clean")
    return LintError.exit_code if findings else EXIT_OK
