"""The upstream package's configuration (upstream-package/package.toml) and the lints of
`dgr export-upstream`: words of ours, whitespace errors, files outside a concern's paths, the form of a
pull request title, and placeholders left in the rendered package.

What is linted follows who wrote it. The documents (`*.md`) are prose of ours: words of ours anywhere (code
blocks included), placeholders outside the submitter's marks. range-diff.txt quotes the series and
upstream's code around it: only the lines of the series (its subjects, messages and added lines) are ours,
and no placeholder is looked for (upstream's `std::vector<float>` or `FIXME` is code, not a gap in our
prose). Upstream's own identifiers that hold a word of ours (`upstream_identifiers` of package.toml, each
found in the pinned tree) are upstream's when the documents quote them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from dgr.contracts import convert
from dgr.contracts.locks import read_toml
from dgr.contracts.report import GROUPS, Group
from dgr.errors import ConfigError, GitError
from dgr.git import gitops

CONFORMANCE_GROUPS: dict[str, Group] = {g: g for g in GROUPS if g != "native"}
"""The groups a concern can name: every group of `dgr verify` but the native tests (each patch's own)."""
DEFAULT_API_HEADERS = ("include/*.h", "src/llama-ext.h")
DEFAULT_MECHANICAL_PATHS = ("src/models/*.cpp",)
"""The files whose lines are the same change repeated (one per architecture), counted apart."""
DEFAULT_TEST_PATHS = ("tests/**",)
LineKind = Literal["core", "tests", "mechanical"]
PullFigures = Literal["parts"]
"""Measured figures a pull request's description shows beside its own (`figures` of a `[[pulls]]` table):
`parts`, every model's ranges loaded from the files that hold only their tensors against from the whole
file (the bench result's `parts`), in the pull request that lets a range load from such files."""
TITLE_MAX = 72
"""A pull request title, and the squashed commit's subject upstream derives from it."""
TITLE_FORM = re.compile(r"^[a-z0-9][a-z0-9_.+/-]*(?:, ?[a-z0-9][a-z0-9_.+/-]*)* : \S.*\S$")
"""`<module> : <title>` (CONTRIBUTING.md of llama.cpp), modules lower case, comma separated."""
BRANCH_FORM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)*$")
IDENTIFIER_FORM = re.compile(r"^[A-Za-z0-9_]+$")
"""An identifier of upstream's (`upstream_identifiers`): letters, digits and `_`, matched as a whole token."""


Text = Annotated[str, convert.NON_EMPTY_TEXT]
Strings = Annotated[tuple[str, ...], convert.AT_LEAST_ONE]
Positive = Annotated[int, convert.POSITIVE]


# the rules of the fields, named here: an annotation is evaluated (typing.get_type_hints) where a lambda in it
# would not see this module's names
LOW_HIGH = convert.Rule(
    lambda value: len(value) == 2 and value[0] <= value[1], "", "expected [low, high], two positive integers"
)
_GROUP = convert.Rule(lambda v: v in CONFORMANCE_GROUPS, f"one of {', '.join(CONFORMANCE_GROUPS)}")


@dataclass(frozen=True)
class Concern:
    """One concern of the series (a `[[concerns]]` table of package.toml, as written): one patch, the paths it
    may touch, the verify group that backs it."""

    patch: Text
    title: Text
    group: Annotated[str, _GROUP] = field(metadata=convert.keyed("verify_group"))
    """`verify_group`: the group of `dgr verify` that backs it, one of CONFORMANCE_GROUPS."""
    paths: Strings
    answers: Text
    """Provenance: the upstream issue or pull request that the patch answers."""
    drop_when: Text
    """Provenance: what upstream would have to do for the series to drop the patch."""
    notes: tuple[Text, ...] = ()
    """Facts about the change that its diff does not show (the ABI of a struct, a default)."""

    def allows(self, path: str) -> bool:
        return any(glob_match(pattern, path) for pattern in self.paths)


@dataclass(frozen=True)
class Pull:
    """One pull request: a branch of consecutive patches of the series, stacked on the previous one."""

    number: int
    branch: str
    title: str
    patches: tuple[str, ...]
    why: str = ""
    """Why these patches go together (or apart): facts, shown in the README and DISCUSSION.md."""
    figures: tuple[PullFigures, ...] = ()
    """The measured figures its description shows beside its own (`PullFigures`)."""


