"""The table of test-llama-archs --layer-ranges as checks of the archs group (dgr.verify.archs)."""

from __future__ import annotations

from dgr.verify import archs

ESC = "\x1b"
OK, REFUSED = f"{ESC}[1;32mOK{ESC}[0m", f"{ESC}[1;33mREFUSED{ESC}[0m"
TABLE = f"""\
0.00.000.290 I main: using seed 42, stdev 0.100000
|     Model arch.|Config| Layers|Ranges                |Result
|           llama| Dense|      4|2,3,1+1               |{OK} bit-identical logits, KV cache by range
|           llama|   MoE|      4|2,3,1+1               |{OK} bit-identical logits, KV cache by range
|          bitnet| Dense|      4|2                     |{REFUSED} the graph uses token_embd.weight
Summary: 2 certified, 1 refused, 0 failed
"""


def test_rows_are_parsed_with_status_ranges_and_reason() -> None:
    rows = archs.parse(TABLE)
    assert [(r.name, r.status, r.n_layer) for r in rows] == [
        ("llama/dense", "certified", 4),
        ("llama/moe", "certified", 4),
        ("bitnet/dense", "refused", 4),
    ]
    assert rows[0].ranges == ("2", "3", "1+1")
    assert rows[2].detail == "the graph uses token_embd.weight"


def test_a_refusal_with_a_reason_passes_and_the_share_is_judged() -> None:
    checks = {c.name: c for c in archs.checks(TABLE, 0)}
    assert checks["bitnet/dense"].passed and checks["bitnet/dense"].figures["reason"]
    share = checks["certified-share"]
    assert share.figures["certified"] == 2 and share.figures["models"] == 3
    assert not share.passed  # 2 of 3 is under the 90% target
    assert "66.7%" in share.detail


def test_a_mismatch_fails_and_a_crash_is_named() -> None:
    crashed = (
        TABLE.replace("Summary: 2 certified, 1 refused, 0 failed\n", "")
        + "|           gemma3| Dense|      4|"
    )
    mismatch = crashed.replace(
        f"{ESC}[1;32mOK{ESC}[0m bit-identical logits", f"{ESC}[1;31mFAIL{ESC}[0m split 2: NMSE 1.0e-03", 1
    )
    checks = {c.name: c for c in archs.checks(mismatch, -6)}
    assert not checks["llama/dense"].passed and "NMSE" in checks["llama/dense"].detail
    assert not checks["gemma3/dense"].passed and checks["gemma3/dense"].figures["status"] == "crashed"


def test_no_table_is_a_failure() -> None:
    checks = archs.checks("encountered runtime error: failed to create llama model\n", 255)
    assert [c.name for c in checks] == ["certified-share"] and not checks[0].passed
