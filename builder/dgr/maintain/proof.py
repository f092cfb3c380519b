"""`dgr rebase-check --onto TARGET --proof`: the proof of a port. The series as commits on the pin and the
port's series as commits on TARGET, side by side (`git range-diff PIN..OLD_TIP TARGET..NEW_TIP`), and the
check that the port added no drift of its own.

The check, per patch (a patch of the port is paired with the patch of the series of the same file name,
else of the same subject):

- D1: the changed lines of the series' patch (`git diff -U0` of its commit against its parent, on the pin);
- D2: the changed lines of the port's patch (its commit against its parent, on TARGET);
- U: upstream's diff under that patch, between the two parents (the pin plus the series' earlier patches,
  TARGET plus the port's earlier patches): what upstream changed there, and what the port's earlier
  resolutions changed.

Line numbers are left out of the comparison: a changed line is its file, its sign (removed or added) and
its text, so a hunk that only moved (upstream inserted lines above it, or changed its context, which
`-U0` does not show) is the same in D1 and D2. What is left, a line of D2 that D1 does not change (the
port adds it) or a line of D1 that D2 does not (the port drops it), is a resolution only if

1. the series' patch did not apply with plain `git am` on the port's parent (`git apply --check`: it
   needed a 3-way merge, a hand resolution of a conflict, or its rule to make it again) and that file is
   one where it did not apply (`git apply --reject`: a rejected hunk or a missing file; for a generated
   patch, every file it changes), and
2. the line lies in a region of U: a line the port removes or replaces is one upstream changed (on the
   new side of U; a dropped line of D1 on the old side), or it goes right next to an upstream insertion
   or deletion.

Anything else is drift: reported with the patch, the file and the `-U0` hunk, and `rebase-check` exits 9
(VerifyError: the verification of the port failed). A patch of the port that the series does not have is
drift as a whole; a patch of the series the port leaves out is drift unless TARGET has its change already
(it applies there in reverse: `redundant`).

Equivalent to the formulation "diff(old patched, new patched) less diff(old base, new base) is confined to
the resolved regions", but per patch, so that drift names the patch it is in. The granularity is the
changed line: a line the port adds inside a hunk that replaces lines upstream changed counts as part of
the resolution (it is where a resolution writes its merged text)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dgr.contracts import convert
from dgr.contracts.locks import Pin
from dgr.core import log
from dgr.core.paths import Repo
from dgr.errors import VerifyError
from dgr.git import apply, gitops, rangediff
from dgr.git.rangediff import Line
from dgr.maintain import rebase
from dgr.series import generated, patchfile

Replay = Literal["clean", "3-way", "regenerated", "conflict", "redundant", "new", "dropped"]
"""How the series' patch went on the port's parent: as rebase-check says (plain `git am`, `--3way`, made
again by its rule, neither, or its change is there already); `new`: a patch of the port only; `dropped`:
a patch of the series the port does not have."""


@dataclass(frozen=True)
class Drift(convert.Record):
    """Changed lines of a patch that neither the series nor upstream explains, in one hunk."""

    patch: str
    file: str
    hunk: str
    how: Literal["adds", "drops"]
    lines: tuple[str, ...]

    def describe(self) -> str:
        what = "a change the series does not make" if self.how == "adds" else "a change of the series"
        head = f"{self.patch}: {self.file}: hunk {self.hunk}: the port {self.how} {what}"
        return "\n".join([head, *(f"    {line}" for line in self.lines)])


@dataclass
class PatchProof(convert.Record):
    name: str
    """The patch of the port (or, `dropped`, of the series)."""
    series_name: str | None
    replay: Replay
    resolved: list[str] = field(default_factory=list)
    """The files where the series' patch did not apply plainly: where the port may differ from it."""
    explained: int = field(default=0, metadata=convert.keyed("explained_lines"))
    """Changed lines that differ from the series' patch and lie in a resolved region."""


