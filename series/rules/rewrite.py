#!/usr/bin/env python3
"""Rewrite rules for the layer loop of the graphs in src/models/*.cpp of llama.cpp.

Usage: python3 rewrite.py [--check | --diff] [--list] [--lists DIR] RULE LLAMA_CPP_TREE

Rules:
  layer-inputs       record the input of every layer through build_layer_inp()
  layer-range-archs  run the layer loop over [il_begin, il_end) and stop after the last
                     layer of a range, in the files named in layer-range-archs.txt

The tree is edited in place. --check and --diff write nothing and exit 1 when the tree
differs from the rule's output. A shape the rule does not know is refused with its file
and line (exit 2); every file is checked first, so a refusal writes nothing.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent

try:
    import tree_sitter
    import tree_sitter_cpp
except ImportError as exc:  # the one dependency: say how to get it rather than fail with a traceback
    sys.exit(
        f"{Path(sys.argv[0]).name}: {exc.name} is not installed: pip install -r {HERE / 'requirements.txt'}"
    )
MODELS = Path("src") / "models"

EXIT_OK = 0
EXIT_DIFFERS = 1
EXIT_REFUSED = 2

Node = tree_sitter.Node


class Refused(Exception):
    """A shape the rule does not know, at a line (1-based) of the file."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason


class BadList(Exception):
    """A list file of a rule that cannot be read."""


@dataclass(frozen=True)
class Edit:
    """Replace the bytes [start, end) of the file by text."""

    start: int
    end: int
    text: bytes


@dataclass(frozen=True)
class Outcome:
    """What a rule does to one file: status is changed, done, no-loop, skipped or refused."""

    path: str
    status: str
    new: bytes = b""
    line: int = 0
    reason: str = ""


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    def with_status(self, status: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == status]


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


def graph_constructors(root: Node) -> list[Node]:
    """The out-of-class constructor definitions `A::B::B(...) { ... }`: the graphs of a model file.

    A parse error inside one, or one around a layer loop outside them, is refused.
    """
    graphs: list[Node] = []
    for node in walk(root):
        if node.type != "function_definition" or node.child_by_field_name("type") is not None:
            continue
        declarator = node.child_by_field_name("declarator")
        if declarator is None or declarator.type != "function_declarator":
            continue
        parts = strip_templates(text(declarator.child_by_field_name("declarator"))).split("::")
        if len(parts) >= 2 and parts[-1] == parts[-2] and node.child_by_field_name("body") is not None:
            graphs.append(node)
    for graph in graphs:
        if graph.has_error:
            error = next(n for n in walk(graph) if n.is_error or n.is_missing)
            raise Refused(line_of(error), "the parser cannot read this graph")
    for node in walk(root):
        if node.is_error and any(layer_loop(n) is not None or near_miss(n) for n in walk(node)):
            raise Refused(line_of(node), "the parser cannot read the code around a layer loop")
    return graphs


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


# --- the shapes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerLoop:
    node: Node
    begin: Node  # the first value of il: 0 or il_begin
    end: Node  # the bound of il: n_layer or il_end
    body: Node

    @property
    def ranged(self) -> bool:
        return text(self.begin) == "il_begin"


def layer_loop(node: Node) -> LayerLoop | None:
    """`for (int il = 0; il < n_layer; ++il) { ... }`, or with il_begin and il_end."""
    if node.type != "for_statement":
        return None
    init = node.child_by_field_name("initializer")
    cond = node.child_by_field_name("condition")
    update = node.child_by_field_name("update")
    body = node.child_by_field_name("body")
    if init is None or cond is None or update is None or body is None or body.type != "compound_statement":
        return None
    if init.type != "declaration" or text(init.child_by_field_name("type")) != "int":
        return None
    decls = init.children_by_field_name("declarator")
    if len(decls) != 1 or decls[0].type != "init_declarator":
        return None
    begin = decls[0].child_by_field_name("value")
    if not is_ident(decls[0].child_by_field_name("declarator"), "il") or begin is None:
        return None
    if cond.type != "binary_expression" or text(cond.child_by_field_name("operator")) != "<":
        return None
    end = cond.child_by_field_name("right")
    if not is_ident(cond.child_by_field_name("left"), "il") or end is None:
        return None
    if update.type != "update_expression" or "".join(text(update).split()) != "++il":
        return None
    if (text(begin), text(end)) not in (("0", "n_layer"), ("il_begin", "il_end")):
        return None
    return LayerLoop(node, begin, end, body)


