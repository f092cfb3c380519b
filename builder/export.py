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

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dgr import apply, buildplan, gitops, locks, log, package, patchfile, render, reports, upstream
from dgr.digest import sha256_bytes
from dgr.errors import ApplyError, ConfigError, LintError, UsageError
from dgr.fs import publish_dir
from dgr.mails import Series, format_mails
from dgr.paths import Cache, Context
from filelock import FileLock

PACKAGE_DIR = render.PACKAGE_DIR
CONFIG_FILE = "package.toml"
DEFAULT_OUT = f"{PACKAGE_DIR}/out"
MANIFEST = "MANIFEST.sha256"


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


def _parse(plan: buildplan.Plan) -> tuple[dict[str, str], dict[str, patchfile.Patch]]:
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
    plan = buildplan.plan(ctx, buildplan.Request(mirror=mirror))
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
    env = render.environment(repo.root / PACKAGE_DIR / render.TEMPLATES_DIR)
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
        report = reports.load_passing(ctx.cache, plan.digest, render.VERIFY_HINT)
        with log.step("render the package"):
            mails = format_mails(
                got.repo, pin.commit, applied.commit, names, tmp / "mails", config.drop_trailers
            )
            files = render.render_all(env, config, plan, series, report, mails, extra)
        _self_check(series, mails, identity, tmp)
        problems = package.scan_prose(render.COVER, files[render.COVER], config.deny_words)
        for name in render.DOCUMENTS:
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