@dataclass
class Proof:
    port: str
    onto: rebase.Onto
    old: tuple[str, str]
    """(the pin, the series' last commit on it)."""
    new: tuple[str, str]
    """(TARGET, the port's last commit on it)."""
    range_diff: str
    patches: list[PatchProof]
    drift: list[Drift]

    @property
    def ok(self) -> bool:
        return not self.drift

    def to_json(self) -> dict[str, Any]:
        return {
            "port": self.port,
            "onto": self.onto.to_json(),
            "old": {"base": self.old[0], "tip": self.old[1]},
            "new": {"base": self.new[0], "tip": self.new[1]},
            "range_diff": self.range_diff,
            "patches": [p.to_json() for p in self.patches],
            "drift": [d.to_json() for d in self.drift],
            "ok": self.ok,
        }

    def error(self) -> VerifyError:
        files = sorted({f"{d.patch}: {d.file}" for d in self.drift})
        return VerifyError(
            f"the port {self.port} on {self.onto.spec} adds drift of its own: {len(self.drift)} hunk(s) in "
            + ", ".join(files),
            detail="\n".join(d.describe() for d in self.drift),
            hint=f"take those changes out of patches/ports/{self.port}/ (`dgr edit --onto {self.onto.spec}`, "
            "`dgr export-patches --dir <that tree>`); a change the port needs beyond resolving the series "
            "belongs in the series on the pin first",
        )


def _series_commits(
    scratch: Path, base: str, patches: list[apply.PatchRef], identity: gitops.Identity, where: Path
) -> list[tuple[str, str, str]]:
    """(patch name, parent, commit) of each patch applied with plain `git am` on `base`."""
    applied = apply.apply_series(scratch, base, patches, identity, where)
    parents = [base, *(c for _, c in applied.commits)]
    return [(name, parents[i], commit) for i, (name, commit) in enumerate(applied.commits)]


def _pairs(series: list[apply.PatchRef], port: list[apply.PatchRef]) -> tuple[dict[str, str], list[str]]:
    """port patch -> series patch (same file name, else same subject), and the series patches left over."""
    left = {ref.name: ref for ref in series}
    paired: dict[str, str] = {}
    for ref in port:
        if ref.name in left:
            paired[ref.name] = left.pop(ref.name).name
    subjects = {patchfile.load(ref.path).subject: name for name, ref in left.items()}
    for ref in port:
        if ref.name not in paired:
            name = subjects.pop(patchfile.load(ref.path).subject, None)
            if name is not None:
                paired[ref.name] = name
                del left[name]
    return paired, list(left)


def _replay(
    worktree: Path, parent: str, patch: apply.PatchRef, rule: bool, identity: gitops.Identity
) -> tuple[Replay, list[str]]:
    """How the series' patch goes on `parent` (the port's tree before its own version of it), and the files
    where it does not apply plainly."""
    gitops.git(["checkout", "--quiet", "--detach", "--force", parent], cwd=worktree)
    gitops.git(["clean", "-fdxq"], cwd=worktree)
    if apply.applies_in_reverse(worktree, patch.path):
        return "redundant", []
    if gitops.git(["apply", "--check", str(patch.path)], cwd=worktree, check=False).returncode == 0:
        return "clean", []
    files = sorted({r.file for r in apply.diagnose(worktree, patch.path)})
    if rule:
        return "regenerated", [f.path for f in patchfile.load(patch.path).files]
    if apply.am(worktree, patch.path, identity, three_way=True)[0]:
        return "3-way", files
    return "conflict", files


def _unexplained(
    lines: list[Line], regions: list[rangediff.Region], resolved: list[str], side: str
) -> tuple[list[Line], int]:
    """The lines outside every region of U in a resolved file (`side`: the regions' new or old lines)."""
    left = []
    for line in lines:
        spans = [r.new if side == "new" else r.old for r in regions if r.file == line.file]
        if line.file in resolved and any(rangediff.overlaps(line.span, s) for s in spans):
            continue
        left.append(line)
    return left, len(lines) - len(left)


def _only(a: list[Line], b: list[Line]) -> list[Line]:
    """The lines of `a` that `b` does not have (by file, sign and text; as many times as `a` has more)."""
    spare = Counter(line.key for line in b)
    found = []
    for line in a:
        if spare[line.key]:
            spare[line.key] -= 1
        else:
            found.append(line)
    return found


def _hunks(patch: str, how: Literal["adds", "drops"], lines: list[Line]) -> list[Drift]:
    grouped: dict[tuple[str, str], list[str]] = {}
    for line in lines:
        grouped.setdefault((line.file, line.hunk), []).append(f"{line.sign}{line.text}")
    return [Drift(patch, file, hunk, how, tuple(texts)) for (file, hunk), texts in grouped.items()]


