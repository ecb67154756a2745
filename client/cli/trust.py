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
import contextlib
import dataclasses
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Final

from deplog.client.audit.offline import AuditInputError
from deplog.client.errors import CLIError, DeplogError, ErrorCode
from deplog.client.follow.http import DEFAULT_TIMEOUT, HttpLogSource
from deplog.client.follow.source import LogSource
from deplog.client.follow.state import DEFAULT_MEMORY_BUDGET_MIB, StateError
from deplog.client.follow.tiles import TilesLogSource, publishes_tiles
from deplog.client.follow.trust import ForkError, SuspectedForkError
from deplog.client.plumbing.storage_faults import (
    CORRUPT,
    StorageFault,
    database_fault,
    database_files,
)
from deplog.client.tlog.keyfile import read_verifier_key
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.policy import MAX_POLICY_SIZE, Policy

__all__ = [
    "EXIT_NOT_PROVEN",
    "TILES_AUTO",
    "TILES_OFF",
    "add_follow_arguments",
    "add_tiles_argument",
    "another_log_error",
    "fork_error",
    "load_trust",
    "log_origin",
    "open_log",
    "positive_seconds",
    "read_bounded",
    "read_log_key",
    "state_fault",
    "writing_state",
]

EXIT_NOT_PROVEN: Final = 4
"""Exit status for a suspicion that proves nothing (``audit evidence``, ``follow --once``)."""


def read_bounded(path: Path, limit: int) -> bytes:
    """The whole file, refusing it (``file_too_large``) if it is over ``limit`` bytes."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise AuditInputError(ErrorCode.FILE_TOO_LARGE, "input file is over the size limit")
    return data


def read_log_key(value: str, flag: str = "--log-key") -> Verifier:
    """A verifier key given to ``flag`` inline or as a file holding one; a bad one is a
    usage error (exit 2) naming the flag."""
    try:
        return read_verifier_key(value)
    except DeplogError as err:
        raise CLIError(
            f"{flag}: {err.code}: give the log's verifier key (<name>+<8 hex>+<base64>) or "
            "a file holding it, such as the authority's keys/<origin>.pub",
            2,
        ) from None
    except OSError as err:
        raise CLIError(f"{flag}: cannot read {value}: {err.strerror}", 2) from None


TILES_AUTO = "auto"
TILES_OFF = "off"


def load_trust(log_key: str | None, policy: Path | None) -> Verifier | Policy:
    """The trust policy file if given, else the pinned log key (``--log-key``: a key, or
    a file holding one)."""
    if policy is not None:
        return Policy.parse(read_bounded(policy, MAX_POLICY_SIZE))
    if log_key is not None:
        return read_log_key(log_key)
    raise CLIError("give the trust policy (--policy FILE) or the log key (--log-key)", 2)


def state_fault(err: sqlite3.Error | OSError, path: Path) -> StorageFault:
    """``client.plumbing.storage_faults``' classification of a follower state file, with advice
    for a state: it is a verified copy of the log, so a corrupt one is rebuilt, not
    restored."""
    fault = database_fault(err, path)
    if fault.kind is not CORRUPT:
        return fault
    advice = "move it aside and run deplog follow again into a new --state"
    return StorageFault(dataclasses.replace(CORRUPT, advice=advice), path, fault.evidence)


@contextlib.contextmanager
def writing_state(path: Path) -> Iterator[None]:
    """Run a command that writes the state file ``path``: a state SQLite cannot open or
    write is one line naming it, with ``client.plumbing.storage_faults``' exit status (77
    permission, 73 disk full, 74 I/O, 65 proven corruption). Whatever ends the run, the
    files it created for a state that never held a verified checkpoint are removed, so a
    failed first follow leaves nothing behind."""
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
    """The one wording of a fork for every command that follows the log (follow, monitor):
    a proven fork names its evidence; a suspected one says why it is not proven and that
    the state did not advance (exit ``EXIT_NOT_PROVEN``)."""
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
    """The one wording of a state file built for another log (``client.follow.state``
    invariant 4), for every command that opens a state with a log key: a usage error
    (exit 2) naming the file, the log it was built for, and the two ways out."""
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


def log_origin(trust: Verifier | Policy) -> str:
    """The name of the log a trust setting follows, for messages."""
    if isinstance(trust, Verifier):
        return trust.name
    return trust.logs[0].verifier.name if trust.logs else "?"


def positive_seconds(text: str) -> float:
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
