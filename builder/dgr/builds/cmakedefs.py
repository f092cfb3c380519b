"""The CMake -D definitions of the two projects of a build (llama.cpp and the worker), with {src}/{build}
path templates, so that they enter the inputs digest the same in every cache dir."""

from __future__ import annotations

from pathlib import Path

from dgr.contracts import locks


def _prefix_map_flags(toolchain_lock: locks.ToolchainLock, worker: bool = False) -> str:
    """The prefix maps of a project: llama.cpp gets only its own trees, so that the place of the
    repository (the worker's sources) does not change its flags and recompile it."""
    maps = [m for m in toolchain_lock.prefix_maps if worker or "{worker_" not in m]
    return " ".join(f"-ffile-prefix-map={m}" for m in maps)


def _sanitizer_flags(sanitize: tuple[str, ...]) -> str:
    return f" -fsanitize={','.join(sanitize)} -fno-omit-frame-pointer" if sanitize else ""


def _sanitizer_optimization(toolchain_lock: locks.ToolchainLock, sanitize: tuple[str, ...]) -> dict[str, str]:
    """Sanitized builds compile at -O1, the level the sanitizers' documentation recommends: instrumented
    code at -O3 took twice as long to compile (llama-model.cpp: 55 s against 26 s) for no better check."""
    if not sanitize:
        return {}
    config = toolchain_lock.build_type.upper()
    return {f"CMAKE_C_FLAGS_{config}": "-O1 -DNDEBUG", f"CMAKE_CXX_FLAGS_{config}": "-O1 -DNDEBUG"}


def llama_definitions(
    toolchain_lock: locks.ToolchainLock,
    pin: locks.Pin,
    patches: int,
    sanitize: tuple[str, ...] = (),
    tools: bool = False,
    backends: tuple[str, ...] = (),
) -> dict[str, str]:
    """The CMake -D definitions of the llama.cpp project, with {src}/{build}-style path templates.

    LLAMA_BUILD_COMMIT depends only on the pin and the series length, so that
    editing a patch recompiles only the files it changes.
    """
    flags = _prefix_map_flags(toolchain_lock)
    sanitizers = {
        f"{project}_SANITIZE_{name.upper()}": "ON" for name in sanitize for project in ("LLAMA", "GGML")
    }
    return {
        **toolchain_lock.cmake_options,
        **(toolchain_lock.tools_cmake_options if tools else {}),
        **{k: v for backend in backends for k, v in toolchain_lock.backends[backend].cmake_options.items()},
        **sanitizers,
        **_sanitizer_optimization(toolchain_lock, sanitize),
        "LLAMA_BUILD_COMMIT": f"{pin.short}-p{patches}" if patches else pin.short,
        "LLAMA_BUILD_NUMBER": "0",
        # ggml/CMakeLists.txt asks git for its own commit id unless git is "not found"
        "GIT_EXE": "GIT_EXE-NOTFOUND",
        "CMAKE_C_FLAGS": flags,
        "CMAKE_CXX_FLAGS": flags,
    }


def worker_definitions(toolchain_lock: locks.ToolchainLock, sanitize: tuple[str, ...] = ()) -> dict[str, str]:
    """The worker project links the llama.cpp build and runs from the published bin/ ($ORIGIN)."""
    flags = _prefix_map_flags(toolchain_lock, worker=True) + _sanitizer_flags(sanitize)
    return {
        "LLAMA_SOURCE_DIR": "{src}",
        "LLAMA_BINARY_DIR": "{build}",
        "CMAKE_C_FLAGS": flags,
        "CMAKE_CXX_FLAGS": flags,
        "CMAKE_BUILD_WITH_INSTALL_RPATH": "ON",
        "CMAKE_INSTALL_RPATH": "$ORIGIN",
        "CMAKE_EXE_LINKER_FLAGS": "-Wl,-rpath-link,{build}/bin" + _sanitizer_flags(sanitize),
        **_sanitizer_optimization(toolchain_lock, sanitize),
    }


def render(definitions: dict[str, str], paths: dict[str, Path]) -> dict[str, str]:
    rendered = {}
    for key, value in definitions.items():
        for name, path in paths.items():
            value = value.replace(f"{{{name}}}", str(path))
        rendered[key] = value
    return rendered
