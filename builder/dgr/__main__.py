"""`python -m dgr`: the same entry point as the `dgr` script."""

from __future__ import annotations

import sys

from dgr.cli import main

if __name__ == "__main__":
    sys.exit(main())
