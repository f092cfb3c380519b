"""`dgr generate`: greedy generation through a chain of layer-range workers (verify/generate.py)."""

from __future__ import annotations

import argparse

from dgr.verify import generate


def run(args: argparse.Namespace) -> int:
    return generate.run(args)
