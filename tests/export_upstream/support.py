"""The fixture package of `dgr export-upstream`: the fake upstream with upstream's own files, the package
configuration, fake verify reports and bench results, and the helpers that export and inspect."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from dgr.builds import buildplan
from dgr.cli import main
from dgr.contracts.bench import BENCH_FORMAT
from dgr.contracts.report import GROUPS
from dgr.core.paths import Context
from dgr.export import measured
from dgr.verify.models import inventory

from tests import helpers
from tests.helpers import README, ROOT, FakeUpstream, checked_out_base, commit_all, git, write_manifest

# upstream's .github/pull_request_template.md at 0c1e570, as it is
TEMPLATE = (helpers.FIXTURES / "pull_request_template.md").read_text()
REQUIREMENTS = TEMPLATE[TEMPLATE.index("## Requirements") :].rstrip("\n")
CI_README = "# CI\n\n```bash\nmkdir tmp\n\n# CPU-only build\nbash ./ci/run.sh ./tmp/results ./tmp/mnt\n```\n"
TEXT = "# build\n\nRun cmake.\n"
PATCHES = [
    "docs-add-a-fixture-page.patch",
    "readme-name-the-cann-vendor.patch",
    "readme-mark-hexagon-experimental.patch",
]
FIXTURE_CONCERNS = {
    "docs-add-a-fixture-page.patch": ("ownership", ["docs/*.md"]),
    "readme-name-the-cann-vendor.patch": ("boundary", ["README.md"]),
    "readme-mark-hexagon-experimental.patch": ("kv", ["README.md"]),
}
QUESTIONS = ["Would you take the fixture as one pull request?"]
UPSTREAM_IDENTIFIER = "routing_block_count"
UPSTREAM_KEY_FILE = "gguf-py/gguf/constants.py"
UPSTREAM_ERROR = (
    "failed to create llama model: llama_model_load: error loading model: "
    f"error loading model hyperparameters: key not found in model: clef.decision.{UPSTREAM_IDENTIFIER}"
)
"""The error of upstream's loader for a variant its random-model generator cannot build (clef at b11434),
which the package's graph table quotes: it holds a word of ours inside upstream's own GGUF key."""
FILES = [
    "DISCUSSION.md",
    "MANIFEST.sha256",
    "PR-1.bundle",
    "PR-1.md",
    "README.md",
    "REPRODUCE.md",
    "range-diff.txt",
]


def make_pr_upstream(path: Path) -> FakeUpstream:
    """A fake llama.cpp with the files of upstream the package reads: `base` is the pin."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "master")
    files = {
        "README.md": README,
        "docs/build.md": TEXT,
        "tests/CMakeLists.txt": "llama_build_and_test(test-sampling.cpp)\n",
        ".github/pull_request_template.md": TEMPLATE,
        "CONTRIBUTING.md": "# Contributors\n",
        "AGENTS.md": "# Instructions for AI agents\n",
        "ci/README.md": CI_README,
        "ci/run.sh": "#!/bin/bash\n",
        # upstream's own identifier that holds a word of ours (its GGUF key, as llama.cpp names it)
        UPSTREAM_KEY_FILE: f'KEY_DECISION_ROUTING_BLOCK_COUNT = "{{arch}}.decision.{UPSTREAM_IDENTIFIER}"\n',
    }
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    base = commit_all(path, "upstream: base", date="1786884793 +0200")
    (path / "docs" / "build.md").write_text(TEXT + "Then ninja.\n")
    later = commit_all(path, "upstream: later", date="1790820708 +0900")
    return checked_out_base(path, base, later)


