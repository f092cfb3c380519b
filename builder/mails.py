"""The series applied on the pin, and its mails: `git format-patch --numbered` of the applied commits, with
our bookkeeping trailers (`Upstream-Status`) removed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dgr import gitops, patchfile
from dgr.errors import ApplyError


@dataclass(frozen=True)
class Series:
    """The series applied on the pin: each patch's text, parsed mail and commit, in series order."""

    git_dir: Path
    base: str
    head: str
    tree: str
    texts: dict[str, str]
    patches: dict[str, patchfile.Patch]
    commits: dict[str, str]


def drop_trailers(mail: str, keys: tuple[str, ...]) -> str:
    """Remove the trailers named `keys` (ours, e.g. Upstream-Status) from the message of a mail."""
    if not keys:
        return mail
    head, sep, rest = mail.partition("\n---\n")
    wanted = {k.lower() for k in keys}
    lines = [
        line for line in head.split("\n") if line.split(":", 1)[0].lower() not in wanted or ":" not in line
    ]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + sep + rest


def header(mail: str, key: str) -> str:
    """The raw header line `key:` of a mail, with its continuation lines."""
    lines = mail.split("\n\n", 1)[0].split("\n")
    for i, line in enumerate(lines):
        if line.lower().startswith(key.lower() + ":"):
            block = [line]
            for more in lines[i + 1 :]:
                if more[:1] not in (" ", "\t"):
                    break
                block.append(more)
            return "\n".join(block)
    raise ApplyError(f"git format-patch wrote a mail without a {key} header")


def format_mails(
    repo: Path, base: str, head: str, names: list[str], where: Path, drop: tuple[str, ...]
) -> dict[str, str]:
    """`git format-patch --numbered` of base..head: `patches/NNNN-<patch stem>.patch` -> mail text."""
    where.mkdir(parents=True)
    gitops.git(
        [
            "format-patch",
            "--quiet",
            "--numbered",
            "--zero-commit",
            "--no-signature",
            "--full-index",
            "--encoding=UTF-8",
            "-o",
            where,
            f"{base}..{head}",
        ],
        cwd=repo,
    )
    produced = sorted(where.iterdir())
    if len(produced) != len(names):
        raise ApplyError(f"git format-patch wrote {len(produced)} mail(s) for {len(names)} patch(es)")
    return {
        f"patches/{i:04d}-{Path(name).stem}.patch": drop_trailers(
            path.read_text(errors="surrogateescape"), drop
        )
        for i, (name, path) in enumerate(zip(names, produced, strict=True), start=1)
    }