def prove(
    scratch: Path,
    pin: Pin,
    onto: rebase.Onto,
    repo: Repo,
    port: str,
    identity: gitops.Identity,
    where: Path,
) -> Proof:
    """The proof of `port` on `onto` (see the module's docstring); `scratch` holds the objects of both."""
    series = apply.verified_series(repo)
    ported = apply.verified_series(repo.for_port(port))
    (where / "old").mkdir()
    (where / "new").mkdir()
    old = _series_commits(scratch, pin.commit, series, identity, where / "old")
    new = _series_commits(scratch, onto.commit, ported, identity, where / "new")
    old_tip = old[-1][2] if old else pin.commit
    new_tip = new[-1][2] if new else onto.commit
    with log.step(f"git range-diff {pin.commit[:12]}..{old_tip[:12]} {onto.commit[:12]}..{new_tip[:12]}"):
        text = rangediff.range_diff(scratch, (pin.commit, old_tip), (onto.commit, new_tip))
    paired, dropped = _pairs(series, ported)
    refs = {ref.name: ref for ref in series}
    olds = {name: (parent, commit) for name, parent, commit in old}
    rules = generated.rules_of(repo)
    patches: list[PatchProof] = []
    drift: list[Drift] = []
    with (
        log.step(f"compare {len(new)} patch(es) of {port} with the series, less upstream's changes"),
        apply.temp_worktree(scratch, onto.commit, where) as worktree,
    ):
        for name, parent, commit in new:
            d2, _ = rangediff.changes(scratch, parent, commit)
            if name not in paired:
                patches.append(PatchProof(name, None, "new"))
                drift += _hunks(name, "adds", d2)
                continue
            ref = refs[paired[name]]
            old_parent, old_commit = olds[ref.name]
            replay, resolved = _replay(worktree, parent, ref, ref.name in rules, identity)
            if replay == "regenerated":  # its rule may edit files new in TARGET
                resolved = sorted({*resolved, *(line.file for line in d2)})
            d1, _ = rangediff.changes(scratch, old_parent, old_commit)
            _, regions = rangediff.changes(scratch, old_parent, parent)
            added, n_added = _unexplained(_only(d2, d1), regions, resolved, "new")
            gone, n_gone = _unexplained(_only(d1, d2), regions, resolved, "old")
            patches.append(PatchProof(name, ref.name, replay, resolved, n_added + n_gone))
            drift += _hunks(name, "adds", added) + _hunks(name, "drops", gone)
        for name in dropped:
            gitops.git(["checkout", "--quiet", "--detach", "--force", new_tip], cwd=worktree)
            if apply.applies_in_reverse(worktree, refs[name].path):
                patches.append(PatchProof(name, name, "redundant"))
                continue
            patches.append(PatchProof(name, name, "dropped"))
            d1, _ = rangediff.changes(scratch, *olds[name])
            drift += _hunks(name, "drops", d1)
    return Proof(port, onto, (pin.commit, old_tip), (onto.commit, new_tip), text, patches, drift)


def render(proof: Proof) -> str:
    """The range-diff, each patch's replay and resolved files, and the verdict, as plain text."""
    old, new = proof.old, proof.new
    lines = [
        f"the proof of the port {proof.port} on {proof.onto.spec} ({proof.onto.commit[:12]})",
        "",
        f"git range-diff {old[0][:12]}..{old[1][:12]} {new[0][:12]}..{new[1][:12]}",
        "  (the series on the pin, then the port on the target)",
        "",
        *proof.range_diff.rstrip("\n").split("\n"),
        "",
    ]
    rows = [["patch", "replay", "resolved files", "resolved lines"]]
    for p in proof.patches:
        name = p.name if p.series_name in (None, p.name) else f"{p.name} (was {p.series_name})"
        rows.append([name, p.replay, ", ".join(p.resolved), str(p.explained) if p.resolved else ""])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.append("")
    if proof.ok:
        lines.append(
            "proof: the port adds no drift of its own: where it differs from the series, it is in the "
            "regions upstream changed under a patch that did not apply plainly"
        )
    else:
        lines.append(f"proof FAILED: {len(proof.drift)} hunk(s) of drift")
        lines += [f"  {line}" for d in proof.drift for line in d.describe().split("\n")]
    return "\n".join(lines)
