"""The rules of rewrite.py: the shapes of the layer loop in a graph of src/models/*.cpp (the graphs of a
file, its one layer loop, the statements that record a layer's input or stop after a range) and the two
rules, `layer-inputs` and `layer-range-archs`, as the edits they make to a file. A module of rewrite.py,
beside it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cppsyntax import (
    Edit,
    Node,
    Refused,
    assignment,
    assigns,
    blank_line,
    call_args,
    declares,
    indent_of,
    inside,
    is_ident,
    line_end,
    line_of,
    line_start,
    own_line,
    rest_of_line_empty,
    strip_templates,
    text,
    walk,
)

# --- the graphs ------------------------------------------------------------------------------------


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


# --- rule layer-inputs ----------------------------------------------------------------------------


def sets_from_embd(stmt: Node) -> bool:
    """`inpL = build_inp_embd(...);`, or the declaration `ggml_tensor * inpL = build_inp_embd(...);`."""
    parts = assignment(stmt)
    if parts is not None:
        return (
            is_ident(parts[0], "inpL")
            and parts[1].type == "call_expression"
            and is_ident(parts[1].child_by_field_name("function"), "build_inp_embd")
        )
    if stmt.type != "declaration":
        return False
    for decl in stmt.children_by_field_name("declarator"):
        value = decl.child_by_field_name("value") if decl.type == "init_declarator" else None
        inner: Node | None = decl
        while inner is not None and inner.type != "identifier":
            inner = inner.child_by_field_name("declarator")
        if is_ident(inner, "inpL"):
            return value is not None and call_args(value, "build_inp_embd") is not None
    return False


def central_capture(graph: Node, loop: LayerLoop) -> bool:
    """Whether llm_graph_context records the input of every layer of this graph by itself: inpL is the
    result of build_inp_embd() up to the loop (the input of layer 0), and the loop ends with
    `cur = build_cvec(cur, il);` and `inpL = cur;` (the input of the next layer)."""
    body = graph.child_by_field_name("body")
    if body is None or loop.node.parent != body:
        return False
    before = [s for s in body.named_children if s.end_byte <= loop.node.start_byte and s.type != "comment"]
    setters = [s for s in before if sets_from_embd(s) or assigns(s, "inpL")]
    if not setters or not sets_from_embd(setters[-1]):
        return False
    statements = [s for s in loop.body.named_children if s.type != "comment"]
    last = assignment(statements[-1]) if statements else None
    if last is None or not is_ident(last[0], "inpL") or not is_ident(last[1], "cur"):
        return False
    cur_setters = [s for s in statements[:-1] if assigns(s, "cur")]
    if not cur_setters:
        return False
    parts = assignment(cur_setters[-1])
    if parts is None or not is_ident(parts[0], "cur"):
        return False
    args = call_args(parts[1], "build_cvec")
    return args is not None and len(args) == 2 and is_ident(args[0], "cur") and is_ident(args[1], "il")


def refuse_other_captures(body: Node, allowed: Sequence[Node]) -> None:
    """Refuse a capture of the layer input in the loop body other than the allowed statements."""
    for node in walk(body):
        if text(node) in CAPTURE and not any(inside(node, a) for a in allowed):
            raise Refused(line_of(node), "the layer loop records its input in an unknown way")


def loop_top(source: bytes, graph: Node, loop: LayerLoop, store_to_call: bool) -> tuple[str, list[Edit]]:
    """The capture at the top of a layer loop: the variable that holds the layer's input and the
    edits that make the loop start with `X = build_layer_inp(il, X);`. A loop that starts with the
    store `res->t_layer_inp[il] = X;` keeps it unless store_to_call."""
    body = loop.body
    rest_of_line_empty(source, body.start_byte + 1, line_of(body), "the `{` of the layer loop")
    statements = body.named_children
    if not statements:
        raise Refused(line_of(body), "the layer loop is empty")
    first = statements[0]
    done, store = layer_inp_call(first), layer_inp_store(first)
    handled = [first] if done or store else []
    refuse_other_captures(body, handled + kept_stores(statements[len(handled) :]))
    indent = indent_of(source, loop.node.start_byte) + b"    "
    if done:
        own_line(source, first, "the call of build_layer_inp()")
        return done, []
    if store:
        own_line(source, first, "the store of res->t_layer_inp[il]")
        if not store_to_call:
            return store, []
        start, end = line_start(source, first.start_byte), line_end(source, first.end_byte)
        new = indent + f"{store} = build_layer_inp(il, {store});\n".encode()
        return store, [Edit(start, end, new if blank_line(source, end) else new + b"\n")]
    if not declares(graph, "inpL", loop.node.start_byte):
        raise Refused(line_of(loop.node), "the graph declares no inpL before its layer loop")
    at = line_end(source, body.start_byte)
    new = indent + b"inpL = build_layer_inp(il, inpL);\n"
    return "inpL", [Edit(at, at, new if blank_line(source, at) else new + b"\n")]


def layer_inputs(source: bytes, root: Node) -> list[Edit] | None:
    """At the top of the layer loop of a graph whose layer inputs llm_graph_context does not record by
    itself (see central_capture()): `inpL = build_layer_inp(il, inpL);`, then a blank line. A loop that
    stores `res->t_layer_inp[il] = inpL;` records its input already and is left as it is. Returns None
    when no graph of the file has a layer loop.
    """
    edits: list[Edit] = []
    loops = layer_loops(root)
    for graph, loop in loops:
        statements = loop.body.named_children
        starts_with_capture = bool(statements) and bool(
            layer_inp_call(statements[0]) or layer_inp_store(statements[0])
        )
        kept = kept_stores(statements)
        if not starts_with_capture and (kept or central_capture(graph, loop)):
            refuse_other_captures(loop.body, kept)
        else:
            edits += loop_top(source, graph, loop, store_to_call=False)[1]
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
        state, top = loop_top(source, graph, loop, store_to_call=True)
        edits += top
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
