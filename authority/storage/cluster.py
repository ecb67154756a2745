"""Many authority processes on one PostgreSQL log: publication rounds, learning, witness progress.

How the processes agree on what is *published* (the ``published`` row) and on each
witness's progress; the mechanism is docs/architecture.md, "The authority's publication".
Rules:

1. One publication round at a time across all processes: a transaction holding the
   advisory lock ``ROUND_LOCK`` (not the ``log_head`` row lock: appends must not wait for
   witnesses), which learns the ``published`` row if it covers the round's checkpoint and
   otherwise saves the witnessed note with ``NOTIFY deplog_published``.
2. Requests to one witness, from any process, hold its advisory lock (``WITNESS_LOCK``)
   and start from its ``witness_progress`` row, which only grows. The row is a hint, not
   flushed at commit: the witness keeps its own record, so a row lost in a crash costs one
   old-size conflict. Locks are taken round, then witness, never the reverse.
3. Every process learns new notes by ``LISTEN deplog_published`` and by polling every
   ``poll_interval`` seconds; a checkpoint signed outside any round is announced on
   ``deplog_signed`` (``announce_signed``).
4. Database failures are ``psycopg.Error``; a failed connection is closed and opened
   again on next use.
5. A frozen or cut-off holder is fenced by the database: every transaction here runs
   ``SELECT 1`` every ``HEARTBEAT`` seconds while it waits for a witness or a thread, and
   the server ends one idle in it for ``IDLE`` seconds, releasing its locks, so the other
   processes' rounds wait about ``IDLE`` for a frozen one. A fenced round can still have
   saved only a published note no smaller than the row's (rule 1, the row's trigger),
   and it signs nothing: checkpoints are signed by the log, one root per size.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import psycopg
from psycopg.conninfo import make_conninfo

from deplog.client.plumbing.dbapi import Connection
from deplog.client.plumbing.waiting import wait_until

log = logging.getLogger("deplog.cluster")

CONNECTING = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 5000,
}
"""Every connection's bound on connecting, the keepalives that notice a dead peer, and the
milliseconds a cut-off peer may leave data unacknowledged before the connection fails (not
the 15 minutes of TCP's retransmissions)."""
IDLE = 1.0
"""Seconds the server lets a transaction of this module idle before ending it (rule 5)."""
HEARTBEAT = IDLE / 4
"""Seconds between the statements that keep a live holder's transaction busy (rule 5)."""
PUBLISHED_CHANNEL = "deplog_published"
SIGNED_CHANNEL = "deplog_signed"
"""Notified by a writer that is no server when it signed a checkpoint (rule 3)."""
ROUND_LOCK = 0x64706C67  # "dplg"
"""The advisory lock key (first half) of publication rounds."""
WITNESS_LOCK = ROUND_LOCK + 1
"""The advisory lock key (first half) of requests to one witness (second: its name's hash)."""

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS witness_progress (
        witness TEXT PRIMARY KEY,
        size BIGINT NOT NULL CHECK (size >= 0)
    )""",
)
"""The table of rule 2 (``Cluster.prepare`` creates it if missing)."""


@dataclass
class Round:
    """One publication round (rule 1): the ``published`` row as the lock found it."""

    conn: psycopg.AsyncConnection[tuple[object, ...]]
    published: tuple[int, bytes] | None

    async def save(self, size: int, note: bytes) -> None:
        """Replace the published note (never by a smaller size) and notify, with the round."""
        await self.conn.execute(
            "INSERT INTO published (id, size, note) VALUES (1, %s, %s) "
            "ON CONFLICT (id) DO UPDATE SET size = excluded.size, note = excluded.note "
            "WHERE excluded.size >= published.size",
            (size, note),
        )
        await self.conn.execute("SELECT pg_notify(%s, %s)", (PUBLISHED_CHANNEL, str(size)))
        self.published = (size, note)


@dataclass
class WitnessProgress:
    """One witness's row of ``witness_progress`` while its lock is held (rule 2)."""

    conn: psycopg.AsyncConnection[tuple[object, ...]]
    name: str
    size: int | None

    async def cosigned(self, size: int) -> None:
        if self.size is not None and size <= self.size:
            return  # a refresh, or a stale success: nothing to raise
        await self.conn.execute(
            "INSERT INTO witness_progress (witness, size) VALUES (%s, %s) "
            "ON CONFLICT (witness) DO UPDATE "
            "SET size = GREATEST(witness_progress.size, excluded.size)",
            (self.name, size),
        )
        self.size = size if self.size is None else max(self.size, size)


class _Connection:
    """One lazily opened connection, closed after any failure and opened again on next use."""

    def __init__(self, cluster: Cluster, autocommit: bool) -> None:
        self.cluster = cluster
        self.autocommit = autocommit
        self.conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None

    async def get(self) -> psycopg.AsyncConnection[tuple[object, ...]]:
        if self.conn is None or self.conn.closed:
            self.conn = await psycopg.AsyncConnection.connect(
                self.cluster.conninfo, autocommit=self.autocommit
            )
        return self.conn

    async def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close()
            self.conn = None

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[tuple[object, ...]]]:
        """A transaction; a failed or interrupted one closes the connection (rule 4), and one
        the server dropped since its last use (a restart) is made again, once."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                conn = await self.get()
                try:
                    await stack.enter_async_context(conn.transaction())
                except psycopg.OperationalError:
                    await self.close()
                    conn = await self.get()
                    await stack.enter_async_context(conn.transaction())
                await stack.enter_async_context(_heartbeat(conn))
                yield conn
        except (psycopg.Error, asyncio.CancelledError):
            await self.close()
            raise


@contextlib.asynccontextmanager
async def _heartbeat(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> AsyncIterator[None]:
    """``SELECT 1`` every ``HEARTBEAT`` seconds until the body ends (rule 5); a beat that
    failed (the server ended the transaction) fails the body's end, never its commit alone."""
    done = asyncio.Event()
    failed: list[psycopg.Error] = []

    async def beat() -> None:
        while not await wait_until(done, HEARTBEAT):
            try:
                await conn.execute("SELECT 1")
            except psycopg.Error as err:
                failed.append(err)
                return

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        done.set()
        await task
    if failed:
        raise failed[0]


