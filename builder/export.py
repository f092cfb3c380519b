"""`dgr export-upstream`: the upstream submission package, rendered from the series and backed by the
verify report of the current inputs.

Steps (nothing is written unless every one succeeds):
 1. plan the build (verifies the series against locks/patches.toml, computes the inputs digest; no build);
 2. read upstream-package/package.toml (one concern per patch) and the README's first command;
 3. apply the series with `git am` on the pinned commit in a temporary worktree (ApplyError, exit 5);
 4. lint each patch: words of ours, `git diff --check`, files outside its concern (LintError, exit 7);
 5. read the passing verify report of the inputs digest (VerifyError, exit 9);
 6. render the mails (`git format-patch` of the applied commits, numbered) and the documents
    (Jinja2 templates in upstream-package/templates/), then `git am` the rendered mails again on the
    pin and compare the tree with the series';
 7. write everything to a staging directory next to --out and rename it into place.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from dgr import apisurface, apply, build, gitops, locks, log, package, patchfile, reports, upstream
from dgr.contracts import GROUPS, Check
from dgr.digest import sha256_bytes
from dgr.errors import ApplyError, ConfigError, LintError, UsageError, VerifyError
from dgr.fs import publish_dir
from dgr.paths import Cache, Context
from filelock import FileLock

PACKAGE_DIR = "upstream-package"
CONFIG_FILE = "package.toml"
TEMPLATES_DIR = "templates"
DEFAULT_OUT = f"{PACKAGE_DIR}/out"
MANIFEST = "MANIFEST.sha256"
COVER = "patches/0000-cover-letter.patch"
MBOX = "series.mbox"
DOCUMENTS = ("API.md", "OUTREACH.md", "TEST-MAP.md", "EVIDENCE.md")
VERIFY_HINT = "run `dgr verify` (all groups) for the current inputs, then `dgr export-upstream` again"
_LIST_ITEM = re.compile(r"^[-*] ")
_TESTS_PARAGRAPH = re.compile(r"^tests ?: ")


@dataclass(frozen=True)
class Exported:
    out: Path
    files: dict[str, str]
    """Relative path -> sha256 of every file written, sorted by path."""
    inputs_digest: str
    report: str

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "inputs_digest": self.inputs_digest,
            "report": self.report,
            "files": self.files,
        }


# --------------------------------------------------------------------------- figures


def fmt(value: Any, nested: bool = False) -> str:
    """A figure as text, the same for the same value: floats with 6 significant digits."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, ".6g")
    if isinstance(value, int):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(fmt(v, True) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {fmt(v, True)}" for k, v in value.items()) + "}"
    return json.dumps(str(value), ensure_ascii=False) if nested else str(value)


def normalized(value: Any) -> Any:
    """The figures for evidence.json: floats rounded to 6 significant digits, the rest unchanged."""
    if isinstance(value, float):
        return float(format(value, ".6g"))
    if isinstance(value, list):
        return [normalized(v) for v in value]
    if isinstance(value, dict):
        return {str(k): normalized(v) for k, v in value.items()}
    return value


_EVIDENCE_PHRASES = {
    "native test": ("native test", "native tests"),
    "real model": ("with a real model", "with a real model"),
    "synthetic fixture": ("with a synthetic model", "with synthetic models"),
}


def counts_text(counts: dict[str, int]) -> str:
    """`{"native test": 3, "real model": 22}` -> "3 native tests, 22 with a real model"."""
    phrases = []
    for kind, count in counts.items():
        one, many = _EVIDENCE_PHRASES.get(kind, (kind, kind))
        phrases.append(f"{count} {one if count == 1 else many}")
    return ", ".join(phrases)


