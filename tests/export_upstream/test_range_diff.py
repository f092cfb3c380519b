"""The package's range-diff.txt: `git range-diff` of the series on the previous pin (the git history of
locks/upstream.toml) against the series on the pin, or why there is none."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from dgr.export import upstream_package

from tests.export_upstream.support import (
    TEXT,
    bench_data,
    digest,
    export,
    refused,
    tree,
    write_bench,
    write_report,
)
from tests.helpers import ROOT, FakeUpstream, commit_all, format_patch, git, message, write_manifest


def test_without_a_previous_pin_the_file_says_so(packaged: Path, tmp_path: Path) -> None:
    assert export(tmp_path / "out") == 0
    files = tree(tmp_path / "out")
    text = files["range-diff.txt"].decode()
    assert text.startswith("# The series against the previous pin\n\nNo previous pin is recorded: ")
    assert "the repository is not a git checkout" in text
    assert (
        "| `range-diff.txt` | `git range-diff` of the series on the previous pin"
        in files["README.md"].decode()
    )


def move_pin(repo: Path, up: FakeUpstream, work: Path) -> None:
    """Pin `later`, with the fixture page reworded there (the other patches as they are)."""
    lock = repo / "locks" / "upstream.toml"
    date = git(up.path, "log", "-1", "--format=%cI", up.later)
    text = lock.read_text().replace(up.base, up.later).replace(up.base_tree, up.later_tree)
    lock.write_text(text.replace("commit_date = 2026-08-16T14:53:13+02:00", f"commit_date = {date}"))
    shutil.copytree(up.path, work)
    git(work, "checkout", "-q", "-B", "moved", up.later)
    (work / "docs" / "fixture.md").write_text("# fixture\n\nA page added by a patch, reworded.\n")
    reworded = message("docs : add a fixture page").replace("a realistic message", "a reworded message")
    page = format_patch(work, commit_all(work, reworded))
    (repo / "patches" / "docs-add-a-fixture-page.patch").write_text(page)
    write_manifest(repo)


def test_the_range_diff_against_the_previous_pin(
    packaged: Path, pr_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(packaged, "init", "-q", "-b", "main")
    commit_all(packaged, "the series on the first pin")
    move_pin(packaged, pr_upstream, tmp_path / "work")
    commit_all(packaged, "pin: later")
    (packaged / "docs.md").write_text("a later commit that leaves the lock alone\n")
    commit_all(packaged, "docs")
    write_report()
    # the perplexity text is docs/build.md of the pin, which `later` changed
    sha = {t: hashlib.sha256(t.encode()).hexdigest() for t in (TEXT, TEXT + "Then ninja.\n")}
    write_bench(json.loads(json.dumps(bench_data(digest())).replace(sha[TEXT], sha[TEXT + "Then ninja.\n"])))
    assert export(tmp_path / "out") == 0, capsys.readouterr().err
    text = tree(tmp_path / "out")["range-diff.txt"].decode()
    head, _, diff = text.partition(f"{pr_upstream.later[:12]}..")
    assert f"previous pin: {pr_upstream.base} (2026-08-16T14:53:13+02:00), 3 patch(es)\n" in head
    assert f"pin:          {pr_upstream.later} (" in head
    assert f"git range-diff --creation-factor=100 {pr_upstream.base[:12]}.." in head
    lines = diff.splitlines()
    [page] = [line for line in lines if line[:1].isdigit() and line.endswith("docs : add a fixture page")]
    assert page.startswith("1:") and " ! 1:" in page
    assert "    -+A page added by a patch.\n    ++A page added by a patch, reworded.\n" in diff
    [cann] = [line for line in lines if line.endswith("readme : name the CANN vendor")]
    assert " = 2:" in cann
    assert "    -    This change exists because the fixture needs a realistic message" in diff
    assert "Upstream-Status" not in text  # our trailers are dropped, as on the branches


def test_a_history_with_one_pin_only_says_so(packaged: Path, tmp_path: Path) -> None:
    git(packaged, "init", "-q", "-b", "main")
    commit_all(packaged, "the series on its only pin")
    assert export(tmp_path / "out") == 0
    text = tree(tmp_path / "out")["range-diff.txt"].decode()
    assert (
        "No previous pin is recorded: the history of locks/upstream.toml (1 commit(s)) holds no other pin"
        in text
    )


# `git range-diff` as the package quotes it: a commit pair, then the two patches' difference, indented by 4
# spaces and an outer mark; upstream's code around the series (context lines, removed lines, the function of
# a hunk header) holds placeholders of C++ (`<float>`, `<N>`) and upstream's own FIXME and words
RANGE_DIFF = """\
# The series against the previous pin