@dataclass(frozen=True)
class UpstreamConventions:
    """How upstream takes contributions (`[upstream]` of package.toml, read as it is written); every path
    names a file of the pinned tree."""

    pr_template: Text
    kept_section: Text
    submitter_section: Text
    facts_section: Text
    ci_readme: Text
    contributing: Text
    agents: Text
    review_lines_per_hour: Annotated[tuple[Positive, ...], LOW_HIGH]
    """Upstream's review rate, [low, high] lines per hour."""
    feature_issue: Positive
    rpc_issue: Positive
    api_changelog_issue: Positive
    perplexity_text: Text


@dataclass(frozen=True)
class LineGlobs:
    """The files whose changed lines count apart (`test_paths`, `mechanical_paths` of package.toml)."""

    tests: tuple[str, ...] = DEFAULT_TEST_PATHS
    mechanical: tuple[str, ...] = DEFAULT_MECHANICAL_PATHS

    def kind(self, path: str) -> LineKind:
        """What the changed lines of `path` count as: tests, mechanical, else hand-written core."""
        if any(glob_match(g, path) for g in self.tests):
            return "tests"
        if any(glob_match(g, path) for g in self.mechanical):
            return "mechanical"
        return "core"


@dataclass(frozen=True)
class Config:
    path: Path
    deny_words: tuple[str, ...]
    drop_trailers: tuple[str, ...]
    api_headers: tuple[str, ...]
    upstream: UpstreamConventions
    pulls: tuple[Pull, ...]
    concerns: tuple[Concern, ...]
    questions: tuple[str, ...]
    line_globs: LineGlobs = field(default_factory=LineGlobs)
    upstream_identifiers: tuple[str, ...] = ()
    """Upstream's identifiers that hold a word of ours (a GGUF key that an error of upstream's names): masked
    before the words of ours are looked for in the documents; each must be in the pinned tree
    (`identifier_problems`)."""

    def concern(self, patch: str) -> Concern | None:
        return next((c for c in self.concerns if c.patch == patch), None)

    def line_kind(self, path: str) -> LineKind:
        """What the changed lines of `path` count as: tests, mechanical, else hand-written core."""
        return self.line_globs.kind(path)


def title_problems(title: str) -> list[str]:
    """Why `title` is not a pull request title in upstream's form (empty: it is one)."""
    found = []
    if not TITLE_FORM.match(title):
        found.append(f"{title!r} is not in upstream's form `<module> : <title>` (e.g. `llama : add a thing`)")
    if len(title) > TITLE_MAX:
        found.append(f"{title!r} has {len(title)} characters, at most {TITLE_MAX}")
    return found


@dataclass(frozen=True)
class _PullTable:
    branch: Annotated[str, convert.NON_EMPTY_TEXT, convert.matches(BRANCH_FORM, "a plain branch name")]
    title: Text
    patches: Strings
    why: str = ""
    figures: tuple[PullFigures, ...] = ()


@dataclass(frozen=True)
class _DiscussionTable:
    questions: tuple[Text, ...] = ()


@dataclass(frozen=True)
class _PackageFile:
    """upstream-package/package.toml as written, decoded by dgr.contracts.convert (unknown keys refused)."""

    deny_words: Strings
    upstream: UpstreamConventions
    pulls: Annotated[tuple[_PullTable, ...], convert.AT_LEAST_ONE]
    concerns: Annotated[tuple[Concern, ...], convert.AT_LEAST_ONE]
    drop_trailers: tuple[Text, ...] = ()
    api_headers: Strings = DEFAULT_API_HEADERS
    discussion: _DiscussionTable = field(default_factory=_DiscussionTable)
    mechanical_paths: Strings = DEFAULT_MECHANICAL_PATHS
    test_paths: Strings = DEFAULT_TEST_PATHS
    upstream_identifiers: tuple[Annotated[str, convert.matches(IDENTIFIER_FORM, "an identifier")], ...] = ()


