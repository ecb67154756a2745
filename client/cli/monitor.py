"""``deplog monitor``: the publisher's alerting on what the log says in its name.

Follows the log as ``deplog follow`` does, into its own state file, and prints one JSON
line on stdout per ``MonitorEvent`` (``client.follow.monitor``) with ``checkpoint_size``,
the verified checkpoint it was found under; progress goes to stderr. With ``--once`` it
exits 0 when it found nothing, ``EXIT_EVENTS`` (3) when it printed events,
``EXIT_NOT_PROVEN`` (4) on a suspected fork, 1 on any error, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Final

from deplog.client.cli.trust import (
    add_follow_arguments,
    add_tiles_argument,
    follow_log,
    load_trust,
    log_origin,
)
from deplog.client.errors import CLIError, DeplogError
from deplog.client.follow.follower import Follower, SyncResult
from deplog.client.follow.monitor import (
    Journal,
    JournalError,
    Monitor,
    MonitorEvent,
    parse_key_id,
)
from deplog.client.model.notice import parse_namespace
from deplog.client.plumbing.arguments import http_url
from deplog.client.plumbing.progress import Progress
from deplog.client.tlog.keyfile import read_verifier_key
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.policy import Policy

DEFAULT_MONITOR_STATE: Final = "deplog-monitor.db"
EXIT_EVENTS: Final = 3
"""``--once`` found events: something in the namespace the publisher should look at."""


def _key_id(value: str) -> bytes:
    """A key id: 8 hex digits, or a verifier key (or a file holding one) whose id it is."""
    try:
        return parse_key_id(value)
    except ValueError:
        pass
    try:
        return bytes(read_verifier_key(value).key_id)
    except (DeplogError, OSError):
        raise CLIError("--key-id takes 8 hex digits, a verifier key or a .pub file", 2) from None


def _namespace(value: str) -> str:
    try:
        return parse_namespace(value)
    except DeplogError:
        raise argparse.ArgumentTypeError("a namespace is lower-case reverse DNS") from None


def _print_events(result: SyncResult, monitor: Monitor) -> int:
    """Print the advance's events as JSON lines; returns how many."""
    events = [event for event in result.noticed if isinstance(event, MonitorEvent)]
    events += [event for entry in result.invalid if (event := monitor.invalid(entry))]
    events.sort(key=lambda event: event.index)
    for event in events:
        line = {**event.to_json(), "checkpoint_size": result.new_size}
        print(json.dumps(line, sort_keys=True, separators=(",", ":")), flush=True)
    return len(events)


def _cmd_monitor(args: argparse.Namespace) -> int:
    trust = load_trust(args.log_key, args.policy)
    key_ids = [_key_id(value) for value in args.key_id]
    try:
        journal = None if args.journal is None else Journal(args.journal)
        return _follow(args, trust, Monitor(args.namespace, key_ids, journal))
    except JournalError as err:
        raise CLIError(f"{err.code}: {err}: {err.path}") from None


def _follow(args: argparse.Namespace, trust: Verifier | Policy, monitor: Monitor) -> int:
    """Follow with ``monitor`` watching, printing its events; the exit status."""
    found = 0

    def report(result: SyncResult) -> None:
        nonlocal found
        found += _print_events(result, monitor)

    async def follow(follower: Follower) -> None:
        follower.trust.watch = monitor
        follower.add_listener(report)
        with Progress("verifying entries") as progress:
            first = await follower.sync(progress.update)
        print(
            f"monitoring {args.namespace} on {log_origin(trust)}: verified to size "
            f"{first.new_size}",
            file=sys.stderr,
            flush=True,
        )
        if not args.once:
            await follower.run(args.interval)

    if follow_log(args, trust, follow):  # stopped by Ctrl-C
        return 130
    return EXIT_EVENTS if found else 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``monitor``."""
    sp = subparsers.add_parser(
        "monitor",
        help="follow the log and report what it says in a namespace that you did not publish",
        description=(
            "Prints one JSON line per event: a notice in the namespace signed by an unknown "
            "key id or missing from the journal, or a registry change touching the namespace "
            f"or its publisher. With --once: exit 0 if none, {EXIT_EVENTS} if any."
        ),
    )
    sp.add_argument("url", type=http_url, help="authority base URL")
    sp.add_argument("--namespace", type=_namespace, required=True, help="the namespace to watch")
    sp.add_argument(
        "--key-id",
        action="append",
        required=True,
        help="a key id you publish with: 8 hex digits, a verifier key or a .pub file (repeatable)",
    )
    sp.add_argument(
        "--journal",
        type=Path,
        help="directory of the envelopes you published (deplog publish --out)",
    )
    add_follow_arguments(sp, DEFAULT_MONITOR_STATE)
    add_tiles_argument(sp)
    sp.add_argument("--once", action="store_true", help="sync once, report, and exit")
    sp.set_defaults(func=_cmd_monitor)
