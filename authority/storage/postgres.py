"""A connection to PostgreSQL that speaks the slice of sqlite3's API our SQL code uses.

The storage code (``store``, ``tree``, ``reader``, the map) is written once, in the two
databases' common SQL subset, against ``client.dbapi.Connection``. This adapter gives a
psycopg 3 connection that shape.

Rules:
  1. ``?`` placeholders become ``%s`` (and a literal ``%`` becomes ``%%``) in a statement
     with parameters; shared SQL never has a ``?`` inside a string literal.
  2. The connection is in autocommit mode and transactions are the SQL the caller issues
     (``BEGIN``/``COMMIT``/``ROLLBACK``), exactly as with ``sqlite3`` opened with
     ``isolation_level=None``; ``in_transaction`` reports the server's view.
  3. ``bytea`` columns read back as ``bytes`` and ``bytes`` parameters are sent as
     ``bytea`` (psycopg's own adaptation).
  4. Every wait is bounded by session settings made on connect (:data:`SESSION`): a
     statement, a lock wait and an idle open transaction each end with an error instead
     of holding the log's order forever; TCP keepalives notice a dead peer.
  5. ``executemany`` (psycopg pipelines it: one round trip for all rows) ends with one
     plain statement. A pipeline's last message is a flush after its sync, and the
     server re-arms ``idle_in_transaction_session_timeout`` only when it answers ready
     for a query (seen with psycopg 3.3 on PostgreSQL 15): without it, a process frozen
     just after an ``executemany`` would hold the log's order forever.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo

from deplog.client.dbapi import Cursor

__all__ = ["CONNECT_TIMEOUT_S", "SESSION", "PgConnection", "connect", "translate"]

CONNECT_TIMEOUT_S = 5
SESSION = {
    "lock_timeout": "10s",
    "statement_timeout": "30s",
    "idle_in_transaction_session_timeout": "5s",
}
"""Session settings of every connection (rule 4). A writer waits at most ``lock_timeout``
for the log's order (another writer's batch takes milliseconds), and a process that stops
between ``BEGIN`` and ``COMMIT`` loses its transaction (and the order) after
``idle_in_transaction_session_timeout``."""
_KEEPALIVES = "keepalives=1 keepalives_idle=5 keepalives_interval=2 keepalives_count=3"


@functools.lru_cache(maxsize=512)
def translate(sql: str) -> str:
    """sqlite3's ``?`` placeholders as psycopg's ``%s`` (rule 1)."""
    return sql.replace("%", "%%").replace("?", "%s")


class PgConnection:
    """One psycopg connection behind the sqlite3-shaped API (see the module rules)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn

    def execute(self, sql: str, parameters: Any = (), /) -> Cursor:
        params = tuple(parameters)
        if not params:  # psycopg sends a statement without parameters as it is
            return self.raw.execute(sql)
        cursor: Cursor = self.raw.execute(translate(sql), params)
        return cursor

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> None:
        rows = [tuple(row) for row in parameters]
        if not rows:
            return
        with self.raw.cursor() as cursor:
            cursor.executemany(translate(sql), rows)
        self.raw.execute("SELECT 1")  # rule 5

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != pq.TransactionStatus.IDLE

    @property
    def broken(self) -> bool:
        """The connection is closed or lost: nothing more can be done on it."""
        return self.raw.closed or self.raw.broken

    def close(self) -> None:
        self.raw.close()


def connect(url: str, *, readonly: bool = False, application: str = "deplog") -> PgConnection:
    """A connection with the session settings of rule 4. A read-only one reads each of its
    transactions from one snapshot (``REPEATABLE READ``) and cannot write."""
    conninfo = make_conninfo(url, connect_timeout=CONNECT_TIMEOUT_S, application_name=application)
    conn = psycopg.connect(f"{conninfo} {_KEEPALIVES}", autocommit=True)
    try:
        for name, value in SESSION.items():
            conn.execute(f"SET {name} = '{value}'")
        if readonly:
            conn.execute("SET default_transaction_isolation = 'repeatable read'")
            conn.execute("SET default_transaction_read_only = on")
    except BaseException:
        conn.close()
        raise
    return PgConnection(conn)
