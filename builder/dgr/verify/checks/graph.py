"""The `graph` group: with no layer range set, the series changes no architecture's compute graph.

`layer-graphs` (verify/worker/graphs.cpp) builds every model of upstream's random-model generator (the
functions of tests/test-llama-archs.cpp: every architecture of the arch list, dense and MoE as the test
chooses) and prints the graph `llama_graph_reserve` builds for three ubatches: a prompt of 16 tokens, all of
them output (`pp`), the same prompt with its last token output only (`pp-last`) and one token (`tg`); of each
graph its number of nodes, the op of every node in order and every node's type and shape; then the size and a
hash of the sequence state after decoding a prompt of 16 tokens. An architecture with nextn (MTP) layers has a
third variant, `nextn`, with one more layer read as a nextn layer. It is built
against the patched tree and against upstream's (the baseline) alike; this module runs both, and one check
per architecture variant passes when the graphs of every ubatch and the states are equal. A variant the
generator cannot build in either tree, with the same error, compared nothing: it is listed (`not_compared`,
the error its detail), neither passed nor failed; one built in one tree only fails.

A crash of llama.cpp (an assertion) ends the program: the variant that began and did not finish is recorded
as crashed with the last line of stderr, and the program runs again for the variants after it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgr.contracts.report import SYNTHETIC, Check
from dgr.core import jsonio, log, proc
from dgr.errors import VerifyError
from dgr.verify.checks.session import GroupSpec, Session

PROGRAM = "layer-graphs"
SHAPES = ("pp", "pp-last", "tg")
"""The graphs of a variant (layer-graphs' SHAPES): a prompt of 16 tokens with every token output, the same
with the last one only, one token."""
SUMMARY = "every-architecture"
TIMEOUT_S = 1800.0
"""For one run of the program over the variants left (a few seconds per variant on two cores)."""
ENV = {"GGML_NO_BACKTRACE": "1"}
"""An assertion in llama.cpp aborts with its message, without a debugger's backtrace."""


@dataclass(frozen=True, kw_only=True)
class Graph:
    n_nodes: int
    ops: tuple[str, ...]
    """ggml_op_desc() of every node, in the graph's order."""
    shapes: tuple[str, ...]
    """The type and shape of every node ("f32 256x16x1x1")."""


@dataclass(frozen=True, kw_only=True)
class Variant:
    arch: str
    config: str
    """dense or moe"""
    gguf: str = ""
    """The fingerprint of the GGUF metadata the generator made (empty: it failed before)."""
    graphs: Mapping[str, Graph] = field(default_factory=dict)
    """By shape; empty when the variant could not be built."""
    state: str = ""
    """The sequence state after a prompt, "<size>:<hash>" ("not decoded" for an encoder; empty: not built)."""
    error: str = ""

    @property
    def name(self) -> str:
        return f"{self.arch}/{self.config}"

    @property
    def built(self) -> bool:
        return not self.error and all(s in self.graphs for s in SHAPES) and bool(self.state)


@dataclass(frozen=True, kw_only=True)
class Output:
    """What one run of the program printed: the variants that began, in order, and the finished ones."""

    begun: tuple[str, ...]
    variants: dict[str, Variant]


@dataclass(frozen=True, kw_only=True)
class Run:
    """The graphs of every variant of one tree, from one or more runs of the program."""

    listed: tuple[str, ...]
    """The variants the generator is asked for (`--list`), in order."""
    variants: dict[str, Variant]
    problems: tuple[str, ...] = ()
    """What went wrong beyond a variant (the program exited with an error after the last one, ...)."""


def _records(text: str) -> list[dict[str, Any]]:
    """The JSON objects of the program's output; any other line (a message of llama.cpp) is skipped."""
    out = []
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = jsonio.loads(line, f"the output of {PROGRAM}", VerifyError)
        except VerifyError:  # no strict JSON (cut short by a crash): its variant did not finish
            continue
        if (
            isinstance(record, dict)
            and isinstance(record.get("arch"), str)
            and isinstance(record.get("config"), str)
        ):
            out.append(record)
    return out


def parse_list(text: str) -> tuple[str, ...]:
    """The variants of `layer-graphs --list`, as arch/config."""
    return tuple(f"{r['arch']}/{r['config']}" for r in _records(text))


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of strings, found {value!r:.80}")
    return tuple(value)


def parse(text: str) -> Output:
    """The variants in the output of one run: a variant is finished when it printed a line for every shape
    (a line with an error makes the variant an error)."""
    begun: list[str] = []
    lines: dict[str, dict[str, dict[str, Any]]] = {}
    states: dict[str, dict[str, Any]] = {}
    for r in _records(text):
        name = f"{r['arch']}/{r['config']}"
        if r.get("begin") is True:
            begun.append(name)
        elif r.get("shape") in SHAPES:
            lines.setdefault(name, {})[r["shape"]] = r
        elif "state" in r or "state_error" in r:
            states[name] = r
    variants: dict[str, Variant] = {}
    for name, by_shape in lines.items():
        if set(by_shape) != set(SHAPES) or name not in states:
            continue
        first = by_shape[SHAPES[0]]
        errors = [str(by_shape[s]["error"]) for s in SHAPES if "error" in by_shape[s]]
        if "state_error" in states[name]:
            errors.append(f"state: {states[name]['state_error']}")
        graphs: dict[str, Graph] = {}
        if not errors:
            for s in SHAPES:
                r = by_shape[s]
                try:
                    ops, shapes = _strings(r.get("ops")), _strings(r.get("shapes"))
                    n_nodes = r.get("n_nodes")
                    if not isinstance(n_nodes, int) or len(ops) != n_nodes or len(shapes) != n_nodes:
                        raise ValueError(f"n_nodes {n_nodes!r}, {len(ops)} ops, {len(shapes)} shapes")
                except ValueError as exc:
                    errors.append(f"{s}: malformed line: {exc}")
                    break
                graphs[s] = Graph(n_nodes=n_nodes, ops=ops, shapes=shapes)
        variants[name] = Variant(
            arch=first["arch"],
            config=first["config"],
            gguf=str(first.get("gguf", "")),
            graphs={} if errors else graphs,
            state="" if errors else str(states[name].get("state", "")),
            error=errors[0] if errors else "",
        )
    return Output(begun=tuple(begun), variants=variants)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output on stderr)"