def near_miss(node: Node) -> bool:
    """A loop over the layers (its condition names n_layer or il_end) in another shape."""
    if node.type != "for_statement" or layer_loop(node) is not None:
        return False
    cond = node.child_by_field_name("condition")
    return cond is not None and any(is_ident(n, "n_layer") or is_ident(n, "il_end") for n in walk(cond))


def loop_header(node: Node) -> str:
    body = node.child_by_field_name("body")
    end = body.start_byte if body is not None else node.end_byte
    source = node.text or b""
    return " ".join(source[: end - node.start_byte].decode().split())


def layer_loops(root: Node) -> list[tuple[Node, LayerLoop]]:
    """Each graph of the file that has a layer loop, with that loop."""
    return [
        (graph, loop) for graph in graph_constructors(root) if (loop := the_layer_loop(graph)) is not None
    ]


def the_layer_loop(graph: Node) -> LayerLoop | None:
    """The one layer loop of a graph, or None if it has none."""
    loops: list[LayerLoop] = []
    for node in walk(graph):
        if near_miss(node):
            raise Refused(line_of(node), f"a loop over the layers in an unknown shape: {loop_header(node)}")
        loop = layer_loop(node)
        if loop is not None:
            loops.append(loop)
    if len(loops) > 1:
        raise Refused(line_of(loops[1].node), "more than one layer loop in one graph")
    return loops[0] if loops else None


def layer_inp_call(stmt: Node) -> str | None:
    """`X = build_layer_inp(il, X);`: X."""
    parts = assignment(stmt)
    if parts is None or not is_ident(parts[0]):
        return None
    args = call_args(parts[1], "build_layer_inp")
    if args is None or len(args) != 2 or not is_ident(args[0], "il") or text(args[1]) != text(parts[0]):
        return None
    return text(parts[0])


def layer_inp_store(stmt: Node) -> str | None:
    """`res->t_layer_inp[il] = X;`: X."""
    parts = assignment(stmt)
    if parts is None or not is_ident(parts[1]):
        return None
    if parts[0].type != "subscript_expression" or "".join(text(parts[0]).split()) != "res->t_layer_inp[il]":
        return None
    return text(parts[1])


def layer_out_guard(stmt: Node) -> str | None:
    """`if (build_layer_out(X)) { return; }`: X."""
    if stmt.type != "if_statement" or stmt.child_by_field_name("alternative") is not None:
        return None
    cond, then = stmt.child_by_field_name("condition"), stmt.child_by_field_name("consequence")
    if cond is None or then is None or cond.named_child_count != 1 or then.type != "compound_statement":
        return None
    args = call_args(cond.named_children[0], "build_layer_out")
    if args is None or len(args) != 1 or not is_ident(args[0]):
        return None
    body = then.named_children
    if len(body) != 1 or body[0].type != "return_statement" or body[0].named_child_count != 0:
        return None
    return text(args[0])


def kept_stores(statements: Sequence[Node]) -> list[Node]:
    """The statements `res->t_layer_inp[il] = inpL;` that store the input of the layer (no
    assignment to inpL before them). build_layer_inp() at the top of the loop records the same
    tensor; they stay as they are."""
    kept: list[Node] = []
    for i, stmt in enumerate(statements):
        if layer_inp_store(stmt) == "inpL" and not any(assigns(s, "inpL") for s in statements[:i]):
            kept.append(stmt)
    return kept


CAPTURE = ("t_layer_inp", "build_layer_inp")  # the names that record the input of a layer


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


# --- rule layer-inputs ----------------------------------------------------------------------------


def layer_inputs(source: bytes, root: Node) -> list[Edit] | None:
    """At the top of the layer loop: `inpL = build_layer_inp(il, inpL);`, then a blank line.

    A loop whose body starts with `res->t_layer_inp[il] = X;` gets `X = build_layer_inp(il, X);`
    in place of that line. Returns None when no graph of the file has a layer loop.
    """
    edits: list[Edit] = []
    loops = layer_loops(root)
    for graph, loop in loops:
        body = loop.body
        rest_of_line_empty(source, body.start_byte + 1, line_of(body), "the `{` of the layer loop")
        statements = body.named_children
        if not statements:
            raise Refused(line_of(body), "the layer loop is empty")
        first = statements[0]
        done, store = layer_inp_call(first), layer_inp_store(first)
        handled = [first] if done or store else []
        allowed = handled + kept_stores(statements[len(handled) :])
        for node in walk(body):
            if text(node) in CAPTURE and not any(inside(node, a) for a in allowed):
                raise Refused(line_of(node), "the layer loop records its input in an unknown way")
        indent = indent_of(source, loop.node.start_byte) + b"    "
        if done:
            own_line(source, first, "the call of build_layer_inp()")
        elif store:
            own_line(source, first, "the store of res->t_layer_inp[il]")
            start, end = line_start(source, first.start_byte), line_end(source, first.end_byte)
            new = indent + f"{store} = build_layer_inp(il, {store});\n".encode()
            edits.append(Edit(start, end, new if blank_line(source, end) else new + b"\n"))
        elif declares(graph, "inpL", loop.node.start_byte):
            at = line_end(source, body.start_byte)
            new = indent + b"inpL = build_layer_inp(il, inpL);\n"
            edits.append(Edit(at, at, new if blank_line(source, at) else new + b"\n"))
        else:
            raise Refused(line_of(loop.node), "the graph declares no inpL before its layer loop")
    return edits if loops else None


