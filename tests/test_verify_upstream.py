"""The `upstream` group: upstream's own CTest suite on the baseline and on the patched build, compared test by
test; a test failing on both is a failure on upstream too (counted apart: no pass, no failure of the series).
CTest is faked here (a script writing a JUnit report); the real run is `dgr verify --only upstream`."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from dgr.builds import artifacts, buildplan
from dgr.builds.cmake import CMakeProject
from dgr.contracts.expectations import ArchsFloor, Expectations, UpstreamFailure
from dgr.contracts.report import Check, Counts, Report
from dgr.core.paths import Context
from dgr.errors import BuildError, ConfigError, VerifyError
from dgr.verify.checks import upstream
from dgr.verify.checks.native import CaseResult, parse_junit
from dgr.verify.checks.progress import Progress
from dgr.verify.checks.report import junit_xml, table
from dgr.verify.checks.session import Session
from dgr.verify.models.env import Env, RealModel
from dgr.verify.models.inventory import Inventory

from tests.helpers import fake_toolchain


def case(name: str, passed: bool, status: str = "run", output: str = "") -> CaseResult:
    return CaseResult(name=name, passed=passed, status=status, time_s=0.1, output=output)


BASELINE = {
    "test-sampling": case("test-sampling", True),
    "test-regressed": case("test-regressed", True),
    "test-arg-parser": case("test-arg-parser", False, output="could not download"),
    "test-fixed": case("test-fixed", False),
    "test-dropped": case("test-dropped", True),
    "test-dropped-broken": case("test-dropped-broken", False),
}
PATCHED = {
    "test-sampling": case("test-sampling", True),
    "test-regressed": case("test-regressed", False, output="assertion failed at llama.cpp:12"),
    "test-arg-parser": case("test-arg-parser", False, output="could not download"),
    "test-fixed": case("test-fixed", True),
    "test-added": case("test-added", True),
    "test-added-broken": case("test-added-broken", False, status="notrun"),
}


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


WHY = "downloads from ggml.ai: the network is unreachable here"
DECLARED = Expectations(
    archs=ArchsFloor(certified_at_least=1), upstream_failures={"test-arg-parser": UpstreamFailure(why=WHY)}
)


def test_compare_judges_each_test_by_both_sides() -> None:
    got = by_name(upstream.compare("main", "native test", BASELINE, PATCHED, DECLARED.why_upstream_fails))
    assert sorted(got) == sorted(f"main/{n}" for n in BASELINE.keys() | PATCHED.keys())
    outcome = {name: c.outcome for name, c in got.items()}
    assert outcome == {
        "main/test-sampling": "PASS",
        "main/test-regressed": "FAIL",
        "main/test-arg-parser": "FAILS UPSTREAM TOO",
        "main/test-fixed": "PASS",
        "main/test-dropped": "FAIL",
        # fails on the baseline, the patched build lacks it, and the series does not declare it
        "main/test-dropped-broken": "FAIL",
        "main/test-added": "PASS",
        "main/test-added-broken": "FAIL",
    }
    figures = {name: (c.figures["baseline"], c.figures["patched"]) for name, c in got.items()}
    assert figures["main/test-regressed"] == ("pass", "fail")
    assert figures["main/test-dropped"] == ("pass", "absent")
    assert figures["main/test-added-broken"] == ("absent", "notrun")
    assert "assertion failed at llama.cpp:12" in got["main/test-regressed"].detail
    assert "could not download" in got["main/test-arg-parser"].detail
    assert f"declared in series/verify.toml: {WHY}" in got["main/test-arg-parser"].detail
    undeclared = "series/verify.toml does not declare that it may fail here: add [upstream_failures.{}]"
    assert undeclared.format("test-dropped-broken") in got["main/test-dropped-broken"].detail
    assert "the series lost it" in got["main/test-dropped"].detail
    assert "only the patched build" in got["main/test-added"].detail


def declares(*tests: str) -> Callable[[str], str | None]:
    return lambda test: "it cannot pass here" if test in tests else None


def test_a_failure_on_upstream_too_is_counted_apart_and_fails_no_report() -> None:
    t, u = {"t": case("t", False)}, {"u": case("u", True)}
    checks = upstream.compare("main", "native test", t, t, declares("t"))
    checks += upstream.compare("main", "native test", u, u, declares("t"))
    assert Counts.of(checks) == Counts(passed=1, device_failures=0, failed=0, upstream_failures=1)
    assert Counts.of(checks).text() == "1 passed, 1 failing on upstream too, 0 failed"
    assert table(checks).splitlines()[-1] == "1 passed, 1 failing on upstream too, 0 failed"
    report = Report(
        inputs_digest="d" * 64, baseline_digest="b" * 64, groups=("upstream",), checks=tuple(checks)
    )
    assert report.passed and not checks[0].passed
    assert Report.from_json(report.to_json()).checks[0].upstream_failure
    suite = ET.fromstring(junit_xml(checks))
    assert (suite.get("failures"), suite.get("errors")) == ("0", "0")
    skipped = next(c for c in suite.iter("testcase") if c.get("name") == "main/t").find("skipped")
    assert skipped is not None
    assert Progress(("upstream",)).line("upstream", checks, 1.0) == (
        "[2] PASS upstream (1 passed, 1 failing on upstream too, 0 failed, 1.0 s)"
    )
    # a regression beside it still fails the run
    regressed = upstream.compare(
        "main", "native test", {"r": case("r", True)}, {"r": case("r", False)}, declares()
    )
    assert not Report(
        inputs_digest="d" * 64, baseline_digest=None, groups=("upstream",), checks=(*checks, *regressed)
    ).passed


def test_a_test_failing_on_both_builds_that_the_series_does_not_declare_fails() -> None:
    both = {"t": case("t", False, output="no network")}
    [undeclared] = upstream.compare("main", "native test", both, both, declares("other"))
    assert undeclared.failed and not undeclared.upstream_failure and undeclared.outcome == "FAIL"
    assert "fails on the unpatched baseline (fail); it fails on the patched build too;" in undeclared.detail
    assert "no network" in undeclared.detail


def test_a_group_of_failures_on_upstream_too_only_is_no_pass() -> None:
    both = {"t": case("t", False), "v": case("v", False)}
    checks = upstream.compare("main", "native test", both, both, declares("t", "v"))
    assert Counts.of(checks) == Counts(passed=0, device_failures=0, failed=0, upstream_failures=2)
    report = Report(inputs_digest="d" * 64, baseline_digest=None, groups=("upstream",), checks=tuple(checks))
    assert not report.passed
    assert report.problems("d" * 64, ("upstream",)) == [
        "no check passed in the group(s) upstream (0 passed, 2 failing on upstream too, 0 failed)"
    ]
    assert Progress(("upstream",)).line("upstream", checks, 1.0) == (
        "[2] FAIL upstream (0 passed, 2 failing on upstream too, 0 failed, 1.0 s)"
    )


def test_a_failure_on_upstream_too_is_neither_a_pass_nor_a_device_failure() -> None:
    for passed, device in ((True, False), (False, True)):
        with pytest.raises(ConfigError, match="neither a pass nor a device failure"):
            Check(
                group="upstream",
                name="x",
                evidence="native test",
                passed=passed,
                device_failure=device,
                upstream_failure=True,
            )


def test_junit_cases_pass_only_when_run_without_failure() -> None:
    root = ET.fromstring(
        textwrap.dedent(
            """\
            <testsuite>
              <testcase name="ok" status="run" time="0.5"><system-out>fine</system-out></testcase>
              <testcase name="bad" status="fail" time="1"><failure message="Failed"/></testcase>
              <testcase name="fixture" status="notrun" time="0"/>
            </testsuite>"""
        )
    )
    got = {c.name: (c.passed, c.status) for c in parse_junit(root)}
    assert got == {"ok": (True, "run"), "bad": (False, "fail"), "fixture": (False, "notrun")}


SHOW_ONLY = [
    {"name": "test-sampling", "command": ["/w/build/bin/test-sampling"]},
    {
        "name": "test-download-model",
        "command": ["/venv/cmake", "-DDEST=/w/build/tinyllamas/stories15M-q4_0.gguf", "-DNAME=x", "-P", "d"],
    },
    {"name": "test-tokenizer-0-gpt-2", "command": ["/w/build/bin/test-tokenizer-0", "/w/src/models/g.gguf"]},
    {"name": "test-jinja-py", "command": ["/usr/bin/python3", "x.py"]},
]


def test_the_download_destination_is_read_from_the_fixture() -> None:
    assert upstream.download_destination(SHOW_ONLY) == Path("/w/build/tinyllamas/stories15M-q4_0.gguf")
    assert upstream.download_destination(SHOW_ONLY[:1]) is None


def test_the_targets_of_upstream_tests_are_the_executables_in_bin(tmp_path: Path) -> None:
    build = tmp_path / "build"
    (build / "tests").mkdir(parents=True)
    (build / "CTestTestfile.cmake").write_text('subdirs("tests")\n')
    (build / "tests" / "CTestTestfile.cmake").write_text(
        f'add_test("test-tokenizer-0-gpt-2" "{build}/bin/test-tokenizer-0" "/w/src/models/g.gguf")\n'
        'set_tests_properties("test-tokenizer-0-gpt-2" PROPERTIES  LABELS "main")\n'
        f'add_test("test-sampling" "{build}/bin/test-sampling")\n'
        f'add_test("test-download-model" "/venv/cmake" "-DDEST={build}/m.gguf")\n'
        f'add_test("test-jinja-py" "{build}/bin/test-jinja" "-py")\n'
    )
    assert artifacts.upstream_test_targets(build) == ["test-jinja", "test-sampling", "test-tokenizer-0"]


def test_upstream_tests_that_do_not_build_are_named_and_never_run_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = CMakeProject(fake_toolchain(), tmp_path / "src", tmp_path / "build", "Release", {})
    (tmp_path / "build" / "bin").mkdir(parents=True)
    for exe in ("test-chat", "test-sampling"):
        (tmp_path / "build" / "bin" / exe).write_text("an earlier build's executable")
    streamed: list[list[str]] = []

    def ninja_fails(cmd: list[object], **kwargs: object) -> list[str]:
        streamed.append([str(c) for c in cmd])
        raise BuildError("ninja -k 0 failed")

    def dry_run(cmd: list[object], **kwargs: object) -> subprocess.CompletedProcess[str]:
        dirty = str(cmd[-1]) == "test-chat"
        return subprocess.CompletedProcess(
            cmd, 0, "[1/2] CXX test-chat.o" if dirty else "ninja: no work to do."
        )

    monkeypatch.setattr("dgr.core.proc.stream", ninja_fails)
    monkeypatch.setattr("dgr.core.proc.run", dry_run)
    assert project.build_what_builds(["test-chat", "test-sampling"], 1) == ["test-chat"]
    assert streamed == [
        ["ninja", "-C", str(tmp_path / "build"), "-k", "0", "-j", "1", "test-chat", "test-sampling"]
    ]
    assert not (tmp_path / "build" / "bin" / "test-chat").exists()
    assert (tmp_path / "build" / "bin" / "test-sampling").exists()
    # no target: no ninja at all (ninja with no target builds everything)
    assert project.build_what_builds([]) == [] and len(streamed) == 1


def test_the_digest_covers_the_upstream_tests(repo: Path) -> None:
    ctx = Context.discover()
    with_tests = buildplan.plan(ctx, buildplan.Request(upstream_only=True, upstream_tests=True))
    without = buildplan.plan(ctx, buildplan.Request(upstream_only=True))
    assert with_tests.upstream_tests and not without.upstream_tests
    assert with_tests.digest != without.digest
    # a prefix of the series is built for its own native tests only
    assert not buildplan.plan(ctx, buildplan.Request(prefix=1, upstream_tests=True)).upstream_tests


FAKE_CTEST = """\
#!{python}
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
build = Path(args[args.index("--test-dir") + 1]) if "--test-dir" in args else Path.cwd()
# cases.json: the cases of each label ({{label: {{test: status}}}}); else one passing test per label
def cases_of(label):
    if (build / "cases.json").exists():
        return json.loads((build / "cases.json").read_text()).get(label, {{}})
    return {{"t-" + label: "run"}}
