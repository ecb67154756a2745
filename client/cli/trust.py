"""What the ``deplog`` commands trust, and how those that follow a log read and run it.

Rules:

1. ``--log-key`` takes a verifier key or a file holding one (``keys/<origin>.pub``),
   ``--policy`` a C2SP tlog-policy file; files are read against size limits. A
   ``--log-key`` that is neither names the file it was taken for, exit 2.
2. ``follow`` and ``monitor`` share their arguments and their run (``follow_log``), so
   both read a log, write a state and report a fork the same way.
3. ``--tiles`` (``open_log``): a URL, ``off`` (the JSON API only), or ``auto``: tiles at
   the authority's URL if it serves the first level-0 tile of its tree (asked once, at
   start-up), else the JSON API. With tiles the JSON API is the fallback
   (``client.follow.follower`` rule 5).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import BinaryIO, Final

from deplog.client.audit.offline import AuditInputError
from deplog.client.errors import CLIError, DeplogError, ErrorCode
from deplog.client.follow.follower import Follower
from deplog.client.follow.http import DEFAULT_TIMEOUT, HttpLogSource
from deplog.client.follow.source import LogSource
from deplog.client.follow.state import DEFAULT_MEMORY_BUDGET_MIB, StateError
from deplog.client.follow.tiles import TilesLogSource, publishes_tiles
from deplog.client.follow.trust import ForkError, SuspectedForkError
from deplog.client.plumbing.arguments import http_url
from deplog.client.plumbing.storage_faults import (
    CORRUPT,
    StorageFault,
    database_fault,
    database_files,
)
from deplog.client.tlog.keyfile import read_verifier_key
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.policy import MAX_POLICY_SIZE, Policy

EXIT_NOT_PROVEN: Final = 4
"""Exit status for a suspicion that proves nothing (``audit evidence``, ``follow --once``)."""


def read_bounded(path: Path | BinaryIO, limit: int) -> bytes:
    """The whole file (or stream), refused (``file_too_large``) over ``limit`` bytes."""
    if isinstance(path, Path):
        with open(path, "rb") as f:
            return read_bounded(f, limit)
    data = path.read(limit + 1)
    if len(data) > limit:
        raise AuditInputError(ErrorCode.FILE_TOO_LARGE, "input file is over the size limit")
    return data


def read_log_key(value: str, flag: str = "--log-key") -> Verifier:
    """A verifier key given to ``flag`` inline or as a file; a bad one is a usage error."""
    try:
        return read_verifier_key(value)
    except DeplogError as err:
        what = str(err.code)
        if Path(value).exists():
            what = f"{value} holds no verifier key ({err.code})"
        elif value.count("+") < 2:  # not a key's name+hex+base64: meant as a file
            what = f"{value}: no such file, nor a key ({err.code})"
        raise CLIError(
            f"{flag}: {what}: give the log's verifier key (<name>+<8 hex>+<base64>) or "
            "a file holding it, such as the authority's keys/<origin>.pub",
            2,
        ) from None
    except OSError as err:
        raise CLIError(f"{flag}: cannot read {value}: {err.strerror}", 2) from None


TILES_AUTO = "auto"
TILES_OFF = "off"


def load_trust(log_key: str | None, policy: Path | None) -> Verifier | Policy:
    """The trust policy file if given, else the pinned log key."""
    if policy is not None:
        return Policy.parse(read_bounded(policy, MAX_POLICY_SIZE))
    if log_key is not None:
        return read_log_key(log_key)
    raise CLIError("give the trust policy (--policy FILE) or the log key (--log-key)", 2)


def state_fault(err: sqlite3.Error | OSError, path: Path) -> StorageFault:
    """A state file's storage fault; a corrupt state is rebuilt from the log, not restored."""
    fault = database_fault(err, path)
    if fault.kind is not CORRUPT:
        return fault
    advice = "move it aside and run deplog follow again into a new --state"
    return StorageFault(dataclasses.replace(CORRUPT, advice=advice), path, fault.evidence)


@contextlib.contextmanager
def _writing_state(path: Path) -> Iterator[None]:
    """Run a command that writes the state ``path``: a failed first follow leaves no file."""
    if not path.parent.is_dir():
        raise CLIError(f"--state: the directory {path.parent} does not exist; create it first", 2)
    if path.is_dir():
        raise CLIError(f"--state: {path} is a directory; give a file path in it", 2)
    existed = {file for file in database_files(path) if file.exists()}
    try:
        yield
    except BaseException as err:
        if path not in existed and not _holds_checkpoint(path):
            for file in database_files(path):
                if file not in existed:
                    with contextlib.suppress(OSError):
                        file.unlink()
        if isinstance(err, sqlite3.Error):
            raise state_fault(err, path) from None
        raise


