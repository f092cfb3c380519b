"""The package configuration's helpers (globs, deny words, titles), the repository's own configuration, and
the other models' figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dgr.export import upstream_package
from dgr.series import patchfile

from tests.export_upstream.support import KL_STATS, bench_data, digest, export, write_bench
from tests.helpers import ROOT


def test_globs_do_not_cross_directories_unless_asked() -> None:
    assert upstream_package.glob_match("src/*.h", "src/llama-ext.h")
    assert not upstream_package.glob_match("src/*.h", "src/models/llama.h")
    assert upstream_package.glob_match("src/**/*.h", "src/models/llama.h")
    assert upstream_package.glob_match("src/**/*.h", "src/llama.h")
    assert upstream_package.glob_match("tests/**", "tests/a/b.cpp")
    assert not upstream_package.glob_match("README.md", "docs/README.md")


def test_deny_words_are_whole_words_in_any_case() -> None:
    pattern = upstream_package.deny_pattern(("dgr", "relay", "routing"))
    assert pattern.search("the DGR tool")
    assert pattern.search("dgr_cache")
    assert pattern.search("x-relay")
    assert not pattern.search("rerouting")
    assert not pattern.search("relays")
    assert not pattern.search("dgrx")


@pytest.mark.parametrize(
    ("title", "ok"),
    [
        ("llama : load and evaluate a range of layers", True),
        ("ggml, llama : a change", True),
        ("llama: no space", False),
        ("Llama : capital module", False),
        ("llama : " + "x" * 70, False),
    ],
)
def test_pull_request_titles_are_in_upstreams_form(title: str, ok: bool) -> None:
    assert (upstream_package.title_problems(title) == []) is ok


def test_the_repository_configuration_covers_the_series() -> None:
    from dgr.series import order as series

    names = series.load(ROOT / "series" / "series").names
    data = upstream_package.load_config(ROOT / "upstream-package" / "package.toml", names)
    assert [c.patch for c in data.concerns] == names
    assert [c.group for c in data.concerns] == [
        "graph",
        "ownership",
        "archs",
        "ownership",
        "archs",
        "boundary",
    ]
    assert data.deny_words == ("meshnet", "dgr", "routing", "billing", "relay")
    # one stacked pull request per patch, titled with the patch's subject
    assert [p.patches for p in data.pulls] == [(n,) for n in names]
    subjects = [patchfile.parse((ROOT / "patches" / n).read_text()).subject for n in names]
    assert [p.title for p in data.pulls] == subjects
    assert all(p.why for p in data.pulls)
    assert len({p.branch for p in data.pulls}) == len(names)
    # what the series no longer has, and how it is sent, is not asked
    assert data.questions
    for question in data.questions:
        assert "llama-ext.h" not in question and "llama_model_layer_" not in question
        assert "stacked" not in question


def test_the_other_models_perplexity_and_llama_bench_are_rendered_beside_the_default(
    packaged: Path, tmp_path: Path
) -> None:
    data = bench_data(digest())
    other = json.loads(json.dumps(data["upstream_comparison"]))
    other["model"]["file"] = "gemma-3-270m-q4_k_m.gguf"
    other["perplexity"]["patched"]["chunks"] = [13.4425, 13.1109]
    other["perplexity"]["kl"]["patched"] = KL_STATS | {"mean": 0.0003, "same_top_percent": 99.5}
    data["models"]["gemma3"]["upstream_comparison"] = other
    write_bench(data)
    out = tmp_path / "out"
    assert export(out) == 0
    body = (out / "PR-1.md").read_text()
    assert (
        "| `gemma-3-270m-q4_k_m.gguf` | this branch, no layer range | PPL = 13.1108 +/- 0.48251 | 2 |" in body
    )
    assert "| `gemma-3-270m-q4_k_m.gguf` | pp512 | 290.00 | 288.55 | 0.995 |" in body
    assert "`gemma-3-270m-q4_k_m.gguf` mean 0.000300 (master against its own: 0.000002)" in body
    assert "same top token 99.500 %: DIFFERENT." in body
