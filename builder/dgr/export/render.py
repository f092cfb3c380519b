"""The documents of the upstream package, rendered with the Jinja2 templates of upstream-package/templates/
from the applied series, its branches, the verify report and the bench result of its inputs, and upstream's
own files at the pin (the pull request template, ci/README.md).

- `PR-<n>.md`: the description of pull request n, built on upstream's .github/pull_request_template.md: its
  sections in order, the submitter's section (Overview) left for the submitter between marks, the measured
  and derived facts in the facts section, the kept section (Requirements) verbatim;
- `DISCUSSION.md`: the facts to post on the feature request first, the prose left to the submitter;
- `REPRODUCE.md`: from a clean upstream checkout and the bundles, in upstream's own commands;
- `README.md`: what is here, and what the submitter must do and check before sending.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import jinja2

from dgr.builds import buildplan
from dgr.builds.reportstore import Stored
from dgr.contracts import convert, locks, modellock
from dgr.errors import ConfigError, VerifyError
from dgr.export import apisurface, evidence, upstream_package
from dgr.export.branches import AppliedSeries, Branch, Stat
from dgr.export.context import (
    AbiChange,
    BranchTest,
    CommitFacts,
    HeaderApi,
    LineCounts,
    NativeTest,
    PackageContext,
    PartsFacts,
    PartsSplitFacts,
    PinFacts,
    Prefix,
    PullFacts,
    Section,
    Spread,
)
from dgr.export.figures import cell, fmt
from dgr.export.measured import Measured
from dgr.git import gitops

PACKAGE_DIR = "upstream-package"
TEMPLATES_DIR = "templates"
VERIFY_HINT = "run `dgr verify` (all groups) for the current inputs, then `dgr export-upstream` again"
GROUP_FILES_OVER = 8
"""A directory with more files than this is listed as one glob with its count."""


def environment(templates: Any) -> jinja2.Environment:
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
    env.filters["mib"] = lambda n: f"{n / 2**20:.1f} MiB"
    env.filters["size"] = _size
    env.filters["f"] = lambda x, digits=2: f"{x:.{digits}f}"
    return env


def _size(n: float) -> str:
    """Bytes as text: B, KiB, MiB or GiB with 3 significant digits."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def _render(env: jinja2.Environment, name: str, context: dict[str, Any]) -> str:
    try:
        text = env.get_template(f"{name}.j2").render(context)
    except jinja2.TemplateNotFound as exc:
        raise ConfigError(f"template {exc.name} is missing in {PACKAGE_DIR}/{TEMPLATES_DIR}/") from exc
    except jinja2.TemplateError as exc:
        raise ConfigError(
            f"template {name}.j2: {exc}", hint=f"fix {PACKAGE_DIR}/{TEMPLATES_DIR}/{name}.j2"
        ) from exc
    return re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + "\n"


# --------------------------------------------------------------------------- upstream's own files


def sections(template: str) -> list[Section]:
    """A Markdown template cut at its `## ` headings, every byte kept."""
    found: list[Section] = []
    heading, lines = "", list[str]()
    for line in template.splitlines(keepends=True):
        if line.startswith("## "):
            if heading or "".join(lines).strip():
                found.append(Section(heading, "".join(lines)))
            heading, lines = line[3:].strip(), [line]
        else:
            lines.append(line)
    found.append(Section(heading, "".join(lines)))
    return found


@dataclass(frozen=True)
class UpstreamFiles:
    """What the package takes from upstream's tree at the pin."""

    template: str
    sections: tuple[Section, ...]
    ci_commands: tuple[str, ...]
    perplexity_text_sha256: str