def _cell(text: Any) -> str:
    """Text for a Markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


# --------------------------------------------------------------------------- patch messages


def why_paragraphs(body: str) -> str:
    """The first paragraphs of a message: those before its first list and its `tests :` paragraph."""
    kept: list[str] = []
    for paragraph in body.strip("\n").split("\n\n"):
        if _LIST_ITEM.match(paragraph) or _TESTS_PARAGRAPH.match(paragraph):
            break
        kept.append(paragraph)
    text = "\n\n".join(kept)
    return text[:-1] + "." if text.endswith(":") else text


def tests_paragraph(body: str) -> str:
    return next((p for p in body.split("\n\n") if _TESTS_PARAGRAPH.match(p)), "")


# --------------------------------------------------------------------------- mails


def _drop_trailers(mail: str, keys: tuple[str, ...]) -> str:
    """Remove the trailers named `keys` (ours, e.g. Upstream-Status) from the message of a mail."""
    if not keys:
        return mail
    head, sep, rest = mail.partition("\n---\n")
    wanted = {k.lower() for k in keys}
    lines = [
        line for line in head.split("\n") if line.split(":", 1)[0].lower() not in wanted or ":" not in line
    ]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + sep + rest


def _header(mail: str, key: str) -> str:
    """The raw header line `key:` of a mail, with its continuation lines."""
    lines = mail.split("\n\n", 1)[0].split("\n")
    for i, line in enumerate(lines):
        if line.lower().startswith(key.lower() + ":"):
            block = [line]
            for more in lines[i + 1 :]:
                if more[:1] not in (" ", "\t"):
                    break
                block.append(more)
            return "\n".join(block)
    raise ApplyError(f"git format-patch wrote a mail without a {key} header")


def format_mails(
    repo: Path, base: str, head: str, names: list[str], where: Path, drop: tuple[str, ...]
) -> dict[str, str]:
    """`git format-patch --numbered` of base..head: `patches/NNNN-<patch stem>.patch` -> mail text."""
    where.mkdir(parents=True)
    gitops.git(
        [
            "format-patch",
            "--quiet",
            "--numbered",
            "--zero-commit",
            "--no-signature",
            "--full-index",
            "--encoding=UTF-8",
            "-o",
            where,
            f"{base}..{head}",
        ],
        cwd=repo,
    )
    produced = sorted(where.iterdir())
    if len(produced) != len(names):
        raise ApplyError(f"git format-patch wrote {len(produced)} mail(s) for {len(names)} patch(es)")
    return {
        f"patches/{i:04d}-{Path(name).stem}.patch": _drop_trailers(
            path.read_text(errors="surrogateescape"), drop
        )
        for i, (name, path) in enumerate(zip(names, produced, strict=True), start=1)
    }


# --------------------------------------------------------------------------- rendering


def _environment(templates: Path) -> jinja2.Environment:
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
    env.filters["cell"] = _cell
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


# --------------------------------------------------------------------------- the command


@dataclass(frozen=True)
class Series:
    """The series applied on the pin: each patch's text, parsed mail and commit, in series order."""

    git_dir: Path
    base: str
    head: str
    tree: str
    texts: dict[str, str]
    patches: dict[str, patchfile.Patch]
    commits: dict[str, str]


def _parse(plan: build.Plan) -> tuple[dict[str, str], dict[str, patchfile.Patch]]:
    texts = {ref.name: ref.path.read_text(errors="surrogateescape") for ref in plan.patches}
    parsed = {}
    for name, text in texts.items():
        try:
            parsed[name] = patchfile.parse(text)
        except patchfile.PatchParseError as exc:
            raise ConfigError(
                f"patches/{name} is not a format-patch mail: {exc}", hint="run `dgr check`"
            ) from exc
    return texts, parsed


def lint(config: package.Config, series: Series) -> list[package.Finding]:
    """Words of ours, whitespace errors and files outside the concern, for every patch."""
    findings: list[package.Finding] = []
    for name, patch in series.patches.items():
        concern = config.concern(name)
        assert concern is not None  # load_config checked it
        findings += package.deny_findings(name, series.texts[name], config.deny_words)
        findings += package.whitespace_findings(name, series.git_dir, series.commits[name])
        touched = sorted({p for f in patch.files for p in (f.path, f.old_path)} - {"/dev/null"})
        findings += package.path_findings(name, touched, concern)
    return findings