def config(
    concerns: dict[str, tuple[str, list[str]]] = FIXTURE_CONCERNS,
    pulls: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "deny_words": ["meshnet", "dgr", "routing", "billing", "relay"],
        "drop_trailers": ["Upstream-Status"],
        "upstream": {
            "pr_template": ".github/pull_request_template.md",
            "kept_section": "Requirements",
            "submitter_section": "Overview",
            "facts_section": "Additional information",
            "ci_readme": "ci/README.md",
            "contributing": "CONTRIBUTING.md",
            "agents": "AGENTS.md",
            "review_lines_per_hour": [200, 400],
            "feature_issue": 25577,
            "rpc_issue": 22436,
            "api_changelog_issue": 9289,
            "perplexity_text": "docs/build.md",
        },
        "pulls": pulls
        if pulls is not None
        else [{"branch": "fixture", "title": "docs : a fixture series", "patches": list(concerns)}],
        "concerns": [
            {
                "patch": name,
                "title": f"Concern {i}",
                "verify_group": group,
                "paths": paths,
                "answers": f"#{25577 + i}",
                "drop_when": f"upstream has concern {i}",
            }
            for i, (name, (group, paths)) in enumerate(concerns.items(), start=1)
        ],
        "discussion": {"questions": QUESTIONS},
        **extra,
    }


def write_package(repo: Path, data: dict[str, Any]) -> None:
    """upstream-package/: the repository's templates and the configuration `data`."""
    target = repo / "upstream-package"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(ROOT / "upstream-package" / "templates", target / "templates")
    (target / "package.toml").write_text(tomli_w.dumps(data))


def digest() -> str:
    return buildplan.plan(Context.discover(), buildplan.Request()).digest


ARCHS = [
    ("llama/dense", "certified", 4, ["2", "3", "1+1"], ""),
    ("llama/moe", "certified", 4, ["2", "3", "1+1"], ""),
    ("rwkv7/dense", "refused", 4, ["[0, 2)"], "not opted in, refused at load"),
    ("gptj", "no-model", None, [], "llama.cpp has no implementation of the architecture"),
]
ARCHS_SUMMARY = {
    "architectures": 3,
    "rows": 4,
    "certified": 1,
    "refused": 1,
    "no-model": 1,
    "failed": 0,
    "certified_archs": ["llama"],
    "no_model": {"gptj": "llama.cpp has no implementation of the architecture"},
}


def write_report(
    passed: bool = True, groups: tuple[str, ...] = GROUPS, native: tuple[str, ...] = (), archs: bool = True
) -> Path:
    """A well-formed verify report for the current inputs; with `archs`, the group holds a small table (one
    row per architecture and variant, and the check of the whole table), the graph group its comparison of
    every variant, and the series group the check of the whole series with the native tests it ran."""
    path = helpers.write_report(digest(), passed, groups, native)
    if archs and "archs" in groups:
        data = json.loads(path.read_text())
        data["checks"] = [c for c in data["checks"] if c["group"] != "archs"]
        data["checks"] += [
            {
                "group": "archs",
                "name": name,
                "evidence": "synthetic fixture",
                # a row without a model compared nothing: listed, not passed (dgr.verify.checks.archs)
                "passed": status != "no-model",
                **({"not_compared": True} if status == "no-model" else {}),
                "figures": {
                    "status": status,
                    "n_layer": n,
                    "ranges": ranges,
                    **({"reason": why} if why else {}),
                },
            }
            for name, status, n, ranges, why in ARCHS
        ]
        data["checks"].append(
            {
                "group": "archs",
                "name": "every-architecture",
                "evidence": "synthetic fixture",
                "passed": passed,
                "figures": ARCHS_SUMMARY,
            }
        )
        if "graph" in groups:
            data["checks"].append(
                {
                    "group": "graph",
                    "name": "every-architecture",
                    "evidence": "synthetic fixture",
                    "passed": passed,
                    "figures": {
                        "variants": 4,
                        "compared": 3,
                        "equal": 3,
                        "not_built": {"gptj/dense": "unknown model architecture: 'gptj'"},
                        "failed": [],
                    },
                }
            )
        data["checks"].append(
            {
                "group": "boundary",
                "name": "split-logits/real",
                "evidence": "real model",
                "passed": passed,
                "figures": {"max_abs_diff": 0.0, "bit_exact": True},
            }
        )
        if native and "series" in groups:
            data["checks"].append(
                {
                    "group": "series",
                    "name": "prefix-2",
                    "evidence": "native test",
                    "passed": passed,
                    "figures": {
                        "patches": [],
                        "inputs_digest": "0" * 64,
                        "tests": dict.fromkeys(native, True),
                    },
                }
            )
        path.write_text(json.dumps(data, indent=2))
    return path


