"""`dgr generate --split 0:10,10:20,20:30 -n 32 [--chat] [--json] PROMPT`: greedy generation through a
chain of layer-worker processes on the locked model, compared with the unsplit model."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from dgr import build, locks, model
from dgr.errors import UsageError
from dgr.paths import Context
from dgr.verify import inventory
from dgr.verify.pipeline import Pipeline, parse_split


def _run(pipe: Pipeline, tokens: list[int], n: int, stop: set[int]) -> tuple[list[int], float]:
    start = time.monotonic()
    out = pipe.generate("generate", 1, tokens, n, stop)
    return out, time.monotonic() - start


def run(args: argparse.Namespace) -> int:
    if args.n_tokens < 1:
        raise UsageError("-n must be at least 1")
    try:
        split = parse_split(args.split)
    except ValueError as exc:
        raise UsageError(str(exc), hint="give contiguous ranges BEGIN:END from 0 to the last layer") from exc
    ctx = Context.discover()
    result = build.run(ctx, build.Request(mirror=args.mirror))
    model_path = model.fetch(ctx.cache, locks.load_model(ctx.repo.locks_dir))
    worker = result.path / "bin" / "layer-worker"
    n_layer = inventory.read(model_path).n_layer
    if split[-1][1] != n_layer:
        raise UsageError(
            f"split {args.split!r} ends at layer {split[-1][1]}; the model has {n_layer} layers",
            hint=f"the last range must end at {n_layer}",
        )
    unsplit = split == [(0, n_layer)]
    with Pipeline(worker, model_path, split, threads=args.threads) as pipe:
        tokens = pipe.tokenize(args.prompt, chat=args.chat)
        eos = pipe.head.request("tokenize", text="").header
        stop = {eos["eos"], eos["eot"]} - {-1}
        out, seconds = _run(pipe, tokens, args.n_tokens, stop)
        text = pipe.detokenize(out)
    ref_seconds = seconds
    ref = out
    if not unsplit:
        with Pipeline(worker, model_path, [(0, n_layer)], threads=args.threads) as whole:
            ref, ref_seconds = _run(whole, tokens, args.n_tokens, stop)
    res: dict[str, Any] = {
        "split": [list(r) for r in split],
        "prompt_tokens": tokens,
        "tokens": out,
        "text": text,
        "matches_unsplit": out == ref,
        "unsplit_tokens": ref,
        "tokens_per_s": round(len(out) / seconds, 2),
        "unsplit_tokens_per_s": round(len(ref) / ref_seconds, 2),
    }
    if args.json:
        json.dump(res, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(text)
        print(f"\ntokens: {out}")
        print(
            f"split {args.split}: {len(out)} tokens, {res['tokens_per_s']} tokens/s; "
            f"unsplit {res['unsplit_tokens_per_s']} tokens/s; matches unsplit: {res['matches_unsplit']}"
        )
    return 0 if res["matches_unsplit"] else 1
