"""`dgr generate` with a fake chain of workers: the prompt printed before its continuation, the unsplit
reference run said on stderr (and skipped by --no-reference), a difference exits 9."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from dgr.cli import main
from dgr.commands import generate

RUNS: list[list[tuple[int, int]]] = []


class FakePipeline:
    """Tokens are characters; the unsplit chain answers `unsplit`, a split one `split`."""

    answers: ClassVar[dict[str, list[int]]] = {"split": [1, 2, 3], "unsplit": [1, 2, 3]}

    def __init__(self, worker: Path, model: Path, split: list[tuple[int, int]], **kwargs: Any) -> None:
        self.split = split
        self.capacity = 2048
        self.n_batch = 512
        self.head = SimpleNamespace(request=lambda op, **f: SimpleNamespace(header={"eos": 0, "eot": -1}))
        RUNS.append(split)

    def __enter__(self) -> FakePipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def tokenize(self, text: str, chat: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def detokenize(self, tokens: list[int]) -> str:
        return " Paris"

    def generate(self, session: str, epoch: int, tokens: list[int], n: int, stop: set[int]) -> list[int]:
        return self.answers["unsplit" if len(self.split) == 1 else "split"]


@pytest.fixture
def fake_chain(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    RUNS.clear()
    FakePipeline.answers = {"split": [1, 2, 3], "unsplit": [1, 2, 3]}
    monkeypatch.setattr(generate, "Pipeline", FakePipeline)
    monkeypatch.setattr(generate, "model_path", lambda ctx, value: tmp_path / "m.gguf")
    monkeypatch.setattr(generate, "model_layers", lambda path: 30)
    monkeypatch.setattr(generate.build, "run", lambda ctx, request: SimpleNamespace(path=tmp_path / "build"))


def test_prints_the_prompt_then_its_continuation(
    repo: Path, fake_chain: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["generate", "The capital of France is"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("[The capital of France is] Paris\n")
    assert "matches unsplit: True" in out
    assert "running the unsplit model (0:30, one worker) as the reference to compare with" in err
    assert RUNS == [[(0, 10), (10, 20), (20, 30)], [(0, 30)]]


def test_the_prompt_is_bold_on_a_terminal() -> None:
    assert generate.shown("Hi", " there", True) == "\033[1mHi\033[0m there"
    assert generate.shown("Hi", " there", False) == "[Hi] there"


def test_no_reference_runs_only_the_split(
    repo: Path, fake_chain: None, capsys: pytest.CaptureFixture[str]
) -> None:
    FakePipeline.answers["unsplit"] = [9]  # would differ: not run
    assert main(["generate", "--no-reference", "--json", "Hi"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert result["matches_unsplit"] is None and result["unsplit_tokens"] is None
    assert result["prompt"] == "Hi" and result["text"] == " Paris"
    assert "--no-reference: the unsplit model is not run" in err
    assert "running the unsplit model" not in err
    assert RUNS == [[(0, 10), (10, 20), (20, 30)]]
    assert main(["generate", "--no-reference", "Hi"]) == 0
    assert "not compared (--no-reference)" in capsys.readouterr().out


def test_a_difference_from_the_reference_exits_9(
    repo: Path, fake_chain: None, capsys: pytest.CaptureFixture[str]
) -> None:
    FakePipeline.answers["unsplit"] = [1, 2, 4]
    assert main(["generate", "Hi"]) == 9
    captured = capsys.readouterr()
    assert "matches unsplit: False" in captured.out
    assert "differs from the unsplit model: [1, 2, 3] vs [1, 2, 4]" in captured.err


def test_the_unsplit_split_is_its_own_reference(
    repo: Path, fake_chain: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["generate", "--split", "0:30", "Hi"]) == 0
    assert "running the unsplit model" not in capsys.readouterr().err
    assert RUNS == [[(0, 30)]]