# --- rule layer-range-archs -----------------------------------------------------------------------


def layer_range(source: bytes, root: Node) -> list[Edit] | None:
    """`for (int il = il_begin; il < il_end; ++il)`, and after the loop
    `if (build_layer_out(X)) { return; }` between blank lines.

    X is the variable of the `X = build_layer_inp(il, X);` that starts the loop (rule
    layer-inputs). Returns None when no graph of the file has a layer loop.
    """
    edits: list[Edit] = []
    loops = layer_loops(root)
    for graph, loop in loops:
        if loop.node.parent != graph.child_by_field_name("body"):
            raise Refused(line_of(loop.node), "the layer loop is not a statement of the graph's body")
        statements = loop.body.named_children
        state = layer_inp_call(statements[0]) if statements else None
        if state is None:
            raise Refused(
                line_of(loop.body), "the layer loop does not start with X = build_layer_inp(il, X);"
            )
        if not loop.ranged:
            edits.append(Edit(loop.begin.start_byte, loop.begin.end_byte, b"il_begin"))
            edits.append(Edit(loop.end.start_byte, loop.end.end_byte, b"il_end"))
        after = loop.node.next_named_sibling
        while after is not None and after.type == "comment":
            after = after.next_named_sibling
        guard = layer_out_guard(after) if after is not None else None
        if after is not None and guard is not None:
            if guard != state:
                raise Refused(line_of(after), f"build_layer_out({guard}) after a layer loop over {state}")
            continue
        close = loop.node.end_point.row + 1
        rest_of_line_empty(source, loop.node.end_byte, close, "the `}` of the layer loop")
        at = line_end(source, loop.node.end_byte)
        if source[at : line_end(source, at)].strip() == b"}":
            raise Refused(close, "the layer loop is the last statement of the graph")
        indent = indent_of(source, loop.node.start_byte)
        guard_lines = b"%sif (build_layer_out(%s)) {\n%s    return;\n%s}\n" % (
            indent,
            state.encode(),
            indent,
            indent,
        )
        if blank_line(source, at):
            at = line_end(source, at)
            edits.append(Edit(at, at, guard_lines + b"\n"))
        else:
            edits.append(Edit(at, at, b"\n" + guard_lines + b"\n"))
    return edits if loops else None


# --- driver ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    name: str
    apply: Callable[[bytes, Node], list[Edit] | None]
    list_file: str  # beside this program: the files the rule edits (only_listed) or leaves alone
    only_listed: bool


RULES = {
    "layer-inputs": Rule("layer-inputs", layer_inputs, "layer-inputs.skip", only_listed=False),
    "layer-range-archs": Rule("layer-range-archs", layer_range, "layer-range-archs.txt", only_listed=True),
}


def read_list(path: Path) -> dict[str, tuple[int, str]]:
    """Lines `file.cpp  [reason]`, `#` comments: {file: (line, reason)}."""
    entries: dict[str, tuple[int, str]] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise BadList(f"{path}: {e.strerror}") from e
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        if not name.endswith(".cpp") or "/" in name:
            raise BadList(f"{path}:{number}: expected the name of a file of {MODELS}, got {name!r}")
        if name in entries:
            raise BadList(f"{path}:{number}: {name} is listed twice")
        entries[name] = (number, reason.strip())
    return entries


def apply_edits(source: bytes, edits: Sequence[Edit]) -> bytes:
    ordered = sorted(edits, key=lambda e: (e.start, e.end))
    for a, b in itertools.pairwise(ordered):
        if b.start < a.end:
            raise AssertionError(f"overlapping edits at bytes {a.start} and {b.start}")
    for edit in reversed(ordered):
        source = source[: edit.start] + edit.text + source[edit.end :]
    return source


