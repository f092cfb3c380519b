"""The documents of the upstream package (cover letter, API.md, TEST-MAP.md, EVIDENCE.md, OUTREACH.md,
evidence.json, series.mbox), rendered with the Jinja2 templates of upstream-package/templates/ from the
applied series, its mails and the verify report of its inputs."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
from dgr import apisurface, buildplan, gitops, package, patchfile, reports
from dgr.contracts import GROUPS, Check
from dgr.errors import ConfigError, VerifyError
from dgr.figures import cell, counts_text, fmt, normalized
from dgr.mails import Series
from dgr.mails import header as mail_header

PACKAGE_DIR = "upstream-package"
TEMPLATES_DIR = "templates"
COVER = "patches/0000-cover-letter.patch"
MBOX = "series.mbox"
DOCUMENTS = ("API.md", "OUTREACH.md", "TEST-MAP.md", "EVIDENCE.md")
VERIFY_HINT = "run `dgr verify` (all groups) for the current inputs, then `dgr export-upstream` again"


def environment(templates: Path) -> jinja2.Environment:
    if not templates.is_dir():
        raise ConfigError(
            f"{templates}: the templates directory is missing", hint="restore upstream-package/templates/"
        )
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["cell"] = cell
    env.filters["fmt"] = fmt
    env.filters["counts"] = counts_text
    return env


def _render(env: jinja2.Environment, name: str, context: dict[str, Any]) -> str:
    try:
        text = env.get_template(f"{name}.j2").render(context)
    except jinja2.TemplateNotFound as exc:
        raise ConfigError(f"template {name}.j2 is missing in {PACKAGE_DIR}/{TEMPLATES_DIR}/") from exc
    except jinja2.TemplateError as exc:
        raise ConfigError(
            f"template {name}.j2: {exc}", hint=f"fix {PACKAGE_DIR}/{TEMPLATES_DIR}/{name}.j2"
        ) from exc
    return text.rstrip("\n") + "\n"


def _counts(checks: Sequence[Check]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for c in checks:
        counts[c.evidence] = counts.get(c.evidence, 0) + 1
    return dict(sorted(counts.items()))


def _evidence(stored: reports.Stored) -> dict[str, Any]:
    report = stored.report
    checks = [
        {
            "group": c.group,
            "name": c.name,
            "evidence": c.evidence,
            "passed": c.passed,
            "figures": normalized(dict(c.figures)),
            "figures_text": "; ".join(f"{k}={fmt(v)}" for k, v in c.figures.items()),
        }
        for c in report.checks
    ]
    groups = [
        {
            "name": g,
            "total": len(report.group(g)),
            "passed": sum(c.passed for c in report.group(g)),
            "by_evidence": _counts(report.group(g)),
            "checks": [c for c in checks if c["group"] == g],
        }
        for g in GROUPS
    ]
    return {
        "report": stored.name,
        "report_sha256": stored.sha256,
        "inputs_digest": report.inputs_digest,
        "baseline_digest": report.baseline_digest,
        "passed": True,
        "total": len(checks),
        "passed_total": sum(c["passed"] for c in checks),
        "by_evidence": _counts(report.checks),
        "groups": groups,
        "checks": checks,
    }


def _evidence_json(evidence: dict[str, Any], pin: dict[str, str]) -> str:
    data = {
        "format": 1,
        "pin": pin,
        "report": {k: evidence[k] for k in ("report", "report_sha256", "inputs_digest", "baseline_digest")},
        "passed": evidence["passed"],
        "summary": {
            "total": evidence["total"],
            "by_evidence": evidence["by_evidence"],
            "by_group": {g["name"]: {"total": g["total"], "passed": g["passed"]} for g in evidence["groups"]},
        },
        "checks": [
            {k: c[k] for k in ("group", "name", "evidence", "passed", "figures")} for c in evidence["checks"]
        ],
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _shortlog(parsed: list[patchfile.Patch]) -> str:
    authors: dict[str, list[str]] = {}
    for p in parsed:
        authors.setdefault(re.sub(r"\s*<[^>]*>$", "", p.author).strip(), []).append(p.subject)
    return "\n\n".join(
        f"{author} ({len(subjects)}):\n" + "\n".join(f"  {s}" for s in subjects)
        for author, subjects in authors.items()
    )


def render_all(
    env: jinja2.Environment,
    config: package.Config,
    plan: buildplan.Plan,
    series: Series,
    stored: reports.Stored,
    mails: dict[str, str],
    extra: dict[str, Any],
) -> dict[str, str]:
    pin = plan.pin
    report = stored.report
    evidence = _evidence(stored)
    native = {c.name: c.to_json() for c in report.group("native")}
    concerns = []
    for index, (name, mail) in enumerate(zip(series.patches, mails, strict=True), start=1):
        patch, concern = series.patches[name], config.concern(name)
        assert concern is not None  # load_config checked it
        tests = buildplan.native_tests([patch])
        missing = [t for t in tests if t not in native]
        if missing:
            raise VerifyError(
                f"patches/{name} adds the native test(s) {', '.join(missing)}, which the verify report lacks",
                hint=VERIFY_HINT,
            )
        headers = []
        for header, added in sorted(apisurface.added_lines(series.texts[name]).items()):
            if not any(package.glob_match(g, header) for g in config.api_headers):
                continue
            post = gitops.file_at(series.git_dir, series.commits[name], header)
            items = apisurface.surface(header, added, post)
            if items:
                headers.append({"path": header, "decls": items, "code": apisurface.block(items)})
        checks = report.group(concern.group)
        concerns.append(
            {
                "index": index,
                "patch": name,
                "mail": mail,
                "title": concern.title,
                "subject": patch.subject,
                "why": patchfile.why_paragraphs(patch.body),
                "tests_note": patchfile.tests_paragraph(patch.body),
                "files": sorted({f.path for f in patch.files}),
                "headers": headers,
                "native_tests": [
                    native[t] | {"time": fmt(native[t]["figures"].get("time_s", ""))} for t in tests
                ],
                "group": concern.group,
                "checks": [c.to_json() for c in checks],
                "check_counts": _counts(checks),
            }
        )
    pin_info = {
        "repo": plan.upstream_lock.repo,
        "commit": pin.commit,
        "short": pin.short,
        "tree": pin.tree,
        "date": pin.commit_date.isoformat(),
    }
    first_mail = next(iter(mails.values()))
    context: dict[str, Any] = {
        "title": config.title,
        "summary": config.summary.strip("\n"),
        "why": config.why.strip("\n"),
        "pin": pin_info,
        "n": len(mails),
        "concerns": concerns,
        "evidence": evidence,
        "mails": list(mails),
        "mbox": MBOX,
        "cover": COVER,
        "from_header": mail_header(first_mail, "From"),
        "date_header": mail_header(first_mail, "Date"),
        "shortlog": _shortlog(list(series.patches.values())),
        "diffstat": gitops.git(
            ["diff", "--stat=72", "--summary", series.base, series.head], cwd=series.git_dir
        ).stdout.rstrip("\n"),
        "questions": config.questions,
        "api_headers": config.api_headers,
        **extra,
    }
    files: dict[str, str] = {COVER: _render(env, "cover-letter.patch", context), **mails}
    files[MBOX] = "".join(files[p] for p in [COVER, *mails])
    for name in DOCUMENTS:
        files[name] = _render(env, name, context)
    files["evidence.json"] = _evidence_json(evidence, pin_info)
    return files
