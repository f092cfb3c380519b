"""Parse one `git format-patch` mail: headers, message, trailers and the diff's files and hunks."""

from __future__ import annotations

import email.parser
import email.policy
import re
from dataclasses import dataclass, field
from pathlib import Path

FROM_LINE = re.compile(r"^From ([0-9a-f]{40}) Mon Sep 17 00:00:00 2001$")
SUBJECT_PREFIX = re.compile(r"^\[PATCH[^\]]*\]\s*")
TRAILER = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]*):\s*(.*)$")
HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
DIFF_GIT = re.compile(r"^diff --git a/(.+?) b/(.+)$")


class PatchParseError(ValueError):
    """The file is not a git format-patch mail."""


@dataclass(frozen=True)
class FileDiff:
    path: str
    old_path: str
    hunks: tuple[str, ...]
    """The `@@ -a,b +c,d @@ ...` header of each hunk, in order."""
    added: tuple[str, ...]
    """The lines this file's diff adds (without the leading '+')."""


@dataclass(frozen=True)
class Patch:
    from_hash: str
    author: str
    date: str
    subject_raw: str
    subject: str
    """The subject with the `[PATCH n/m]` prefix removed."""
    body: str
    """The message body without the trailer block."""
    trailers: tuple[tuple[str, str], ...]
    files: tuple[FileDiff, ...] = field(default=())

    def trailer(self, key: str) -> list[str]:
        return [v for k, v in self.trailers if k.lower() == key.lower()]

    def file(self, path: str) -> FileDiff | None:
        return next((f for f in self.files if f.path == path or f.old_path == path), None)


def _split_trailers(message: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    paragraphs = message.strip("\n").split("\n\n")
    last = paragraphs[-1].strip("\n").split("\n") if paragraphs else []
    trailers: list[tuple[str, str]] = []
    for line in last:
        match = TRAILER.match(line)
        if match:
            trailers.append((match.group(1), match.group(2).strip()))
        elif line[:1] in (" ", "\t") and trailers:
            key, value = trailers[-1]
            trailers[-1] = (key, f"{value} {line.strip()}")
        else:
            return message.strip("\n"), ()
    if not trailers:
        return message.strip("\n"), ()
    return "\n\n".join(paragraphs[:-1]).strip("\n"), tuple(trailers)


def _parse_diff(lines: list[str]) -> tuple[FileDiff, ...]:
    files: list[FileDiff] = []
    current: tuple[str, str] | None = None
    hunks: list[str] = []
    added: list[str] = []

    def flush() -> None:
        if current is not None:
            files.append(FileDiff(current[1], current[0], tuple(hunks), tuple(added)))

    in_hunk = False
    for i, line in enumerate(lines):
        match = DIFF_GIT.match(line)
        if match:
            flush()
            current, hunks, added, in_hunk = (match.group(1), match.group(2)), [], [], False
        elif line == "-- " and all(not rest.startswith(("+", "-", " ", "@")) for rest in lines[i + 1 :]):
            break  # the signature (`-- ` and the git version) that ends the mail
        elif HUNK.match(line):
            hunks.append(line)
            in_hunk = True
        elif in_hunk and line.startswith("+"):
            added.append(line[1:])
    flush()
    return tuple(files)


def parse(text: str) -> Patch:
    """Parse a format-patch mail; raise PatchParseError naming what is missing."""
    lines = text.split("\n")
    match = FROM_LINE.match(lines[0]) if lines else None
    if not match:
        raise PatchParseError("first line is not `From <40-hex> Mon Sep 17 00:00:00 2001`")
    try:
        blank = lines.index("", 1)
    except ValueError as exc:
        raise PatchParseError("no blank line after the mail headers") from exc
    headers = email.parser.HeaderParser(policy=email.policy.default).parsestr(
        "\n".join(lines[1:blank]) + "\n"
    )
    missing = [h for h in ("From", "Date", "Subject") if headers[h] is None]
    if missing:
        raise PatchParseError(f"missing header(s): {', '.join(missing)}")
    subject_raw = " ".join(str(headers["Subject"]).split())
    if not SUBJECT_PREFIX.match(subject_raw):
        raise PatchParseError(f"subject {subject_raw!r} has no [PATCH...] prefix")
    rest = lines[blank + 1 :]
    diff_start = next((i for i, line in enumerate(rest) if DIFF_GIT.match(line)), None)
    if diff_start is None:
        raise PatchParseError("no `diff --git` section")
    message_lines = rest[:diff_start]
    separator = next((i for i, line in enumerate(message_lines) if line == "---"), None)
    if separator is not None:
        message_lines = message_lines[:separator]
    body, trailers = _split_trailers("\n".join(message_lines))
    files = _parse_diff(rest[diff_start:])
    return Patch(
        from_hash=match.group(1),
        author=str(headers["From"]),
        date=str(headers["Date"]),
        subject_raw=subject_raw,
        subject=SUBJECT_PREFIX.sub("", subject_raw),
        body=body,
        trailers=trailers,
        files=files,
    )


def load(path: Path) -> Patch:
    return parse(path.read_text(errors="surrogateescape"))


# --------------------------------------------------------------------------- the paragraphs of a message

_LIST_ITEM = re.compile(r"^[-*] ")
_TESTS_PARAGRAPH = re.compile(r"^tests ?: ")


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
