"""Every subcommand's --help: 2 to 4 examples that parse, and only the exit codes its declaration
(dgr.commandref.COMMANDS) gives, which name every error family its module raises itself."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest
from dgr import errors
from dgr.cli import build_parser
from dgr.commandref import ALWAYS, COMMANDS
from dgr.errors import EXIT_CODES

from tests.helpers import ROOT


def subcommands() -> dict[str, argparse.ArgumentParser]:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("dgr has no subcommands")


def sections(help_text: str) -> tuple[list[str], list[int]]:
    """The example command lines and the exit codes a help text lists."""
    examples = re.search(r"^examples:\n(.*?)\n\n", help_text, flags=re.M | re.S)
    codes = re.search(r"^exit codes:\n(.*)", help_text, flags=re.M | re.S)
    assert examples and codes, help_text
    commands = [line.strip() for line in examples.group(1).splitlines() if line.startswith("  dgr ")]
    return commands, [int(line.split()[0]) for line in codes.group(1).splitlines() if line.strip()]


def test_every_command_is_declared() -> None:
    assert set(subcommands()) == set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_has_examples_and_only_its_exit_codes(name: str) -> None:
    examples, codes = sections(subcommands()[name].format_help())
    assert 2 <= len(examples) <= 4
    assert codes == sorted(COMMANDS[name].exit_codes)
    assert set(ALWAYS) <= set(codes) < set(EXIT_CODES)
    for example in examples:
        argv = shlex.split(example)
        assert argv[0] == "dgr" and name in argv
        build_parser().parse_args(argv[1:])  # a real invocation: it parses (SystemExit otherwise)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_declared_codes_cover_what_the_command_raises_itself(name: str) -> None:
    source = (ROOT / "builder" / "dgr" / "commands" / f"{name.replace('-', '_')}.py").read_text()
    named = set(re.findall(r"\b(?:raise |return )(\w+Error)\b", source))
    named |= set(re.findall(r"\b(\w+Error)\.exit_code\b", source))
    codes = {getattr(errors, cls).exit_code for cls in named}
    assert codes <= set(COMMANDS[name].exit_codes), f"{name}: {sorted(named)}"


def test_the_top_level_help_keeps_the_whole_table() -> None:
    table = build_parser().format_help().split("exit codes:\n", 1)[1]
    assert [int(line.split()[0]) for line in table.splitlines() if line.strip()] == sorted(EXIT_CODES)
