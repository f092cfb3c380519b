"""What a user hits first: bad arguments and bad places give a clear error naming the problem, a non-zero
exit code and no traceback, before anything is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dgr.cli import main
from dgr.commands.generate import check_fits
from dgr.core.paths import Repo
from dgr.errors import UsageError
from dgr.git import gitops
from dgr.maintain import editing
from dgr.verify.models import synth
from dgr.verify.wire.pipeline import Pipeline, StepResult


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic 30-layer model: a real GGUF file to read the layer count from."""
    return synth.ensure(synth.LLAMA_UNTIED, tmp_path_factory.mktemp("models"))


@pytest.mark.parametrize(
    ("argv", "code", "expected"),
    [
        (["generate", ""], 2, "the prompt is empty"),
        (["generate", "   "], 2, "the prompt is empty"),
        (["generate", "--split", "garbage", "hi"], 2, "split part 'garbage' is not BEGIN:END"),
        (["generate", "--split", "0:10,10:x", "hi"], 2, "split part '10:x' is not BEGIN:END"),
        (["generate", "--split", "0:10,12:30", "hi"], 2, "does not tile the layers: [12, 30) after layer 10"),
        (["generate", "--split", "0:20,10:30", "hi"], 2, "does not tile the layers: [10, 30) after layer 20"),
        (["generate", "--split", "0:10,20:10", "hi"], 2, "does not tile"),
        (["generate", "-n", "0", "hi"], 2, "argument -n/--n-tokens: 0 is not at least 1"),
        (["generate", "-n", "-1", "hi"], 2, "argument -n/--n-tokens: -1 is not at least 1"),
        (["generate", "-n", "many", "hi"], 2, "'many' is not a whole number"),
        (["generate", "--threads", "0", "hi"], 2, "argument --threads: 0 is not at least 1"),
        (["generate", "--ctx", "0", "hi"], 2, "argument --ctx: 0 is not at least 1"),
        (
            ["generate", "--model", "/no/such/model.gguf", "hi"],
            8,
            "--model /no/such/model.gguf: no such file",
        ),
        (
            ["generate", "--model", "llama", "hi"],
            2,
            "--model llama: not a model of locks/model.toml (smollm2, gemma3) nor a GGUF file",
        ),
        (["verify", "--only", "nonsense"], 2, "unknown group(s) in --only 'nonsense': nonsense"),
        (["verify", "--threads", "0"], 2, "argument --threads: 0 is not at least 1"),
        (["bench", "--threads", "-2"], 2, "argument --threads: -2 is not at least 1"),
        (["bench", "--out", "/proc/x"], 8, "--out /proc/x: cannot write there"),
        (["bench", "--ctx", "100"], 2, "--ctx 100 is too small: the measurements need 512 positions"),
        (["bench", "--quick", "--ctx", "63"], 2, "--ctx 63 is too small: the measurements need 64 positions"),
    ],
)
def test_bad_arguments(
    repo: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, expected: str
) -> None:
    got, err = run(capsys, *argv)
    assert got == code, err
    assert expected in err


