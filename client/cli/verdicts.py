"""What the read-only ``deplog`` commands decide, as exit statuses a script can branch on.

``check``, ``status`` and ``inventory check`` answer from the follower's verified state
only and share one exit table, the guard's verdicts (``VERDICT_EXITS``): 0 serve or
warn, 1 an error, 2 a usage error, 5 refuse, 6 stale, 7 unknown. Rules:

1. Of several entries the most severe wins: refuse, then stale, then unknown.
2. A read-only command never creates a state file: a missing one is
   ``messages.NO_STATE_YET`` and exit 1.
3. ``--url`` asks the authority for its checkpoint (one short request) and warns on
   stderr when the log is ahead of the state; the warning never changes the result,
   and an unreachable authority or a refused redirect only skips it.
4. ``check --light`` reads no state: it verifies the authority's checkpoint under
   ``--log-key`` or ``--policy`` and the tool's map proof at it
   (``client.follow.light``), with the same exit statuses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from deplog.client.cache.guard import (
    DEFAULT_FRESHNESS,
    Decision,
    Guard,
    ProcessedThrough,
    Verdict,
)
from deplog.client.cli.messages import NO_STATE_YET, SENTENCES, explain
from deplog.client.cli.trust import load_trust, positive_seconds, served_checkpoint, state_fault
from deplog.client.errors import CLIError, DeplogError, ErrorCode
from deplog.client.follow.http import HttpLogSource
from deplog.client.follow.light import LightVerifier
from deplog.client.follow.source import FetchError
from deplog.client.follow.state import LocalState, TrustedCheckpoint
from deplog.client.model.notice import parse_timestamp, parse_tool_id, parse_version
from deplog.client.model.table import says
from deplog.client.plumbing.arguments import http_url
from deplog.client.plumbing.files import write_atomic
from deplog.client.plumbing.storage_faults import file_fault
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import parse_note
from deplog.client.tlog.timestamps import format_timestamp

EXIT_REFUSE: Final = 5
EXIT_STALE: Final = 6
EXIT_UNKNOWN: Final = 7
VERDICT_EXITS: Final[dict[Verdict, int]] = {
    Verdict.SERVE: 0,
    Verdict.WARN: 0,
    Verdict.REFUSE: EXIT_REFUSE,
    Verdict.STALE: EXIT_STALE,
    Verdict.UNKNOWN: EXIT_UNKNOWN,
}
_SEVERITY: Final = (EXIT_REFUSE, EXIT_STALE, EXIT_UNKNOWN)
STATUS_EXITS: Final[dict[str, int]] = {
    "revoked": EXIT_REFUSE,
    "sunset": EXIT_REFUSE,
    "unknown": EXIT_UNKNOWN,  # an entry about the tool fails validation (fold-spec)
}


def status_exit(status: str) -> int:
    """The exit status of one version status: 5 refused, 7 unknown, else 0."""
    return STATUS_EXITS.get(status, 0)


BEHIND_TIMEOUT: Final = 3.0
"""Seconds the optional is-the-state-behind request may take (rule 3)."""


def exit_for(codes: list[int]) -> int:
    """The most severe of several entries' exit statuses (0 if all may be served)."""
    for code in _SEVERITY:
        if code in codes:
            return code
    return 0


def row_line(tool_id: str, row: dict[str, Any]) -> str:
    """One row of a tool's status table (or a ``VersionStatus``) as a line: what it covers,
    ``table.says``, pending notices and the notices behind it."""
    line = f"{tool_id} {row.get('covers') or row['version']}: {says(row)}"
    pending = row.get("pending") or []
    if pending and isinstance(pending[0], dict):
        line += "".join(f"; notice {p['index']} pending until {p['effective_at']}" for p in pending)
    if row.get("notices"):
        line += f" (notices {', '.join(str(i) for i in row['notices'])})"
    return line


def table_lines(table: dict[str, Any], size: int) -> list[str]:
    """``deplog status TOOL`` as text: the tool's worst status, then one line per row."""
    tool_id = table["tool_id"]
    if not table["rows"] and not table["invalid"]:
        return [f"no notice names {tool_id} as of checkpoint {size}"]
    lines = [f"{tool_id}: {table['status']} (the worst of {len(table['rows'])} rows)"]
    if table["invalid"]:
        indexes = ", ".join(str(i) for i in table["invalid"])
        lines.append(
            f"{tool_id}: unknown: the log holds entries about it that fail validation "
            f"({indexes}); no version can be vouched for"
        )
    return lines + [row_line(tool_id, row) for row in table["rows"]]


