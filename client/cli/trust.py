"""What the ``deplog`` commands trust, and the arguments of those that follow a log.

``--log-key`` takes a verifier key (``name+hex8+base64``) or the path of a
file holding one, such as the authority's ``keys/<origin>.pub``; ``--policy``
takes a C2SP tlog-policy file. Files are read with size limits, so a hostile
file cannot exhaust memory. ``follow`` and ``monitor`` share their follower
arguments (``add_follow_arguments``) so that both read a log the same way.

``--tiles`` says where the log's C2SP tlog-tiles are read from (``open_log``):
a URL (another host, a CDN), ``off`` (the authority's JSON API only), or
``auto``, the default: tiles at the authority's base URL if it publishes them,
which is asked once, at start-up, by fetching its checkpoint and the first
level-0 hash tile of that tree; an authority that does not answer with one,
or an empty log, is read through the JSON API. With tiles, the JSON API stays
the fallback: a step the tiles fail (a bad tile, a failed fetch, a suspected
fork) is retried through it at once (``client.follow.follower`` rule 5).
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from deplog.client.cli.audit import read_bounded
from deplog.client.errors import CLIError
from deplog.client.follow.http import DEFAULT_TIMEOUT, HttpLogSource
from deplog.client.follow.source import LogSource
from deplog.client.follow.state import DEFAULT_MEMORY_BUDGET_MIB
from deplog.client.follow.tiles import TilesLogSource, publishes_tiles
from deplog.client.tlog.keyfile import read_verifier_key
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.policy import MAX_POLICY_SIZE, Policy

__all__ = [
    "TILES_AUTO",
    "TILES_OFF",
    "add_follow_arguments",
    "add_tiles_argument",
    "load_trust",
    "log_origin",
    "open_log",
]

TILES_AUTO = "auto"
TILES_OFF = "off"


def load_trust(log_key: str | None, policy: Path | None) -> Verifier | Policy:
    """The trust policy file if given, else the pinned log key (``--log-key``: a key, or
    a file holding one)."""
    if policy is not None:
        return Policy.parse(read_bounded(policy, MAX_POLICY_SIZE))
    if log_key is not None:
        return read_verifier_key(log_key)
    raise CLIError("give the trust policy (--policy FILE) or the log key (--log-key)")


def log_origin(trust: Verifier | Policy) -> str:
    """The name of the log a trust setting follows, for messages."""
    if isinstance(trust, Verifier):
        return trust.name
    return trust.logs[0].verifier.name if trust.logs else "?"


def _positive_seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def _positive_mib(text: str) -> float:
    """A positive, finite number of MiB (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number of MiB")
    return value


def add_follow_arguments(parser: argparse.ArgumentParser, default_state: str) -> None:
    """The follower's arguments: what to trust, where its state lives, how it polls."""
    parser.add_argument(
        "--log-key", help="the log's verifier key, or a file holding it (pinned; no witnesses)"
    )
    parser.add_argument(
        "--policy", type=Path, help="C2SP tlog-policy file: the log key, witnesses and quorum"
    )
    parser.add_argument(
        "--state",
        type=Path,
        default=Path(default_state),
        help=f"local state file (default: {default_state})",
    )
    parser.add_argument(
        "--interval",
        type=_positive_seconds,
        default=30.0,
        help="seconds between polls (default: 30)",
    )
    parser.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=DEFAULT_TIMEOUT,
        help=f"seconds one request to the authority may take (default: {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--memory-budget",
        type=_positive_mib,
        default=DEFAULT_MEMORY_BUDGET_MIB,
        metavar="MIB",
        help="MiB of tool statuses kept folded in memory; the rest stays in the state file "
        f"(default: {DEFAULT_MEMORY_BUDGET_MIB})",
    )


def add_tiles_argument(parser: argparse.ArgumentParser) -> None:
    """``--tiles URL|auto|off``: where tlog-tiles are read from (see the module)."""
    parser.add_argument(
        "--tiles",
        default=TILES_AUTO,
        metavar="URL|auto|off",
        help="read the log's C2SP tlog-tiles from URL (a CDN, a mirror); auto (default): "
        "at the authority URL if it serves them; off: the JSON API only",
    )


@asynccontextmanager
async def open_log(
    url: str, tiles: str, timeout: float
) -> AsyncIterator[tuple[LogSource, LogSource | None]]:
    """The follower's log source and fallback for ``url`` and ``--tiles``, closed on exit."""
    async with AsyncExitStack() as stack:
        api = await stack.enter_async_context(HttpLogSource(url, timeout=timeout))
        if tiles == TILES_OFF:
            yield api, None
            return
        try:
            source = TilesLogSource(url if tiles == TILES_AUTO else tiles, timeout=timeout)
        except ValueError:
            raise CLIError("--tiles takes an http or https URL, auto or off") from None
        await stack.enter_async_context(source)
        if tiles == TILES_AUTO and not await publishes_tiles(source):
            yield api, None
            return
        yield source, api
