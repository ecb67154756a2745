"""Many authority processes on one PostgreSQL log: publication rounds, learning, witness progress.

Every ``authority serve --db postgresql://...`` process appends its own batches
(the order is the database's, ``authority/log.py``); this module is how the
processes agree on what is *published*: the ``published`` row (the served,
cosigned note) and the witnesses' progress. Rules:

1. One publication round at a time across all processes: a round is one
   transaction holding the transaction-scoped advisory lock ``ROUND_LOCK``. It
   reads the ``published`` row under the lock; a round whose checkpoint is
   already covered by it ends there (it learns the row instead), otherwise it
   witnesses the latest signed checkpoint and saves its note with ``NOTIFY
   deplog_published`` in the same transaction. A killed process's transaction
   aborts and its lock goes with its connection; ``idle_in_transaction_session_
   timeout`` ends a round whose process hangs, ``lock_timeout`` bounds the wait.
2. Requests to one witness, from any process, hold that witness's advisory lock
   (``WITNESS_LOCK``, keyed by the witness's name) and start from its row in
   ``witness_progress``: the largest size of this log it cosigned, whichever
   process asked. After a cosignature the row only grows (``GREATEST``), so a
   process that starts after a failover never takes the witness's size for a
   fork, and never offers it a smaller one. The row is a hint (the witness keeps
   its own record and refuses a rollback itself), so its commit does not wait
   for a flush: a row lost in a database crash costs an old-size conflict. Lock
   order is round, then witness, never the reverse, so the locks cannot deadlock.
3. Every process learns new published notes by ``LISTEN deplog_published``
   (``listen``), and polls the row every ``poll_interval`` seconds besides, so a
   lost notification or a broken listening connection delays learning by one
   interval at most. A learned note is served only after its log signature
   checks out (``Publication._learn``): the row is the database's word. A
   checkpoint signed by a writer that runs no rounds (an admin command) is
   announced on ``deplog_signed`` (``announce_signed``): every process then
   publishes the latest signed checkpoint, and rule 1 makes one round do it.
4. Database failures are ``psycopg.Error``; a connection that failed is closed
   and opened again on next use (the next round, the next request).

Why an advisory lock and not the ``log_head`` row lock that orders appends: a
round talks to witnesses over the network for up to their timeout, and
appends must not wait for that; the round only needs to exclude other rounds.
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

__all__ = [
    "PUBLISHED_CHANNEL",
    "ROUND_LOCK",
    "SCHEMA",
    "SIGNED_CHANNEL",
    "WITNESS_LOCK",
    "Cluster",
    "Round",
    "WitnessProgress",
    "announce_signed",
]

log = logging.getLogger("deplog.cluster")

PUBLISHED_CHANNEL = "deplog_published"
SIGNED_CHANNEL = "deplog_signed"
"""Notified by a writer that is no server (``authority publisher ...``) when it signed a
checkpoint that no round will publish otherwise (rule 3)."""
ROUND_LOCK = 0x64706C67  # "dplg": the first key of every advisory lock of this module
"""The advisory lock key (first half) of publication rounds."""
WITNESS_LOCK = ROUND_LOCK + 1
"""The advisory lock key (first half) of requests to one witness; the second is its name's
hash."""

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS witness_progress (
        witness TEXT PRIMARY KEY,
        size BIGINT NOT NULL CHECK (size >= 0)
    )""",
)
"""The table of rule 2 (``Cluster.prepare`` creates it if missing)."""


@dataclass
class Round:
    """One publication round (rule 1): the ``published`` row as the lock found it, and
    ``save`` for the note the round publishes."""

    conn: psycopg.AsyncConnection[tuple[object, ...]]
    published: tuple[int, bytes] | None

    async def save(self, size: int, note: bytes) -> None:
        """Replace the published note (never by a smaller size) and notify every process,
        both committed with the round."""
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
        """A transaction on this connection; a failed or interrupted one closes it (rule 4),
        any other exception only rolls it back. A connection the server dropped since its
        last use (a restart) fails at ``BEGIN`` and is made again, once."""
        try:
            conn = await self.get()
            try:
                transaction = conn.transaction()
                await transaction.__aenter__()
            except psycopg.OperationalError:
                await self.close()
                conn = await self.get()
                transaction = conn.transaction()
                await transaction.__aenter__()
            async with _entered(transaction):
                yield conn
        except (psycopg.Error, asyncio.CancelledError):
            await self.close()
            raise


def _conninfo_with_bounds(url: str, round_timeout: float) -> str:
    """``url`` with session settings bounding every wait (rule 1) and keepalives that
    notice a dead peer."""
    milliseconds = int(round_timeout * 1000)
    options = (
        f"-c lock_timeout={milliseconds} "
        f"-c statement_timeout={milliseconds + 5000} "
        f"-c idle_in_transaction_session_timeout={milliseconds}"
    )
    return make_conninfo(
        url,
        options=options,
        application_name="deplog-cluster",
        connect_timeout=5,
        keepalives=1,
        keepalives_idle=5,
        keepalives_interval=2,
        keepalives_count=3,
    )


class Cluster:
    """The connections of one process to the shared database for rules 1 to 4.

    ``round_timeout`` bounds a round (the witnesses' timeout, twice, and some
    margin): longer, the database ends it; waiting for the lock is bounded alike.
    """

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
        """Create this module's table if it is missing (under a lock: processes starting
        together must not race on ``CREATE``)."""
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
            # The row is a hint, the witness enforces its own record: a commit lost in a
            # database crash costs one old-size conflict later, never a rollback. So it
            # does not wait for a flush (one fsync less per publication).
            await conn.execute("SET LOCAL synchronous_commit = off")
            row = await (
                await conn.execute("SELECT size FROM witness_progress WHERE witness = %s", (name,))
            ).fetchone()
            yield WitnessProgress(conn, name, None if row is None else int(str(row[0])))

    async def listen(
        self, published: Callable[[], None], signed: Callable[[], None] = lambda: None
    ) -> None:
        """Call ``published`` on every ``NOTIFY deplog_published`` and ``signed`` on every
        ``NOTIFY deplog_signed``, and both once connected (a notification may have been
        missed meanwhile); returns only by failing (rule 3)."""
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


@contextlib.asynccontextmanager
async def _entered(
    transaction: contextlib.AbstractAsyncContextManager[object],
) -> AsyncIterator[None]:
    """Leave an already entered transaction: commit, or roll back on an exception."""
    try:
        yield
    except BaseException as err:
        await transaction.__aexit__(type(err), err, err.__traceback__)
        raise
    await transaction.__aexit__(None, None, None)


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
