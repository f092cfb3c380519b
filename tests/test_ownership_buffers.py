"""ownership: with mmap, the mapped weight buffer is the file's span of its tensors, read from the GGUF."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dgr.verify.checks.ownership import _mapped_buffers
from dgr.verify.models.inventory import Inventory

# three tensors laid out in the file: a at [100, 200), b at [200, 260), c at [300, 400)
INV = Inventory(
    path=Path("m.gguf"),
    arch="llama",
    n_layer=1,
    n_embd=8,
    tensors={"a": 100, "b": 60, "c": 100},
    spans={"a": (100, 200), "b": (200, 260), "c": (300, 400)},
)


def buffers(mapped: int, repack: int) -> list[dict[str, Any]]:
    return [
        {"type": "CPU_Mapped", "bytes": mapped, "tensors": ["a", "c"]},
        {"type": "CPU_REPACK", "bytes": repack, "tensors": ["b"]},
    ]


def test_the_mapped_buffer_is_the_span_of_its_tensors() -> None:
    assert _mapped_buffers(INV, buffers(300, 64), "[0, 1)") == []


def test_a_mapped_buffer_other_than_the_span_is_named() -> None:
    [problem] = _mapped_buffers(INV, buffers(300 + 4096, 64), "[0, 1)")
    assert "the mapped buffer is 4396 bytes; its 2 tensors span 300 bytes of the file (100 to 400)" in problem


def test_a_repacked_buffer_smaller_than_its_tensors_is_named() -> None:
    [problem] = _mapped_buffers(INV, buffers(300, 59), "[0, 1)")
    assert "the CPU_REPACK buffer is 59 bytes for 60 bytes" in problem


def test_a_buffer_of_unknown_tensors_or_none_and_no_mapped_buffer_are_named() -> None:
    odd = [{"type": "CPU_REPACK", "bytes": 8, "tensors": ["zz"]}, {"type": "CPU", "bytes": 8, "tensors": []}]
    problems = _mapped_buffers(INV, odd, "[0, 1)")
    assert problems[0] == "[0, 1): 0 CPU_Mapped weight buffers, expected one (the file)"
    assert "holds ['zz']" in problems[1] and "holds no tensor" in problems[2]