def fork_error(err: ForkError | SuspectedForkError) -> CLIError:
    """The one wording of a fork, proven (its evidence) or suspected (``EXIT_NOT_PROVEN``)."""
    if isinstance(err, ForkError):
        return CLIError(f"fork detected; evidence saved to {err.evidence}")
    return CLIError(
        f"suspected_fork: the consistency proof served between two signed checkpoints "
        f"fails; not proven (the log never signs proofs, the network path may have "
        f"corrupted it); the state did not advance; run again to retry; unproven "
        f"evidence: {err.evidence}",
        EXIT_NOT_PROVEN,
    )


def another_log_error(err: StateError) -> CLIError:
    """The one wording of a state built for another log: a usage error, with two ways out."""
    path = err.path or "the state file"
    return CLIError(
        f"--state: {err.code}: {path} was built for {err.built_for or 'another log'}, "
        "not for the log key given (an authority started over with new keys is another "
        f"log, not a fork of the old one); follow into a new --state FILE, or delete {path} "
        "to start over",
        2,
    )


def _holds_checkpoint(path: Path) -> bool:
    """Whether the state at ``path`` holds a verified checkpoint (when unsure: yes, keep it)."""
    if not path.exists():
        return False
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT 1 FROM trusted").fetchone() is not None
        finally:
            conn.close()
    except sqlite3.Error:
        return True


def served_checkpoint(url: str, timeout: float) -> bytes:
    """The checkpoint note the authority at ``url`` serves, not verified (one request)."""

    async def fetch() -> bytes:
        async with HttpLogSource(url, timeout=timeout) as source:
            return await source.checkpoint()

    return asyncio.run(fetch())


def log_origin(trust: Verifier | Policy) -> str:
    """The name of the log a trust setting follows, for messages."""
    if isinstance(trust, Verifier):
        return trust.name
    return trust.logs[0].verifier.name if trust.logs else "?"


def _positive(unit: str) -> Callable[[str], float]:
    """The argparse type of a positive, finite number of ``unit``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"must be a positive number of {unit}")
        return value

    return parse


positive_seconds = _positive("seconds")
_positive_mib = _positive("MiB")


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
        type=positive_seconds,
        default=30.0,
        help="seconds between polls (default: 30)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
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


def _tiles(text: str) -> str:
    """``--tiles``: auto, off, or a URL checked as every URL flag is."""
    return text if text in (TILES_AUTO, TILES_OFF) else http_url(text)


def add_tiles_argument(parser: argparse.ArgumentParser) -> None:
    """``--tiles URL|auto|off`` (rule 3)."""
    parser.add_argument(
        "--tiles",
        type=_tiles,
        default=TILES_AUTO,
        metavar="URL|auto|off",
        help="read the log's C2SP tlog-tiles from URL (a CDN, a mirror); auto (default): "
        "at the authority URL if it serves them; off: the JSON API only",
    )


@asynccontextmanager
async def open_log(
    url: str, tiles: str, timeout: float
) -> AsyncIterator[tuple[LogSource, LogSource | None]]:
    """The follower's log source and fallback for ``url`` and ``--tiles`` (rule 3)."""
    async with AsyncExitStack() as stack:
        api = await stack.enter_async_context(HttpLogSource(url, timeout=timeout))
        if tiles == TILES_OFF:
            yield api, None
            return
        source = TilesLogSource(url if tiles == TILES_AUTO else tiles, timeout=timeout)
        await stack.enter_async_context(source)
        if tiles == TILES_AUTO and not await publishes_tiles(source):
            yield api, None
            return
        yield source, api


def follow_log(
    args: argparse.Namespace,
    trust: Verifier | Policy,
    session: Callable[[Follower], Awaitable[None]],
) -> int:
    """Run ``session`` over a follower of ``args.url`` (rule 2): 130 on Ctrl-C, else 0."""

    async def run() -> None:
        async with (
            open_log(args.url, args.tiles, args.timeout) as (source, fallback),
            Follower(
                source, trust, args.state, fallback=fallback, memory_mib=args.memory_budget
            ) as follower,
        ):
            await session(follower)

    try:
        with _writing_state(args.state):
            asyncio.run(run())
    except KeyboardInterrupt:
        return 130
    except (ForkError, SuspectedForkError) as err:
        raise fork_error(err) from None
    return 0
