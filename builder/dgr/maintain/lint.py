"""`dgr check`: series <-> patches <-> manifest, each patch's message, and the locks."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from dgr.contracts.locks import LOCK_FILES, PatchManifest, load_manifest_file, problems_in
from dgr.core.digest import sha256_bytes, sha256_file
from dgr.core.paths import Repo
from dgr.series import order as series
from dgr.series import patchfile, patchmanifest

SUBJECT_MAX = 72
BODY_MIN_WORDS = 20
UPSTREAM_STATUS = re.compile(r"^(Pending|Accepted|Backport( \[.+\])?|Submitted \[.+\]|Inappropriate \[.+\])$")
STATUS_HINT = (
    "add a trailer `Upstream-Status: <status>` with one of: Pending, Submitted [where], "
    "Accepted, Backport, Inappropriate [reason]"
)


FindingKind = Literal[
    "lock",
    "missing",
    "unused",
    "duplicate",
    "unparsable",
    "digest",
    "message",
    "style",
    "generated",
    "package",
]


@dataclass(frozen=True)
class LintFinding:
    file: str
    kind: FindingKind
    problem: str
    hint: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    def render(self) -> str:
        return f"{self.file}: {self.kind}: {self.problem}\n    hint: {self.hint}"


def check(repo: Repo) -> list[LintFinding]:
    """All findings, for the series and every port; raises ConfigError (exit 8) when a series or a lock
    cannot be read."""
    findings: list[LintFinding] = []
    for view in [repo, *(repo.for_port(p) for p in repo.ports())]:
        findings += _check_series(view)
    for name, (filename, parse) in LOCK_FILES.items():
        findings += [
            LintFinding(f"locks/{filename}", "lock", problem, f"fix locks/{filename} (the {name} lock)")
            for problem in problems_in(repo.locks_dir / filename, parse)
        ]
    return findings


def _check_series(repo: Repo) -> list[LintFinding]:
    order = series.load(repo.series_file)
    findings = _series_findings(repo, order)
    findings += _manifest_findings(repo, order)
    for entry in dict.fromkeys(order.names):
        path = repo.patches_dir / entry
        if path.is_file():
            findings += lint_patch(path, repo.rel(path))
    return findings


def _patch_files(repo: Repo) -> list[str]:
    """The patch files of the series' directory (the ports' directories are theirs)."""
    if not repo.patches_dir.is_dir():
        return []
    ports = repo.patches_dir / "ports"
    return sorted(
        str(p.relative_to(repo.patches_dir))
        for p in repo.patches_dir.rglob("*.patch")
        if repo.port is not None or ports not in p.parents
    )


def _series_findings(repo: Repo, order: series.OrderFile) -> list[LintFinding]:
    findings: list[LintFinding] = []
    counts = Counter(order.names)
    for entry in order.entries:
        if not (repo.patches_dir / entry.name).is_file():
            findings.append(
                LintFinding(
                    f"{repo.rel(repo.series_file)}:{entry.line}",
                    "missing",
                    f"names {entry.name}, which is not in {repo.rel(repo.patches_dir)}/",
                    "restore the patch file or remove the line from the series",
                )
            )
    for name, count in counts.items():
        if count > 1:
            lines = ", ".join(str(e.line) for e in order.entries if e.name == name)
            findings.append(
                LintFinding(
                    repo.rel(repo.series_file),
                    "duplicate",
                    f"{name} is named {count} times (lines {lines})",
                    "keep one line per patch",
                )
            )
    for name in _patch_files(repo):
        if name not in counts:
            findings.append(
                LintFinding(
                    f"{repo.rel(repo.patches_dir)}/{name}",
                    "unused",
                    f"not named in {repo.rel(repo.series_file)}",
                    f"add it to {repo.rel(repo.series_file)} where it belongs, or delete it",
                )
            )
    return findings


def _manifest_findings(repo: Repo, order: series.OrderFile) -> list[LintFinding]:
    locked = load_manifest_file(repo.manifest_file)
    patches = {
        name: sha256_file(repo.patches_dir / name)
        for name in order.names
        if (repo.patches_dir / name).is_file()
    }
    actual = PatchManifest(sha256_bytes(repo.series_file.read_bytes()), patches)
    return [
        LintFinding(
            m.file,
            "digest",
            _describe(m, repo.rel(repo.manifest_file)),
            patchmanifest.REFRESH_HINT.format(file=m.file),
        )
        for m in patchmanifest.compare(locked, actual, repo)
        if not (m.actual is None and m.file.removeprefix(f"{repo.rel(repo.patches_dir)}/") in order.names)
    ]


def _describe(m: patchmanifest.Mismatch, manifest_file: str) -> str:
    if m.actual is None:
        return f"listed in {manifest_file} (sha256 {m.expected}) but the file is gone or not in the series"
    if m.expected is None:
        return f"not listed in {manifest_file} (actual sha256 {m.actual})"
    return f"digest mismatch: {manifest_file} says {m.expected}, the file has {m.actual}"


def lint_patch(path: Path, label: str) -> list[LintFinding]:
    """Parse one patch and lint its message: subject, a why-body, an Upstream-Status trailer."""
    try:
        patch = patchfile.load(path)
    except patchfile.PatchParseError as exc:
        return [
            LintFinding(
                label,
                "unparsable",
                f"not a git format-patch mail: {exc}",
                "regenerate it with `dgr export-patches`",
            )
        ]
    findings: list[LintFinding] = []
    if not patch.subject:
        findings.append(LintFinding(label, "message", "empty subject", "write a one-line summary"))
    elif len(patch.subject) > SUBJECT_MAX:
        findings.append(
            LintFinding(
                label,
                "message",
                f"subject is {len(patch.subject)} characters (max {SUBJECT_MAX}): {patch.subject!r}",
                "shorten the subject; put details in the body",
            )
        )
    words = len(patch.body.split())
    if words < BODY_MIN_WORDS:
        findings.append(
            LintFinding(
                label,
                "message",
                f"the body has {words} word(s) before the trailers; it must say why the patch exists "
                f"(at least {BODY_MIN_WORDS} words)",
                "explain the problem the patch solves and why upstream needs it",
            )
        )
    statuses = patch.trailer("Upstream-Status")
    if not statuses:
        findings.append(LintFinding(label, "message", "no Upstream-Status trailer", STATUS_HINT))
    findings.extend(
        LintFinding(label, "message", f"Upstream-Status {status!r} is not a known status", STATUS_HINT)
        for status in statuses
        if not UPSTREAM_STATUS.match(status)
    )
    return findings
