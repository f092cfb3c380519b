"""A verify report and a bench result are current only for the harness that ran them: the worker's sources,
the Python of the checks (and what it imports) and the model lock, by path (dgr.builds.harness). Another
harness makes them stale: `dgr export-upstream`, `dgr pin` and `dgr status` say so, naming the file and what
changed. A bench that compared a model outside the model lock is refused too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from dgr.builds import harness, reportstore
from dgr.cli import main
from dgr.contracts import locks
from dgr.contracts.harness import Harness
from dgr.contracts.report import Report
from dgr.core.paths import Context, Repo
from dgr.errors import ConfigError, StaleError, VerifyError
from dgr.export import measured

from tests import helpers
from tests.export_upstream.support import bench_data, digest, export, write_bench, write_report
from tests.helpers import ROOT

# --------------------------------------------------------------------------- the harness


def test_the_harness_is_the_worker_the_checks_what_they_import_and_the_model_lock() -> None:
    files = {p.relative_to(ROOT).as_posix() for p in harness.files(Repo(ROOT))}
    for path in (
        "verify/worker/worker.cpp",
        "verify/worker/fuzz_decoders.cpp",
        "verify/worker/CMakeLists.txt",
        "builder/dgr/verify/checks/kv.py",
        "builder/dgr/verify/wire/bundle.py",
        "builder/dgr/verify/models/inventory.py",
        "builder/dgr/verify/bench/fuzz.py",
        "builder/dgr/commands/verify.py",
        "builder/dgr/commands/bench.py",
        # imported by the checks: followed through the imports
        "builder/dgr/contracts/report.py",
        "builder/dgr/contracts/archtable.py",
        "builder/dgr/core/proc.py",
        "builder/dgr/errors.py",
        "builder/dgr/__init__.py",
        "locks/model.toml",
    ):
        assert path in files, path
    # the series manager is not the harness: the build it makes is the inputs digest's
    for path in (
        "builder/dgr/builds/build.py",
        "builder/dgr/export/export.py",
        "builder/dgr/commands/build.py",
        "locks/toolchain.toml",
    ):
        assert path not in files, path


def test_the_harness_follows_a_new_import_of_the_checks(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "builder", tmp_path / "builder", ignore=shutil.ignore_patterns("__pycache__"))
    rel = "builder/dgr/maintain/lint.py"
    assert rel not in harness.current(Repo(tmp_path)).files
    kv = tmp_path / "builder/dgr/verify/checks/kv.py"
    kv.write_text("from dgr.maintain import lint\n" + kv.read_text())
    assert rel in harness.current(Repo(tmp_path)).files


def test_changes_name_every_changed_new_and_removed_file() -> None:
    then = Harness.of({"a.py": "1" * 64, "b.py": "2" * 64, "gone.cpp": "3" * 64})
    now = Harness.of({"a.py": "1" * 64, "b.py": "9" * 64, "new.py": "4" * 64})
    assert then.changes(then) == []
    assert then.changes(now) == ["changed: b.py", "new: new.py", "removed: gone.cpp"]
    many = Harness.of({f"f{i:02}.py": "5" * 64 for i in range(12)})
    assert Harness.of({}).changes(many) == [f"new: {', '.join(f'f{i:02}.py' for i in range(8))} and 4 more"]


def test_a_harness_whose_digest_is_not_its_files_is_refused() -> None:
    data = Harness.of({"a.py": "1" * 64}).to_json()
    assert Harness.from_json(data) == Harness.of({"a.py": "1" * 64})
    data["files"]["a.py"] = "2" * 64
    with pytest.raises(ConfigError, match="`digest` is not the digest of its `files`"):
        Harness.from_json(data, "report.harness")


def test_the_report_reads_back_its_harness() -> None:
    ran = Harness.of({"verify/worker/worker.cpp": "1" * 64})
    report = Report(inputs_digest="a" * 64, baseline_digest=None, groups=("kv",), checks=(), harness=ran)
    data = json.loads(json.dumps(report.to_json()))
    assert list(data)[-1] == "harness"
    assert Report.from_json(data) == report
    assert report.stale(ran) == []
    assert Report.from_json({k: v for k, v in data.items() if k != "harness"}).stale(ran) == [
        "it does not record the harness that ran its checks (a report of an older dgr)"
    ]


# --------------------------------------------------------------------------- the report and the bench


def test_a_report_of_another_model_lock_is_stale(repo: Path) -> None:
    path = helpers.write_report(digest())
    cache = Context.discover().cache
    assert reportstore.load_passing(cache, digest(), harness.current(Repo(repo))).report.passed
    with (repo / "locks" / "model.toml").open("a") as lock:
        lock.write("# edited\n")
    with pytest.raises(StaleError) as raised:
        reportstore.load_passing(cache, digest(), harness.current(Repo(repo)))
    assert raised.value.exit_code == VerifyError.exit_code == 9
    assert str(path) in raised.value.what and "is stale" in raised.value.what
    assert raised.value.detail == "- changed: locks/model.toml"


def test_a_report_without_a_harness_is_stale(repo: Path) -> None:
    path = helpers.write_report(digest())
    data = json.loads(path.read_text())
    del data["harness"]
    path.write_text(json.dumps(data))
    with pytest.raises(StaleError, match="is stale") as raised:
        reportstore.load_passing(Context.discover().cache, digest(), harness.current(Repo(repo)))
    assert "does not record the harness" in (raised.value.detail or "")


def load_bench(root: Path, data: dict[str, object]) -> measured.Measured:
    path = write_bench(data)
    return measured.load(path, digest(), harness.current(Repo(root)), locks.load_models(root / "locks"))


def test_a_bench_of_another_harness_or_none_is_stale(repo: Path) -> None:
    data = bench_data(digest())
    assert load_bench(repo, data).model.name == "smollm2"
    other = Harness.of({**harness.current(Repo(repo)).files, "verify/worker/worker.cpp": "0" * 64})
    with pytest.raises(StaleError, match=r"bench\.json is stale") as raised:
        load_bench(repo, {**data, "harness": other.to_json()})
    assert raised.value.detail == "- removed: verify/worker/worker.cpp"
    del data["harness"]
    with pytest.raises(StaleError, match=r"bench\.json is stale") as raised:
        load_bench(repo, data)
    assert "does not record the harness that measured" in (raised.value.detail or "")


def test_a_bench_of_a_model_outside_the_lock_is_refused(repo: Path) -> None:
    data = bench_data(digest())
    data["upstream_comparison"]["model"] = {"file": "other.gguf", "sha256": "7" * 64}
    with pytest.raises(VerifyError, match=r"compared other\.gguf with upstream, which is not a model") as e:
        load_bench(repo, data)
    assert e.value.actual == f"other.gguf (sha256 {'7' * 64})"
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in (e.value.expected or "")
    assert "dgr bench --rpc" in (e.value.hint or "")


# --------------------------------------------------------------------------- end to end


@pytest.fixture
def harnessed(packaged: Path) -> Path:
    """The fixture package in a repository that holds this repository's harness (worker and Python), with a
    report and a bench of that harness."""
    shutil.copytree(ROOT / "verify", packaged / "verify")
    shutil.copytree(ROOT / "builder", packaged / "builder", ignore=shutil.ignore_patterns("__pycache__"))
    write_report()
    write_bench()
    return packaged


def test_export_refuses_the_report_once_a_check_changes(
    harnessed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert export(tmp_path / "before") == 0
    kv = harnessed / "builder/dgr/verify/checks/kv.py"
    kv.write_text(kv.read_text() + "# a check changed after the report\n")
    out = tmp_path / "out"
    assert export(out) == 9
    err = capsys.readouterr().err
    report = Context.discover().cache.root / reportstore.name(digest())
    assert f"dgr: verify: the verify report {report} is stale" in err
    assert "- changed: builder/dgr/verify/checks/kv.py\n" in err
    assert "run `dgr verify`" in err and "Traceback" not in err
    assert not out.exists()
    assert main(["status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["verify"].startswith(f"stale: the verify report {report} is stale")
    assert status["bench"].startswith("stale: the bench result")
    assert "a passing verify report (`dgr verify`)" in status["export_needs"]


def test_export_refuses_the_bench_of_another_harness(
    harnessed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the report ran with the harness as it is now, the bench before the worker changed
    data = bench_data(digest())
    data["harness"]["files"]["verify/worker/worker.cpp"] = "0" * 64
    data["harness"] = Harness.of(data["harness"]["files"]).to_json()
    bench = write_bench(data)
    assert export(tmp_path / "out") == 9
    err = capsys.readouterr().err
    assert f"the bench result {bench} is stale" in err
    assert "- changed: verify/worker/worker.cpp\n" in err
    assert "dgr bench --rpc" in err
