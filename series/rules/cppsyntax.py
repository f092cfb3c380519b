"""The C++ syntax the rewrite rules read (tree-sitter-cpp) and the lines they edit: parsing, node text
and lines, the small queries (an assignment, a call, a declaration) and the checks that a construct owns
its lines. A module of rewrite.py, beside it (see README.md)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

try:
    import tree_sitter
    import tree_sitter_cpp
except ImportError as exc:  # the one dependency: say how to get it rather than fail with a traceback
    sys.exit(
        f"{Path(sys.argv[0]).name}: {exc.name} is not installed: pip install -r {HERE / 'requirements.txt'}"
    )

Node = tree_sitter.Node


class Refused(Exception):
    """A shape the rule does not know, at a line (1-based) of the file."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason


@dataclass(frozen=True)
class Edit:
    """Replace the bytes [start, end) of the file by text."""

    start: int
    end: int
    text: bytes


# --- syntax ---------------------------------------------------------------------------------------

_PARSER: list[tree_sitter.Parser] = []


def parse(source: bytes) -> Node:
    if not _PARSER:
        _PARSER.append(tree_sitter.Parser(tree_sitter.Language(tree_sitter_cpp.language())))
    return _PARSER[0].parse(source).root_node


def text(node: Node | None) -> str:
    if node is None or node.text is None:
        return ""
    return node.text.decode()


def line_of(node: Node) -> int:
    return node.start_point.row + 1


def walk(node: Node) -> Iterator[Node]:
    yield node
    for child in node.children:
        yield from walk(child)


def inside(node: Node, outer: Node) -> bool:
    return outer.start_byte <= node.start_byte < outer.end_byte


def is_ident(node: Node | None, name: str | None = None) -> bool:
    return node is not None and node.type == "identifier" and (name is None or text(node) == name)


def strip_templates(name: str) -> str:
    previous = None
    while previous != name:
        previous, name = name, re.sub(r"<[^<>]*>", "", name)
    return re.sub(r"\s+", "", name)


def assignment(stmt: Node) -> tuple[Node, Node] | None:
    """`LEFT = RIGHT;` as (LEFT, RIGHT)."""
    if stmt.type != "expression_statement" or stmt.named_child_count != 1:
        return None
    expr = stmt.named_children[0]
    if expr.type != "assignment_expression" or text(expr.child_by_field_name("operator")) != "=":
        return None
    left, right = expr.child_by_field_name("left"), expr.child_by_field_name("right")
    if left is None or right is None:
        return None
    return left, right


def call_args(node: Node, function: str) -> list[Node] | None:
    """The arguments of the call `function(...)`, or None if node is no such call."""
    if node.type != "call_expression" or not is_ident(node.child_by_field_name("function"), function):
        return None
    args = node.child_by_field_name("arguments")
    return list(args.named_children) if args is not None else None


def assigns(node: Node, name: str) -> bool:
    """Whether an assignment to the variable `name` occurs in node."""
    return any(
        n.type == "assignment_expression" and is_ident(n.child_by_field_name("left"), name)
        for n in walk(node)
    )


def declares(scope: Node, name: str, before: int) -> bool:
    """Whether scope declares a variable `name` before the byte offset `before`."""
    for node in walk(scope):
        if node.start_byte >= before or node.type != "declaration":
            continue
        for decl in node.children_by_field_name("declarator"):
            inner: Node | None = decl
            while inner is not None and inner.type != "identifier":
                inner = inner.child_by_field_name("declarator")
            if is_ident(inner, name):
                return True
    return False


# --- lines ----------------------------------------------------------------------------------------


def line_start(source: bytes, offset: int) -> int:
    return source.rfind(b"\n", 0, offset) + 1


def line_end(source: bytes, offset: int) -> int:
    """The offset just past the newline that ends the line holding offset."""
    end = source.find(b"\n", offset)
    return len(source) if end < 0 else end + 1


def indent_of(source: bytes, offset: int) -> bytes:
    line = source[line_start(source, offset) : offset]
    return line[: len(line) - len(line.lstrip(b" \t"))]


def blank_line(source: bytes, offset: int) -> bool:
    """Whether the line that starts at offset is empty or white space."""
    return offset < len(source) and source[offset : line_end(source, offset)].strip() == b""


def rest_of_line_empty(source: bytes, offset: int, line: int, what: str) -> None:
    if source[offset : line_end(source, offset)].strip() != b"":
        raise Refused(line, f"{what} is not the last thing on its line")


def own_line(source: bytes, node: Node, what: str) -> None:
    if source[line_start(source, node.start_byte) : node.start_byte].strip() != b"":
        raise Refused(line_of(node), f"{what} does not start its line")
    rest_of_line_empty(source, node.end_byte, line_of(node), what)