if "--show-only=json-v1" in args:
    # with -L: the tests of that label; without: the download fixture and the test that sets up `models`,
    # which test-s requires
    names = list(cases_of(args[args.index("-L") + 1])) if "-L" in args else []
    tests = [{{"name": n}} for n in names] or [
        {{"name": "test-download-model",
          "command": ["cmake", "-DDEST=" + str(build / "tinyllamas" / "m.gguf")],
          "properties": [{{"name": "FIXTURES_SETUP", "value": ["download"]}}]}},
        {{"name": "test-setup", "properties": [{{"name": "FIXTURES_SETUP", "value": ["models"]}}]}},
        {{"name": "test-s",
          "properties": [{{"name": "FIXTURES_REQUIRED", "value": ["models", "download"]}}]}},
    ]
    print(json.dumps({{"tests": tests}}))
    sys.exit(0)
with open(build / "calls.jsonl", "a") as log:
    log.write(json.dumps({{"args": args, "model": os.environ.get("LLAMACPP_TEST_MODELFILE"),
        "dest": os.path.realpath(build / "tinyllamas" / "m.gguf")}}) + "\\n")
label = args[args.index("-L") + 1]
junit = args[args.index("--output-junit") + 1]
cases = cases_of(label)
if "-R" in args:
    import re
    cases = {{n: s for n, s in cases.items() if re.search(args[args.index("-R") + 1], n)}}
