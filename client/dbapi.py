"""The slice of a DB-API connection that SQL shared between storage backends uses.

``sqlite3.Connection`` has it; so does the authority's PostgreSQL adapter
(``deplog.authority.storage.postgres``), which this package never imports. Code typed
with :class:`Connection` writes its SQL in the two databases' common subset: ``?``
placeholders, ``INSERT ... ON CONFLICT ... DO UPDATE/NOTHING``, no backend-only
functions, and explicit ``BEGIN``/``COMMIT`` issued by its caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

__all__ = ["Connection", "Cursor"]


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
