"""What the ``authority`` and ``witness`` commands share: their parser's top, and how they end.

Rules:

1. A command ends in one line on stderr, ``<prog>: <message>``, never a traceback, with
   an exit status from the one table of every command (docs/deplog-command.md, "Exit
   statuses"): 0 done, 1 refused, 2 usage (``Parser``, a file named that leads nowhere),
   65/73/74/77 storage, 69 unavailable, 141 quietly when the output's reader went away.
2. A ``DeplogError`` prints its code first, then its sentence: scripts match the code,
   people read the sentence.
3. A file or directory that cannot be used is named, with its kind's status
   (``client.plumbing.storage_faults.file_fault``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from deplog.client.errors import CLIError, DeplogError, ErrorCode
from deplog.client.plumbing.arguments import Parser
from deplog.client.plumbing.files import output_closed
from deplog.client.plumbing.storage_faults import file_fault
from deplog.client.tlog.keyfile import KeyFileError

EXIT_REFUSED = 1
"""A refusal: a stable code with its sentence, or the command's own message."""
EXIT_USAGE = 2
"""A flag or argument argparse refused, or a file named that leads nowhere."""


def command_parser(prog: str, description: str) -> tuple[argparse.ArgumentParser, Any]:
    """A command's parser with ``--version``, and its subcommands' action."""
    parser = Parser(prog=prog, description=description)
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {metadata.version('deplog')}",
        help="print the version and exit",
    )
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        help="what to do (COMMAND -h: its options)",
    )
    return parser, sub


def refusal(err: DeplogError) -> str:
    """``<code>: <sentence>``, or the code alone when the error carries no sentence."""
    sentence = str(err)
    return err.code if sentence in ("", err.code) else f"{err.code}: {sentence}"


_KEY_ADVICE = {
    ErrorCode.KEY_MISSING: "run '{init}' first, or give --keys the directory that holds it",
    ErrorCode.KEY_PERMISSIONS: "it must be readable by its owner only: chmod 600 it",
    ErrorCode.KEY_MALFORMED: "restore it from your backup of the keys directory",
}


@contextlib.contextmanager
def key_file(path: Path, init: str) -> Iterator[None]:
    """A key file error inside names ``path`` and what to do (``init`` makes the key)."""
    try:
        yield
    except KeyFileError as err:
        advice = _KEY_ADVICE[err.code].format(init=init)
        raise CLIError(f"{refusal(err)}: {path}: {advice}") from None


def run(
    prog: str,
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
) -> int:
    """Parse ``argv``, run the chosen command, and end it by rule 1."""
    args = parser.parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.func
    try:
        return int(command(args))
    except CLIError as err:
        print(f"{prog}: {err.message}", file=sys.stderr)
        return err.exit_status
    except DeplogError as err:
        print(f"{prog}: {refusal(err)}", file=sys.stderr)
        return EXIT_REFUSED
    except BrokenPipeError:
        return output_closed()
    except OSError as err:
        fault = file_fault(err)
        print(f"{prog}: {fault.message}", file=sys.stderr)
        return fault.exit_status
