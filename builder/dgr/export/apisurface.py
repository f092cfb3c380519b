"""The public surface a patch adds, read from its own diff (never retyped).

From the lines a patch adds to the public headers (`include/*.h`, `src/llama-ext.h`):
`LLAMA_API` declarations, new structs and enums, and fields or enumerators added
to existing ones. The post-image of the header (the file at the applied commit)
only tells which struct or enum an added field belongs to.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from dgr.git.rangediff import HUNK
from dgr.series.patchfile import DIFF_GIT

_OPEN = re.compile(r"^\s*(?:typedef\s+)?(struct|enum|union)\s*(\w+)?\s*(?::\s*\w+\s*)?\{")
_FUNCTION_NAME = re.compile(r"(\w+)\s*\(")


@dataclass(frozen=True)
class Item:
    kind: str
    """"function", "struct", "enum", "fields" (added to an existing struct) or "enumerators"."""
    name: str
    header: str
    line: int
    """The first line of the declaration (its comment included) in the post-image of the header."""
    end: int
    """Its last line."""
    code: str
    """The added lines, verbatim but for common indentation, with their directly preceding comments."""


def added_lines(patch_text: str) -> dict[str, list[tuple[int, str]]]:
    """Per file (post-image path): (post-image line number, text) of every added line.

    Hunks are walked by their line counts, so a mail signature or an added line
    that looks like a header is never mistaken for one.
    """
    files: dict[str, list[tuple[int, str]]] = {}
    current: list[tuple[int, str]] | None = None
    old_left = new_left = 0
    line_no = 0
    for line in patch_text.split("\n"):
        if old_left > 0 or new_left > 0:
            tag, text = line[:1], line[1:]
            if tag == "+":
                assert current is not None
                current.append((line_no, text))
                line_no += 1
                new_left -= 1
            elif tag == "-":
                old_left -= 1
            elif tag == "\\":
                pass  # "\ No newline at end of file"
            else:
                line_no += 1
                old_left -= 1
                new_left -= 1
            continue
        if match := DIFF_GIT.match(line):
            current = files.setdefault(match.group(2), [])
        elif (match := HUNK.match(line)) and current is not None:
            old_left = int(match.group(2) or 1)
            line_no = int(match.group(3))
            new_left = int(match.group(4) or 1)
    return files


def _code(line: str, in_comment: bool) -> tuple[str, bool]:
    """`line` without comments; whether a /* comment continues on the next line."""
    out: list[str] = []
    i = 0
    while i < len(line):
        if in_comment:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), True
            i, in_comment = end + 2, False
        elif line.startswith("//", i):
            break
        elif line.startswith("/*", i):
            in_comment = True
            i += 2
        else:
            out.append(line[i])
            i += 1
    return "".join(out), in_comment


def scopes(text: str) -> list[tuple[str, str] | None]:
    """For each line (0-based) of a header: the struct/enum whose body the line starts in, if any."""
    stack: list[tuple[str, str] | None] = []
    found: list[tuple[str, str] | None] = []
    in_comment = False
    for line in text.split("\n"):
        found.append(_innermost(stack))
        code, in_comment = _code(line, in_comment)
        opening = _OPEN.match(code)
        first = True
        for ch in code:
            if ch == "{":
                if first and opening:
                    kind, name = opening.group(1), opening.group(2)
                    stack.append((kind, name) if name and kind != "union" else ("anonymous", ""))
                else:
                    stack.append(None)
                first = False
            elif ch == "}" and stack:
                stack.pop()
    return found


def _innermost(stack: list[tuple[str, str] | None]) -> tuple[str, str] | None:
    for scope in reversed(stack):
        if scope is None:
            return None
        if scope[0] != "anonymous":
            return scope
    return None


def _is_comment(text: str) -> bool:
    return text.strip().startswith(("//", "/*", "*"))


def _dedent(lines: list[str]) -> str:
    return textwrap.dedent("\n".join(line.rstrip() for line in lines)).strip("\n")


def surface(header: str, added: list[tuple[int, str]], post_image: str) -> list[Item]:
    """The declarations among `added` (lines of `header`), in source order."""
    where = scopes(post_image)
    items: list[Item] = []
    fields: dict[tuple[str, str], list[tuple[int, list[str]]]] = {}
    comment: list[tuple[int, str]] = []
    i = 0
    while i < len(added):
        number, text = added[i]
        if _is_comment(text):
            comment = (
                [*comment, (number, text)] if comment and comment[-1][0] == number - 1 else [(number, text)]
            )
            i += 1
            continue
        doc = [t for _, t in comment] if comment and comment[-1][0] == number - 1 else []
        comment = []
        if not text.strip():
            i += 1
            continue
        code, _ = _code(text, False)
        first_line = number - len(doc)
        if "LLAMA_API" in code:
            j = _extend(added, i, _declaration_done)
            block = [t for _, t in added[i : j + 1]]
            joined = " ".join(_code(t, False)[0] for t in block)
            after = joined.split("LLAMA_API", 1)[1]
            match = _FUNCTION_NAME.search(after)
            kind = "function" if match else "declaration"
            name = match.group(1) if match else after.strip().rstrip(";").split()[-1]
            items.append(Item(kind, name, header, first_line, added[j][0], _dedent([*doc, *block])))
            i = j + 1
            continue
        opening = _OPEN.match(code)
        if opening and opening.group(2) and opening.group(1) != "union":
            j = _extend(added, i, _braces_closed)
            block = [t for _, t in added[i : j + 1]]
            items.append(
                Item(
                    opening.group(1),
                    opening.group(2),
                    header,
                    first_line,
                    added[j][0],
                    _dedent([*doc, *block]),
                )
            )
            i = j + 1
            continue
        scope = where[number - 1] if 0 < number <= len(where) else None
        if scope is not None:
            fields.setdefault(scope, []).append((first_line, [*doc, text]))
        i += 1
    for (kind, name), parts in fields.items():
        lines: list[str] = []
        for n, (_, part) in enumerate(parts):
            if n and parts[n - 1][0] + len(parts[n - 1][1]) != parts[n][0]:
                lines.append("")
            lines += part
        kind_name = "fields" if kind == "struct" else "enumerators"
        end = parts[-1][0] + len(parts[-1][1]) - 1
        items.append(Item(kind_name, name, header, parts[0][0], end, _dedent(lines)))
    return sorted(items, key=lambda item: item.line)


def following_member(post_image: str, item: Item) -> str | None:
    """The first declaration after `item` in the post-image of its header (None: `item` ends its struct or
    enum): where added fields or enumerators were inserted."""
    lines = post_image.split("\n")
    in_comment = False
    for text in lines[item.end :]:
        code, in_comment = _code(text, in_comment)
        code = code.strip()
        if not code:
            continue
        return None if code.startswith("}") else code
    return None


def field_names(item: Item) -> list[str]:
    """The names of the fields or enumerators of an item of kind "fields" or "enumerators"."""
    names = []
    in_comment = False
    for text in item.code.split("\n"):
        code, in_comment = _code(text, in_comment)
        code = code.strip().rstrip(";,").split("=", 1)[0].split("[", 1)[0].strip()
        if code:
            names.append(code.split()[-1].lstrip("*&"))
    return names


def block(items: list[Item]) -> str:
    """The items as one piece of code: adjacent declarations stay together, others are a blank line apart."""
    parts: list[str] = []
    for n, item in enumerate(items):
        if n:
            parts.append("\n" if items[n - 1].end + 1 == item.line else "\n\n")
        parts.append(item.code)
    return "".join(parts)


def _extend(added: list[tuple[int, str]], i: int, done: Callable[[list[str]], bool]) -> int:
    """The index of the last added line of the declaration starting at `i` (consecutive lines only)."""
    j = i
    while (
        not done([t for _, t in added[i : j + 1]])
        and j + 1 < len(added)
        and added[j + 1][0] == added[j][0] + 1
    ):
        j += 1
    return j


def _declaration_done(block: list[str]) -> bool:
    code = "".join(_code(t, False)[0] for t in block)
    depth = 0
    for ch in code:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == ";" and depth == 0:
            return True
    return False


def _braces_closed(block: list[str]) -> bool:
    code = "".join(_code(t, False)[0] for t in block)
    return code.count("{") > 0 and code.count("{") == code.count("}")
