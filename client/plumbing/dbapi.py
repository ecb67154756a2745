"""The slice of a DB-API connection that SQL shared between storage backends uses.

``sqlite3.Connection`` has it; so does the authority's PostgreSQL adapter
(``deplog.authority.storage.postgres``), which this package never imports. Code typed
with :class:`Connection` writes its SQL in the two databases' common subset: ``?``
placeholders, ``INSERT ... ON CONFLICT ... DO UPDATE/NOTHING``, no backend-only
functions, and explicit ``BEGIN``/``COMMIT`` issued by its caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, Protocol

__all__ = ["MAX_PARAMETERS", "Connection", "Cursor", "insert_rows"]


class Cursor(Protocol):
    """The result of one statement."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """A connection whose transactions are the caller's (``BEGIN``/``COMMIT`` as SQL)."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Any: ...

    @property
    def in_transaction(self) -> bool: ...

    def close(self) -> None: ...


MAX_PARAMETERS: Final = 999
"""Parameters of one ``insert_rows`` statement: the bound of the oldest SQLite builds."""


def insert_rows(conn: Connection, head: str, rows: Sequence[Sequence[Any]], tail: str = "") -> None:
    """``conn.executemany(f"{head} VALUES (?, ...) {tail}", rows)`` in few statements: one
    of 2^k rows per binary digit of the rows' count, none over ``MAX_PARAMETERS``.

    Python's sqlite3 releases the GIL around every step of a statement and takes it
    back after: ``executemany`` steps once per row, and a thread that must take the GIL
    back from a busy event loop waits its turn each time, so a batch of N rows paid up
    to N waits (measured, over HTTP, five times the rows' CPU time). A multi-row
    ``VALUES`` is one step. Power-of-two sizes keep a handful of statements in the
    connection's statement cache. Rows must not repeat a conflict key (PostgreSQL
    refuses a statement that updates one row twice).
    """
    if not rows:
        return
    width = len(rows[0])
    one = "(" + ", ".join("?" * width) + ")"
    most = 1 << ((MAX_PARAMETERS // width).bit_length() - 1)
    at = 0
    while at < len(rows):
        left = len(rows) - at
        count = min(most, 1 << (left.bit_length() - 1))
        chunk = rows[at : at + count]
        values = ", ".join([one] * count)
        conn.execute(f"{head} VALUES {values} {tail}", [v for row in chunk for v in row])
        at += count