def _identifier_problems(doc: _PackageFile) -> list[str]:
    """An upstream identifier must hold a word of ours, and more than the word: `routing_block_count` lets
    that key through, `routing` would let the word itself through everywhere."""
    pattern = deny_pattern(doc.deny_words)
    problems = []
    for i, ident in enumerate(doc.upstream_identifiers):
        found = pattern.search(ident)
        if found is None:
            problems.append(f"upstream_identifiers[{i}]: {ident!r} holds no word of ours: remove it")
        elif found.group(0) == ident:
            problems.append(
                f"upstream_identifiers[{i}]: {ident!r} is a word of ours itself, not an identifier that "
                "holds one"
            )
    return problems


def _pull_problems(doc: _PackageFile, series: list[str]) -> list[str]:
    """What is wrong with the pull requests together: titles, the series in order, branches used twice."""
    problems = [
        f"pulls[{i}].title: {p}" for i, pull in enumerate(doc.pulls) for p in title_problems(pull.title)
    ]
    listed = [p for pull in doc.pulls for p in pull.patches]
    if listed != series:
        problems.append(
            "pulls: the patches of the pull requests, in order, must be the series "
            f"({', '.join(series) or 'empty'}), each once: stacked pull requests take consecutive patches; "
            f"they list {', '.join(listed)}"
        )
    branches = [p.branch for p in doc.pulls]
    problems += [
        f"pulls: branch {b} is used twice" for b in sorted({b for b in branches if branches.count(b) > 1})
    ]
    return problems


def _concern_problems(doc: _PackageFile, series: list[str]) -> list[str]:
    names = [c.patch for c in doc.concerns]
    problems = [f"concerns: {n} is declared twice" for n in sorted({n for n in names if names.count(n) > 1})]
    problems += [
        f"concerns: no concern declares patch {n} (in series/series)" for n in series if n not in names
    ]
    return problems + [f"concerns: {n} is not in series/series" for n in names if n not in series]


def load_config(path: Path, series: list[str]) -> Config:
    """Read package.toml; every problem (and every patch of the series without a concern) is listed."""
    problems: list[str] = []
    doc: _PackageFile | None = None
    try:
        doc = convert.from_json(_PackageFile, read_toml(path), path.name)
    except ConfigError as exc:
        problems = convert.problems(exc)
    if doc is not None:
        problems = _pull_problems(doc, series) + _concern_problems(doc, series) + _identifier_problems(doc)
    if doc is None or problems:
        raise ConfigError(
            f"{path}: invalid upstream package configuration ({len(problems)} problem(s))",
            detail="\n".join(problems),
            hint="fix upstream-package/package.toml: one [[concerns]] per patch of series/series, "
            "[[pulls]] that take the series in order",
        )
    return Config(
        path,
        doc.deny_words,
        doc.drop_trailers,
        doc.api_headers,
        doc.upstream,
        tuple(
            Pull(i + 1, p.branch, p.title, p.patches, p.why.strip(), p.figures)
            for i, p in enumerate(doc.pulls)
        ),
        tuple(sorted(doc.concerns, key=lambda c: series.index(c.patch))),
        doc.discussion.questions,
        LineGlobs(tests=doc.test_paths, mechanical=doc.mechanical_paths),
        doc.upstream_identifiers,
    )


def identifier_problems(config: Config, git_dir: Path, commit: str) -> list[str]:
    """The `upstream_identifiers` that the pinned tree (`commit` of `git_dir`) does not hold as a whole word:
    an identifier the tree lacks is not upstream's to quote."""
    problems = []
    for ident in config.upstream_identifiers:
        found = gitops.git(["grep", "-q", "-w", "-F", "-e", ident, commit], cwd=git_dir, check=False)
        if found.returncode == 1:
            problems.append(f"upstream_identifiers: {ident!r} is not in llama.cpp {commit[:12]}")
        elif found.returncode != 0:
            raise GitError(f"git grep {ident} {commit[:12]} failed", detail=found.stderr)
    return problems