def set_not_built(report: Path, not_built: dict[str, str]) -> None:
    """The graph comparison of `report` listing `not_built`: variant -> the error of upstream's generator."""
    data = json.loads(report.read_text())
    [summary] = [c for c in data["checks"] if c["group"] == "graph" and c["name"] == "every-architecture"]
    summary["figures"]["not_built"] = not_built
    report.write_text(json.dumps(data, indent=2))


KL_STATS = {"mean": 0.000002, "mean_error": 0.000001, "max": 0.00012, "same_top_percent": 100.0}


def paired(median: float) -> dict[str, Any]:
    """A paired-rounds ratio (dgr.contracts.paired) of five rounds with the median `median`."""
    rounds = [median - 0.02, median - 0.01, median, median + 0.01, median + 0.03]
    return {"median": median, "low": rounds[0], "high": rounds[-1], "best": median, "rounds": rounds}


def parts_range(begin: int, end: int, files: int, part_bytes: int, load: float) -> dict[str, Any]:
    """A range from the files of its tensors against from the whole file (`parts` of the bench result)."""
    return {
        "layers": [begin, end],
        "files": files,
        "part_bytes": part_bytes,
        "load_whole_s": 0.1,
        "load_parts_s": round(0.1 / load, 6),
        "load": paired(load),
        "peak_rss_whole_mmap": 60 << 20,
        "peak_rss_parts_mmap": 61 << 20,
        "peak_rss_whole_no_mmap": 80 << 20,
        "peak_rss_parts_no_mmap": 80 << 20,
    }


SMOLLM2_BYTES = 98362432
"""The size of the default model's file, which the fixture's figures from its parts are against."""


