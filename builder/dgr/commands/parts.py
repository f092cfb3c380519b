"""`dgr parts [--model NAME|PATH] [--out DIR] [--split RANGES|K] [--lock] [--json]`: cut a model (of
locks/model.toml, fetched and verified, or a GGUF file) into the files its layer ranges need: upstream's
split format cut at layer boundaries (dgr.verify.models.parts), with their manifest `parts.toml`, into
`<cache>/parts/<sha256>/` or `--out DIR`; print the directory and, with `--split`, what each range needs.

The parts of a locked model are held to `locks/parts.toml` (exit 3 naming the part and both digests);
`--lock` records them there. A destination that holds the parts already is checked, not written again; one
that holds anything else is refused (`--out`) or, in the cache, replaced."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dgr.contracts import locks
from dgr.contracts import parts as records
from dgr.contracts.parts import PartsManifest, PartsRecord
from dgr.core import log
from dgr.core.digest import sha256_file
from dgr.core.paths import Context
from dgr.errors import EXIT_OK, ConfigError, IntegrityError, UsageError
from dgr.sources import model
from dgr.verify.models import inventory
from dgr.verify.models import parts as cutter
from dgr.verify.wire.pipeline import parse_split

SPLIT_HINT = (
    "give contiguous ranges BEGIN:END from 0 to the model's layer count (0:10,10:20,20:30 for 30 layers), or "
    "a number K of (nearly) equal ranges"
)


def _split_syntax(text: str | None) -> None:
    """`--split`'s syntax, before anything is fetched."""
    if text is None:
        return
    if text.strip().isdigit():
        if int(text) < 1:
            raise UsageError(f"--split {text}: a split has at least one range", hint=SPLIT_HINT)
        return
    try:
        parse_split(text)
    except ValueError as exc:
        raise UsageError(f"--split {text}: {exc}", hint=SPLIT_HINT) from exc


def ranges_of(text: str, n_layer: int) -> list[tuple[int, int]]:
    """`--split` for a model of `n_layer` layers: RANGES that tile them, or K (nearly) equal ranges."""
    if text.strip().isdigit():
        k = int(text)
        if not 1 <= k <= n_layer:
            raise UsageError(
                f"--split {k}: the model has {n_layer} layers, at most {n_layer} ranges", hint=SPLIT_HINT
            )
        return inventory.split(n_layer, k)
    try:
        return parse_split(text, n_layer)
    except ValueError as exc:
        raise UsageError(f"--split {text}: {exc}", hint=SPLIT_HINT) from exc


def _source(ctx: Context, value: str | None, lock_it: bool) -> tuple[Path, str, str | None]:
    """(the model file, its SHA-256, its name in locks/model.toml or None) of `--model`."""
    models = locks.load_models(ctx.repo.locks_dir)
    if value is None or value in models.models:
        locked = models.get(value)
        return model.fetch(ctx.cache, locked), locked.sha256, locked.name
    if lock_it:
        raise UsageError(
            f"--lock records the parts of a model of locks/model.toml; {value} is not one",
            hint=f"give one of {', '.join(models.names)}",
        )
    if not ("/" in value or value.endswith(".gguf") or Path(value).exists()):
        raise UsageError(
            f"--model {value}: not a model of locks/model.toml ({', '.join(models.names)}) nor a GGUF file",
            hint=f"give one of {', '.join(models.names)}, or the path of a .gguf file",
        )
    path = Path(value).resolve()
    if not path.is_file():
        raise ConfigError(f"--model {value}: no such file", hint="give the path of a GGUF model file")
    return path, sha256_file(path), None


def _existing(destination: Path, sha256: str, in_cache: bool) -> PartsManifest | None:
    """The parts already at `destination`, checked, or None when there are none (nothing there, an empty
    directory, or, in the cache, anything else: removed, `cutter.cached`). Outside the cache, a destination
    that holds anything but these parts is refused: other files or another model's parts (exit 2), parts that
    do not check (their own error: exit 3 for other bytes, 8 for a part cut short)."""
    if in_cache:
        return cutter.cached(destination, sha256)
    if not destination.exists() or (destination.is_dir() and not any(destination.iterdir())):
        return None
    what = f"--out {destination}"
    if not destination.is_dir() or not (destination / records.MANIFEST).is_file():
        names = sorted(p.name for p in destination.iterdir()) if destination.is_dir() else []
        held = f"holds other files ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})"
        raise UsageError(
            f"{what}: {held if destination.is_dir() else 'is a file'}, not the parts of a model",
            hint=f"give a new or empty directory, or remove {destination}",
        )
    try:
        return cutter.check_directory(destination, sha256, what)
    except (ConfigError, IntegrityError) as exc:
        exc.hint = f"remove {destination} and run again to write the parts afresh"
        raise


def _range_rows(manifest: PartsManifest, split: list[tuple[int, int]]) -> list[dict[str, Any]]:
    rows = []
    for begin, end in split:
        needed = manifest.files_for(begin, end)
        rows.append(
            {
                "begin": begin,
                "end": end,
                "files": [p.name for p in needed],
                "bytes": sum(p.size for p in needed),
                "whole_bytes": manifest.source.size,
            }
        )
    return rows


def run(args: argparse.Namespace) -> int:
    _split_syntax(args.split)
    ctx = Context.discover()
    parts_lock = records.load_lock(ctx.repo.locks_dir)  # a bad lock before any download
    source, sha256, name = _source(ctx, args.model, args.lock)
    record = None if args.lock else (parts_lock.get(name) if name else parts_lock.by_source(sha256))
    in_cache = args.out is None
    destination = cutter.cache_dir(ctx.cache.root, sha256) if in_cache else args.out.resolve()
    manifest = _existing(destination, sha256, in_cache)
    if manifest is None:
        manifest = cutter.write(source, destination, sha256, record=record)
        log.info(f"wrote {len(manifest.files)} parts of {source.name} to {destination}")
    elif record is not None:
        record.check(manifest, str(destination))
    if record is None and not args.lock and name is not None:
        log.info(f"locks/parts.toml has no parts of {name}: `dgr parts --model {name} --lock` records them")
    if args.lock:
        assert name is not None
        old = parts_lock.get(name)
        new = PartsRecord.of(name, manifest)
        if old != new:
            records.write_lock(ctx.repo.locks_dir, parts_lock.with_record(new))
            log.info(f"locks/parts.toml: recorded the {len(manifest.files)} parts of {name}")
        else:
            log.info(f"locks/parts.toml: the parts of {name} are recorded already")
    split = ranges_of(args.split, manifest.n_layer) if args.split is not None else []
    rows = _range_rows(manifest, split)
    if args.json:
        out = {"directory": str(destination), "manifest": manifest.to_toml(), "ranges": rows}
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK
    print(destination)
    for row in rows:
        share = 100 * row["bytes"] / row["whole_bytes"]
        print(
            f"[{row['begin']}, {row['end']}): {len(row['files'])} of {len(manifest.files)} files, "
            f"{row['bytes']} of the whole file's {row['whole_bytes']} bytes ({share:.1f} %)"
        )
    return EXIT_OK