def test_fuzz_without_a_fuzzing_compiler_fails_first_and_says_what_to_install(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("dgr.verify.bench.fuzz.shutil.which", lambda name: None)
    # before the build and the measurements: unit tests may not build, so a build here would fail loudly
    assert main(["bench", "--fuzz", "--quick"]) == 8
    err = capsys.readouterr().err
    assert "--fuzz needs clang++ with libFuzzer, and this machine has none" in err
    assert "apt-get install clang-14 libclang-rt-14-dev" in err


def test_a_model_that_is_not_gguf(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_text("not a model")
    code, err = run(capsys, "generate", "--model", str(fake), "hi")
    assert (
        code == 8
        and f"--model {fake}: not a valid GGUF file: at byte 0, magic: b'not ' is not b'GGUF'" in err
    )


@pytest.mark.parametrize(
    ("split", "expected"),
    [
        ("0:10,10:40", "ends at layer 40, the model has 30 layers"),
        ("0:10,10:20", "ends at layer 20, the model has 30 layers"),
    ],
)
def test_a_split_that_does_not_end_at_the_models_last_layer(
    repo: Path, gguf: Path, capsys: pytest.CaptureFixture[str], split: str, expected: str
) -> None:
    """Checked against the model's own layer count, before anything is built."""
    code, err = run(capsys, "generate", "--model", str(gguf), "--split", split, "hi")
    assert code == 2 and expected in err and "next: give contiguous ranges" in err


@pytest.mark.parametrize("command", [["check"], ["fetch"], ["generate", "hi"]])
def test_a_cache_dir_that_is_a_file(
    repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for cache in (blocker, blocker / "cache"):
        monkeypatch.setenv("DGR_CACHE_DIR", str(cache))
        code, err = run(capsys, *command)
        assert code == 8, err
        assert f"$DGR_CACHE_DIR {cache} cannot be the cache dir" in err
        assert "set $DGR_CACHE_DIR to a directory you can write to" in err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_a_cache_dir_that_cannot_be_created_although_its_parent_looks_writable(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """/proc passes os.access for root, yet no directory can be made there: probed, not guessed."""
    monkeypatch.setenv("DGR_CACHE_DIR", "/proc/dgr-cache")
    code, err = run(capsys, "check")
    assert code == 8, err
    assert "$DGR_CACHE_DIR /proc/dgr-cache cannot be the cache dir: a directory cannot be created in" in err
    assert not Path("/proc/dgr-cache").exists()


def test_an_edit_tree_that_is_a_file_or_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    base = editing.EditBase(tmp_path, "0" * 40, tmp_path)
    identity = gitops.Identity("e", "e@localhost", "2026-01-01T00:00:00+00:00")
    repo = Repo(tmp_path)
    with pytest.raises(UsageError) as info:
        editing.create(blocker, base, [], identity, repo)
    assert info.value.what == f"the edit tree {blocker} is a file"
    with pytest.raises(UsageError) as info:
        editing.create(blocker / "tree", base, [], identity, repo)
    assert info.value.what.startswith(f"the edit tree {blocker / 'tree'} cannot be created: ")
    assert blocker.read_text() == "x"


def test_a_prompt_that_does_not_fit_the_context() -> None:
    check_fits(2000, 32, 4096, 4096)
    check_fits(4064, 32, 4096, 4096)
    with pytest.raises(UsageError) as info:
        check_fits(4065, 32, 4096, 4096)
    assert "the prompt has 4065 tokens and -n asks for 32 more: 4097 positions" in info.value.what
    assert "the context holds 4096 (--ctx 4096)" in info.value.what
    assert info.value.hint == "raise --ctx to at least 4097, or shorten the prompt or -n"


class Recorder(Pipeline):
    """A pipeline without workers: records the decode steps a prefill makes."""

    def __init__(self, n_batch: int) -> None:
        self.info: list[dict[str, Any]] = [{"n_batch": n_batch, "n_ctx": 4096, "max_sessions": 1}]
        self.steps: list[tuple[int, list[int], str]] = []

    def step(self, session: str, epoch: int, pos: int, tokens: list[int], logits: str = "last") -> StepResult:
        self.steps.append((pos, tokens, logits))
        return StepResult([7], None, [], [])  # type: ignore[arg-type]  # no logits: nothing reads them


@pytest.mark.parametrize(
    ("n", "chunks"), [(1, [1]), (512, [512]), (513, [512, 1]), (2000, [512, 512, 512, 464])]
)
def test_a_long_prompt_is_prefilled_in_chunks_of_n_batch(n: int, chunks: list[int]) -> None:
    pipe = Recorder(512)
    tokens = list(range(n))
    assert pipe.prefill("s", 1, tokens).argmax == [7]
    assert [len(t) for _, t, _ in pipe.steps] == chunks
    assert [pos for pos, _, _ in pipe.steps] == [sum(chunks[:i]) for i in range(len(chunks))]
    assert [t for _, chunk, _ in pipe.steps for t in chunk] == tokens
    assert [logits for _, _, logits in pipe.steps] == ["none"] * (len(chunks) - 1) + ["last"]
    assert pipe.capacity == 4096
    with pytest.raises(ValueError, match="empty prompt"):
        pipe.prefill("s", 1, [])