# --------------------------------------------------------------------------- paths


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """`**` crosses directories, `*` and `?` stay within one path segment."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def glob_match(pattern: str, path: str) -> bool:
    return bool(_glob_regex(pattern).match(path))


# --------------------------------------------------------------------------- the lints of the patches


@dataclass(frozen=True)
class PackageFinding:
    patch: str
    line: int | None
    """The line of the patch file (None: not tied to one line)."""
    problem: str

    def render(self) -> str:
        where = f"patches/{self.patch}" + (f":{self.line}" if self.line else "")
        return f"{where}: {self.problem}"


@dataclass(frozen=True)
class MailLine:
    number: int
    kind: str
    """"author", "subject", "message" or "added"."""
    text: str
    file: str = ""


def mail_lines(text: str) -> list[MailLine]:
    """The lines of a format-patch mail that are ours to write: author, subject, message, added lines."""
    lines = text.split("\n")
    found: list[MailLine] = []
    i, header = 1, ""
    while i < len(lines) and lines[i] != "":
        line = lines[i]
        if line[:1] in (" ", "\t") and header in ("author", "subject"):
            found.append(MailLine(i + 1, header, line))
        else:
            key = line.split(":", 1)[0].lower()
            header = {"from": "author", "subject": "subject"}.get(key, "")
            if header:
                found.append(MailLine(i + 1, header, line.split(":", 1)[1]))
        i += 1
    in_message, in_hunk, file = True, False, ""
    for number, line in enumerate(lines[i + 1 :], start=i + 2):
        if in_message:
            if line == "---" or line.startswith("diff --git "):
                in_message = False
            else:
                found.append(MailLine(number, "message", line))
                continue
        if match := re.match(r"^diff --git a/(.+?) b/(.+)$", line):
            in_hunk, file = False, match.group(2)
        elif line.startswith("@@ "):
            in_hunk = True
        elif line == "-- ":
            break
        elif in_hunk and line.startswith("+"):
            found.append(MailLine(number, "added", line[1:], file))
    return found


def deny_pattern(words: tuple[str, ...]) -> re.Pattern[str]:
    """Whole words, any case; `_`, `-` and `.` separate words (`dgr_x` and `x-relay` match)."""
    alternatives = "|".join(re.escape(w) for w in sorted(words, key=str.lower))
    return re.compile(rf"(?<![A-Za-z0-9])({alternatives})(?![A-Za-z0-9])", re.IGNORECASE)


def deny_findings(name: str, text: str, words: tuple[str, ...]) -> list[PackageFinding]:
    pattern = deny_pattern(words)
    found = []
    for line in mail_lines(text):
        for match in pattern.finditer(line.text):
            where = f"added line of {line.file}" if line.kind == "added" else line.kind
            found.append(
                PackageFinding(
                    name, line.number, f"word of ours {match.group(1)!r} in the {where}: {line.text.strip()}"
                )
            )
    return found


def path_findings(name: str, files: list[str], concern: Concern) -> list[PackageFinding]:
    return [
        PackageFinding(
            name,
            None,
            f"touches {path}, outside the paths of its concern {concern.title!r} "
            f"({', '.join(concern.paths)})",
        )
        for path in files
        if not concern.allows(path)
    ]


def whitespace_findings(name: str, repo: Path, commit: str) -> list[PackageFinding]:
    """`git diff --check` of the applied commit against its parent."""
    result = gitops.git(["diff", "--check", f"{commit}^", commit], cwd=repo, check=False)
    if result.returncode == 0:
        return []
    out = result.stdout.strip()
    if not out:
        raise GitError(f"git diff --check failed for {commit}", detail=result.stderr)
    problems = [line for line in out.splitlines() if not line.startswith(("+", "-", " "))]
    return [PackageFinding(name, None, f"git diff --check: {p}") for p in problems]


# --------------------------------------------------------------------------- the lints of the package

SUBMITTER_BEGIN = "<!-- BEGIN: written by the submitter"
SUBMITTER_END = "<!-- END: written by the submitter -->"
"""The marks around what the submitter writes in their own words (the tool writes none of it)."""
_HTML_TAGS = {"details", "summary", "br", "sub", "sup", "code", "b", "i", "p", "kbd"}
_ANGLE = re.compile(r"<([A-Za-z][A-Za-z0-9 _.-]*)>")
_WORD = re.compile(r"\b(TODO|XXX|FIXME|TBD)\b")


def submitter_lines(text: str) -> set[int]:
    """The line numbers (1-based) inside the submitter's marked sections, the marks included."""
    inside, lines = False, set()
    for number, line in enumerate(text.split("\n"), start=1):
        if line.startswith(SUBMITTER_BEGIN):
            inside = True
        if inside:
            lines.add(number)
        if line.startswith(SUBMITTER_END):
            inside = False
    return lines


