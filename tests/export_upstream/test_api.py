"""`dgr export-upstream`: the API and the ABI a pull request changes, and its line counts, from the diff."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.export_upstream.support import config, export, refused, write_bench, write_package, write_report
from tests.helpers import FakeUpstream, commit_all, format_patch, git, message, write_manifest

HEADER = """#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

    struct llama_model_params {
        int32_t n_gpu_layers;

        bool vocab_only;
    };

    // the default parameters
    LLAMA_API struct llama_model_params llama_model_default_params(void);

#ifdef __cplusplus
}
#endif
"""


def api_series(upstream: FakeUpstream, work: Path) -> dict[str, str]:
    """Two patches: one adds a public header, the next adds fields, functions, an enum and a test."""
    git(work.parent, "clone", "-q", str(upstream.path), str(work))
    git(work, "checkout", "-q", "-B", "series", upstream.base)
    (work / "include").mkdir()
    (work / "include" / "llama.h").write_text(HEADER)
    first = commit_all(work, message("llama : add the public header"))
    header = work / "include" / "llama.h"
    header.write_text(
        header.read_text().replace(
            "        int32_t n_gpu_layers;\n",
            "        int32_t n_gpu_layers;\n\n        // first layer to load\n        int32_t layer_begin;\n"
            "        int32_t layer_end;\n",
        )
    )
    (work / "src").mkdir()
    (work / "src" / "llama-ext.h").write_text(
        "#pragma once\n\n"
        "enum llama_range_status {\n    LLAMA_RANGE_OK = 0,\n    LLAMA_RANGE_INVALID = -1,\n};\n\n"
        "// first layer held by the model\n"
        "LLAMA_API int32_t llama_model_layer_begin(\n        const struct llama_model * model,\n"
        "                         int32_t   flags);\n"
    )
    (work / "src" / "internal.h").write_text("LLAMA_API int32_t llama_internal_helper(void);\n")
    (work / "src" / "llama-model.cpp").write_text(
        "void check(const char * name) {\n"
        '    throw std::runtime_error(format("the architecture %s does not support layer ranges", name));\n'
        "}\n"
    )
    (work / "src" / "models").mkdir()
    for arch in ("llama", "gemma3", "qwen2"):
        (work / "src" / "models" / f"{arch}.cpp").write_text(
            "for (int il = il_begin; il < il_end; ++il) {\n}\n"
        )
    (work / "tests" / "test-api.cpp").write_text("int main() { return 0; }\n")
    (work / "tests" / "test-llama-archs.cpp").write_text("int main() {\n    return 0;\n}\n")
    cmake = work / "tests" / "CMakeLists.txt"
    cmake.write_text(
        cmake.read_text() + "llama_build_and_test(test-api.cpp)\n"
        "llama_build_and_test(test-llama-archs.cpp NAME test-llama-archs-layer-ranges "
        "ARGS --layer-ranges -s 42)\n"
    )
    second = commit_all(work, message("llama : add a layer range"))
    return {
        "add-the-public-header.patch": format_patch(work, first),
        "add-a-layer-range.patch": format_patch(work, second),
    }


API_TESTS = ("test-api", "test-llama-archs-layer-ranges")


def install_api_series(
    repo: Path, upstream: FakeUpstream, work: Path, pulls: list[dict[str, Any]] | None = None
) -> None:
    """Replace the repository's series with the two patches of api_series, and their concerns (one pull
    request unless `pulls`)."""
    patches = api_series(upstream, work)
    shutil.rmtree(repo / "patches")
    (repo / "patches").mkdir()
    for name, text in patches.items():
        (repo / "patches" / name).write_text(text)
    (repo / "series" / "series").write_text("".join(f"{name}\n" for name in patches))
    write_manifest(repo)
    concerns = {
        "add-the-public-header.patch": ("ownership", ["include/llama.h"]),
        "add-a-layer-range.patch": (
            "boundary",
            ["include/*.h", "src/*.h", "src/llama-model.cpp", "src/models/*.cpp", "tests/**"],
        ),
    }
    data = config(
        concerns,
        pulls=pulls
        if pulls is not None
        else [{"branch": "api", "title": "llama : an API", "patches": list(concerns)}],
    )
    data["concerns"][1]["notes"] = ["A zero-initialised struct loads every layer."]
    write_package(repo, data)


def test_the_api_changes_and_the_abi_come_from_the_diff(
    repo: Path, pr_upstream: FakeUpstream, tmp_path: Path
) -> None:
    install_api_series(repo, pr_upstream, tmp_path / "work")
    write_report(native=API_TESTS)
    write_bench()
    out = tmp_path / "out"
    assert export(out) == 0
    body = (out / "PR-1.md").read_text()
    api = body.split("### API changes", 1)[1].split("### Files", 1)[0]
    first, second = api.split("(llama : add a layer range)", 1)
    assert "- struct `llama_model_params`" in first
    assert "- function `llama_model_default_params()`" in first
    assert "- fields added to struct `llama_model_params`" in second
    assert "```c\n// first layer to load\nint32_t layer_begin;\nint32_t layer_end;\n```" in second
    assert "- enum `llama_range_status`" in second
    assert (
        "// first layer held by the model\nLLAMA_API int32_t llama_model_layer_begin(\n"
        "        const struct llama_model * model,\n                         int32_t   flags);"
    ) in second
    assert "llama_internal_helper" not in body  # src/internal.h is not a public header
    assert (
        "- `struct llama_model_params` (include/llama.h): 2 fields added (`layer_begin`, `layer_end`), "
        "before `bool vocab_only;`: its size and the offsets of the members after them change"
    ) in api
    assert "- A zero-initialised struct loads every layer." in api
    assert "| `test-api` | `test-api` | added (commit 2) |" in body
    assert "| `test-llama-archs-layer-ranges` | `test-llama-archs` | added (commit 2) |" in body
    assert (
        "ctest --test-dir build -R '^(test-api|test-llama-archs-layer-ranges)$' --output-on-failure" in body
    )
    # the series' native tests, as the prefix of the series that ends with this pull request ran them
    assert "`test-api` passed, `test-llama-archs-layer-ranges` passed." in body
    # the architecture table, with the refusal message copied from the diff
    archs = body.split("### Architectures", 1)[1].split("### Perplexity", 1)[0]
    assert (
        '| refused at load, not opted in, with the standard message "the architecture rwkv7 does not support '
        'layer ranges" | 1 | 1 |'
    ) in archs
    assert "`boundary/split-logits/real` | max_abs_diff=0; bit_exact=true |" in body


def test_stacked_pull_requests_count_core_test_and_mechanical_lines_from_the_diff(
    repo: Path, pr_upstream: FakeUpstream, tmp_path: Path
) -> None:
    pulls = [
        {
            "branch": "header",
            "title": "llama : add the public header",
            "patches": ["add-the-public-header.patch"],
        },
        {
            "branch": "layer-range",
            "title": "llama : add a layer range",
            "patches": ["add-a-layer-range.patch"],
        },
    ]
    install_api_series(repo, pr_upstream, tmp_path / "work", pulls)
    write_report(native=API_TESTS)
    write_bench()
    out = tmp_path / "out"
    assert export(out) == 0
    header = len(HEADER.splitlines())
    first, second = (out / "PR-1.md").read_text(), (out / "PR-2.md").read_text()
    assert f"| 1 | llama : add the public header | 1 | +{header} -0 | {header} | 0 | 0 |" in first
    # include/llama.h 4, src/llama-ext.h 11, src/internal.h 1, src/llama-model.cpp 3; tests/ 6; src/models/ 6
    assert "| 1 | llama : add a layer range | 10 | +31 -0 | 19 | 6 | 6 |" in second
    readme = (out / "README.md").read_text()
    assert f"| 1 | `llama : add the public header` | `header` | 1 | {header} | 0 | 0 |" in readme
    assert "| 2 | `llama : add a layer range` | `layer-range` on `header` | 10 | 19 | 6 | 6 |" in readme
    discussion = (out / "DISCUSSION.md").read_text()
    assert "2 stacked pull requests, each on top of the one before" in discussion
    assert (
        "2. `llama : add a layer range`: 10 files, 19 hand-written core lines, 6 hand-written test lines, "
        "6 mechanical lines."
    ) in discussion
    # the first pull request has no test: no ctest, no architecture table; its API is driven by the
    # real-model checks, which ran on the whole stack
    assert "This pull request adds no test." in first
    assert "### Architectures" not in first and "ctest --test-dir" not in first
    assert (
        "(not part of this pull request), on the branch of pull request 2 (`layer-range`)</summary>" in first
    )
    assert "| `test-llama-archs-layer-ranges` | `test-llama-archs` | added (commit 1) |" in second
    assert "### Architectures" in second and "`boundary/split-logits/real`" in second
    assert "Measured on the branch of pull request" not in second


def test_a_native_test_missing_from_the_report_is_refused(
    repo: Path, pr_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_api_series(repo, pr_upstream, tmp_path / "work")
    write_report()
    write_bench()
    refused(
        tmp_path / "out",
        9,
        capsys,
        "adds the native test(s) test-api, test-llama-archs-layer-ranges, which the verify report lacks",
    )
