"""`dgr bench`: split cost, memory per range, bundle codec, build timing, fuzzing (verify/bench.py)."""

from __future__ import annotations

import argparse

from dgr.verify import bench


def run(args: argparse.Namespace) -> int:
    return bench.run(args)