1:  1111111 = 1:  2222222 llama : record layer inputs
2:  3333333 ! 2:  4444444 llama : load and evaluate a range of layers
    @@ Metadata
      ## Commit message ##
         llama : load and evaluate a range of layers
     
    -    A range of layers loads.
    +    A range of layers loads, evaluates and caches.
    @@ src/llama-model.cpp: static std::vector<float> llama_copy<N>(const std::vector<float> & v) {
         // FIXME: upstream's note, kept as it is; MoE routing picks the experts
         const std::vector<float> & probs = model.routing_probs<N>();
    -+    std::vector<float> held(n_layer);  // TODO of the previous series, gone
    ++    std::vector<float> held(layer_end - layer_begin);
      ## tests/test-llama-archs.cpp ##
    +@@ tests/test-llama-archs.cpp: static int test_layer_ranges(const std::map<std::string, int> & archs) {
    ++    // every architecture of the arch list gets a row
    + }
3:  5555555 < -:  ------- llama : offload n_gpu_layers of a layer range
"""
WORDS = ("meshnet", "dgr", "routing", "billing", "relay")


def test_upstreams_code_quoted_by_the_range_diff_is_not_linted_as_prose() -> None:
    """The export of main exited 7 on 169 lines such as `range-diff.txt:5866: placeholder '<float>' outside
    the submitter's section`: upstream's code that the range-diff quotes is code, not prose of ours."""
    assert upstream_package.scan_range_diff("range-diff.txt", RANGE_DIFF, WORDS) == []
    # what the prose lint said of the same file
    prose = upstream_package.scan_package("range-diff.txt", RANGE_DIFF, WORDS)
    assert "range-diff.txt:11: placeholder '<float>' outside the submitter's section" in prose
    assert "range-diff.txt:11: placeholder '<N>' outside the submitter's section" in prose
    assert "range-diff.txt:12: placeholder 'FIXME' outside the submitter's section" in prose
    assert "range-diff.txt:13: word of ours 'routing'" in prose
    # the lines of the series: the header, the subjects, the message, the lines either series adds
    ours = dict(upstream_package.range_diff_lines(RANGE_DIFF))
    assert sorted(ours) == [1, 3, 4, 7, 9, 10, 14, 15, 18, 20]
    assert ours[15] == "    std::vector<float> held(layer_end - layer_begin);"
    assert ours[9] == "    A range of layers loads."


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        ("    ++    std::vector<float> held", "    ++    std::vector<float> relay_held", 15),
        (
            "    -+    std::vector<float> held(n_layer);",
            "    -+    std::vector<float> held(n_layer); // dgr",
            14,
        ),
        ("    ++    // every architecture", "    ++    // every dgr architecture", 18),
        ("    +    A range of layers loads,", "    +    A range of layers loads (meshnet),", 10),
        ("2:  4444444 llama : load and evaluate", "2:  4444444 llama : relay and evaluate", 4),
        ("3:  5555555 < -:  ------- llama : offload", "3:  5555555 < -:  ------- dgr : offload", 20),
    ],
)
def test_a_word_of_ours_in_a_line_of_the_series_is_refused(old: str, new: str, line: int) -> None:
    """The range-diff quotes both series: a word of ours in a line either series adds, in a message or in a
    subject is refused, with its line."""
    assert old in RANGE_DIFF
    [problem] = upstream_package.scan_range_diff("range-diff.txt", RANGE_DIFF.replace(old, new), WORDS)
    assert problem.startswith(f"range-diff.txt:{line}: word of ours ")
    assert "in a line of the series" in problem


def test_the_range_diffs_of_the_series_kept_in_docs_pass() -> None:
    """The range-diffs of the real series' earlier moves (docs/evidence), with the real words of ours: git's
    output on upstream's code, which quotes C++ templates, passes; the prose lint refused each of them."""
    from dgr.series import order

    names = order.load(ROOT / "series" / "series").names
    words = upstream_package.load_config(ROOT / "upstream-package" / "package.toml", names).deny_words
    files = sorted((ROOT / "docs" / "evidence").glob("range-diff*.txt"))
    assert len(files) >= 5
    for path in files:
        text = path.read_text()
        assert upstream_package.scan_range_diff(path.name, text, words) == [], path.name
        assert any("placeholder '<" in p for p in upstream_package.scan_package(path.name, text, words))
        subjects = [n for n, line in upstream_package.range_diff_lines(text) if re.match(r"^\d+: ", line)]
        assert subjects, path.name  # the commit pairs are read as ours


def test_a_word_of_ours_in_the_previous_series_is_refused_and_its_code_is_not(
    packaged: Path, pr_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The previous pin's series is in the range-diff only (the patch lint reads the current one): its
    placeholders of code pass, a word of ours in a line it added is refused."""
    page = packaged / "patches" / "docs-add-a-fixture-page.patch"
    lock = packaged / "locks" / "upstream.toml"
    original, pinned = page.read_text(), lock.read_text()
    for added, refusal in (
        ("+A page added by a patch: std::vector<float> v(<N>); // FIXME", None),
        ("+A page added by a relay patch.", "word of ours 'relay' in a line of the series"),
    ):
        shutil.rmtree(packaged / ".git", ignore_errors=True)
        lock.write_text(pinned)
        page.write_text(original.replace("+A page added by a patch.", added))
        write_manifest(packaged)
        git(packaged, "init", "-q", "-b", "main")
        commit_all(packaged, "the series on the first pin")
        move_pin(packaged, pr_upstream, tmp_path / f"work-{refusal is None}")
        commit_all(packaged, "pin: later")
        write_report()
        sha = {t: hashlib.sha256(t.encode()).hexdigest() for t in (TEXT, TEXT + "Then ninja.\n")}
        data = json.loads(json.dumps(bench_data(digest())).replace(sha[TEXT], sha[TEXT + "Then ninja.\n"]))
        write_bench(data)
        out = tmp_path / f"out-{refusal is None}"
        if refusal is None:
            assert export(out) == 0, capsys.readouterr().err
            assert f"    -{added}\n" in tree(out)["range-diff.txt"].decode()
        else:
            err = refused(out, 7, capsys, refusal)
            line = re.escape(added[1:])
            assert re.search(
                rf"range-diff\.txt:\d+: word of ours 'relay' in a line of the series: {line}$", err, re.M
            )
