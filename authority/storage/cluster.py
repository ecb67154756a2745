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
   old-size conflict. Locks are taken round, then witness, never the reverse: a round
   takes the witnesses it asks as it opens (by name), and their rows grow with its commit.
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
6. A transaction is two round trips besides what its body waits for: ``BEGIN`` with its
   opening statements (locks, then reads, each statement seeing what the lock let through),
   and its deferred writes with ``COMMIT``, each one simple query, so the server answers
   ready for a query after it and rule 5's timeout is armed (a pipeline would leave it
   disarmed: psycopg follows its sync with a flush). A round also reads the latest signed
   checkpoint as it opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg.conninfo import make_conninfo

from deplog.authority.storage.store import StoredCheckpoint
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


Row = tuple[object, ...]
Statement = tuple[str, tuple[object, ...]]
"""A statement and its parameters (``%s`` placeholders)."""


@dataclass
class Transaction:
    """One transaction of this module: the rows its opening statements returned, and the
    writes it defers to its commit (rule 6)."""

    conn: psycopg.AsyncConnection[Row]
    opened: list[list[Row]]
    deferred: list[Statement] = field(default_factory=list)


@dataclass
class Round:
    """One publication round (rule 1): the ``published`` row as the lock found it, the
    latest checkpoint signed then, and the witnesses it holds (rule 2)."""

    transaction: Transaction
    published: tuple[int, bytes] | None
    latest: StoredCheckpoint | None
    witnesses: dict[str, WitnessProgress] = field(default_factory=dict)

    def save(self, size: int, note: bytes) -> None:
        """Replace the published note (never by a smaller size) and notify, with the round's
        commit."""
        self.transaction.deferred += [
            (
                "INSERT INTO published (id, size, note) VALUES (1, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET size = excluded.size, note = excluded.note "
                "WHERE excluded.size >= published.size",
                (size, note),
            ),
            ("SELECT pg_notify(%s, %s)", (PUBLISHED_CHANNEL, str(size))),
        ]
        self.published = (size, note)


@dataclass
class WitnessProgress:
    """One witness's row of ``witness_progress`` while its lock is held (rule 2)."""

    transaction: Transaction
    name: str
    size: int | None

    def cosigned(self, size: int) -> None:
        """The witness cosigned ``size``: the row grows with the request's commit."""
        if self.size is not None and size <= self.size:
            return  # a refresh, or a stale success: nothing to raise
        self.transaction.deferred.append(
            (
                "INSERT INTO witness_progress (witness, size) VALUES (%s, %s) "
                "ON CONFLICT (witness) DO UPDATE "
                "SET size = GREATEST(witness_progress.size, excluded.size)",
                (self.name, size),
            )
        )
        self.size = size if self.size is None else max(self.size, size)


async def _script(
    conn: psycopg.AsyncConnection[Row], statements: list[Statement]
) -> list[list[Row]]:
    """``statements`` as one simple query, their parameters quoted by psycopg (rule 6); the
    rows of each statement that returns rows, in order."""
    quoting = psycopg.AsyncClientCursor(conn)
    text = "; ".join(quoting.mogrify(sql, params) if params else sql for sql, params in statements)
    cursor = await conn.execute(text, prepare=False)
    rows: list[list[Row]] = []
    while True:
        if cursor.description is not None:
            rows.append(await cursor.fetchall())
        if not cursor.nextset():
            return rows