def run(ctx: Context, out: Path, mirror: Path | None = None) -> Exported:
    repo = ctx.repo
    _refuse_foreign_out(out)
    plan = build.plan(ctx, build.Request(mirror=mirror))
    names = [ref.name for ref in plan.patches]
    if not names:
        raise UsageError("the series is empty: there is nothing to send upstream")
    config = package.load_config(repo.root / PACKAGE_DIR / CONFIG_FILE, names)
    model = locks.load_model(repo.locks_dir)
    extra = {
        "commands": package.reproduce_commands(repo.root / "README.md", config.clone),
        "model": {
            "file": model.filename,
            "sha256": model.sha256,
            "package": f"{model.package}=={model.version}",
        },
    }
    env = _environment(repo.root / PACKAGE_DIR / TEMPLATES_DIR)
    texts, parsed = _parse(plan)
    pin = plan.pin
    with log.step(f"obtain upstream {pin.short}"):
        got = upstream.obtain(ctx.cache, pin, plan.sources, mirror)
    identity = gitops.Identity.from_locks(plan.toolchain_lock, pin)
    with ctx.cache.tmpdir("export-upstream") as tmp:
        applied = apply.apply_series(got.repo, pin.commit, list(plan.patches), identity, tmp)
        series = Series(
            got.repo, pin.commit, applied.commit, applied.tree, texts, parsed, dict(applied.commits)
        )
        with log.step(f"lint {len(names)} patch(es): words of ours, git diff --check, declared paths"):
            findings = lint(config, series)
        if findings:
            raise LintError(
                f"{len(findings)} problem(s) in {len({f.patch for f in findings})} patch(es): "
                "not fit to send upstream",
                detail="\n".join(f.render() for f in findings),
                hint="repair the patch (`dgr edit`, then `dgr export-patches`), or fix the concern's "
                f"paths in {PACKAGE_DIR}/{CONFIG_FILE}",
            )
        report = reports.load_passing(ctx.cache, plan.digest, VERIFY_HINT)
        with log.step("render the package"):
            mails = format_mails(
                got.repo, pin.commit, applied.commit, names, tmp / "mails", config.drop_trailers
            )
            files = _render_all(env, config, plan, series, report, mails, extra)
        _self_check(series, mails, identity, tmp)
        problems = package.scan_prose(COVER, files[COVER], config.deny_words)
        for name in DOCUMENTS:
            problems += package.scan_prose(name, files[name], config.deny_words)
        if problems:
            raise LintError(
                "the rendered package carries words of ours",
                detail="\n".join(problems),
                hint=f"reword {PACKAGE_DIR}/{CONFIG_FILE} or the templates (code spans are not scanned)",
            )
    data = {path: text.encode("utf-8", errors="surrogateescape") for path, text in files.items()}
    data[MANIFEST] = "".join(f"{sha256_bytes(data[p])}  {p}\n" for p in sorted(data)).encode()
    _publish(ctx.cache, out, data)
    return Exported(out, {p: sha256_bytes(data[p]) for p in sorted(data)}, plan.digest, report.name)


def _render_all(
    env: jinja2.Environment,
    config: package.Config,
    plan: build.Plan,
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
        tests = build.native_tests([patch])
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
            post = gitops.out(["show", f"{series.commits[name]}:{header}"], cwd=series.git_dir)
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
                "why": why_paragraphs(patch.body),
                "tests_note": tests_paragraph(patch.body),
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
        "from_header": _header(first_mail, "From"),
        "date_header": _header(first_mail, "Date"),
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


def _self_check(series: Series, mails: dict[str, str], identity: gitops.Identity, tmp: Path) -> None:
    """`git am` the rendered mails on the pin: they must give the tree of the series."""
    staged = tmp / "rendered"
    refs = []
    for path, text in mails.items():
        target = staged / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, errors="surrogateescape")
        refs.append(apply.PatchRef(Path(path).name, target, ""))
    try:
        got = apply.apply_series(series.git_dir, series.base, refs, identity, tmp)
    except ApplyError as exc:
        exc.what = f"the rendered mail {exc.what} (a bug in export-upstream or its templates)"
        raise
    if got.tree != series.tree:
        raise ApplyError(
            "the rendered mails do not reproduce the series",
            expected=f"tree {series.tree}",
            actual=f"tree {got.tree}",
        )
    log.detail(f"the rendered mails apply with git am on {series.base[:12]} and give tree {series.tree[:12]}")


# --------------------------------------------------------------------------- writing


def _refuse_foreign_out(out: Path) -> None:
    """Replace only an earlier export (it holds MANIFEST.sha256) or an empty directory."""
    if not out.exists():
        return
    if not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).is_file()):
        raise UsageError(
            f"{out} exists and is not the output of an earlier `dgr export-upstream`",
            hint="choose another --out, or remove it yourself",
        )


def _publish(cache: Cache, out: Path, data: dict[str, bytes]) -> None:
    """Write into a staging directory next to `out`, then rename it into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for path, content in data.items():
            target = staging / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        with FileLock(cache.lock_file("export-upstream")):
            _refuse_foreign_out(out)
            publish_dir(staging, out, replace=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