def open_state(path: Path) -> LocalState:
    """The follower state at ``path`` for reading; never creates one (rule 2)."""
    if not path.exists():
        raise CLIError(f"{path}: no such state file; {NO_STATE_YET}")
    try:
        return LocalState(path, None)
    except (sqlite3.Error, OSError) as err:
        raise state_fault(err, path) from None


def time_flag(flag: str, text: str | None) -> datetime:
    """An RFC 3339 UTC time given to ``flag``, or now; a bad one is a usage error naming it."""
    if text is None:
        return datetime.now(UTC).replace(microsecond=0)
    try:
        return parse_timestamp(text)
    except DeplogError as err:
        raise CLIError(f"{flag}: {explain(err)}", 2) from None


def is_stale(trusted: TrustedCheckpoint, max_age: timedelta) -> bool:
    """Whether the state was last verified longer ago than ``max_age``."""
    return datetime.now(UTC) - trusted.verified_at > max_age


def processed_through(through: TrustedCheckpoint | ProcessedThrough) -> dict[str, Any]:
    """The signed checkpoint an answer was made at (every --json shape carries it)."""
    note = through.note.decode() if isinstance(through, TrustedCheckpoint) else through.checkpoint
    return {
        "size": through.size,
        "verified_at": format_timestamp(through.verified_at),
        "checkpoint": note,
    }


def warn_if_behind(url: str | None, state: LocalState) -> None:
    """Rule 3: one stderr line when the authority at ``url`` serves a larger tree."""
    if url is None or state.trusted is None:
        return
    try:
        note = served_checkpoint(url, BEHIND_TIMEOUT)
        size = Checkpoint.from_text(parse_note(note)[0]).size
    except FetchError as err:
        if err.code == ErrorCode.REDIRECT_REFUSED:
            print(
                f"deplog: warning: --url: {explain(err)}; the state was not compared with it",
                file=sys.stderr,
            )
        return
    except (OSError, ValueError, DeplogError):
        return
    if size > state.size:
        print(
            f"deplog: warning: the local state is at size {state.size} but the authority "
            f"serves size {size}: run deplog follow to catch up",
            file=sys.stderr,
        )


def _seconds(text: str) -> timedelta:
    return timedelta(seconds=positive_seconds(text))


def add_state_arguments(parser: argparse.ArgumentParser, default_state: str) -> None:
    """The arguments of every command that reads the state: the file, freshness, --url."""
    parser.add_argument(
        "--state",
        type=Path,
        default=Path(default_state),
        help="local follower state file, written by deplog follow (default: %(default)s)",
    )
    parser.add_argument(
        "--max-age",
        type=_seconds,
        default=DEFAULT_FRESHNESS,
        metavar="SECONDS",
        help=(
            "the state is stale (exit 6) when last verified longer ago than this "
            f"(default: {DEFAULT_FRESHNESS.total_seconds():g})"
        ),
    )
    parser.add_argument(
        "--url",
        type=http_url,
        help="authority base URL: warn on stderr when the state is behind it (an authority "
        "that does not answer never fails the command)",
    )


def _decision_json(decision: Decision) -> dict[str, Any]:
    through = decision.processed_through
    return {
        "tool_id": decision.tool_id,
        "version": decision.version,
        "verdict": str(decision.verdict),
        "reason": decision.reason,
        "may_serve": decision.may_serve,
        "status": None if decision.status is None else decision.status.to_json(),
        "processed_through": None if through is None else processed_through(through),
    } | ({} if decision.guarantee is None else {"guarantee": decision.guarantee})


def _cmd_check(args: argparse.Namespace) -> int:
    """The guard's verdict for one cached tool version, and its exit status."""
    # No --cached-at: a copy fetched this instant, which no processed notice postdates.
    cached_at = time_flag("--cached-at", args.cached_at) if args.cached_at else datetime.now(UTC)
    if args.light:
        decision = asyncio.run(_light_check(args, cached_at))
    else:
        state = open_state(args.state)
        try:
            warn_if_behind(args.url, state)
            decision = Guard(state, freshness=args.max_age).check(
                args.tool_id,
                args.version,
                cached_at=cached_at,
                schema_digest=args.schema_digest,
                with_proof=args.proof is not None,
            )
        finally:
            state.close()
    if args.proof is not None:
        _write_proof(args.proof, decision)
    if args.json:
        answer = _decision_json(decision)
        if args.proof is not None:
            answer["proof_file"] = None if decision.proof is None else str(args.proof)
        print(json.dumps(answer, sort_keys=True))
    else:
        through = decision.processed_through
        at = (
            "nothing verified yet"
            if through is None
            else f"processed through size {through.size}, verified at "
            f"{format_timestamp(through.verified_at)}"
        )
        if decision.guarantee is not None:
            at += f", guarantee {decision.guarantee}"
        print(f"{decision.verdict} ({decision.reason}): {args.tool_id} {args.version}; {at}")
    return VERDICT_EXITS[decision.verdict]


