"""The slice of a DB-API connection that SQL shared between storage backends uses.

``sqlite3.Connection`` has it, and so does the authority's PostgreSQL adapter. Code typed
with ``Connection`` writes the two databases' common subset: ``?`` placeholders, ``INSERT
... ON CONFLICT``, no backend-only functions, and ``BEGIN``/``COMMIT`` by its caller.
A statement whose result nobody reads goes through :func:`write`: a connection far from its
database sends it with the next statement that is read (one round trip for all).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, Protocol


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


Query = tuple[str, Sequence[Any]]
"""A statement and its parameters."""


def write(conn: Connection, sql: str, parameters: Sequence[Any] = ()) -> None:
    """Run ``sql`` for its effect alone. A connection with ``defer`` (the PostgreSQL writer's)
    sends it with the next statement whose result is read, or the ``COMMIT``: a failure then
    surfaces there, in the same transaction, which the caller rolls back as any failure."""
    defer = getattr(conn, "defer", None)
    if defer is None:
        conn.execute(sql, parameters)
    else:
        defer(sql, parameters)


MAX_PARAMETERS: Final = 999
"""Parameters of one ``insert_rows`` statement: the bound of the oldest SQLite builds."""


def insert_rows(conn: Connection, head: str, rows: Sequence[Sequence[Any]], tail: str = "") -> None:
    """``conn.executemany(f"{head} VALUES (?, ...) {tail}", rows)`` in few statements, of
    2^k rows each (few distinct statements to cache), none over ``MAX_PARAMETERS``: each
    ``executemany`` step waits to take the GIL back from a busy event loop. Rows must not
    repeat a conflict key (PostgreSQL refuses it)."""
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
        write(conn, f"{head} VALUES {values} {tail}", [v for row in chunk for v in row])
        at += count
