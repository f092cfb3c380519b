"""The upstream package's configuration (upstream-package/package.toml) and the lints of
`dgr export-upstream`: words of ours, whitespace errors, files outside a concern's paths."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dgr import gitops
from dgr.contracts import GROUPS, Group
from dgr.errors import ConfigError, DgrError
from dgr.locks import read_toml

CONFORMANCE_GROUPS: dict[str, Group] = {g: g for g in GROUPS if g != "native"}
"""The groups a concern can name: every group of `dgr verify` but the native tests (each patch's own)."""
DEFAULT_API_HEADERS = ("include/*.h", "src/llama-ext.h")
SUBJECT_MAX = 72
_BUILD_LINE = re.compile(r"^(?:\.venv/bin/)?\S*dgr (build|verify)$")


@dataclass(frozen=True)
class Concern:
    """One concern of the series: one patch, the paths it may touch, the verify group that backs it."""

    patch: str
    title: str
    group: Group
    paths: tuple[str, ...]

    def allows(self, path: str) -> bool:
        return any(glob_match(pattern, path) for pattern in self.paths)


@dataclass(frozen=True)
class Config:
    path: Path
    title: str
    summary: str
    why: str
    clone: str
    deny_words: tuple[str, ...]
    drop_trailers: tuple[str, ...]
    api_headers: tuple[str, ...]
    questions: tuple[str, ...]
    concerns: tuple[Concern, ...]

    def concern(self, patch: str) -> Concern | None:
        return next((c for c in self.concerns if c.patch == patch), None)


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    """The table `key` of `data`; a missing or mistyped one reads as empty (its keys are then reported)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _text(data: dict[str, Any], key: str, where: str, problems: list[str]) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where}{key}: expected a non-empty string")
        return ""
    return value


def _strings(
    data: dict[str, Any], key: str, where: str, problems: list[str], default: tuple[str, ...] = ()
) -> tuple[str, ...]:
    value = data.get(key, list(default) if default else None)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        problems.append(f"{where}{key}: expected a non-empty list of strings")
        return ()
    return tuple(value)


def _optional_strings(data: dict[str, Any], key: str, where: str, problems: list[str]) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        problems.append(f"{where}{key}: expected a list of strings")
        return ()
    return tuple(value)


def load_config(path: Path, series: list[str]) -> Config:
    """Read package.toml; every problem (and every patch of the series without a concern) is listed."""
    data = read_toml(path)
    problems: list[str] = []
    cover, reproduce, outreach = (_table(data, key) for key in ("cover", "reproduce", "outreach"))
    concerns: list[Concern] = []
    raw = data.get("concerns")
    if not isinstance(raw, list) or not raw:
        problems.append("concerns: expected an array of tables ([[concerns]]), one per patch")
        raw = []
    for i, entry in enumerate(raw):
        where = f"concerns[{i}]."
        if not isinstance(entry, dict):
            problems.append(f"concerns[{i}]: expected a table")
            continue
        text = _text(entry, "verify_group", where, problems)
        group = CONFORMANCE_GROUPS.get(text)
        if text and group is None:
            problems.append(f"{where}verify_group: {text!r} is not one of {', '.join(CONFORMANCE_GROUPS)}")
        concerns.append(
            Concern(
                _text(entry, "patch", where, problems),
                _text(entry, "title", where, problems),
                group or "ownership",  # only when a problem is reported: the config is refused
                _strings(entry, "paths", where, problems),
            )
        )
    title = _text(data, "title", "", problems)
    if len(title) > SUBJECT_MAX:
        problems.append(f"title: {len(title)} characters, at most {SUBJECT_MAX} (the cover letter's subject)")
    names = [c.patch for c in concerns]
    problems += [f"concerns: {n} is declared twice" for n in sorted({n for n in names if names.count(n) > 1})]
    problems += [
        f"concerns: no concern declares patch {n} (in series/series)" for n in series if n not in names
    ]
    problems += [f"concerns: {n} is not in series/series" for n in names if n and n not in series]
    config = Config(
        path,
        title,
        _text(cover, "summary", "cover.", problems),
        _text(cover, "why", "cover.", problems),
        _text(reproduce, "clone", "reproduce.", problems),
        _strings(data, "deny_words", "", problems),
        _optional_strings(data, "drop_trailers", "", problems),
        _strings(data, "api_headers", "", problems, DEFAULT_API_HEADERS),
        _optional_strings(outreach, "questions", "outreach.", problems),
        tuple(sorted(concerns, key=lambda c: series.index(c.patch) if c.patch in series else len(series))),
    )
    if problems:
        raise ConfigError(
            f"{path}: invalid upstream package configuration ({len(problems)} problem(s))",
            detail="\n".join(problems),
            hint="fix upstream-package/package.toml: one [[concerns]] per patch of series/series",
        )
    return config


def reproduce_commands(readme: Path, clone: str) -> tuple[str, str, str]:
    """The README's first command split in three: clone + install, `dgr build`, `dgr verify`."""
    try:
        text = readme.read_text()
    except OSError as exc:
        raise ConfigError(f"{readme}: unreadable ({exc})", hint="restore README.md") from exc
    match = re.search(r"^```sh\n(.+?)\n```", text, flags=re.M)
    parts = [p.strip() for p in match.group(1).split("&&")] if match else []
    steps = {m.group(1): p for p in parts if (m := _BUILD_LINE.match(p))}
    install = [p for p in parts if not _BUILD_LINE.match(p)]
    if set(steps) != {"build", "verify"} or not install:
        raise ConfigError(
            f"{readme}: the first ```sh block is not `<install> && dgr build && dgr verify`",
            actual=match.group(1) if match else "no ```sh block",
            hint="keep the README's first command as the install, build and verify line",
        )
    return f"{clone} && {' && '.join(install)}", steps["build"], steps["verify"]


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


# --------------------------------------------------------------------------- the lints


@dataclass(frozen=True)
class Finding:
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


def deny_findings(name: str, text: str, words: tuple[str, ...]) -> list[Finding]:
    pattern = deny_pattern(words)
    found = []
    for line in mail_lines(text):
        for match in pattern.finditer(line.text):
            where = f"added line of {line.file}" if line.kind == "added" else line.kind
            found.append(
                Finding(
                    name, line.number, f"word of ours {match.group(1)!r} in the {where}: {line.text.strip()}"
                )
            )
    return found


def path_findings(name: str, files: list[str], concern: Concern) -> list[Finding]:
    return [
        Finding(
            name,
            None,
            f"touches {path}, outside the paths of its concern {concern.title!r} "
            f"({', '.join(concern.paths)})",
        )
        for path in files
        if not concern.allows(path)
    ]


def whitespace_findings(name: str, repo: Path, commit: str) -> list[Finding]:
    """`git diff --check` of the applied commit against its parent."""
    result = gitops.git(["diff", "--check", f"{commit}^", commit], cwd=repo, check=False)
    if result.returncode == 0:
        return []
    out = result.stdout.strip()
    if not out:
        raise DgrError(f"git diff --check failed for {commit}", detail=result.stderr)
    problems = [line for line in out.splitlines() if not line.startswith(("+", "-", " "))]
    return [Finding(name, None, f"git diff --check: {p}") for p in problems]


def scan_prose(name: str, text: str, words: tuple[str, ...]) -> list[str]:
    """Words of ours in rendered prose; fenced code blocks and `inline code` are skipped."""
    pattern = deny_pattern(words)
    found, fenced = [], False
    for number, line in enumerate(text.split("\n"), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        prose = re.sub(r"`[^`]*`", "", line)
        found += [f"{name}:{number}: word of ours {m.group(1)!r}" for m in pattern.finditer(prose)]
    return found