def mask_identifiers(line: str, identifiers: tuple[str, ...]) -> str:
    """`line` with each of upstream's `identifiers` (a whole token: not inside a longer run of letters,
    digits and `_`) blanked out, so that the words of ours in it are not looked for."""
    for ident in identifiers:
        line = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(ident)}(?![A-Za-z0-9_])", " " * len(ident), line)
    return line


def scan_package(
    name: str, text: str, words: tuple[str, ...], upstream_identifiers: tuple[str, ...] = ()
) -> list[str]:
    """Words of ours anywhere (code included; upstream's `upstream_identifiers` excepted), and placeholders
    (`<...>`, TODO, XXX) outside the submitter's marked sections, in one rendered document."""
    pattern = deny_pattern(words)
    skip = submitter_lines(text)
    found = []
    for number, line in enumerate(text.split("\n"), start=1):
        ours = mask_identifiers(line, upstream_identifiers)
        found += [f"{name}:{number}: word of ours {m.group(1)!r}" for m in pattern.finditer(ours)]
        if number in skip:
            continue
        for m in _ANGLE.finditer(line):
            if m.group(1).lower() not in _HTML_TAGS:
                found.append(f"{name}:{number}: placeholder {m.group(0)!r} outside the submitter's section")
        found += [
            f"{name}:{number}: placeholder {m.group(1)!r} outside the submitter's section"
            for m in _WORD.finditer(line)
        ]
    return found


# --------------------------------------------------------------------------- the lint of range-diff.txt

_SECTION = re.compile(r"^ ## (.+) ##$")
"""A section of a patch as `git range-diff` shows it: ` ## Metadata ##`, ` ## Commit message ##`,
` ## <path> ##`."""
_MESSAGE_SECTIONS = ("Metadata", "Commit message")


def range_diff_lines(text: str) -> list[tuple[int, str]]:
    """The lines of a `git range-diff` (no colour) that the series wrote, with their numbers (1-based): every
    line that is not git's quote of a patch (the commit pairs with their subjects, the header dgr writes),
    and of the quoted patches their author, their message and the lines they add (`+` after the outer mark,
    from either series). Upstream's lines (context, removed lines, the function named by a hunk header, the
    paths) are left out.

    A quoted patch is indented by 4 spaces and an outer mark (` `, `-`, `+`); git's own hunk headers are
    `@@ <section>` at the indent, and a patch's sections start at ` ## <name> ##` lines."""
    ours: list[tuple[int, str]] = []
    section: str | None = None
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        if not line.startswith("    "):
            ours.append((number, line))
            section = None
            continue
        rest = line[4:]
        if rest.startswith("@@"):
            title = rest[2:].split(":", 1)[0].strip()
            if title:
                section = "message" if title in _MESSAGE_SECTIONS else "diff"
            continue
        inner = rest[1:]
        if match := _SECTION.match(inner):
            section = "message" if match.group(1) in _MESSAGE_SECTIONS else "diff"
        elif section == "diff":
            if inner.startswith("+"):
                ours.append((number, inner[1:]))
        else:
            # the message and the author, or a line before git named its section: ours either way
            ours.append((number, inner))
    return ours


def scan_range_diff(name: str, text: str, words: tuple[str, ...]) -> list[str]:
    """Words of ours in the lines of range-diff.txt that the series wrote (`range_diff_lines`); upstream's
    code quoted around them is upstream's, and no placeholder is looked for in code."""
    pattern = deny_pattern(words)
    return [
        f"{name}:{number}: word of ours {m.group(1)!r} in a line of the series: {line.strip()}"
        for number, line in range_diff_lines(text)
        for m in pattern.finditer(line)
    ]
