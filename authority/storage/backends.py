"""Which storage backend holds a log: ``open_database`` reads ``--db``.

The one place that names the backends: a ``postgresql://`` (or ``postgres://``) URL is
PostgreSQL (imported only then: SQLite never needs psycopg), anything else a SQLite path.
"""

from __future__ import annotations

from pathlib import Path

from deplog.authority.storage.database import Database
from deplog.authority.storage.sqlite import SqliteDatabase
from deplog.client.errors import CLIError

_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(target: str | Path) -> bool:
    """Whether ``target`` names a PostgreSQL database (what ``--db`` accepts)."""
    return isinstance(target, str) and target.startswith(_SCHEMES)


def open_database(target: str | Path | Database) -> Database:
    """The database ``target`` names: a ``postgresql://`` URL, or a SQLite file path."""
    if isinstance(target, Database):
        return target
    if is_postgres_url(target):
        try:
            from deplog.authority.storage.postgres import PostgresDatabase
        except ImportError:
            raise CLIError(
                "PostgreSQL needs the psycopg driver: pip install 'deplog[postgres]'"
            ) from None
        return PostgresDatabase(str(target))
    return SqliteDatabase(Path(target))
