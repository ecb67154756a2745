"""Command-line options declared on config dataclass fields, so each default lives once.

A field declared with :func:`option` carries its flag, help text and parsing;
:func:`add_options` builds the argparse options from a config dataclass and
:func:`from_options` the dataclass back from the parsed arguments.

Rules:

1. The field's default is the only default: argparse has none (``SUPPRESS``), so a flag
   left out leaves the dataclass default, which ``--help`` prints.
2. A flag's text becomes the field's value through ``parse`` (by default the default's
   type); a flag in other units than its field names its :class:`Units`, so ``--help``
   prints the default in the flag's units.
3. A ``bool`` field is a switch: ``--flag`` when off by default, ``--flag/--no-flag``
   when on.
4. Fields without an ``option`` are the program's to set, never on the command line.
5. A ``tuple`` field is a repeatable flag: each use adds one ``parse``d item.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

T = TypeVar("T")
C = TypeVar("C")

_KEY: Final = "deplog.option"
_MIB: Final = 1024 * 1024


def _show(value: object) -> str:
    """A default as ``--help`` prints it: 10 rather than 10.0, on/off, none."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return "none" if value is None or value == () else str(value)


@dataclasses.dataclass(frozen=True)
class Units:
    """How a flag in other units than its field converts, both ways (rule 2): ``parse``
    (named by argparse's "invalid <name> value") and ``show``."""

    parse: Callable[[str], Any]
    show: Callable[[Any], str]


@dataclasses.dataclass(frozen=True)
class Option:
    """How one config field appears on the command line: ``--help`` prints ``help (default:
    <show(default)>[; <note>])``; no ``flag`` is ``--`` and the field name, no ``parse``
    the default's type (rule 2)."""

    help: str
    flag: str = ""
    parse: Callable[[str], Any] | None = None
    show: Callable[[Any], str] = _show
    note: str = ""


def option(
    default: T,
    help: str,
    *,
    flag: str = "",
    parse: Callable[[str], Any] | None = None,
    units: Units | None = None,
    note: str = "",
) -> T:
    """A dataclass field with ``default`` that is also a command-line option."""
    if units is not None:
        spec = Option(help, flag, units.parse, units.show, note)
    else:
        spec = Option(help, flag, parse, _show, note)
    return dataclasses.field(default=default, metadata={_KEY: spec})


def options_of(config: type[Any]) -> Iterator[tuple[dataclasses.Field[Any], Option, str]]:
    """Each optional field of a config dataclass, its option and its flag (rule 4)."""
    for field in dataclasses.fields(config):
        spec = field.metadata.get(_KEY)
        if isinstance(spec, Option):
            yield field, spec, spec.flag or "--" + field.name.replace("_", "-")


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def add_options(parser: argparse.ArgumentParser, config: type[Any]) -> None:
    """Add an option to ``parser`` for every optional field of ``config`` (rules 1-3)."""
    for field, spec, flag in options_of(config):
        default = field.default
        shown = spec.show(default) + (f"; {spec.note}" if spec.note else "")
        help_text = f"{spec.help} (default: {shown})".replace("%", "%%")
        common: dict[str, Any] = {
            "dest": _dest(flag),
            "default": argparse.SUPPRESS,
            "help": help_text,
        }
        if isinstance(default, bool):
            action = argparse.BooleanOptionalAction if default else "store_true"
            parser.add_argument(flag, action=action, **common)
        elif isinstance(default, tuple) and spec.parse is not None:
            parser.add_argument(flag, type=spec.parse, action="append", **common)
        elif spec.parse is not None:
            parser.add_argument(flag, type=spec.parse, **common)
        elif isinstance(default, int | float | str):
            parser.add_argument(flag, type=type(default), **common)
        else:
            raise TypeError(f"option {flag} must say how to parse it")


def from_options(config: type[C], args: argparse.Namespace, **fixed: Any) -> C:
    """``config`` built from the options given in ``args`` and the ``fixed`` fields (rule 1)."""
    given = {
        field.name: getattr(args, _dest(flag))
        for field, _, flag in options_of(config)
        if hasattr(args, _dest(flag))
    }
    given = {name: tuple(v) if isinstance(v, list) else v for name, v in given.items()}
    return config(**given, **fixed)


def milliseconds(text: str) -> float:
    """Seconds from a flag given in milliseconds."""
    return float(text) / 1000


def mebibytes(text: str) -> int:
    """Bytes from a flag given in MiB (fractions allowed)."""
    return int(float(text) * _MIB)


MILLISECONDS: Final = Units(milliseconds, lambda seconds: f"{seconds * 1000:g}")
"""A flag in milliseconds for a field in seconds."""
MEBIBYTES: Final = Units(mebibytes, lambda size: _show(None if size is None else size / _MIB))
"""A flag in MiB for a field in bytes (None, no limit, shown as ``none``)."""
