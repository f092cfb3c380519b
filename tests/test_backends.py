"""GPU backends: `dgr build --backend NAME` has its own digest (the CPU build's does not change), a machine
that lacks what the backend needs is told what to install before anything is built, the Debian package of the
Vulkan headers is located through the machine's apt sources, and the offload group's expectation counts
n_gpu_layers as llama.cpp does."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from dgr.builds import backends, buildplan
from dgr.cli import main
from dgr.commands.verify import groups_of
from dgr.contracts import locks
from dgr.core.paths import Context
from dgr.errors import ConfigError, UsageError
from dgr.sources import debian
from dgr.verify.checks import offload
from dgr.verify.models.inventory import Inventory


def plan(request: buildplan.Request) -> buildplan.Plan:
    return buildplan.plan(Context.discover(), request)


def test_a_gpu_backend_has_its_own_digest_and_the_cpu_build_keeps_its_own(repo: Path) -> None:
    cpu = plan(buildplan.Request())
    vulkan = plan(buildplan.Request(backend="vulkan"))
    assert vulkan.digest != cpu.digest
    assert (cpu.flavor, vulkan.flavor) == ("patched", "patched+vulkan")
    assert "GGML_VULKAN" not in cpu.inputs["cmake_options"]
    assert vulkan.inputs["cmake_options"]["GGML_VULKAN"] == "ON"
    # the headers' path enters the digest as a template (the same in every cache), their sha256 by the lock
    assert vulkan.inputs["cmake_options"]["Vulkan_INCLUDE_DIR"] == "{deb:libvulkan-dev}/usr/include"
    assert "libvulkan-dev" in vulkan.inputs["locks"]["toolchain.toml"]
    # the CPU build does not depend on the backends' table: without it, its digest is the same
    lock_file = repo / "locks" / "toolchain.toml"
    lock = locks.load_toolchain(lock_file.parent)
    lock_file.write_text(tomli_w.dumps(dataclasses.replace(lock, backends={}).to_toml()))
    assert plan(buildplan.Request()).digest == cpu.digest
    with pytest.raises(UsageError, match=r"has no \[toolchain.backends.vulkan\] table"):
        plan(buildplan.Request(backend="vulkan"))


def test_a_machine_without_vulkan_is_told_what_to_install(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(backends, "_any", lambda patterns: False)
    monkeypatch.setattr(backends, "_program", lambda name: False)
    with pytest.raises(ConfigError) as caught:
        backends.require_build("vulkan")
    message = str(caught.value)
    for missing in ("glslc", "libvulkan.so", "SPIR-V headers"):
        assert missing in message
    assert "apt-get install -y glslc libvulkan-dev spirv-headers" in (caught.value.hint or "")
    # through the command: exit 8, and nothing obtained, applied or built
    cache = Path(Context.discover().cache.root)
    assert main(["build", "--backend", "vulkan"]) == 8
    err = capsys.readouterr().err
    assert "building the vulkan backend needs what this machine lacks" in err
    assert not (cache / "work").exists() and not (cache / "builds").exists()
    with pytest.raises(ConfigError, match="a Vulkan driver"):
        backends.require_run("vulkan")


def test_the_cpu_needs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "_any", lambda patterns: False)
    backends.require_build("cpu")
    backends.require_run("cpu")


def test_the_debian_archive_is_read_from_the_apt_sources(tmp_path: Path) -> None:
    deb822 = tmp_path / "debian.sources"
    deb822.write_text(
        "Types: deb\nURIs: http://archive.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\n"
        "Types: deb\nURIs: http://archive.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /keys/debian.gpg\n"
    )
    assert debian.archive((deb822,)) == ("http://archive.example/debian", "/keys/debian.gpg")
    one_line = tmp_path / "sources.list"
    one_line.write_text("# comment\ndeb http://mirror.example/debian bookworm main\n")
    assert debian.archive((one_line,)) == ("http://mirror.example/debian", debian.DEFAULT_KEYRING)
    other = tmp_path / "other.list"
    other.write_text("deb http://ppa.example/ubuntu jammy main\n")
    with pytest.raises(ConfigError, match="name no Debian archive"):
        debian.archive((other,))


def test_a_deb_of_the_lock_is_checked() -> None:
    problems: list[str] = []
    lock = locks.ToolchainLock.parse(
        {
            "toolchain": {
                "cmake": "4.4.5",
                "ninja": "1.13.2",
                "ccache": "4.14.2",
                "generator": "Ninja",
                "build_type": "Release",
                "base_targets": ["llama"],
                "cmake_options": {},
                "tools": {"targets": ["llama-bench"], "cmake_options": {}},
                "backends": {"vulkan": {"cmake_options": {"GGML_VULKAN": "ON"}, "debs": [{"package": "x"}]}},
            },
            "reproducibility": {
                "source_date_epoch": "upstream.commit_date",
                "prefix_maps": ["{src}=/src"],
                "git_am": {
                    "committer_name": "a",
                    "committer_email": "b",
                    "committer_date": "upstream.commit_date",
                },
            },
        },
        "toolchain.toml",
        problems,
    )
    assert lock is None
    assert problems == [
        "toolchain.toml.toolchain.backends.vulkan.debs[0].version: missing",
        "toolchain.toml.toolchain.backends.vulkan.debs[0].suite: missing",
        "toolchain.toml.toolchain.backends.vulkan.debs[0].sha256: missing",
    ]


def test_the_groups_of_a_gpu_backend() -> None:
    assert groups_of(None, "vulkan") == ("archs", "offload")
    assert groups_of("offload", "vulkan") == ("offload",)
    with pytest.raises(UsageError, match="unknown group"):
        groups_of("offload")
    with pytest.raises(UsageError, match="unknown group"):
        groups_of("native", "vulkan")


def upstream_offloaded(n_layer: int, ngl: int) -> tuple[set[int], bool]:
    """llama.cpp's assignment at the pin, for the whole model: the layers il in [i_gpu_start, i_gpu_start +
    act_gpu_layers) of n_layer + 1 (the last one the output layer) go to the device."""
    start = max(n_layer + 1 - ngl, 0)
    act = min(ngl, n_layer + 1)
    on = {il for il in range(n_layer + 1) if start <= il < start + act}
    return on - {n_layer}, n_layer in on


@pytest.mark.parametrize("n_layer", [1, 4, 18, 30])
def test_the_whole_model_is_offloaded_as_upstream_offloads_it(n_layer: int) -> None:
    for ngl in range(n_layer + 4):
        assert offload.offloaded_layers(0, n_layer, n_layer, ngl) == upstream_offloaded(n_layer, ngl)


def test_a_range_offloads_its_last_layers() -> None:
    # the example of the issue: [0, 16) of 32 layers with n_gpu_layers 8 offloaded nothing
    assert offload.offloaded_layers(0, 16, 32, 8) == (set(range(8, 16)), False)
    # the range that holds the output layer counts it first
    assert offload.offloaded_layers(16, 32, 32, 8) == (set(range(25, 32)), True)
    assert offload.offloaded_layers(16, 32, 32, 1) == (set(), True)
    assert offload.offloaded_layers(10, 20, 32, 99) == (set(range(10, 20)), False)
    assert offload.offloaded_layers(10, 20, 32, 0) == (set(), False)


@pytest.mark.parametrize("n_layer", [4, 18, 30])
def test_the_unsplit_reference_places_a_range_as_the_range_places_itself(n_layer: int) -> None:
    # the reference of a split with layers on both sides: the unsplit model, loaded with reference_ngl
    for begin in range(n_layer):
        for end in range(begin + 1, n_layer + 1):
            for ngl in range(end - begin + 3):
                layers, output = offload.offloaded_layers(begin, end, n_layer, ngl)
                on, on_output = upstream_offloaded(n_layer, offload.reference_ngl(begin, end, n_layer, ngl))
                assert on & set(range(begin, end)) == layers, (begin, end, ngl)
                if end == n_layer:
                    assert on_output == output, (begin, end, ngl)


def inventory(tied: bool) -> Inventory:
    tensors = {"token_embd.weight": 100, "output_norm.weight": 4, "rope_freqs.weight": 2}
    if not tied:
        tensors["output.weight"] = 100
    for il in range(4):
        tensors |= {f"blk.{il}.attn_q.weight": 10, f"blk.{il}.ffn_up.weight": 20}
    return Inventory(Path("m.gguf"), "llama", 4, 8, tensors)


def test_the_tensors_expected_on_the_device() -> None:
    untied, tied = inventory(False), inventory(True)
    assert offload.expected_on_device(untied, 0, 2, 1) == {"blk.1.attn_q.weight", "blk.1.ffn_up.weight"}
    assert offload.expected_on_device(untied, 2, 4, 1) == {"output_norm.weight", "output.weight"}
    # tied embeddings: the head of the last range is token_embd.weight, on the device; the input stays on the
    # CPU
    assert offload.expected_on_device(tied, 2, 4, 2) == {
        "output_norm.weight",
        "token_embd.weight",
        "blk.3.attn_q.weight",
        "blk.3.ffn_up.weight",
    }
    assert "token_embd.weight" not in offload.expected_on_device(untied, 0, 4, 99)


def report(
    device: list[str],
    kv: list[tuple[int, bool]],
    kv_device: int,
    extra: int = 0,
    layers: tuple[str, ...] = ("CPU", "Vulkan0"),
    output: str | None = None,
    kept: tuple[tuple[str, bool], ...] = (),
) -> dict[str, Any]:
    tensors = inventory(False).tensors
    return {
        "device_tensors": device,
        "device_bytes": sum(tensors[n] for n in device) + extra,
        "layer_devices": list(layers),
        "output_device": output,
        "host_kept": [
            {"name": n, "bytes": tensors[n], "device": "Vulkan0", "device_supports": ok} for n, ok in kept
        ],
        "kv_layers": [{"layer": il, "on_device": on, "k_bytes": 8} for il, on in kv],
        "memory": {"kv_device_bytes": kv_device},
    }


def test_a_misplaced_layer_is_a_problem() -> None:
    inv = inventory(False)
    good = report(["blk.1.attn_q.weight", "blk.1.ffn_up.weight"], [(0, False), (1, True)], 16)
    assert offload.placement_problems(inv, good, 0, 2, 1, "Vulkan0") == []
    wrong = report(["blk.0.attn_q.weight", "blk.1.ffn_up.weight"], [(0, True), (1, True)], 32)
    problems = offload.placement_problems(inv, wrong, 0, 2, 1, "Vulkan0")
    assert "on the device but not offloaded ['blk.0.attn_q.weight']" in problems[0]
    assert "offloaded but not on the device ['blk.1.attn_q.weight']" in problems[0]
    assert "the K cache of layer 0 is on the device" in problems[-1]
    # llama.cpp's tensors on the device are larger than the file's
    bigger = report(["blk.1.attn_q.weight", "blk.1.ffn_up.weight"], [(0, False), (1, True)], 16, extra=4)
    assert offload.placement_problems(inv, bigger, 0, 2, 1, "Vulkan0") == [
        "[0, 2): 34 bytes of weights on the device, the offloaded tensors have 30 in the file"
    ]
    none = report([], [(0, False), (1, False)], 0)
    assert any(
        "0 bytes of KV cache on the device" in p
        for p in offload.placement_problems(inv, none, 0, 2, 1, "Vulkan0")
    )


def test_the_layer_assignment_is_judged_strictly() -> None:
    inv = inventory(False)
    both = report(
        ["blk.1.attn_q.weight", "blk.1.ffn_up.weight"],
        [(0, False), (1, True)],
        16,
        layers=("Vulkan0", "Vulkan0"),
    )
    assert offload.placement_problems(inv, both, 0, 2, 1, "Vulkan0") == [
        "[0, 2): layer 0 is assigned to Vulkan0, not CPU"
    ]
    # the range with the output layer: n_gpu_layers 1 offloads the output layer only
    head = report(["output_norm.weight", "output.weight"], [(2, False), (3, False)], 0, layers=("CPU", "CPU"))
    assert offload.placement_problems(inv, head | {"output_device": "CPU"}, 2, 4, 1, "Vulkan0") == [
        "[2, 4): the output layer is assigned to CPU"
    ]


def test_a_weight_the_device_cannot_use_may_stay_in_host_memory() -> None:
    # lavapipe cannot hold Gemma 3's tied head: llama.cpp keeps it in host memory, its own fallback
    inv = inventory(False)
    kept = report(
        ["output_norm.weight"],
        [(2, False), (3, False)],
        0,
        layers=("CPU", "CPU"),
        output="Vulkan0",
        kept=(("output.weight", False),),
    )
    assert offload.placement_problems(inv, kept, 2, 4, 1, "Vulkan0") == []
    # a weight whose op the device supports must be on the device
    supported = kept | {"host_kept": [{**kept["host_kept"][0], "device_supports": True}]}
    problems = offload.placement_problems(inv, supported, 2, 4, 1, "Vulkan0")
    assert problems[0] == "[2, 4): output.weight is in host memory, though Vulkan0 supports its op"
    assert "offloaded but not on the device ['output.weight']" in problems[1]


def test_a_mixed_placement_has_an_unsplit_reference_per_range() -> None:
    # SmolLM2's halves with 5: [10, 15) on the device, as the unsplit model with 21 (the output layer and 20
    # layers) places them; [26, 30) and the output layer, as with 5
    assert [offload.reference_ngl(b, e, 30, 5) for b, e in ((0, 15), (15, 30))] == [21, 5]
    # the last range with n_gpu_layers 1 offloads its output layer only; 0: none
    assert offload.reference_ngl(2, 4, 4, 1) == 1
    assert offload.reference_ngl(2, 4, 4, 0) == 0
    # a range before the last with nothing offloaded: the device starts after it
    assert offload.reference_ngl(0, 2, 4, 0) == 3
