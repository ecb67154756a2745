"""Every ``authority`` and ``witness`` subcommand documents every argument in ``--help``,
in plain text (no reStructuredText markup), and both print their version."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from importlib import metadata

import pytest

from deplog.authority import cli as authority_cli
from deplog.authority.witness import cli as witness_cli

PARSERS = {"authority": authority_cli.parser, "witness": witness_cli.parser}


def commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser under it, depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from commands(sub)


ALL = [(name, sub) for name, build in PARSERS.items() for sub in commands(build())]


@pytest.mark.parametrize(("name", "command"), ALL, ids=[c.prog for _, c in ALL])
def test_every_argument_has_help_text(name: str, command: argparse.ArgumentParser) -> None:
    undocumented = [
        action.dest
        for action in command._actions
        if not action.help or action.help == argparse.SUPPRESS
    ]
    assert undocumented == []


@pytest.mark.parametrize(("name", "command"), ALL, ids=[c.prog for _, c in ALL])
def test_help_is_plain_text_without_backticks(name: str, command: argparse.ArgumentParser) -> None:
    assert "`" not in command.format_help()


@pytest.mark.parametrize("name", PARSERS)
def test_version_prints_the_package_version(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        PARSERS[name]().parse_args(["--version"])
    assert ended.value.code == 0
    assert capsys.readouterr().out == f"{name} {metadata.version('deplog')}\n"