def run(exe: Path) -> Run:
    """Every variant's graphs from the program `exe` (of one build); a crash is recorded for the variant that
    began and did not finish, and the program runs again for the ones left."""
    if not exe.is_file():
        raise VerifyError(
            f"the build at {exe.parent.parent} has no {PROGRAM}",
            hint="run `dgr build` (and `dgr build --upstream-only`): they build verify/worker/graphs.cpp",
        )
    listed = parse_list(
        proc.run([exe, "--list"], error=VerifyError, what=f"{PROGRAM} --list", env=ENV, timeout=60).stdout
    )
    if not listed:
        raise VerifyError(f"{exe} --list printed no variant")
    variants: dict[str, Variant] = {}
    problems: list[str] = []
    left = list(listed)
    while left:
        result = proc.run(
            [exe, *(left if len(left) < len(listed) else [])],
            check=False,
            error=VerifyError,
            what=f"{PROGRAM} timed out after {TIMEOUT_S:.0f} s",
            env=ENV,
            timeout=TIMEOUT_S,
        )
        out = parse(result.stdout)
        variants.update({n: v for n, v in out.variants.items() if n in left})
        unfinished = [n for n in out.begun if n in left and n not in out.variants]
        if result.returncode != 0 and unfinished:
            crashed = unfinished[-1]
            arch, _, config = crashed.partition("/")
            variants[crashed] = Variant(
                arch=arch,
                config=config,
                error=f"crashed (exit code {result.returncode}): {_last_line(result.stderr)}",
            )
        elif result.returncode != 0:
            problems.append(f"{PROGRAM} exited with {result.returncode}: {_last_line(result.stderr)}")
        progress = [n for n in left if n in variants]
        left = [n for n in left if n not in variants]
        if left and (result.returncode == 0 or not progress):
            problems.append(f"{PROGRAM} printed nothing for {len(left)} variant(s): {', '.join(left)}")
            break
    return Run(listed=listed, variants=variants, problems=tuple(problems))