async def _light_check(args: argparse.Namespace, cached_at: datetime) -> Decision:
    """``--light`` (rule 4): the authority's checkpoint and the tool's map proof, verified now."""
    if args.url is None:
        raise CLIError("--light: give the authority's base URL (--url URL)", 2)
    trust = load_trust(args.log_key, args.policy)
    async with HttpLogSource(args.url) as source:
        light = LightVerifier(source, trust, freshness=args.max_age)
        await light.refresh()
        await light.prepare([args.tool_id])
    return light.check(
        args.tool_id,
        args.version,
        cached_at=cached_at,
        schema_digest=args.schema_digest,
        with_proof=args.proof is not None,
    )


def _write_proof(path: Path, decision: Decision) -> None:
    """``--proof``: the map proof behind the verdict, for ``deplog audit status``; when there
    is none, stderr says why (the verdict's exit status stands)."""
    if decision.proof is None:
        why = (
            "the state keeps no tool-status map at its checkpoint"
            if decision.status is not None
            else f"the verdict is {decision.verdict} ({decision.reason})"
        )
        print(f"deplog: no proof written to {path}: {why}", file=sys.stderr)
        return
    try:
        write_atomic(path, [decision.proof])
    except OSError as err:
        # Named as given (the error may name the temporary file beside it), with the
        # storage-fault status of its kind: 77 permission, 73 full, 74 I/O, else 1.
        fault = file_fault(OSError(err.errno, err.strerror, str(path)), "write")
        raise CLIError(f"--proof: {fault.message}", fault.exit_status) from None


def _checked(parse: Callable[[str], object]) -> Callable[[str], str]:
    """An argparse type: the text if the model's ``parse`` takes it, else a usage error."""

    def check(text: str) -> str:
        try:
            parse(text)
        except DeplogError as err:
            raise argparse.ArgumentTypeError(f"{err.code}: {SENTENCES[err.code]}") from None
        return text

    return check


tool_id = _checked(parse_tool_id)
"""``tool:<namespace>/<name>`` on a command line; anything else is a usage error (exit 2)."""
version = _checked(parse_version)
"""A SemVer version on a command line; anything else is a usage error (exit 2)."""


def register(sub: Any, default_state: str) -> None:
    """Add ``check``: the guard's verdict from the shell."""
    codes = "\n".join(
        f"  {code}  {meaning}"
        for code, meaning in (
            (0, "serve (active), or serve with a warning (deprecated)"),
            (1, "an error"),
            (2, "a usage error"),
            (EXIT_REFUSE, "refuse: revoked, sunset or schema mismatch"),
            (EXIT_STALE, "stale: run deplog follow (or refetch the cached copy)"),
            (EXIT_UNKNOWN, "unknown: the log holds entries about the tool that fail validation"),
        )
    )
    sp = sub.add_parser(
        "check",
        help="the cache guard's verdict for one tool version, from the local state",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Decide, from the verified local state only, whether a cached copy of a tool\n"
            "version may be served, and at which signed checkpoint the answer was made."
        ),
        epilog=f"exit codes:\n{codes}",
    )
    sp.add_argument("tool_id", type=tool_id, help="tool:<namespace>/<name>")
    sp.add_argument("version", type=version, help="a SemVer version, e.g. 1.2.0")
    sp.add_argument(
        "--cached-at",
        metavar="TIME",
        help="RFC 3339 UTC time the cached copy was fetched (default: now)",
    )
    sp.add_argument(
        "--schema-digest", help="sha256:<hex> of the cached definition (refused on a mismatch)"
    )
    add_state_arguments(sp, default_state)
    sp.add_argument(
        "--proof",
        type=Path,
        metavar="FILE",
        help="write the map proof behind the verdict to FILE (deplog audit status checks it)",
    )
    sp.add_argument(
        "--light",
        action="store_true",
        help="no state file: verify the authority's checkpoint (--url) and the tool's map "
        "proof now, trusting --log-key or --policy",
    )
    sp.add_argument("--log-key", help="with --light: log verifier key, or a file holding it")
    sp.add_argument("--policy", type=Path, help="with --light: a C2SP tlog-policy file")
    sp.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    sp.set_defaults(func=_cmd_check)
