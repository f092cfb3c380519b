"""The package's `range-diff.txt`: `git range-diff` of the series on the previous pin against the series
on the pin, so that a reviewer sees what moving the pin changed in each commit.

The pin's history is the git history of locks/upstream.toml in the repository: `dgr pin --to` rewrites
its [upstream] (and keeps the old pin as a rebase target), and the move is committed with the series it
made. The previous pin is the [upstream] of the newest commit of that history whose lock pins another
commit than the pin now (with its own sources, verified by commit and tree as the pin is), and its series
is the series/series and patches/ of that same commit. Both series are applied with `git am` (our
trailers dropped, as on the package's branches) in one scratch repository borrowing both upstreams.

When there is no previous pin (the repository is not a git checkout, or its history has no other pin),
the file says so, rather than being left out."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from dgr.contracts.locks import Pin, Source, UpstreamLock
from dgr.core import log
from dgr.core.paths import Cache
from dgr.git import apply, gitops, rangediff
from dgr.series import order
from dgr.sources import upstream

FILE = "range-diff.txt"
LOCK = "locks/upstream.toml"


@dataclass(frozen=True)
class Previous:
    revision: str
    """The repository's commit that holds the previous pin and its series."""
    pin: Pin
    sources: tuple[Source, ...]
    patches: dict[str, str]
    """The previous series in order: patch name -> mail."""


def _show(root: Path, revision: str, path: str) -> str:
    return gitops.git(["show", f"{revision}:./{path}"], cwd=root).output.decode(errors="surrogateescape")


def find(root: Path, pin: Pin) -> Previous | str:
    """The previous pin and its series, or why there is none (a sentence)."""
    inside = gitops.git(["rev-parse", "--is-inside-work-tree"], cwd=root, check=False)
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return f"the repository is not a git checkout, so {LOCK} has no history to hold one"
    revisions = gitops.git(["log", "--format=%H", "--", LOCK], cwd=root, check=False).stdout.split()
    for revision in revisions:
        problems: list[str] = []
        try:
            data = tomllib.loads(_show(root, revision, LOCK))
        except tomllib.TOMLDecodeError:
            continue
        lock = UpstreamLock.parse(data, f"{revision[:12]}:{LOCK}", problems)
        if problems or lock is None or lock.pin.commit == pin.commit:
            continue
        names = order.parse(_show(root, revision, "series/series"), Path("series/series")).names
        patches = {name: _show(root, revision, f"patches/{name}") for name in names}
        pinned, sources = upstream.select(lock, None)
        return Previous(revision, pinned, sources, patches)
    return f"the history of {LOCK} ({len(revisions)} commit(s)) holds no other pin than {pin.short}"


def without_trailers(mail: str, keys: tuple[str, ...]) -> str:
    """The mail without the trailers named `keys` in its message (which ends at its `---` line, or where
    the diff starts in a mail without a diffstat); everything else byte for byte."""
    ends = [i for i in (mail.find("\n---\n"), mail.find("\ndiff --git ")) if i >= 0]
    end = min(ends) if ends else len(mail)
    wanted = {k.lower() for k in keys}
    kept = [
        line
        for line in mail[:end].split("\n")
        if ":" not in line or line.split(":", 1)[0].strip().lower() not in wanted
    ]
    return "\n".join(kept) + mail[end:]


def _refs(texts: dict[str, str], drop: tuple[str, ...], where: Path) -> list[apply.PatchRef]:
    where.mkdir(parents=True)
    refs = []
    for i, (name, text) in enumerate(texts.items()):
        path = where / f"{i:04d}.patch"
        path.write_bytes(without_trailers(text, drop).encode(errors="surrogateescape"))
        refs.append(apply.PatchRef(name, path, ""))
    return refs


def render(
    cache: Cache,
    root: Path,
    pin: Pin,
    pin_repo: Path,
    texts: dict[str, str],
    drop: tuple[str, ...],
    identity: gitops.Identity,
    where: Path,
    mirror: Path | None = None,
) -> str:
    """The text of range-diff.txt for the series `texts` (name -> mail, in order) on `pin`."""
    found = find(root, pin)
    if isinstance(found, str):
        return (
            "# The series against the previous pin\n\n"
            f"No previous pin is recorded: {found}. There is no earlier series to compare the series on "
            f"{pin.commit} with.\n"
        )
    old = upstream.obtain(cache, found.pin, found.sources, mirror)
    scratch = where / "scratch.git"
    gitops.init_bare(scratch)
    (scratch / "objects" / "info" / "alternates").write_text(
        "".join(f"{(r / 'objects').resolve()}\n" for r in (pin_repo, old.repo))
    )
    shallow = [
        line
        for r in (pin_repo, old.repo)
        if (r / "shallow").is_file()
        for line in (r / "shallow").read_text().split()
    ]
    if shallow:
        (scratch / "shallow").write_text("".join(f"{oid}\n" for oid in dict.fromkeys(shallow)))
    (where / "apply-old").mkdir(parents=True)
    (where / "apply-new").mkdir()
    before = apply.apply_series(
        scratch, found.pin.commit, _refs(found.patches, drop, where / "old"), identity, where / "apply-old"
    )
    after = apply.apply_series(
        scratch, pin.commit, _refs(texts, drop, where / "new"), identity, where / "apply-new"
    )
    with log.step(f"git range-diff against the previous pin {found.pin.short}"):
        text = rangediff.range_diff(scratch, (found.pin.commit, before.commit), (pin.commit, after.commit))
    return (
        "# The series against the previous pin\n\n"
        f"previous pin: {found.pin.commit} ({found.pin.commit_date.isoformat()}), {len(found.patches)} "
        "patch(es)\n"
        f"pin:          {pin.commit} ({pin.commit_date.isoformat()}), {len(texts)} patch(es)\n\n"
        f"git range-diff --creation-factor={rangediff.CREATION_FACTOR} {found.pin.commit[:12]}.."
        f"{before.commit[:12]} {pin.commit[:12]}..{after.commit[:12]}\n\n" + text
    )
