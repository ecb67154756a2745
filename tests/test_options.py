"""Options built from config dataclasses (authority/options.py), and the serve commands built so.

The "Limits" table of docs/operators.md is the oracle written apart from the code: its
defaults must be the dataclass defaults, so the documentation cannot drift.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deplog.authority import cli as authority_cli
from deplog.authority.http.limits import Rate
from deplog.authority.http.server import MAX_ENTRIES_PER_REQUEST, ServerConfig
from deplog.authority.log import MAP_LAYER_ENTRIES, MAP_LAYER_GROUPS, MAP_LAYER_RECORD_BYTES
from deplog.authority.options import (
    MEBIBYTES,
    MILLISECONDS,
    add_options,
    from_options,
    option,
    options_of,
)
from deplog.authority.sequencer import MAP_FLUSH_IDLE, SequencerLimits
from deplog.authority.witness import cli as witness_cli
from deplog.authority.witnessing import WitnessingConfig
from deplog.client.model.notice import MAX_ENVELOPE_BYTES
from tests.doctext import ROOT, section, table

OPERATORS = ROOT / "docs" / "operators.md"


@dataclass(frozen=True)
class Example:
    """A config with one option of each kind, and a field the program sets."""

    path: str
    count: int = option(3, "how many")
    wait: float = option(0.25, "pause", flag="--wait-ms", units=MILLISECONDS, note="then stop")
    rate: Rate = option(Rate(5, 10), "a rate", parse=Rate.parse)
    quota: int | None = option(None, "a quota", flag="--quota-mb", units=MEBIBYTES)
    loud: bool = option(False, "say more")
    colour: bool = option(True, "use colour")
    fixed: int = field(default=9)


def example_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="example")
    add_options(parser, Example)
    return parser


def build(*argv: str) -> Example:
    return from_options(Example, example_parser().parse_args(argv), path="p")


def flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def help_lines(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_help().split())


# The mechanism


def test_flags_left_out_keep_the_dataclass_defaults() -> None:
    assert build() == Example("p")


def test_given_flags_set_their_fields() -> None:
    built = build("--count", "7", "--rate", "1/2", "--loud", "--no-colour")
    assert (built.count, built.rate, built.loud, built.colour) == (7, Rate(1, 2), True, False)


def test_a_flag_in_other_units_is_converted_to_the_fields() -> None:
    built = build("--wait-ms", "1500", "--quota-mb", "0.5")
    assert (built.wait, built.quota) == (1.5, 512 * 1024)


def test_fields_without_an_option_are_not_flags() -> None:
    assert "--fixed" not in flags(example_parser())
    assert "--path" not in flags(example_parser())


def test_a_switch_that_defaults_on_can_be_turned_off_and_one_that_defaults_off_cannot() -> None:
    assert {"--colour", "--no-colour", "--loud"} <= flags(example_parser())
    assert "--no-loud" not in flags(example_parser())


def test_help_shows_each_default_in_the_flags_units() -> None:
    shown = help_lines(example_parser())
    for expected in (
        "how many (default: 3)",
        "pause (default: 250; then stop)",
        "a rate (default: 5/10)",
        "a quota (default: none)",
        "say more (default: off)",
        "use colour (default: on)",
    ):
        assert expected in shown


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["--count", "many"], "invalid int value"), (["--wait-ms", "soon"], "invalid milliseconds")],
)
def test_a_value_that_does_not_parse_is_refused_naming_what_was_expected(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        example_parser().parse_args(argv)
    assert named in capsys.readouterr().err


def test_an_option_that_cannot_say_how_to_parse_is_a_programming_error() -> None:
    @dataclass(frozen=True)
    class Unparsable:
        limit: int | None = option(None, "no parse given")

    with pytest.raises(TypeError):
        add_options(argparse.ArgumentParser(), Unparsable)


# authority serve and witness serve


def subcommand(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[name]
    return parser


SERVE = subcommand(authority_cli.parser(), "serve")
SERVE_OPTIONS = {
    flag: (config_field, spec)
    for config in authority_cli.SERVE_CONFIGS
    for config_field, spec, flag in options_of(config)
}
INSTANCE_FLAGS = {"-h", "--help", "--data", "--keys", "--origin", "--db", "--db-file"}
"""What every authority command takes: where the data, keys and log database are, the origin
on first start."""


def test_every_authority_serve_flag_maps_to_a_config_field() -> None:
    assert flags(SERVE) - INSTANCE_FLAGS == {
        *SERVE_OPTIONS,
        "--no-embedded-witness",  # the off form of --embedded-witness
        "--no-explorer",  # the off form of --explorer
        "--no-tiles",  # the off form of --tiles
    }


def test_authority_serve_with_no_flags_builds_the_dataclass_defaults() -> None:
    args = SERVE.parse_args([])
    assert from_options(authority_cli.ServeOptions, args) == authority_cli.ServeOptions()
    assert from_options(WitnessingConfig, args) == WitnessingConfig()
    built = from_options(
        ServerConfig,
        args,
        db_path=Path("db"),
        origin="o",
        limits=from_options(SequencerLimits, args),
    )
    assert built == ServerConfig(Path("db"), "o")


@pytest.mark.parametrize("flag", sorted(SERVE_OPTIONS))
def test_authority_serve_help_shows_the_dataclass_default(flag: str) -> None:
    config_field, spec = SERVE_OPTIONS[flag]
    [action] = [a for a in SERVE._actions if flag in a.option_strings]
    help_text = SERVE._get_formatter()._expand_help(action)
    assert f"(default: {spec.show(config_field.default)}" in help_text


def test_witness_serve_shows_its_listen_defaults() -> None:
    serve = subcommand(witness_cli.parser(), "serve")
    shown = help_lines(serve)
    assert f"(default: {witness_cli.DEFAULT_PORT})" in shown
    assert "listen address (default: 127.0.0.1)" in shown
    args = serve.parse_args(["--data", "d", "--keys", "k"])
    assert from_options(witness_cli.ServeOptions, args) == witness_cli.ServeOptions()


# The Limits table of docs/operators.md


def limits_table() -> dict[str, tuple[str, str]]:
    """Each row of the operators' Limits table: limit -> (default, flag column)."""
    rows = table(section(OPERATORS, "## Limits"))
    return {limit: (default, flag) for limit, default, flag in rows}