Path(junit).write_text("<testsuite>" + "".join(
    f'<testcase name="{{n}}" status="{{s}}" time="1"><system-out>{{n}} said {{s}}</system-out></testcase>'
    for n, s in cases.items()) + "</testsuite>")
sys.exit(0)
"""


def fake_ctest(tmp_path: Path) -> Path:
    path = tmp_path / "ctest"
    path.write_text(FAKE_CTEST.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_run_side_runs_each_suite_as_ci_does_with_the_locked_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLAMACPP_TEST_MODELFILE", raising=False)
    build = tmp_path / "build"
    build.mkdir()
    (build / "CTestTestfile.cmake").write_text("")
    smol, gemma = tmp_path / "smol.gguf", tmp_path / "gemma.gguf"
    smol.write_bytes(b"GGUF")
    gemma.write_bytes(b"GGUF")
    suites = [
        upstream.Suite("main", upstream.MAIN, "native test", smol),
        upstream.Suite("model@gemma3", upstream.MODEL, "real model", gemma, model_file=True),
    ]
    got = upstream.run_side(fake_ctest(tmp_path), build, suites)
    assert {s: list(cases) for s, cases in got.items()} == {"main": ["t-main"], "model@gemma3": ["t-model"]}
    calls = [json.loads(line) for line in (build / "calls.jsonl").read_text().splitlines()]
    main, model = calls
    assert main["args"][-6:] == ["-L", "main", "-E", "test-opt", "-FS", "test-download-model"]
    assert model["args"][-4:] == ["-L", "model", "-FS", "test-download-model"]
    # the download fixture's model is the locked one of each suite; LLAMACPP_TEST_MODELFILE is set for
    # `-L model` only, as ci/run.sh sets it
    assert (main["model"], main["dest"]) == (None, os.path.realpath(smol))
    assert (model["model"], model["dest"]) == (str(gemma), os.path.realpath(gemma))


def test_run_side_refuses_a_build_dir_without_tests(tmp_path: Path) -> None:
    with pytest.raises(VerifyError, match=r"no CTestTestfile\.cmake"):
        upstream.run_side(fake_ctest(tmp_path), tmp_path, [])


def test_the_group_compares_the_baseline_with_the_patched_build_per_suite(tmp_path: Path) -> None:
    dirs = {}
    cases = {
        True: {
            "main": {"test-a": "run", "test-b": "run", "test-c": "fail", "test-d": "fail"},
            "model": {"test-m": "run"},
        },
        False: {"main": {"test-a": "run", "test-b": "fail", "test-c": "fail", "test-d": "fail"}, "model": {}},
    }
    for baseline in (True, False):
        dirs[baseline] = tmp_path / ("baseline" if baseline else "patched")
        dirs[baseline].mkdir()
        (dirs[baseline] / "CTestTestfile.cmake").write_text("")
        (dirs[baseline] / "cases.json").write_text(json.dumps(cases[baseline]))
    inv = Inventory(tmp_path / "m.gguf", "llama", 2, 8, {"blk.0.attn_q.weight": 64})
    inv.path.write_bytes(b"GGUF")
    env = Env(worker=tmp_path / "w", models=(RealModel("smollm2", inv.path, inv),), fixtures=tmp_path)
    asked: list[tuple[bool, tuple[str, ...] | None]] = []

    def work_build(baseline: bool, only: tuple[str, ...] | None = None) -> Path:
        asked.append((baseline, only))
        return dirs[baseline]

    expected = Expectations(
        archs=ArchsFloor(certified_at_least=1),
        upstream_failures={"test-c": UpstreamFailure(why="no network")},
    )
    # the patched build registers a test of the series' own (the native group runs it) and one of upstream's
    # again (as layer-range-mmap.patch registers test-generate-models)
    native_tests = ("test-own", "test-b")
    patched = SimpleNamespace(manifest=SimpleNamespace(build=SimpleNamespace(native_tests=native_tests)))
    run = Session(
        env,
        fake_ctest(tmp_path),
        patched,
        None,
        lambda k: None,
        work_build=work_build,
        expected=lambda: expected,
    )  # type: ignore[arg-type]
    checks = upstream.GROUP.verify(run)
    got = {c.name: c.outcome for c in checks}
    # the patched build with every test, the baseline configured, then built for the tests that do not pass
    # on the patched build only (test-a passes there: the baseline neither builds nor runs it)
    assert asked == [(False, None), (True, ()), (True, ("test-b", "test-c", "test-d", "test-m"))]
    calls = [json.loads(line) for line in (dirs[True] / "calls.jsonl").read_text().splitlines()]
    assert [c["args"][c["args"].index("-R") + 1] for c in calls] == [
        "^(test\\-b|test\\-c|test\\-d)$",
        "^(test\\-m)$",
    ]
    # the patched build runs each suite less the test only the series registers (not test-b, which the
    # baseline has too); the baseline runs the suites as ci/run.sh does
    main, model = (json.loads(line) for line in (dirs[False] / "calls.jsonl").read_text().splitlines())
    assert main["args"][main["args"].index("-E") + 1] == "test-opt|^(test\\-own)$"
    assert model["args"][model["args"].index("-E") + 1] == "^(test\\-own)$"
    assert all(c["args"][c["args"].index("-E") + 1] == "test-opt" for c in calls if "-E" in c["args"])
    figures = {c.name: c.figures for c in checks}
    assert figures["main/test-a"] == {"baseline": upstream.NOT_RUN, "patched": "pass"}
    assert figures["main/test-b"] == {"baseline": "pass", "patched": "fail"}
    assert got == {
        "main/test-a": "PASS",
        "main/test-b": "FAIL",
        # both fail on both builds: the one the series declares is counted apart, the other one fails
        "main/test-c": "FAILS UPSTREAM TOO",
        "main/test-d": "FAIL",
        # the patched build ran no test of `-L model`: a failed check, not a silent pass
        "model@smollm2/ran": "FAIL",
    }
    assert upstream.GROUP.needs_baseline


def test_the_baseline_builds_the_setups_of_the_fixtures_its_tests_require_but_the_download(
    tmp_path: Path,
) -> None:
    registered = upstream._registered(fake_ctest(tmp_path), tmp_path)
    assert upstream.with_setups(registered, {"test-s"}) == {"test-s", "test-setup"}
    assert upstream.with_setups(registered, {"test-x"}) == {"test-x"}


def test_a_suite_leaves_out_the_tests_only_the_series_registers() -> None:
    """The tests only the series registers (the native group runs them) are excluded with -E, beside
    test-opt as ci/run.sh excludes it, or with an -E of their own; none: ci/run.sh's line."""
    assert upstream.without(upstream.MAIN, ()) == upstream.MAIN
    assert upstream.without(upstream.MODEL, ("test-x",)) == (*upstream.MODEL, "-E", "^(test\\-x)$")
    args = upstream.without(upstream.MAIN, ("test-llama-archs-layer-ranges", "test-llama-archs-layer-inputs"))
    assert args[:-1] == upstream.MAIN[:-1]
    exclude = re.compile(args[-1])
    names = ["test-opt", "test-llama-archs-layer-inputs", "test-llama-archs-layer-ranges"]
    assert all(exclude.search(n) for n in names)
    kept = ["test-llama-archs", "test-generate-models", "test-llama-archs-layer-ranges-x", "test-gguf"]
    assert not any(exclude.search(n) for n in kept)
