"""`dgr generate [--model NAME|PATH] [--split RANGES] [--parts | --parts-dir DIR] [-n N] [--ctx N] [--chat]
[--no-reference] [--json] PROMPT`: greedy generation through a chain of layer-worker processes (one per
range, each sending its hidden state on to the next itself: `forward` of docs/protocol.md) on a locked model
(the default one unless named) or a GGUF file, compared with the unsplit model (run after it, said on stderr;
`--no-reference` skips it); exit 9 when the two differ. With `--parts` each range loads from its own
directory holding only the files of the model's parts it needs (`dgr parts`, in the cache; `--parts-dir`: a
directory of parts given), checked before any worker starts. The text printed is the prompt (bold on a
terminal, else in brackets) followed by its continuation."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dgr.builds import build, buildplan
from dgr.contracts import locks
from dgr.contracts import parts as records
from dgr.core import log
from dgr.core.digest import sha256_file
from dgr.core.paths import Context
from dgr.errors import EXIT_OK, ConfigError, UsageError, VerifyError
from dgr.sources import model
from dgr.verify.models import inventory
from dgr.verify.models import parts as cutter
from dgr.verify.wire.pipeline import Pipeline, parse_split

SESSION = "generate"
SPLIT_HINT = (
    "give contiguous ranges BEGIN:END from 0 to the model's layer count, e.g. 0:10,10:20,20:30 for 30 layers"
)


def _run(pipe: Pipeline, tokens: list[int], n: int, stop: set[int]) -> tuple[list[int], float]:
    start = time.monotonic()
    out = pipe.generate(SESSION, 1, tokens, n, stop)
    return out, time.monotonic() - start


def check_fits(n_prompt: int, n_tokens: int, capacity: int, ctx: int) -> None:
    """A prompt and the tokens to generate must fit the context of one session; UsageError otherwise."""
    if n_prompt + n_tokens > capacity:
        raise UsageError(
            f"the prompt has {n_prompt} tokens and -n asks for {n_tokens} more: {n_prompt + n_tokens} "
            f"positions, but the context holds {capacity} (--ctx {ctx})",
            hint=f"raise --ctx to at least {n_prompt + n_tokens}, or shorten the prompt or -n",
        )


def model_path(ctx: Context, value: str | None) -> Path:
    """The model of `--model`: a name of locks/model.toml (fetched and verified), else the path of a file;
    none: the lock's default model. A value that is neither a locked name nor a path is a UsageError."""
    models = locks.load_models(ctx.repo.locks_dir)
    if value is None or value in models.models:
        return model.fetch(ctx.cache, models.get(value))
    if "/" in value or value.endswith(".gguf") or Path(value).exists():
        return Path(value).resolve()
    raise UsageError(
        f"--model {value}: not a model of locks/model.toml ({', '.join(models.names)}) nor a GGUF file",
        hint=f"give one of {', '.join(models.names)}, or the path of a .gguf file",
    )


def model_layers(path: Path) -> int:
    """The layer count of the GGUF model at `path` (read from its header); ConfigError if it is none."""
    if not path.is_file():
        raise ConfigError(f"--model {path}: no such file", hint="give the path of a GGUF model file")
    try:
        return inventory.read(path).n_layer
    except ConfigError as exc:  # a broken file: the offset and the field
        raise ConfigError(f"--model {exc.what}", detail=exc.detail, hint=exc.hint) from exc


def ranges_of(text: str | None, n_layer: int) -> list[tuple[int, int]]:
    """`--split`, checked against the model's layers; none: three ranges of (nearly) equal size."""
    if text is None:
        return inventory.split(n_layer, min(3, n_layer))
    try:
        return parse_split(text, n_layer)
    except ValueError as exc:
        raise UsageError(str(exc), hint=SPLIT_HINT) from exc


