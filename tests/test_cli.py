"""Errors map to documented exit codes through main(argv); paths and the cache dir resolve as documented."""

from __future__ import annotations

import importlib
import os
import pkgutil
from pathlib import Path

import platformdirs
import pytest
from dgr import errors
from dgr.cli import main
from dgr.contracts.report import GROUPS
from dgr.core.paths import find_cache_root, find_repo_root

from tests.helpers import ROOT


def test_usage_error_is_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-command"]) == 2
    assert main(["rebase-check"]) == 2
    assert main([]) == 2


def test_help_lists_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for code in (3, 4, 5, 6, 7, 8, 9, 10, 130):
        assert f"{code:>5}  " in out


def all_subclasses(cls: type[BaseException]) -> list[type[BaseException]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in all_subclasses(sub))]


def test_every_error_class_has_a_documented_code() -> None:
    classes = [c for c in all_subclasses(errors.DgrError) if issubclass(c, errors.DgrError)]
    assert {c.exit_code for c in classes} == set(errors.EXIT_CODES) - {0, 130}
    # the exit-code table of docs/DESIGN.md (README.md's "Exit codes" carries the same rows)
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    for code, meaning in errors.EXIT_CODES.items():
        assert f"| {code} |" in design, meaning


def test_every_error_class_is_named_an_error() -> None:
    """Every exception class of the package, DgrError's or not (frames, bundles, patch parsing)."""
    import dgr

    for module in pkgutil.walk_packages(dgr.__path__, "dgr."):
        importlib.import_module(module.name)

    names = {c.__name__ for c in all_subclasses(Exception) if c.__module__.split(".")[0] == "dgr"}
    assert {"WorkerRequestError", "WorkerDiedError", "ShardFailedError", "FrameError", "BundleError"} <= names
    assert [n for n in names if not n.endswith("Error")] == []


def test_worker_errors_have_their_own_codes() -> None:
    refused = errors.WorkerRequestError(
        "shard0[0,30)", "decode", "bad_request", "n_tokens must be in [1, 512]"
    )
    died = errors.WorkerDiedError("shard1[10,20)", "no reply to 'decode' within 10 s", "line 1\nline 2")
    failed = errors.ShardFailedError(1, (10, 20), died)
    assert (refused.exit_code, died.exit_code, failed.exit_code) == (12, 13, 13)
    assert refused.code == "bad_request" and refused.render() == (
        "dgr: worker: shard0[0,30): decode: bad_request: n_tokens must be in [1, 512]"
    )
    assert failed.render().splitlines()[:4] == [
        "dgr: worker died: shard 1 (layers [10, 20)): failed: no reply to 'decode' within 10 s",
        "  worker stderr:",
        "    line 1",
        "    line 2",
    ]
    assert isinstance(failed, errors.WorkerDiedError) and failed.index == 1


def crash(args: object) -> int:
    raise KeyError("no such thing")


@pytest.mark.parametrize("flags", [[], ["check", "-v"], ["-v", "check"], ["--verbose", "check"]])
def test_an_unexpected_exception_is_an_internal_error(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    monkeypatch.setattr("dgr.commands.check.run", crash)
    verbose = bool(flags)
    assert main(flags or ["check"]) == 11
    err = capsys.readouterr().err
    assert "dgr: internal error: KeyError: 'no such thing'" in err
    if verbose:
        assert "Traceback (most recent call last)" in err and "in crash" in err
    else:
        assert "Traceback" not in err and err.endswith("\n")
        assert err.splitlines() == [
            "dgr: internal error: KeyError: 'no such thing'",
            "  next: rerun with -v for the traceback: `dgr -v check`",
        ]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == "dgr 0.1.0\n"


def test_a_mistyped_command_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["biuld"]) == 2
    assert "dgr: error: 'biuld' is not a dgr command; did you mean `build`?" in capsys.readouterr().err
    assert main(["zzzz"]) == 2
    err = capsys.readouterr().err
    assert (
        "'zzzz' is not a dgr command (`dgr --help` lists the commands)" in err and "did you mean" not in err
    )


