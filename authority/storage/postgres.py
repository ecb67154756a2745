"""The PostgreSQL backend: a log many authority processes share, and its connections.

This module gives a psycopg 3 connection the shape of ``client.plumbing.dbapi.Connection``
(:class:`_PgConnection`) and is the driver (:class:`PostgresDatabase`); the schema and the
order row are ``schema_postgres``'s.

Rules:
  1. ``?`` placeholders become ``%s`` (a literal ``%``, ``%%``) in a statement with
     parameters; shared SQL never has a ``?`` inside a string literal.
  2. Autocommit: transactions are the SQL the caller issues, as with ``sqlite3`` opened
     with ``isolation_level=None``; ``in_transaction`` reports the server's view.
  3. ``bytea`` reads back as ``bytes`` and ``bytes`` is sent as ``bytea``.
  4. Every wait is bounded by the session settings of :data:`SESSION` (a statement, a lock
     wait, an idle open transaction), and TCP keepalives notice a dead peer. The writer and
     the embedded witness, whose transactions wait for nothing but the database, idle at
     most :data:`WRITER_IDLE`: a frozen holder of the order loses it within that.
  5. ``executemany`` (pipelined) ends with one plain statement: the server re-arms
     ``idle_in_transaction_session_timeout`` only when it answers ready for a query (psycopg
     3.3, PostgreSQL 15), so a process frozen after a pipeline still loses the order.
  6. A URL is named without its password (:func:`_redact_url`), and reaches a child process
     in its environment, never its argv.
  7. Deferred writes (``dbapi.write``): inside a transaction, a statement whose result
     nobody reads waits, and goes with the next statement that is read (or ``COMMIT``) in
     one simple query, its parameters quoted by psycopg: one round trip for all, and one
     answer of ready for a query, which keeps rule 5 (a pipeline would not: psycopg follows
     its sync with a flush). The first failing statement ends the query and fails the
     transaction. ``ROLLBACK`` drops what waits.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo

from deplog.authority.storage import schema_postgres
from deplog.authority.storage.cluster import CONNECTING, Cluster
from deplog.authority.storage.database import Database, WitnessStore, unavailable
from deplog.client.errors import CLIError
from deplog.client.plumbing.dbapi import Connection, Cursor, Query, write

SESSION = {
    "lock_timeout": "10s",
    "statement_timeout": "30s",
    "idle_in_transaction_session_timeout": "5s",
}
"""Session settings of every connection (rule 4)."""
WRITER_IDLE = "1s"
"""``idle_in_transaction_session_timeout`` of the writer and embedded witness (rule 4)."""
SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
"""A read transaction whose reads all see one snapshot, while other processes commit."""


@functools.lru_cache(maxsize=512)
def _translate(sql: str) -> str:
    """sqlite3's ``?`` placeholders as psycopg's ``%s`` (rule 1)."""
    return sql.replace("%", "%%").replace("?", "%s")


class _PgConnection:
    """One psycopg connection behind the sqlite3-shaped API (see the module rules)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn
        self._deferred: list[tuple[str, tuple[Any, ...]]] = []

    def execute(self, sql: str, parameters: Any = (), /) -> Cursor:
        if sql == "ROLLBACK":
            self._deferred.clear()
        if self._deferred:  # rule 7
            cursor = self._send_script([(sql, parameters)])
            while cursor.nextset():  # to the last statement's result
                pass
            return cursor
        return self._send(sql, tuple(parameters))

    def script(self, statements: Sequence[Query]) -> list[list[Any]]:
        """Rule 7: what waits, then ``statements``, as one simple query; the rows of each
        statement that returns rows (deferred writes return none)."""
        cursor = self._send_script(statements)
        rows: list[list[Any]] = []
        while True:
            if cursor.description is not None:
                rows.append(cursor.fetchall())
            if not cursor.nextset():
                return rows

    def _send_script(self, statements: Sequence[Query]) -> psycopg.Cursor[Any]:
        every = [*self._deferred, *((sql, tuple(params)) for sql, params in statements)]
        self._deferred = []
        return self.raw.execute("; ".join(self._inline(*s) for s in every), prepare=False)

    def _send(self, sql: str, params: tuple[Any, ...]) -> Cursor:
        if not params:  # psycopg sends a statement without parameters as it is
            return self.raw.execute(sql)
        cursor: Cursor = self.raw.execute(_translate(sql), params)
        return cursor

    def _inline(self, sql: str, params: Sequence[Any]) -> str:
        """``sql`` with its parameters as literals, quoted by psycopg (rule 7)."""
        if not params:
            return sql
        return psycopg.ClientCursor(self.raw).mogrify(_translate(sql), params)

    def defer(self, sql: str, parameters: Any = (), /) -> None:
        """Rule 7: a ``BEGIN``, or a statement in a transaction, waits for the next read."""
        if sql == "BEGIN" or self.in_transaction:
            self._deferred.append((sql, tuple(parameters)))
        else:
            self.execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> None:
        rows = [tuple(row) for row in parameters]
        if not rows:
            return
        if self._deferred:
            self.execute("SELECT 1")  # what waits goes first (rule 7)
        with self.raw.cursor() as cursor:
            cursor.executemany(_translate(sql), rows)
        self.raw.execute("SELECT 1")  # rule 5

    @property
    def in_transaction(self) -> bool:
        return bool(self._deferred) or self.raw.info.transaction_status != pq.TransactionStatus.IDLE

    @property
    def broken(self) -> bool:
        """The connection is closed or lost: nothing more can be done on it."""
        return self.raw.closed or self.raw.broken

    def close(self) -> None:
        self._deferred.clear()
        self.raw.close()