def parts_figures(n_layer: int = 30, whole_bytes: int = SMOLLM2_BYTES, files: int = 33) -> dict[str, Any]:
    """A model's figures from its parts at 2 and 3 ranges (the real bench has 5 ranges too): a range stores
    a third of the file for its first or last layer and its share of the rest."""
    splits = []
    for k, loads in ((2, (1.02, 0.97)), (3, (1.01, 0.99, 1.03))):
        ranges = []
        for i, ((begin, end), load) in enumerate(zip(inventory.split(n_layer, k), loads, strict=True)):
            ends = whole_bytes // 3 if i in (0, k - 1) else 0
            stored = ends + (whole_bytes // 3) * (end - begin) // n_layer
            ranges.append(parts_range(begin, end, end - begin + 2, stored, load))
        splits.append({"shards": k, "ranges": ranges})
    return {
        "files": files,
        "whole_bytes": whole_bytes,
        "rounds": 7,
        "prefill_tokens": 64,
        "n_ctx": 1024,
        "splits": splits,
    }


def bench_data(inputs: str) -> dict[str, Any]:
    rows = [
        {
            "engine": engine,
            "processes": n,
            "start": start,
            "wire_bytes_before_first_token": wire,
            "wire_bytes_per_token": 200000.0,
            "ttft_s": ttft,
            "prefill_tps": 180.5,
            "decode_tps": 66.25,
            "same_output": True,
            "same_output_reps": 3,
            "procs": [{"role": "range", "what": "layers", "peak_rss": 100 << 20}]
            if engine != "rpc"
            else [
                {"role": "head", "what": "llama-completion", "peak_rss": 200 << 20},
                {"role": "server", "what": "ggml-rpc-server", "peak_rss": 150 << 20},
            ],
        }
        for engine, n, start, wire, ttft in (
            ("whole", 1, "cold", 2048, 0.4),
            ("ranges", 2, "cold", 552803, 0.6),
            ("rpc", 2, "first", 99151820, 1.5),
            ("rpc", 2, "later", 68944999, 0.9),
        )
    ]
    rows[3]["decode_tps"] = 70.5  # the later start of RPC decodes faster than the ranges
    return {
        "format": BENCH_FORMAT,
        "machine": {"date": "2026-12-01T20:00:00Z", "cpu": "Fixture CPU", "cores": 2},
        "quick": False,
        "inputs_digest": inputs,
        # the measurements of every bench (the export renders none of them): bench.json is read whole
        "model": {"file": "SmolLM2-135M-Instruct.Q4_1.gguf", "n_layer": 30, "bytes": 1 << 27},
        "hop_bytes_per_token": 2304,
        "in_process": [],
        "workers": [],
        "memory": [],
        "parts": parts_figures(),
        "codec": {},
        "build": {},
        "models": {
            "gemma3": {
                "model": {
                    "file": "gemma-3-270m-q4_k_m.gguf",
                    "n_layer": 18,
                    "bytes": 253113024,
                    "name": "gemma3",
                },
                "hop_bytes_per_token": 2560,
                "in_process": [],
                "workers": [],
                "memory": [],
                "parts": parts_figures(18, 253113024, 21),
            }
        },
        "harness": helpers.harness_json(),
        "upstream_comparison": {
            "model": {"file": "SmolLM2-135M-Instruct.Q4_1.gguf", "sha256": helpers_model_sha256()},
            "threads": 2,
            "perplexity": {
                "text": "docs/build.md",
                "text_sha256": hashlib.sha256(TEXT.encode()).hexdigest(),
                "args": ["-c", "512", "--chunks", "8", "-t", "2"],
                "baseline": {"final": 13.1108, "error": 0.48251, "chunks": [13.4425, 13.1108]},
                "patched": {"final": 13.1108, "error": 0.48251, "chunks": [13.4425, 13.1108]},
                "kl": {
                    "base_args": ["--kl-divergence-base", "FILE"],
                    "args": ["--kl-divergence", "--kl-divergence-base", "FILE"],
                    "reference": KL_STATS,
                    "patched": KL_STATS,
                },
            },
            "bench": {
                "args": ["-p", "512", "-n", "128", "-r", "3", "-t", "2"],
                "rounds": 5,
                "results": [
                    {"test": "pp512", "baseline_tps": 290.0, "patched_tps": 288.55, "ratio": paired(0.995)},
                    {"test": "tg128", "baseline_tps": 70.0, "patched_tps": 70.07, "ratio": paired(1.001)},
                ],
                "target": 0.99,
            },
        },
        "rpc": {
            "model": {"file": "SmolLM2-135M-Instruct.Q4_1.gguf", "n_layer": 30},
            "threads": 2,
            "prompt": "The history of the printing press",
            "prompt_tokens": 64,
            "decode_tokens": 32,
            "head_args": [
                "-m",
                "SmolLM2-135M-Instruct.Q4_1.gguf",
                "--rpc",
                "127.0.0.1:50152,127.0.0.1:50153",
            ],
            "server_args": ["-H", "127.0.0.1", "-p", "50152", "-t", "2", "-c"],
            "wire_method": "loopback counters",
            "rows": rows,
        },
    }


def helpers_model_sha256() -> str:
    from dgr.contracts import locks

    return locks.load_model(ROOT / "locks").sha256


def write_bench(data: dict[str, Any] | None = None) -> Path:
    path = measured.full_result(Context.discover().cache, digest())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data if data is not None else bench_data(digest()), indent=2))
    return path


def export(out: Path, *args: str) -> int:
    return main(["export-upstream", "--out", str(out), *args])


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def edit_patch(repo: Path, name: str, old: str, new: str) -> None:
    path = repo / "patches" / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    write_manifest(repo)
    write_report()  # a passing report and bench for the new inputs: only the patch itself is wrong
    write_bench()


def refused(out: Path, code: int, capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    assert export(out) == code
    err = capsys.readouterr().err
    for text in expected:
        assert text in err
    assert "Traceback" not in err
    assert not out.exists()
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    return err


def fetch(upstream: FakeUpstream, bundle: Path, branch: str, where: Path) -> Path:
    """A fresh clone of the upstream at the pin, with the bundle's branch fetched."""
    git(where.parent, "clone", "-q", str(upstream.path), str(where))
    git(where, "checkout", "-q", "--detach", upstream.base)
    git(where, "fetch", "-q", str(bundle), f"{branch}:{branch}")
    return where


def series_tree(upstream: FakeUpstream, repo: Path, where: Path, names: list[str]) -> str:
    """The tree of `names` applied with plain git am on the pin, as `dgr build` applies them."""
    git(where.parent, "clone", "-q", str(upstream.path), str(where))
    git(where, "checkout", "-q", "--detach", upstream.base)
    git(where, "am", *(str(repo / "patches" / n) for n in names))
    return git(where, "rev-parse", "HEAD^{tree}")