def read_upstream(git_dir: Any, commit: str, config: upstream_package.UpstreamConventions) -> UpstreamFiles:
    """Upstream's pull request template, CI command and perplexity text at `commit`; ConfigError when one is
    missing or the template lacks a section the package needs."""

    def read(path: str) -> str:
        try:
            return gitops.file_at(git_dir, commit, path)
        except KeyError:
            raise ConfigError(
                f"llama.cpp {commit[:12]} has no {path}",
                hint=f"upstream moved or removed it: update [upstream] in {PACKAGE_DIR}/package.toml",
            ) from None

    template = read(config.pr_template)
    cut = sections(template)
    headings = [s.heading for s in cut]
    for wanted in (config.submitter_section, config.facts_section, config.kept_section):
        if wanted not in headings:
            raise ConfigError(
                f"the pull request template of llama.cpp {commit[:12]} ({config.pr_template}) has no "
                f"`## {wanted}` section",
                actual=", ".join(f"## {h}" for h in headings if h) or "no section",
                hint=f"update [upstream] in {PACKAGE_DIR}/package.toml to the template's sections",
            )
    for path in (config.contributing, config.agents):
        read(path)
    ci: list[str] = []
    blocks = re.findall(r"^```(?:bash|sh)?\n(.*?)^```", read(config.ci_readme), flags=re.M | re.S)
    for block in blocks:
        lines = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
        run = next((i for i, line in enumerate(lines) if "ci/run.sh" in line), None)
        if run is not None:
            ci = lines[: run + 1]
            break
    if not ci:
        raise ConfigError(
            f"{config.ci_readme} of llama.cpp {commit[:12]} shows no `ci/run.sh` command",
            hint=f"update [upstream] ci_readme in {PACKAGE_DIR}/package.toml",
        )
    text = read(config.perplexity_text).encode(errors="surrogateescape")
    return UpstreamFiles(template, tuple(cut), tuple(ci), hashlib.sha256(text).hexdigest())


# --------------------------------------------------------------------------- facts


def _file_groups(files: Sequence[str]) -> list[str]:
    """The files, a directory with many files of one extension shown as `dir/*.ext (N files)`."""
    by_dir: dict[tuple[str, str], list[str]] = {}
    for path in files:
        p = PurePosixPath(path)
        by_dir.setdefault((str(p.parent), p.suffix), []).append(path)
    out: list[str] = []
    shown: set[tuple[str, str]] = set()
    for path in files:
        p = PurePosixPath(path)
        key = (str(p.parent), p.suffix)
        if len(by_dir[key]) > GROUP_FILES_OVER:
            if key not in shown:
                shown.add(key)
                out.append(f"`{key[0]}/*{key[1]}` ({len(by_dir[key])} files)")
        else:
            out.append(f"`{path}`")
    return out


def _api(series: AppliedSeries, name: str, config: upstream_package.Config) -> tuple[HeaderApi, ...]:
    """The public declarations patch `name` adds, per header, with what they do to the ABI."""
    headers = []
    for header, added in sorted(apisurface.added_lines(series.texts[name]).items()):
        if not any(upstream_package.glob_match(g, header) for g in config.api_headers):
            continue
        post = gitops.file_at(series.git_dir, series.commits[name], header)
        items = apisurface.surface(header, added, post)
        if not items:
            continue
        abi = tuple(
            AbiChange(
                struct=item.name,
                fields=tuple(apisurface.field_names(item)),
                before=apisurface.following_member(post, item),
            )
            for item in items
            if item.kind == "fields"
        )
        headers.append(HeaderApi(path=header, decls=tuple(items), code=apisurface.block(items), abi=abi))
    return tuple(headers)


def _rpc_better(result: Measured) -> list[str]:
    """Where the RPC backend did better than the layer ranges with as many processes, in this run."""
    rows = result.rpc.rows
    found: list[str] = []
    for ranges in (r for r in rows if r.engine == "ranges"):
        for rpc in (r for r in rows if r.engine == "rpc" and r.processes == ranges.processes):
            where = f"{rpc.processes} processes, {rpc.start} start"
            checks = (
                ("time to the first token", rpc.ttft_s, ranges.ttft_s, False, "s"),
                ("prefill", rpc.prefill_tps, ranges.prefill_tps, True, "t/s"),
                ("decode", rpc.decode_tps, ranges.decode_tps, True, "t/s"),
                (
                    "bytes sent before the first token",
                    rpc.wire_bytes_before_first_token,
                    ranges.wire_bytes_before_first_token,
                    False,
                    "B",
                ),
                (
                    "largest peak RSS of a server or range",
                    rpc.max_other_rss,
                    ranges.max_other_rss,
                    False,
                    "B",
                ),
            )
            for what, a, b, higher, unit in checks:
                if (a > b) if higher else (a < b):
                    found.append(f"{what} ({where}): {fmt(float(a))} {unit} against {fmt(float(b))} {unit}")
    return found


def _spread(values: Sequence[float]) -> Spread:
    return Spread(low=min(values), high=max(values))


