"""The typed contracts that cross layer boundaries, in one place.

Each record is a frozen dataclass with `to_json` / `from_json`; closed sets of values are `Literal`s.
The series manager writes the build manifest, verify writes the report, bench writes its result; commands
and the export read them back through `from_json`, which refuses a malformed document with a ConfigError.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- the verify report

# --------------------------------------------------------------------------- the build manifest

# --------------------------------------------------------------------------- the bench result
