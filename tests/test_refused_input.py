"""Input that is refused through the real CLI, with its exit code and what to do: an `--only` that names no
group, a program that is not executable, a broken model lock under `dgr status`; and `dgr verify`'s report
when a group raises (the groups that finished are kept, the raising one is a failed check)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from dgr.builds import reportstore
from dgr.cli import main
from dgr.contracts.report import GROUPS, Check
from dgr.core import proc
from dgr.core.paths import Context
from dgr.errors import ApplyError, ConfigError
from dgr.verify.checks.session import GroupSpec, Session


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err and "a bug of dgr" not in err
    return code, err


@pytest.mark.parametrize("only", ["", "   ", " , ,"])
def test_an_only_that_names_no_group_is_a_usage_error_naming_the_groups(
    capsys: pytest.CaptureFixture[str], only: str
) -> None:
    code, err = run(capsys, "verify", "--only", only)
    assert code == 2
    assert f"--only {only!r} names no group" in err
    assert ", ".join(GROUPS) in err


def not_executable(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "bin" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 'cmake version 4.4.5'\n")
    path.chmod(0o644)
    return path


def test_a_locked_tool_that_is_not_executable_is_a_config_error_naming_it(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the pinned cmake of the venv without its +x: `dgr status` plans the build, which asks it its version
    cmake = not_executable(tmp_path, "cmake")
    monkeypatch.setattr("cmake.CMAKE_BIN_DIR", str(cmake.parent))
    code, err = run(capsys, "status")
    assert code == 8
    assert f"cannot run {cmake}: it is not executable" in err
    assert f"chmod +x {cmake}" in err and "pip install -e ." in err


@pytest.mark.parametrize("how", ["run", "watch", "spawn"])
def test_every_way_of_starting_a_program_refuses_one_that_is_not_executable(tmp_path: Path, how: str) -> None:
    program = not_executable(tmp_path, "tool")
    start: dict[str, Any] = {
        "run": lambda: proc.run([program]),
        "watch": lambda: proc.watch([program], idle_s=5),
        "spawn": lambda: proc.spawn([program]),
    }
    with pytest.raises(ConfigError, match=f"cannot run {program}: it is not executable") as info:
        start[how]()
    assert info.value.exit_code == 8 and f"chmod +x {program}" in (info.value.hint or "")


def test_status_with_a_broken_model_lock_is_the_locks_error(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = repo / "locks" / "model.toml"
    lock.write_text(lock.read_text().replace('default = "smollm2"', 'default = "nosuchmodel"'))
    code = main(["status"])
    captured = capsys.readouterr()
    assert code == 8
    assert "model.toml: invalid lock" in captured.err and "'nosuchmodel' is not a model" in captured.err
    assert "next:" not in captured.out


def fake_verify(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, groups: dict[str, GroupSpec]) -> str:
    """`dgr verify` without a llama.cpp build: a published build, models and toolchain stand-ins, and the
    groups `groups` in place of the real ones; returns the inputs digest of the fake build."""
    digest = "ab" * 32
    built = SimpleNamespace(path=tmp_path / "build", manifest=SimpleNamespace(inputs_digest=digest))
    monkeypatch.setattr("dgr.commands.verify.build.run", lambda ctx, request: built)
    monkeypatch.setattr("dgr.commands.verify.locks.load_models", lambda d: SimpleNamespace(all=lambda: ()))
    monkeypatch.setattr("dgr.commands.verify.model.fetch_all", lambda cache, models: ())
    monkeypatch.setattr("dgr.commands.verify.Env", lambda **fields: SimpleNamespace(**fields))
    monkeypatch.setattr(
        "dgr.commands.verify.Toolchain.find", lambda lock: SimpleNamespace(ctest=tmp_path / "ctest")
    )
    monkeypatch.setattr("dgr.commands.verify.load", lambda group: groups[group])
    return digest


def passing(group: str) -> GroupSpec:
    def verify(session: Session) -> list[Check]:
        return [Check(group=group, name="it-works", evidence="native test", passed=True)]  # type: ignore[arg-type]

    return GroupSpec(verify)


def raising(error: Exception) -> GroupSpec:
    def verify(session: Session) -> list[Check]:
        raise error

    return GroupSpec(verify)


@pytest.mark.parametrize(
    ("error", "code", "text"),
    [
        (ApplyError("patch 0002 does not apply", hint="run `dgr rebase-check`"), 5, "0002 does not apply"),
        (RuntimeError("a bug in a group"), 11, "RuntimeError: a bug in a group"),
    ],
)
def test_a_group_that_raises_keeps_the_report_of_the_groups_that_finished(
    repo: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
    code: int,
    text: str,
) -> None:
    groups = {"native": passing("native"), "series": raising(error), "archs": passing("archs")}
    digest = fake_verify(monkeypatch, tmp_path, groups)
    assert main(["verify", "--only", "native,series,archs"]) == code
    captured = capsys.readouterr()
    assert str(error) in captured.err  # the command ends with the group's error
    path = Context.discover().cache.root / reportstore.name(digest, ("native", "series", "archs"))
    report = json.loads(path.read_text())
    checks = [(c["group"], c["name"], c["passed"]) for c in report["checks"]]
    # native finished and is kept; series is a failed check carrying its error; archs, after it, did not run
    assert checks == [("native", "it-works", True), ("series", "ran", False)]
    assert text in report["checks"][1]["detail"]
    assert report["passed"] is False
    assert "series/ran" in captured.out  # the table of what ran is printed too


def test_a_verify_whose_groups_all_finish_writes_their_report_and_exits_0(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = fake_verify(monkeypatch, tmp_path, {"native": passing("native"), "series": passing("series")})
    assert main(["verify", "--only", "native,series"]) == 0
    path = Context.discover().cache.root / reportstore.name(digest, ("native", "series"))
    report = json.loads(path.read_text())
    assert [(c["group"], c["passed"]) for c in report["checks"]] == [("native", True), ("series", True)]