def parts_facts(measured: Measured) -> tuple[PartsFacts, ...]:
    """Every model's ranges from their own files, with the lowest and the highest figure of each split."""
    out = []
    for one in measured.parts:
        f = one.figures
        splits = tuple(
            PartsSplitFacts(
                shards=s.shards,
                ranges=s.ranges,
                stored=_spread([r.part_bytes for r in s.ranges]),
                share=_spread([r.part_bytes / f.whole_bytes for r in s.ranges]),
                load=_spread([r.load.median for r in s.ranges]),
                rss_mmap=_spread([r.peak_rss_parts_mmap / r.peak_rss_whole_mmap for r in s.ranges]),
                rss_no_mmap=_spread([r.peak_rss_parts_no_mmap / r.peak_rss_whole_no_mmap for r in s.ranges]),
            )
            for s in f.splits
        )
        out.append(
            PartsFacts(
                model_file=one.model.file,
                n_layer=one.model.n_layer,
                whole_bytes=f.whole_bytes,
                files=f.files,
                rounds=f.rounds,
                prefill_tokens=f.prefill_tokens,
                n_ctx=f.n_ctx,
                splits=splits,
            )
        )
    return tuple(out)


def _ctest_regex(names: Sequence[str]) -> str:
    """`ctest -R` for exactly `names` (regex characters escaped, `-` kept as it is)."""
    return "^(" + "|".join(re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", n) for n in names) + ")$"


def _after(args: Sequence[str], flag: str) -> list[str]:
    """The value of `flag` in `args`, as a list of one (none when absent)."""
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag][:1]


def line_counts(stat: Stat, config: upstream_package.Config) -> LineCounts:
    """The files a diff touches and its changed lines (added + removed) by kind: hand-written core, tests,
    mechanical (`config.line_kind`), from `git diff --numstat`."""
    counts = {"core": 0, "tests": 0, "mechanical": 0}
    for f in stat.by_file:
        counts[config.line_kind(f.path)] += f.lines
    return LineCounts(files=stat.files, **counts)


def _hours(lines: int, per_hour: tuple[int, ...]) -> tuple[float, float]:
    return round(lines / per_hour[1], 1), round(lines / per_hour[0], 1)


def _cmake_options(toolchain: locks.ToolchainLock) -> list[str]:
    options = {"CMAKE_BUILD_TYPE": toolchain.build_type, **toolchain.cmake_options}
    options |= toolchain.tools_cmake_options
    return [f"-D{k}={v}" for k, v in options.items()]