def test_options_are_not_abbreviated_and_a_bad_one_shows_its_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["generate", "--spl", "0:1", "hi"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: dgr generate ")
    assert "dgr generate: error: unknown option --spl; did you mean `--split`?" in err


@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        (["--bogus"], "dgr"),
        (["--bogus=3"], "dgr"),
        (["-v", "--bogus"], "dgr"),
        (["build", "--bogus"], "dgr build"),
        (["--bogus", "build"], "dgr build"),
        (["status", "--json", "--bogus", "x"], "dgr status"),
    ],
)
def test_an_unknown_option_is_named_before_or_after_the_command(
    capsys: pytest.CaptureFixture[str], argv: list[str], prog: str
) -> None:
    """Not argparse's `the following arguments are required: COMMAND` (`dgr --bogus`): the option, exit 2,
    with the usage of its command."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: {prog} ")
    assert f"{prog}: error: unknown option --bogus (`{prog} --help` lists the options)" in err
    assert "required" not in err and "Traceback" not in err


def test_a_misplaced_option_says_where_it_goes_and_a_missing_command_is_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--json", "build"]) == 2
    assert (
        "dgr build: error: option --json is `dgr build`'s: it goes after the command"
        in capsys.readouterr().err
    )
    assert main(["build", "-C", "/tmp"]) == 2
    assert "dgr build: error: option -C is dgr's: it goes before the command" in capsys.readouterr().err
    assert main(["build", "extra"]) == 2
    assert "dgr build: error: unexpected argument(s): extra" in capsys.readouterr().err
    for argv in ([], ["-v"]):
        assert main(argv) == 2
        assert "dgr: error: the following arguments are required: COMMAND" in capsys.readouterr().err


def test_minus_c_runs_in_the_directory(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DGR_REPO")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--no-style"]) == 8  # not in a repository
    capsys.readouterr()
    assert main(["-C", str(repo), "check", "--no-style"]) == 0
    assert capsys.readouterr().out == "dgr check: clean\n"
    assert main(["-C", str(tmp_path / "missing"), "check"]) == 2
    assert "-C " + str(tmp_path / "missing") + ": No such file or directory" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["-q", "manifest"], ["manifest", "--quiet"]])
def test_quiet_prints_results_only(repo: Path, capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    assert main(["manifest"]) == 0
    loud = capsys.readouterr()
    assert main(flags) == 0
    quiet = capsys.readouterr()
    assert quiet.out == loud.out and loud.err != "" and quiet.err == ""


def test_a_closed_pipe_ends_quietly(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def closed(args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("dgr.commands.status.run", closed)
    assert main(["status"]) == 1
    assert capsys.readouterr().err == ""


def test_missing_lock_is_8(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "locks" / "upstream.toml").unlink()
    assert main(["fetch"]) == 8
    assert "upstream.toml: lock file missing" in capsys.readouterr().err


def test_verify_refuses_an_unknown_group_before_building(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", "--only", "ownership,bogus"]) == 2
    err = capsys.readouterr().err
    assert "unknown group" in err and ", ".join(GROUPS) in err


def test_generate_refuses_a_split_that_does_not_tile(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--split", "0:10,12:30", "hello"]) == 2
    assert "does not tile" in capsys.readouterr().err


def test_error_rendering_names_expected_actual_and_next() -> None:
    text = errors.IntegrityError("x.patch changed", expected="a" * 64, actual="b" * 64, hint="run y").render()
    assert text.splitlines() == [
        "dgr: integrity: x.patch changed",
        f"  expected: {'a' * 64}",
        f"  actual:   {'b' * 64}",
        "  next: run y",
    ]


def test_repo_root_discovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT / "builder")
    assert find_repo_root() == ROOT
    monkeypatch.chdir(tmp_path)
    with pytest.raises(errors.ConfigError):
        find_repo_root()
    monkeypatch.setenv("DGR_REPO", str(tmp_path))
    with pytest.raises(errors.ConfigError, match="DGR_REPO"):
        find_repo_root()


def test_cache_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_cache_root(ROOT) == Path(os.environ["DGR_CACHE_DIR"]).resolve()
    monkeypatch.delenv("DGR_CACHE_DIR")
    assert find_cache_root(ROOT) == Path(platformdirs.user_cache_dir("dgr")).resolve()
    monkeypatch.setenv("DGR_CACHE_DIR", str(ROOT / "cache"))
    with pytest.raises(errors.ConfigError, match="inside the repository"):
        find_cache_root(ROOT)


def test_a_bad_choice_of_an_option_names_the_option_not_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--backend", "vulkn"]) == 2
    err = capsys.readouterr().err
    assert "argument --backend: 'vulkn' is not one of cpu, vulkan; did you mean `vulkan`?" in err
    assert "not a dgr command" not in err