class _Connection:
    """One lazily opened connection, closed after any failure and opened again on next use."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.conn: psycopg.AsyncConnection[Row] | None = None

    async def get(self) -> psycopg.AsyncConnection[Row]:
        if self.conn is None or self.conn.closed:
            self.conn = await psycopg.AsyncConnection.connect(
                self.cluster.conninfo, autocommit=True
            )
        return self.conn

    async def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close()
            self.conn = None

    @contextlib.asynccontextmanager
    async def transaction(self, *opening: Statement) -> AsyncIterator[Transaction]:
        """A transaction begun with ``opening`` and committed with what it deferred, a round
        trip each (rule 6); a failed or interrupted one closes the connection (rule 4), and
        one the server dropped since its last use (a restart) is made again, once."""
        begin = [("BEGIN", ()), *opening]
        try:
            conn = await self.get()
            try:
                opened = await _script(conn, begin)
            except psycopg.OperationalError:
                if not conn.broken:  # a lock timeout, not a lost connection
                    raise
                await self.close()
                conn = await self.get()
                opened = await _script(conn, begin)
            transaction = Transaction(conn, opened)
            try:
                async with _heartbeat(conn):
                    yield transaction
            except psycopg.Error:
                raise
            except Exception:  # the body refused: nothing of it stays
                try:
                    await conn.execute("ROLLBACK")
                except psycopg.Error:
                    await self.close()
                raise
            await _script(conn, [*transaction.deferred, ("COMMIT", ())])
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
        self._round = _Connection(self)
        self._reads = _Connection(self)
        self._witnesses: dict[str, _Connection] = {}
        self._listener = _Connection(self)

    async def prepare(self) -> None:
        """Create this module's table if it is missing, under a lock."""
        lock = ("SELECT pg_advisory_xact_lock(%s, 1)", (ROUND_LOCK,))
        async with self._round.transaction(lock, *((sql, ()) for sql in SCHEMA)):
            pass

    async def close(self) -> None:
        for conn in (self._round, self._reads, self._listener, *self._witnesses.values()):
            await conn.close()

    @contextlib.asynccontextmanager
    async def round(self, witnesses: Sequence[str] = ()) -> AsyncIterator[Round]:
        """Rule 1, holding ``witnesses`` too (rule 2: their progress grows with the round's
        commit); the caller serializes its own rounds (one connection)."""
        names = sorted(set(witnesses))
        async with self._round.transaction(
            ("SELECT pg_advisory_xact_lock(%s, 0)", (ROUND_LOCK,)),
            (PUBLISHED, ()),
            ("SELECT size, root, note FROM checkpoints ORDER BY size DESC LIMIT 1", ()),
            *(statement for name in names for statement in _witness_opening(name)),
        ) as transaction:
            _, published, latest, *held = transaction.opened
            yield Round(
                transaction,
                _published_row(published),
                _stored_checkpoint(latest[0]) if latest else None,
                {
                    name: WitnessProgress(transaction, name, _progress(rows))
                    for name, rows in zip(names, held[1::2], strict=True)
                },
            )

    async def published(self) -> tuple[int, bytes] | None:
        """The ``published`` row now (size, note), or None before the first publication."""
        try:
            conn = await self._reads.get()
            return _published_row(await (await conn.execute(PUBLISHED)).fetchall())
        except BaseException:
            await self._reads.close()
            raise

    @contextlib.asynccontextmanager
    async def witness(self, name: str) -> AsyncIterator[WitnessProgress]:
        """Rule 2, for one request to the witness ``name``; the caller serializes its own."""
        connection = self._witnesses.setdefault(name, _Connection(self))
        async with connection.transaction(
            ("SET LOCAL synchronous_commit = off", ()),  # a hint: rule 2
            *_witness_opening(name),
        ) as transaction:
            yield WitnessProgress(transaction, name, _progress(transaction.opened[-1]))

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


PUBLISHED = "SELECT size, note FROM published WHERE id = 1"


def _witness_opening(name: str) -> list[Statement]:
    """Rule 2's lock of the witness ``name``, then its progress row."""
    return [
        ("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (WITNESS_LOCK, name)),
        ("SELECT size FROM witness_progress WHERE witness = %s", (name,)),
    ]


def _progress(rows: list[Row]) -> int | None:
    return int(str(rows[0][0])) if rows else None


def _published_row(rows: list[Row]) -> tuple[int, bytes] | None:
    if not rows:
        return None
    size, note = rows[0]
    assert isinstance(size, int) and isinstance(note, bytes)
    return size, note


def _stored_checkpoint(row: Row) -> StoredCheckpoint:
    size, root, note = row
    assert isinstance(size, int) and isinstance(root, bytes) and isinstance(note, bytes)
    return StoredCheckpoint(size, root, note)


def announce_signed(conn: Connection, size: int) -> None:
    """Tell every serving process that checkpoint ``size`` is signed (rule 3)."""
    conn.execute("SELECT pg_notify(?, ?)", (SIGNED_CHANNEL, str(size)))