def _connect(
    url: str, *, readonly: bool = False, application: str = "deplog", writer: bool = False
) -> _PgConnection:
    """A connection with rule 4's settings (read-only: one snapshot a transaction)."""
    conninfo = make_conninfo(url, application_name=application, **CONNECTING)
    conn = psycopg.connect(conninfo, autocommit=True)
    settings = SESSION | ({"idle_in_transaction_session_timeout": WRITER_IDLE} if writer else {})
    try:
        for name, value in settings.items():
            conn.execute(f"SET {name} = '{value}'")
        if readonly:
            conn.execute("SET default_transaction_isolation = 'repeatable read'")
            conn.execute("SET default_transaction_read_only = on")
    except BaseException:
        conn.close()
        raise
    return _PgConnection(conn)


def _redact_url(url: str) -> str:
    """``url`` without its password (rule 6), in the userinfo or as a query parameter."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{host}" if user else host
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k.lower() != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class PostgresDatabase(Database):
    """A PostgreSQL database any number of authority processes share, ordering their writes."""

    shared: ClassVar[bool] = True

    def __init__(self, url: str) -> None:
        self.url = url
        self.errors = (psycopg.Error,)

    def describe(self) -> str:
        return _redact_url(self.url)

    def passed_to_child(self, variable: str) -> tuple[str, dict[str, str]]:
        return "-", {variable: self.url}

    def redact(self, text: str) -> str:
        password = urlsplit(self.url).password
        for key, value in parse_qsl(urlsplit(self.url).query):
            if key.lower() == "password":
                password = value
        return text.replace(password, "***") if password else text

    def connect(self, readonly: bool = False) -> Connection:
        return _connect(self.url, readonly=readonly)

    def connect_writer(self) -> Connection:
        return _connect(self.url, writer=True)

    def prepare(self, conn: Connection) -> None:
        schema_postgres.require_current(conn, self.describe())

    def require_current(self, conn: Connection) -> None:
        schema_postgres.require_current(conn, self.describe())

    def begin_write(
        self, conn: Connection, reads: Sequence[Query] = ()
    ) -> tuple[int | None, list[list[Any]]]:
        pg: _PgConnection = conn  # type: ignore[assignment]
        head, *rows = pg.script([("BEGIN", ()), (schema_postgres.TAKE_ORDER, ()), *reads])
        return int(head[0][0]), rows

    def begin_unordered(self, conn: Connection) -> None:
        write(conn, "BEGIN")

    def begin_read(self, conn: Connection) -> None:
        conn.execute(SNAPSHOT)

    def set_head(self, conn: Connection, size: int) -> None:
        write(conn, schema_postgres.MOVE_HEAD, (size,))

    def broken(self, conn: Connection) -> bool:
        pg: _PgConnection = conn  # type: ignore[assignment]
        return pg.broken

    def fault(self, err: Exception) -> CLIError:
        return unavailable(self, err)

    def unreachable(self, err: BaseException) -> CLIError | None:
        return unavailable(self, err) if isinstance(err, self.errors) else None

    def cluster(self) -> Cluster:
        return Cluster(self.url)

    def embedded_witness_store(self) -> WitnessStore:
        def connect_witness() -> Connection:
            conn = _connect(self.url, application="deplog-embedded-witness", writer=True)
            conn.execute(f"SET search_path = {schema_postgres.EMBEDDED_WITNESS_SCHEMA}")
            return conn

        return WitnessStore(
            name=schema_postgres.EMBEDDED_WITNESS_SCHEMA,
            connect=connect_witness,
            begin="BEGIN",
            errors=(psycopg.Error,),
            schema=schema_postgres.EMBEDDED_WITNESS_DDL,
        )