def _conninfo_with_bounds(url: str, round_timeout: float) -> str:
    """``url`` with settings bounding every wait (rules 1 and 5), and keepalives."""
    milliseconds = int(round_timeout * 1000)
    options = (
        f"-c lock_timeout={milliseconds} "
        f"-c statement_timeout={milliseconds + 5000} "
        f"-c idle_in_transaction_session_timeout={int(IDLE * 1000)}"
    )
    return make_conninfo(url, options=options, application_name="deplog-cluster", **CONNECTING)


class Cluster:
    """One process's connections to the shared database for rules 1 to 4."""

    errors: tuple[type[Exception], ...] = (psycopg.Error,)
    """What a failed database operation of this module raises."""

    def __init__(
        self, conninfo: str, *, poll_interval: float = 1.0, round_timeout: float = 30.0
    ) -> None:
        self.conninfo = _conninfo_with_bounds(conninfo, round_timeout)
        self.poll_interval = poll_interval
        self._round = _Connection(self, autocommit=False)
        self._reads = _Connection(self, autocommit=True)
        self._witnesses: dict[str, _Connection] = {}
        self._listener = _Connection(self, autocommit=True)

    async def prepare(self) -> None:
        """Create this module's table if it is missing, under a lock."""
        async with self._round.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(%s, 1)", (ROUND_LOCK,))
            for statement in SCHEMA:
                await conn.execute(statement)

    async def close(self) -> None:
        for conn in (self._round, self._reads, self._listener, *self._witnesses.values()):
            await conn.close()

    @contextlib.asynccontextmanager
    async def round(self) -> AsyncIterator[Round]:
        """Rule 1; the caller serializes its own rounds (one connection)."""
        async with self._round.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (ROUND_LOCK,))
            yield Round(conn, await _published(conn))

    async def published(self) -> tuple[int, bytes] | None:
        """The ``published`` row now (size, note), or None before the first publication."""
        try:
            conn = await self._reads.get()
            return await _published(conn)
        except BaseException:
            await self._reads.close()
            raise

    @contextlib.asynccontextmanager
    async def witness(self, name: str) -> AsyncIterator[WitnessProgress]:
        """Rule 2, for one request to the witness ``name``; the caller serializes its own."""
        connection = self._witnesses.setdefault(name, _Connection(self, autocommit=False))
        async with connection.transaction() as conn:
            await conn.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (WITNESS_LOCK, name)
            )
            await conn.execute("SET LOCAL synchronous_commit = off")  # a hint: rule 2
            row = await (
                await conn.execute("SELECT size FROM witness_progress WHERE witness = %s", (name,))
            ).fetchone()
            yield WitnessProgress(conn, name, None if row is None else int(str(row[0])))

    async def listen(
        self, published: Callable[[], None], signed: Callable[[], None] = lambda: None
    ) -> None:
        """Call ``published`` and ``signed`` on their notifications (rule 3), until failing."""
        wake = {PUBLISHED_CHANNEL: published, SIGNED_CHANNEL: signed}
        try:
            conn = await self._listener.get()
            await conn.execute(f"LISTEN {PUBLISHED_CHANNEL}; LISTEN {SIGNED_CHANNEL}")
            for callback in wake.values():
                callback()
            async for notify in conn.notifies():
                wake[notify.channel]()
            raise psycopg.OperationalError("the listening connection ended")
        finally:
            await self._listener.close()


async def _published(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> tuple[int, bytes] | None:
    cursor = await conn.execute("SELECT size, note FROM published WHERE id = 1")
    row = await cursor.fetchone()
    if row is None:
        return None
    size, note = row
    assert isinstance(size, int) and isinstance(note, bytes)
    return size, note


def announce_signed(conn: Connection, size: int) -> None:
    """Tell every serving process that checkpoint ``size`` is signed (rule 3)."""
    conn.execute("SELECT pg_notify(?, ?)", (SIGNED_CHANNEL, str(size)))