def numbers(text: str) -> list[float]:
    """The numbers a default states, before any explanation in parentheses."""
    return [float(n) for n in re.findall(r"\d+(?:\.\d+)?", text.split("(", 1)[0])]


ROWS = limits_table()
FLAGGED = {
    re.findall(r"`(--[a-z-]+)`", flag_column)[0]: default
    for default, flag_column in ROWS.values()
    if flag_column.startswith("`--")
}


def test_the_limits_table_names_only_real_serve_flags() -> None:
    assert FLAGGED  # the table was found and has flagged rows
    assert set(FLAGGED) <= set(SERVE_OPTIONS)


@pytest.mark.parametrize("flag", sorted(FLAGGED))
def test_the_limits_table_states_the_dataclass_default(flag: str) -> None:
    config_field, spec = SERVE_OPTIONS[flag]
    shown = spec.show(config_field.default)
    documented = FLAGGED[flag]
    assert numbers(documented) == numbers(shown)
    if not numbers(shown):
        assert documented == shown


def test_the_limits_table_states_the_map_rows_a_writer_holds() -> None:
    held = ROWS["tool-status map rows held in memory before they are written (SQLite)"][0]
    assert numbers(held) == [MAP_LAYER_ENTRIES, MAP_LAYER_GROUPS, MAP_LAYER_RECORD_BYTES >> 20]
    assert MAP_LAYER_RECORD_BYTES % (1 << 20) == 0
    assert f"{MAP_FLUSH_IDLE * 1000:g} ms without a submission" in held


def test_the_limits_table_states_the_fixed_request_limits() -> None:
    defaults = ServerConfig(Path("db"), "o")
    assert numbers(ROWS["request body"][0]) == [defaults.max_body / 1024]
    assert defaults.max_body == MAX_ENVELOPE_BYTES
    assert numbers(ROWS["entries per read"][0]) == [defaults.max_entries]
    assert defaults.max_entries == MAX_ENTRIES_PER_REQUEST
