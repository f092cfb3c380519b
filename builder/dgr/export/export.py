"""`dgr export-upstream`: the upstream package, in the form llama.cpp takes contributions (GitHub pull
requests), rendered from the series and backed by the verify report and the bench result of its inputs.

Steps (nothing is written unless every one succeeds):
 1. plan the build (verifies the series against locks/patches.toml, computes the inputs digest; no build);
 2. read upstream-package/package.toml: one concern per patch, the pull requests, how upstream takes them;
 3. apply the series with `git am` on the pinned commit in a temporary worktree (ApplyError, exit 5);
 4. lint each patch: words of ours, `git diff --check`, files outside its concern (LintError, exit 7);
 5. read the passing verify report of the inputs digest, and the bench result measured on the same inputs
    with `--rpc`, both by the current harness (the checks' sources and the model lock), the bench with the
    locked models (VerifyError, exit 9);
 6. make one branch per pull request (the commits without our trailers, dgr.export.branches) and its git
    bundle; fetch each bundle into a fresh repository that has the pin and compare its tree with the series'
    (ApplyError, exit 5);
 7. the range-diff of the series on the previous pin against the series on the pin (dgr.export.previous:
    the pin's history is the git history of locks/upstream.toml), or, without one, why there is none;
    read upstream's pull request template, CI command and perplexity text at the pin, and render the
    documents (Jinja2 templates in upstream-package/templates/); the kept section must be verbatim, and no
    document may carry a word of ours (code included; upstream's `upstream_identifiers` excepted, each checked
    against the pinned tree, ConfigError) or a placeholder outside the submitter's marks, nor range-diff.txt
    a word of ours in a line of the series (upstream's code quoted there is upstream's) (LintError);
 8. write everything to a staging directory next to --out and rename it into place.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from dgr.builds import buildplan, harness, reportstore
from dgr.contracts import locks
from dgr.core import log
from dgr.core.digest import sha256_bytes
from dgr.core.fs import publish_dir
from dgr.core.paths import Cache, Context, Repo
from dgr.errors import ConfigError, LintError, UsageError
from dgr.export import branches, measured, previous, render, upstream_package
from dgr.git import apply, gitops
from dgr.series import generated, patchfile
from dgr.series import order as series
from dgr.sources import upstream

PACKAGE_DIR = render.PACKAGE_DIR
CONFIG_FILE = "package.toml"
DEFAULT_OUT = f"{PACKAGE_DIR}/out"
MANIFEST = "MANIFEST.sha256"
GITHUB_BODY_MAX = 65536
"""The most characters GitHub takes in a pull request description or a comment."""


@dataclass(frozen=True)
class Exported:
    out: Path
    files: dict[str, str]
    """Relative path -> sha256 of every file written, sorted by path."""
    inputs_digest: str
    report: str
    bench: str
    pulls: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "inputs_digest": self.inputs_digest,
            "report": self.report,
            "bench": self.bench,
            "pulls": self.pulls,
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


def lint(
    config: upstream_package.Config, series: branches.AppliedSeries
) -> list[upstream_package.PackageFinding]:
    """Words of ours, whitespace errors and files outside the concern, for every patch."""
    findings: list[upstream_package.PackageFinding] = []
    for name, patch in series.patches.items():
        concern = config.concern(name)
        assert concern is not None  # load_config checked it
        findings += upstream_package.deny_findings(name, series.texts[name], config.deny_words)
        findings += upstream_package.whitespace_findings(name, series.git_dir, series.commits[name])
        findings += upstream_package.path_findings(name, touched(patch), concern)
    return findings


def touched(patch: patchfile.Patch) -> list[str]:
    """The paths a patch touches, old and new names of a rename both, sorted."""
    return sorted({p for f in patch.files for p in (f.path, f.old_path)} - {"/dev/null"})


def concern_findings(repo: Repo) -> list[upstream_package.PackageFinding]:
    """The files each patch of the series touches outside the paths of its concern (package.toml): what
    `dgr export-upstream` refuses, for `dgr check` to find before a package is rendered. ConfigError (exit
    8) when package.toml or a patch cannot be read; none for a repository without package.toml (it renders no
    package: `dgr export-upstream` refuses to run there)."""
    path = repo.root / PACKAGE_DIR / CONFIG_FILE
    if not path.is_file():
        return []
    names = series.load(repo.series_file).names
    config = upstream_package.load_config(path, names)
    findings: list[upstream_package.PackageFinding] = []
    for name in names:
        concern = config.concern(name)
        assert concern is not None  # load_config checked it
        try:
            patch = patchfile.parse((repo.patches_dir / name).read_text(errors="surrogateescape"))
        except (OSError, patchfile.PatchParseError) as exc:
            raise ConfigError(f"patches/{name} cannot be read: {exc}", hint="run `dgr check`") from exc
        findings += upstream_package.path_findings(name, touched(patch), concern)
    return findings


def run(ctx: Context, out: Path, mirror: Path | None = None, bench: Path | None = None) -> Exported:
    repo = ctx.repo
    _refuse_foreign_out(out)
    plan = buildplan.plan(ctx, buildplan.Request(mirror=mirror))
    names = [ref.name for ref in plan.patches]
    if not names:
        raise UsageError("the series is empty: there is nothing to send upstream")
    config = upstream_package.load_config(repo.root / PACKAGE_DIR / CONFIG_FILE, names)
    rules = {name: rule for name, rule in generated.rules_of(repo).items() if name in names}
    env = render.environment(repo.root / PACKAGE_DIR / render.TEMPLATES_DIR)
    texts, parsed = _parse(plan)
    pin = plan.pin
    with log.step(f"obtain upstream {pin.short}"):
        got = upstream.obtain(ctx.cache, pin, plan.sources, mirror)
    identity = gitops.Identity.from_locks(plan.toolchain_lock, pin)
    unknown = upstream_package.identifier_problems(config, got.repo, pin.commit)
    if unknown:
        raise ConfigError(
            f"{PACKAGE_DIR}/{CONFIG_FILE}: {len(unknown)} upstream identifier(s) not in the pinned tree",
            detail="\n".join(unknown),
            hint="list in upstream_identifiers only identifiers of llama.cpp at the pin that the package "
            "quotes (an error of upstream's names one); reword what is ours instead",
        )
    with ctx.cache.tmpdir("export-upstream") as tmp:
        applied = apply.apply_series(got.repo, pin.commit, list(plan.patches), identity, tmp / "series")
        series = branches.AppliedSeries(
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
        ran = harness.current(repo)
        report = reportstore.load_passing(ctx.cache, plan.digest, ran, render.VERIFY_HINT)
        bench_path = bench or measured.full_result(ctx.cache, plan.digest)
        result = measured.load(bench_path, plan.digest, ran, locks.load_models(repo.locks_dir))
        with log.step(f"make {len(config.pulls)} branch(es) and their bundles"):
            made = branches.make(series, config.pulls, config.drop_trailers, identity, tmp / "branches")
            branches.check(series, made, tmp / "check")
        for b in made:
            log.detail(
                f"{b.pull.branch}: {len(b.commits)} commit(s), tree {b.tree[:12]}, the series' tree after "
                f"{b.pull.patches[-1]}"
            )
        with log.step("the range-diff against the previous pin"):
            range_diff = previous.render(
                ctx.cache,
                repo.root,
                pin,
                got.repo,
                texts,
                config.drop_trailers,
                identity,
                tmp / "previous",
                mirror,
            )
        with log.step("render the package"):
            files = render.read_upstream(got.repo, pin.commit, config.upstream)
            context = render.context(
                config,
                plan,
                series,
                made,
                report,
                result,
                files,
                result.model,
                rules,
            )
            documents = render.render_all(env, context)
            documents[previous.FILE] = range_diff
        problems = render.kept_verbatim(documents, context, config.upstream.kept_section)
        if rules:
            # the rules themselves, for the reviewer to run on the commits they generate (see PR-<n>.md)
            for name in generated.PACKAGED:
                documents[f"rules/{name}"] = (repo.root / generated.RULES_DIR / name).read_text()
        for name, text in documents.items():
            if name == previous.FILE:
                # git's quote of both series and of upstream's code around them: the series' lines only
                problems += upstream_package.scan_range_diff(name, text, config.deny_words)
            else:
                problems += upstream_package.scan_package(
                    name, text, config.deny_words, config.upstream_identifiers
                )
            posted = name == "DISCUSSION.md" or (name.startswith("PR-") and name.endswith(".md"))
            if posted and len(text) > GITHUB_BODY_MAX:
                problems.append(f"{name}: {len(text)} characters, GitHub takes at most {GITHUB_BODY_MAX}")
        for b in made:
            problems += upstream_package.scan_package(
                f"{b.pull.branch} (branch name)", b.pull.branch, config.deny_words
            )
        if problems:
            raise LintError(
                "the rendered package is not fit to send upstream",
                detail="\n".join(problems),
                hint=f"reword {PACKAGE_DIR}/{CONFIG_FILE} or the templates; placeholders belong between the "
                "submitter's marks only; an identifier of llama.cpp that holds a word of ours (quoted from "
                f"upstream's output) goes in upstream_identifiers of {PACKAGE_DIR}/{CONFIG_FILE}",
            )
    data: dict[str, bytes] = {
        path: text.encode("utf-8", errors="surrogateescape") for path, text in documents.items()
    }
    for b in made:
        data[f"PR-{b.pull.number}.bundle"] = b.bundle
    data[MANIFEST] = "".join(f"{sha256_bytes(data[p])}  {p}\n" for p in sorted(data)).encode()
    _publish(ctx.cache, out, data)
    pulls: list[dict[str, Any]] = []
    for b in made:
        counts = render.line_counts(b.stat, config)
        pulls.append(
            {
                "number": b.pull.number,
                "title": b.pull.title,
                "branch": b.pull.branch,
                "head": b.head,
                "tree": b.tree,
                "commits": [c for _, c in b.commits],
                "lines": b.stat.lines,
                "files": counts.files,
                "core_lines": counts.core,
                "test_lines": counts.tests,
                "mechanical_lines": counts.mechanical,
            }
        )
    return Exported(
        out,
        {p: sha256_bytes(data[p]) for p in sorted(data)},
        plan.digest,
        report.name,
        str(bench_path),
        pulls,
    )


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