# --------------------------------------------------------------------------- the comparison

_LOCATION = re.compile(r"[\w./+-]+\.(?:c|cc|cpp|h|hpp):\d+")


def _same_error(a: str, b: str) -> bool:
    """The same failure in both trees: a source location's line number may differ (the series edits the
    file above it)."""

    def norm(s: str) -> str:
        return _LOCATION.sub(lambda m: m.group(0).rsplit(":", 1)[0], s)

    return norm(a) == norm(b)


def first_difference(a: Sequence[str], b: Sequence[str]) -> int | None:
    """The first index where two sequences differ (the length of the shorter one if it is a prefix of the
    other); None when equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _at(seq: Sequence[str], i: int) -> str:
    return seq[i] if i < len(seq) else "(end)"


@dataclass(frozen=True, kw_only=True)
class GraphComparison:
    """One variant in both trees."""

    name: str
    patched: Variant | None
    baseline: Variant | None

    def figures(self) -> dict[str, Any]:
        p, b = self.patched, self.baseline
        if p is None or b is None or not p.built or not b.built:
            return {
                "built": {"patched": bool(p and p.built), "baseline": bool(b and b.built)},
                "error": {
                    "patched": p.error if p else "not listed",
                    "baseline": b.error if b else "not listed",
                },
            }
        figures: dict[str, Any] = {
            "n_nodes": {s: {"patched": p.graphs[s].n_nodes, "baseline": b.graphs[s].n_nodes} for s in SHAPES},
            "equal": self.equal,
        }
        differences: dict[str, Any] = {}
        for s in SHAPES:
            pg, bg = p.graphs[s], b.graphs[s]
            i = first_difference(pg.ops, bg.ops)
            j = first_difference(pg.shapes, bg.shapes)
            # the first op that differs, else the first shape (named with its op)
            what, k, lists = (
                ("op", i, (pg.ops, bg.ops)) if i is not None else ("shape", j, (pg.shapes, bg.shapes))
            )
            if k is not None:
                differences[s] = {"what": what, "index": k}
                if what == "shape":
                    differences[s]["op"] = _at(pg.ops, k)
                differences[s] |= {"patched": _at(lists[0], k), "baseline": _at(lists[1], k)}
        if differences:
            figures["first_difference"] = differences
        if p.gguf != b.gguf:
            figures["gguf"] = {"patched": p.gguf, "baseline": b.gguf}
        figures["state"] = {"patched": p.state, "baseline": b.state}
        return figures

    @property
    def compared(self) -> bool:
        return bool(self.patched and self.baseline and self.patched.built and self.baseline.built)

    @property
    def equal(self) -> bool:
        p, b = self.patched, self.baseline
        return bool(p and b and self.compared and p.graphs == b.graphs and p.state == b.state)

    @property
    def listed_only(self) -> bool:
        """Built in neither tree, with the same error: listed (not compared), neither passed nor failed."""
        p, b = self.patched, self.baseline
        return bool(p and b and not p.built and not b.built and _same_error(p.error, b.error))

    def problem(self) -> str:
        p, b = self.patched, self.baseline
        if p is None or b is None:
            return f"only the {'patched' if b is None else 'baseline'} generator has this variant"
        if self.listed_only:
            return ""
        if not p.built and not b.built:
            return f"it fails differently: patched {p.error!r}, baseline {b.error!r}"
        if not p.built:
            return f"it builds in the baseline tree only (patched: {p.error})"
        if not b.built:
            return f"it builds in the patched tree only (baseline: {b.error})"
        if p.gguf != b.gguf:
            return "the generators of the two trees made different models (GGUF metadata): not comparable"
        problems = []
        for s in SHAPES:
            pg, bg = p.graphs[s], b.graphs[s]
            if pg.n_nodes != bg.n_nodes:
                problems.append(f"{s}: {pg.n_nodes} nodes, upstream {bg.n_nodes}")
            i = first_difference(pg.ops, bg.ops)
            if i is not None:
                problems.append(f"{s}: op {i} is {_at(pg.ops, i)}, upstream {_at(bg.ops, i)}")
                continue
            j = first_difference(pg.shapes, bg.shapes)
            if j is not None:
                problems.append(
                    f"{s}: node {j} ({_at(pg.ops, j)}) is {_at(pg.shapes, j)}, upstream {_at(bg.shapes, j)}"
                )
        if p.state != b.state:
            problems.append(f"the sequence state after a prompt is {p.state}, upstream {b.state}")
        return "; ".join(problems)


def compare(patched: Run, baseline: Run) -> list[GraphComparison]:
    """Every variant of either tree, in the patched tree's order, then the baseline's others."""
    names = list(dict.fromkeys([*patched.listed, *baseline.listed]))
    return [
        GraphComparison(
            name=n,
            patched=_variant(patched, n),
            baseline=_variant(baseline, n),
        )
        for n in names
    ]


def _variant(run: Run, name: str) -> Variant | None:
    if name not in run.listed:
        return None
    arch, _, config = name.partition("/")
    return run.variants.get(
        name, Variant(arch=arch, config=config, error="the program printed nothing for it")
    )


def checks(patched: Run, baseline: Run) -> list[Check]:
    """One check per architecture variant, and one for all of them."""
    comparisons = compare(patched, baseline)
    out: list[Check] = []
    for c in comparisons:
        problem = c.problem()
        # built in neither tree, with the same error: nothing was compared, so it is listed, not passed
        listed = c.listed_only
        why = f"built in neither tree, with the same error: {c.patched.error}" if c.patched and listed else ""
        out.append(
            Check(
                group="graph",
                name=c.name,
                evidence=SYNTHETIC,
                passed=not problem and not listed,
                not_compared=listed,
                figures=c.figures(),
                detail=problem or why,
            )
        )
    failed = [c.name for c, check in zip(comparisons, out, strict=True) if check.failed]
    compared = [c for c in comparisons if c.compared]
    problems = [f"patched: {p}" for p in patched.problems] + [f"baseline: {p}" for p in baseline.problems]
    if not compared:
        problems.append("no architecture variant was built in both trees")
    if failed:
        problems.append(f"{len(failed)} variant(s) differ or build in one tree only: {', '.join(failed)}")
    out.append(
        Check(
            group="graph",
            name=SUMMARY,
            evidence=SYNTHETIC,
            passed=not problems,
            figures={
                "variants": len(comparisons),
                "compared": len(compared),
                "equal": sum(c.equal for c in compared),
                "not_built": {
                    c.name: c.patched.error for c in comparisons if c.listed_only and c.patched is not None
                },
                "failed": failed,
            },
            detail="\n".join(problems),
        )
    )
    return out


def _verify(session: Session) -> list[Check]:
    """The compute graph of every architecture of upstream's random-model generator, from the patched build
    and from the baseline: one check per architecture variant, equal or not."""

    def compare() -> tuple[list[Check], dict[str, str]]:
        with log.step(f"graphs of the patched build ({PROGRAM})"):
            ours = run(session.patched.path / "bin" / PROGRAM)
        with log.step(f"graphs of the baseline ({PROGRAM})"):
            theirs = run(session.upstream_build().path / "bin" / PROGRAM)
        return checks(ours, theirs), {}

    inputs = {
        "part": "graph",
        "patched": session.built(session.patched),
        "baseline": session.built(session.upstream_build()),
    }
    return session.kept("graph", inputs, compare)[0]


GROUP = GroupSpec(_verify, needs_baseline=True)