def run(args: argparse.Namespace) -> int:
    if not args.prompt.strip():
        raise UsageError("the prompt is empty: there is nothing to continue", hint='give a prompt, e.g. "Hi"')
    if args.split is not None:
        try:
            parse_split(args.split)  # the syntax, before anything is built
        except ValueError as exc:
            raise UsageError(str(exc), hint=SPLIT_HINT) from exc
    ctx = Context.discover()
    path = model_path(ctx, args.model)
    n_layer = model_layers(path)
    split = ranges_of(args.split, n_layer)  # before the build: a split past the last layer is refused now
    with contextlib.ExitStack() as stack:
        # before the build too: parts that do not check are refused before anything runs
        source: Path | Callable[[int, int], Path] = path
        from_parts: dict[str, Any] | None = None
        if args.parts or args.parts_dir is not None:
            scratch = stack.enter_context(ctx.cache.tmpdir("generate-parts"))
            parts = model_parts(ctx, args, path, split, scratch)
            from_parts = parts_rows(parts, split)
            source = parts.model_for
        worker = build.run(ctx, buildplan.Request(mirror=args.mirror)).path / "bin" / "layer-worker"
        # one session per worker: it gets the whole context (a worker gives each session n_ctx / max_sessions)
        with Pipeline(
            worker, source, split, threads=args.threads, n_ctx=args.ctx, max_sessions=1, forward=True
        ) as pipe:
            tokens = pipe.tokenize(args.prompt, chat=args.chat)
            check_fits(len(tokens), args.n_tokens, pipe.capacity, args.ctx)
            eos = pipe.head.request("tokenize", text="").header
            stop = {eos["eos"], eos["eot"]} - {-1}
            chunks = -(-len(tokens) // pipe.n_batch)
            log.info(
                f"prompt: {len(tokens)} tokens, prefilled in {chunks} chunk(s) of at most {pipe.n_batch}"
            )
            out, seconds = _run(pipe, tokens, args.n_tokens, stop)
            text = pipe.detokenize(out)
    whole_model = [(0, n_layer)]
    ref: list[int] | None = out
    ref_seconds = seconds
    if args.no_reference:
        ref = None
        log.info("--no-reference: the unsplit model is not run; the output is not compared")
    elif split != whole_model or from_parts is not None:
        log.info(f"running the unsplit model (0:{n_layer}, one worker) as the reference to compare with")
        with Pipeline(
            worker, path, whole_model, threads=args.threads, n_ctx=args.ctx, max_sessions=1
        ) as whole:
            ref, ref_seconds = _run(whole, tokens, args.n_tokens, stop)
    split_text = ",".join(f"{b}:{e}" for b, e in split)
    res: dict[str, Any] = {
        "model": path.name,
        "split": [list(r) for r in split],
        "prompt": args.prompt,
        "prompt_tokens": tokens,
        "tokens": out,
        "text": text,
        "parts": from_parts,
        "matches_unsplit": None if ref is None else out == ref,
        "unsplit_tokens": ref,
        "tokens_per_s": round(len(out) / seconds, 2),
        "unsplit_tokens_per_s": None if ref is None else round(len(ref) / ref_seconds, 2),
    }
    if args.json:
        json.dump(res, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(shown(args.prompt, text, sys.stdout.isatty()))
        print(f"\ntokens: {out}")
        compared = (
            "not compared (--no-reference)"
            if ref is None
            else f"unsplit {res['unsplit_tokens_per_s']} tokens/s; matches unsplit: {res['matches_unsplit']}"
        )
        print(f"split {split_text}: {len(out)} tokens, {res['tokens_per_s']} tokens/s; {compared}")
        if from_parts is not None:
            print(f"from the parts in {from_parts['directory']}:")
            for row in from_parts["ranges"]:
                print(
                    f"[{row['begin']}, {row['end']}): {len(row['files'])} of {from_parts['files']} files, "
                    f"{row['bytes']} of the whole file's {row['whole_bytes']} bytes "
                    f"({100 * row['bytes'] / row['whole_bytes']:.1f} %)"
                )
    if ref is not None and out != ref:
        log.warn(f"split {split_text} differs from the unsplit model: {out} vs {ref}")
        return VerifyError.exit_code
    return EXIT_OK


def model_parts(
    ctx: Context, args: argparse.Namespace, path: Path, split: list[tuple[int, int]], scratch: Path
) -> cutter.ModelParts:
    """The parts the ranges of `split` run from: `--parts-dir DIR`, or with `--parts` those in the cache
    (written there first when missing, as `dgr parts` does); of the model at `path`, held to its entry in
    locks/parts.toml when it has one (exit 3 when they differ); each range's own directory made under
    `scratch` and checked before any worker starts (exit 8: a file it needs missing, another part in its
    place, a part cut short, naming the offset; exit 3: a part of another model, other bytes than
    recorded)."""
    models = locks.load_models(ctx.repo.locks_dir)
    locked = models.get(args.model) if args.model is None or args.model in models.models else None
    sha256 = locked.sha256 if locked is not None else sha256_file(path)
    lock = records.load_lock(ctx.repo.locks_dir)
    record = lock.get(locked.name) if locked is not None else lock.by_source(sha256)
    if args.parts_dir is not None:
        directory = args.parts_dir.resolve()
        if not directory.is_dir():
            raise ConfigError(
                f"--parts-dir {args.parts_dir}: no such directory",
                hint="give the directory of the model's parts (`dgr parts --out DIR` writes one)",
            )
        parts = cutter.ModelParts.open(directory, sha256, record, scratch)
    else:
        directory, manifest = cutter.ensure_cached(ctx.cache.root, path, sha256, record)
        parts = cutter.ModelParts(directory, manifest, scratch)
    if record is None:
        log.info(
            f"locks/parts.toml has no parts of {path.name}: they are held to their own {records.MANIFEST}"
        )
    for begin, end in split:
        parts.range(begin, end)
    return parts


def parts_rows(parts: cutter.ModelParts, split: list[tuple[int, int]]) -> dict[str, Any]:
    """The parts the ranges ran from: their directory and, per range, the files it needs and their bytes
    against the whole file's."""
    ranges = []
    for begin, end in split:
        r = parts.range(begin, end)
        files = [p.name for p in r.files]
        ranges.append(
            {"begin": begin, "end": end, "files": files, "bytes": r.bytes, "whole_bytes": r.whole_bytes}
        )
    return {"directory": str(parts.directory), "files": len(parts.manifest.files), "ranges": ranges}


def shown(prompt: str, continuation: str, terminal: bool) -> str:
    """The prompt then its continuation, the prompt set apart: bold on a terminal, else in brackets."""
    return f"\033[1m{prompt}\033[0m{continuation}" if terminal else f"[{prompt}]{continuation}"
