"""What a GPU backend needs on the machine, checked before a build or a run starts: each missing piece is
named with the Debian package that brings it, in one error (exit 8) with the command to install them all.

Vulkan builds with glslc, the Vulkan loader and the SPIR-V headers of the machine (ggml-vulkan's CMake asks
for them), and with the Vulkan headers of locks/toolchain.toml (fetched by dgr: ggml-vulkan at the pin needs
newer ones than Debian 12 has); it runs on any Vulkan driver: without a GPU, Mesa's lavapipe is one."""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dgr.errors import ConfigError


@dataclass(frozen=True)
class Need:
    what: str
    """What is missing, as the error names it."""
    package: str
    """The Debian package that brings it."""
    present: Callable[[], bool]


def _sdk() -> list[Path]:
    """$VULKAN_SDK, where the LunarG SDK is used instead of the system's packages."""
    sdk = os.environ.get("VULKAN_SDK")
    return [Path(sdk)] if sdk else []


def _program(name: str) -> bool:
    return shutil.which(name) is not None


def _any(patterns: list[str]) -> bool:
    return any(glob.glob(p) for p in patterns)  # noqa: PTH207 (absolute patterns with wildcards in directories)


def _library(name: str) -> bool:
    dirs = ["/usr/lib", "/usr/lib/*-linux-gnu", "/usr/lib64", "/usr/local/lib", *(f"{p}/lib" for p in _sdk())]
    return _any([f"{d}/{name}" for d in dirs])


def _cmake_package(name: str) -> bool:
    dirs = ["/usr/share/cmake", "/usr/lib/cmake", "/usr/lib/*-linux-gnu/cmake", "/usr/local/share/cmake"]
    return _any(
        [f"{d}/{name}/{name}Config.cmake" for d in dirs] + [f"{p}/**/{name}Config.cmake" for p in _sdk()]
    )


def _vulkan_driver() -> bool:
    if os.environ.get("VK_ICD_FILENAMES") or os.environ.get("VK_DRIVER_FILES"):
        return True
    return _any(
        ["/usr/share/vulkan/icd.d/*.json", "/etc/vulkan/icd.d/*.json", "/usr/local/share/vulkan/icd.d/*.json"]
    )


BUILD_NEEDS: dict[str, tuple[Need, ...]] = {
    "vulkan": (
        Need("glslc (the GLSL to SPIR-V compiler)", "glslc", lambda: _program("glslc")),
        Need("the Vulkan loader (libvulkan.so)", "libvulkan-dev", lambda: _library("libvulkan.so")),
        Need("the SPIR-V headers' CMake package", "spirv-headers", lambda: _cmake_package("SPIRV-Headers")),
    ),
}
RUN_NEEDS: dict[str, tuple[Need, ...]] = {
    "vulkan": (
        Need("the Vulkan loader (libvulkan.so.1)", "libvulkan1", lambda: _library("libvulkan.so.1")),
        Need(
            "a Vulkan driver (an ICD file in /usr/share/vulkan/icd.d; without a GPU: Mesa's lavapipe)",
            "mesa-vulkan-drivers",
            _vulkan_driver,
        ),
    ),
}


def missing(needs: tuple[Need, ...]) -> list[Need]:
    return [need for need in needs if not need.present()]


def _require(backend: str, needs: tuple[Need, ...], doing: str) -> None:
    absent = missing(needs)
    if not absent:
        return
    packages = " ".join(dict.fromkeys(n.package for n in absent))
    raise ConfigError(
        f"{doing} the {backend} backend needs what this machine lacks:\n"
        + "\n".join(f"  - {n.what} (Debian: {n.package})" for n in absent),
        hint=f"install it: `apt-get update && apt-get install -y {packages}`",
    )


def require_build(backend: str) -> None:
    """ConfigError naming every missing build requirement of `backend` and the packages (the CPU: none)."""
    _require(backend, BUILD_NEEDS.get(backend, ()), "building")


def require_run(backend: str) -> None:
    """ConfigError naming every missing run requirement of `backend` (a loader, a driver)."""
    _require(backend, RUN_NEEDS.get(backend, ()), "running")