def context(
    config: upstream_package.Config,
    plan: buildplan.Plan,
    series: AppliedSeries,
    branches: list[Branch],
    stored: Stored,
    measured: Measured,
    files: UpstreamFiles,
    model: modellock.ModelLock,
    rules: Mapping[str, str] | None = None,
) -> PackageContext:
    """Everything the templates show, derived from the inputs, in series order; `rules`: the rule of each
    generated patch (dgr.series.generated)."""
    rules = rules or {}
    pin = plan.pin
    report = stored.report
    native = {c.name: c for c in report.group("native")}
    up = config.upstream
    repo_url = plan.upstream_lock.repo
    comparison = measured.comparison
    comparisons = (comparison, *measured.others)
    for c in comparisons:
        if c.text != up.perplexity_text or c.text_sha256 != files.perplexity_text_sha256:
            raise VerifyError(
                f"the bench result measured perplexity of {c.model_file} on another text than "
                f"{up.perplexity_text} of the pin",
                expected=f"{up.perplexity_text} (sha256 {files.perplexity_text_sha256})",
                actual=f"{c.text} (sha256 {c.text_sha256})",
                hint="run `dgr bench --rpc` again, then `dgr export-upstream`",
            )
    pulls: list[PullFacts] = []
    series_checks = {c.name: c for c in report.group("series")}
    # the native tests of the branch so far: (ctest name, target, number of the pull request that adds it)
    tests: list[tuple[str, str, int]] = []
    done = 0
    api_so_far = False
    for branch in branches:
        number = branch.pull.number
        commits: list[CommitFacts] = []
        added_in: dict[str, int] = {}
        # the tests this pull request adds or extends: ctest name -> the index of its commit that does
        extended: dict[str, int] = {}
        parent_commit = branch.parent
        for index, ((name, commit), stat) in enumerate(
            zip(branch.commits, branch.commit_stats, strict=True), start=1
        ):
            patch, concern = series.patches[name], config.concern(name)
            assert concern is not None  # load_config checked it
            own_tests = buildplan.native_test_targets([patch])
            missing = [t for t, _ in own_tests if t not in native]
            if missing:
                raise VerifyError(
                    f"patches/{name} adds the native test(s) {', '.join(missing)}, which the verify report "
                    "lacks",
                    hint=VERIFY_HINT,
                )
            touched = {f.path for f in patch.files}
            extends = [t for t, target, _ in tests if f"tests/{target}.cpp" in touched]
            extended |= {t: index for t in extends if t not in extended}
            added_in |= {t: index for t, _ in own_tests if t not in added_in}
            tests += [(t, target, number) for t, target in own_tests]
            commits.append(
                CommitFacts(
                    index=index,
                    commit=commit,
                    subject=patch.subject,
                    concern=concern,
                    stat=stat,
                    lines=line_counts(stat, config),
                    files=tuple(_file_groups(sorted({f.path for f in patch.files}))),
                    tests=tuple(NativeTest(name=t, target=target) for t, target in own_tests),
                    api=_api(series, name, config),
                    rule=rules.get(name),
                    parent_commit=parent_commit,
                )
            )
            parent_commit = commit
        done += len(branch.commits)
        api_so_far = api_so_far or any(c.api for c in commits)
        names = tuple(t for t, _, _ in tests)
        prefix = series_checks.get(f"prefix-{done}")
        pulls.append(
            PullFacts(
                **convert.fields_of(upstream_package.Pull, branch.pull),
                bundle=f"PR-{number}.bundle",
                body=f"PR-{number}.md",
                head=branch.head,
                stacked_on=branches[number - 2].pull.branch if number > 1 else None,
                stat=branch.stat,
                lines=line_counts(branch.stat, config),
                hours=_hours(branch.stat.lines, up.review_lines_per_hour),
                commits=tuple(commits),
                tests=names,
                branch_tests=tuple(
                    BranchTest(
                        name=t,
                        target=target,
                        added_by=by,
                        commit=added_in.get(t),
                        extended_in=extended.get(t),
                    )
                    for t, target, by in tests
                ),
                targets=tuple(dict.fromkeys(target for _, target, _ in tests)),
                api_so_far=api_so_far,
                ctest_regex=_ctest_regex(names) if names else "",
                prefix=Prefix(patches=done, tests=dict(prefix.figures.get("tests", {})), passed=prefix.passed)
                if prefix is not None
                else None,
            )
        )
    last = pulls[-1]
    return PackageContext(
        pin=PinFacts(
            repo=repo_url,
            commit=pin.commit,
            short=pin.short,
            date=pin.commit_date.isoformat(),
        ),
        upstream=up,
        issue_url=f"{repo_url}/issues",
        pulls=tuple(pulls),
        last=last,
        all_targets=last.targets,
        authors=tuple(dict.fromkeys(p.author for p in series.patches.values())),
        all_ctest_regex=last.ctest_regex,
        sections=files.sections,
        ci_commands=files.ci_commands,
        submitter_begin=upstream_package.SUBMITTER_BEGIN,
        submitter_end=upstream_package.SUBMITTER_END,
        archs=evidence.archs_table(report.checks, evidence.refusal_message(series)),
        graphs=evidence.graphs_table(report.checks),
        archs_test=next((t for t in last.tests if "archs" in t), None),
        real_model=evidence.real_model_rows(report.checks),
        measured=measured,
        comparison=comparison,
        comparisons=comparisons,
        rpc=measured.rpc,
        rpc_better=tuple(_rpc_better(measured)),
        rpc_head_args=shlex.join(
            f"../models/{a}" if a == measured.rpc.model_file else a for a in measured.rpc.head_args
        ),
        rpc_ports=tuple(
            int(a.rsplit(":", 1)[1])
            for arg in _after(measured.rpc.head_args, "--rpc")
            for a in arg.split(",")
        ),
        parts=parts_facts(measured),
        model=model,
        cmake_options=tuple(_cmake_options(plan.toolchain_lock)),
        questions=config.questions,
        line_globs=config.line_globs,
    )


def render_all(env: jinja2.Environment, ctx: PackageContext) -> dict[str, str]:
    """Every document of the package: path -> text."""
    files: dict[str, str] = {}
    for pull in ctx.pulls:
        files[pull.body] = _render(env, "PR.md", ctx.variables(pull=pull))
    for name in ("DISCUSSION.md", "REPRODUCE.md", "README.md"):
        files[name] = _render(env, name, ctx.variables())
    return files


def kept_verbatim(files: dict[str, str], ctx: PackageContext, kept: str) -> list[str]:
    """Pull request bodies that do not hold upstream's kept section byte for byte."""
    section = next(s for s in ctx.sections if s.heading == kept)
    return [
        f"{pull.body}: the `## {kept}` section of upstream's template is not kept verbatim"
        for pull in ctx.pulls
        if section.text.rstrip("\n") not in files[pull.body]
    ]
