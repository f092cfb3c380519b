"""The verdicts of the conformance checks on figures made up to break them: each fails when what it names
is absent or differs from its reference (the GGUF file, the unsplit model), and passes only when it holds."""

from __future__ import annotations

import numpy as np
from dgr.verify.checks import boundary

LOGITS = np.arange(12, dtype=np.float32).reshape(3, 4)


def test_baseline_empty_states_fail() -> None:
    problems, figures = boundary.baseline_verdict(LOGITS, LOGITS.copy(), [b"", b""], [True, True])
    assert figures["state_identical"] is True  # equal, and proving nothing
    assert problems == ["the saved state of the patched and the upstream build is empty: nothing to compare"]
    problems, _ = boundary.baseline_verdict(LOGITS, LOGITS.copy(), [b"kv", b""], [True, True])
    assert problems == ["the saved state of the upstream build is empty: nothing to compare"]


def test_baseline_equal_states_and_logits_pass() -> None:
    assert boundary.baseline_verdict(LOGITS, LOGITS.copy(), [b"kv", b"kv"], [True, True])[0] == []
    problems, _ = boundary.baseline_verdict(LOGITS, LOGITS + 1, [b"kv", b"kx"], [True, False])
    assert len(problems) == 3