def rewrite_source(rule: Rule, source: bytes, path: str) -> Outcome:
    try:
        edits = rule.apply(source, parse(source))
    except Refused as refused:
        return Outcome(path, "refused", line=refused.line, reason=refused.reason)
    if edits is None:
        return Outcome(path, "no-loop")
    new = apply_edits(source, edits)
    return Outcome(path, "changed", new=new) if new != source else Outcome(path, "done")


def run_rule(rule: Rule, tree: Path, list_dir: Path = HERE) -> Report:
    """The outcome of the rule on every file of src/models/ (nothing is written)."""
    models = tree / MODELS
    if not models.is_dir():
        raise BadList(f"{models}: no such directory (expected a llama.cpp source tree)")
    list_path = list_dir / rule.list_file
    listed = read_list(list_path)
    present = sorted(p.name for p in models.glob("*.cpp"))
    report = Report()
    if rule.only_listed:
        for name, (number, _) in sorted(listed.items()):
            if name not in present:
                reason = f"{MODELS / name} is not in the tree"
                report.outcomes.append(Outcome(str(list_path), "refused", line=number, reason=reason))
    for name in present:
        path = str(MODELS / name)
        if (name in listed) != rule.only_listed:
            report.outcomes.append(Outcome(path, "skipped", reason=listed.get(name, (0, ""))[1]))
            continue
        outcome = rewrite_source(rule, (models / name).read_bytes(), path)
        if rule.only_listed and outcome.status == "no-loop":
            outcome = Outcome(
                path, "refused", line=1, reason="listed, but no graph of the file has a layer loop"
            )
        report.outcomes.append(outcome)
    return report


def unified_diff(tree: Path, outcome: Outcome) -> bytes:
    old = (tree / outcome.path).read_bytes().decode("latin-1").splitlines(keepends=True)
    new = outcome.new.decode("latin-1").splitlines(keepends=True)
    lines = difflib.unified_diff(old, new, f"a/{outcome.path}", f"b/{outcome.path}")
    eof = "\n\\ No newline at end of file\n"
    return "".join(line if line.endswith("\n") else line + eof for line in lines).encode("latin-1")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Apply a rewrite rule to the graphs in src/models/*.cpp of a llama.cpp source tree."
    )
    parser.add_argument("rule", choices=sorted(RULES))
    parser.add_argument("tree", type=Path, help="the root of the llama.cpp source tree")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the rule would change files"
    )
    mode.add_argument("--diff", action="store_true", help="write nothing; print the changes; exit 1 if any")
    parser.add_argument("--list", action="store_true", help="print the outcome for every file")
    parser.add_argument(
        "--lists",
        type=Path,
        default=HERE,
        metavar="DIR",
        help="where the list files are (default: beside %(prog)s)",
    )
    args = parser.parse_args(argv)
    rule = RULES[args.rule]
    try:
        report = run_rule(rule, args.tree, args.lists)
    except BadList as e:
        print(f"{rule.name}: {e}", file=sys.stderr)
        return EXIT_REFUSED

    if args.list:
        for o in report.outcomes:
            print(
                f"{o.status:8} {o.path}"
                + (f":{o.line}" if o.line else "")
                + (f": {o.reason}" if o.reason else "")
            )
    refused = report.with_status("refused")
    for o in refused:
        print(f"{o.path}:{o.line}: {rule.name}: {o.reason}", file=sys.stderr)
    changed = report.with_status("changed")
    writes = not (refused or args.check or args.diff)
    print(
        f"{rule.name}: {len(changed)} {'changed' if writes else 'to change'}, {report.count('done')} done, "
        f"{report.count('no-loop')} without a layer loop, {report.count('skipped')} not for this rule, "
        f"{len(refused)} refused",
        file=sys.stderr,
    )
    if refused:
        print(f"{rule.name}: nothing written", file=sys.stderr)
        return EXIT_REFUSED
    if args.diff:
        sys.stdout.flush()
        sys.stdout.buffer.write(b"".join(unified_diff(args.tree, o) for o in changed))
        sys.stdout.buffer.flush()
    if args.check:
        for o in changed:
            print(f"{o.path}: {rule.name}: differs from the rule's output", file=sys.stderr)
    if args.check or args.diff:
        return EXIT_DIFFERS if changed else EXIT_OK
    for o in changed:
        (args.tree / o.path).write_bytes(o.new)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
