"""`dgr verify`: the native tests and the conformance checks of verify/ (imported when run)."""

from __future__ import annotations

import argparse

from dgr.verify import cli


def run(args: argparse.Namespace) -> int:
    return cli.run(args)
