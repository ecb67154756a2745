"""Where the log lives: a SQLite file (the default) or a PostgreSQL database.

``open_database(target)`` chooses at start from ``--db``: a ``postgresql://`` (or
``postgres://``) URL is PostgreSQL, anything else a SQLite path. Everything above this
module (``Log``, ``LogReader``, the audit, tiles, the map) runs the same SQL on either
(``client.dbapi``); what differs is here: how to connect, the DDL, how a write
transaction starts, which exceptions mean "the database failed", how to name it.

Rules:
  1. ``describe()`` names the database for messages and logs, a PostgreSQL URL always
     without its password (nor a ``password=`` parameter).
  2. ``begin_write`` starts the one kind of transaction that may write the log. On SQLite
     that is ``BEGIN IMMEDIATE`` (one writer per file). On PostgreSQL it is ``BEGIN``
     then ``SELECT size FROM log_head WHERE id = 1 FOR UPDATE``: the row lock is the
     log's order (see ``schema_postgres``), and its answer is the committed log size,
     which a writer compares with its in-memory state.
  3. ``prepare`` makes a database usable by ``Log``: on SQLite it creates what is
     missing; on PostgreSQL it only checks the schema version (``authority migrate``
     creates and upgrades it) and refuses otherwise.
"""

from __future__ import annotations

import contextlib
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from deplog.authority.storage import store
from deplog.client.dbapi import Connection
from deplog.client.errors import CLIError

if TYPE_CHECKING:
    from deplog.authority.storage.postgres import PgConnection

__all__ = [
    "DATABASE_UNAVAILABLE_EXIT",
    "Database",
    "PostgresDatabase",
    "SqliteDatabase",
    "is_postgres_url",
    "open_database",
    "reaching",
    "redact_url",
    "redact_url_in",
    "unavailable",
]

_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(target: str | Path) -> bool:
    return isinstance(target, str) and target.startswith(_SCHEMES)


def redact_url(url: str) -> str:
    """``url`` without its password (rule 1), in the userinfo or as a query parameter."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{host}" if user else host
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k.lower() != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_url_in(text: str, db: Database) -> str:
    """``text`` (a driver's message) with the database's password, if any, masked."""
    if isinstance(db, PostgresDatabase):
        password = urlsplit(db.url).password
        for key, value in parse_qsl(urlsplit(db.url).query):
            if key.lower() == "password":
                password = value
        if password:
            return text.replace(password, "***")
    return text


DATABASE_UNAVAILABLE_EXIT = 69
"""Exit status when the database cannot be reached at start (sysexits ``EX_UNAVAILABLE``,
as for a listen address)."""


def unavailable(db: Database, err: BaseException) -> CLIError:
    """The one line for a database that cannot be used at start: it names the database
    (never its password), the driver's first line of evidence, and what to do."""
    text = str(err).strip()
    reason = text.splitlines()[0] if text else type(err).__name__
    return CLIError(
        f"storage_unavailable: cannot use the database {db.describe()} "
        f"({type(err).__name__}: {redact_url_in(reason, db)}): start it or check --db, "
        "then start again",
        DATABASE_UNAVAILABLE_EXIT,
    )


@contextlib.contextmanager
def reaching(db: Database) -> Iterator[None]:
    """Inside this block, a PostgreSQL failure is :func:`unavailable`'s one line (exit 69);
    SQLite's failures are left to ``storage_faults``, which classifies them by evidence."""
    try:
        yield
    except Exception as err:
        if db.kind == "postgresql" and isinstance(err, db.errors):
            raise unavailable(db, err) from None
        raise


class Database(ABC):
    """One log database, chosen at start; connections to it are made here."""

    kind: ClassVar[str]
    errors: tuple[type[Exception], ...]
    """Exceptions meaning "the database failed" (not "the data is wrong")."""

    @abstractmethod
    def connect(self, readonly: bool = False) -> Connection:
        """A new connection; transactions are the caller's."""

    @abstractmethod
    def begin_write(self, conn: Connection) -> int | None:
        """Start a write transaction (rule 2); the committed log size on PostgreSQL."""

    @abstractmethod
    def prepare(self, conn: Connection) -> None:
        """Make the schema usable, or refuse (rule 3)."""

    @abstractmethod
    def describe(self) -> str:
        """The database, for messages: a path, or a URL without its password."""

    def broken(self, conn: Connection) -> bool:
        """True when ``conn`` can no longer be used (lost, closed): reconnect."""
        return False

    def __str__(self) -> str:
        return self.describe()


class SqliteDatabase(Database):
    """The embedded default: one SQLite file in WAL mode (``store.connect``)."""

    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.errors = (sqlite3.Error,)

    def connect(self, readonly: bool = False) -> Connection:
        return store.connect(self.path, readonly=readonly)

    def begin_write(self, conn: Connection) -> int | None:
        conn.execute("BEGIN IMMEDIATE")
        return None

    def prepare(self, conn: Connection) -> None:
        store.create_schema(conn)  # type: ignore[arg-type]

    def describe(self) -> str:
        return str(self.path)


class PostgresDatabase(Database):
    """A PostgreSQL database shared by any number of authority processes."""

    kind = "postgresql"

    def __init__(self, url: str) -> None:
        import psycopg

        self.url = url
        self.errors = (psycopg.Error,)

    def connect(self, readonly: bool = False) -> Connection:
        from deplog.authority.storage import postgres

        return postgres.connect(self.url, readonly=readonly)

    def begin_write(self, conn: Connection) -> int | None:
        conn.execute("BEGIN")
        row = conn.execute("SELECT size FROM log_head WHERE id = 1 FOR UPDATE").fetchone()
        return int(row[0])

    def prepare(self, conn: Connection) -> None:
        from deplog.authority.storage import schema_postgres

        schema_postgres.require_current(conn, self.describe())

    def describe(self) -> str:
        return redact_url(self.url)

    def broken(self, conn: Connection) -> bool:
        pg: PgConnection = conn  # type: ignore[assignment]
        return pg.broken


def open_database(target: str | Path | Database) -> Database:
    """The database ``--db`` names: a ``postgresql://`` URL, or a SQLite file path."""
    if isinstance(target, Database):
        return target
    if is_postgres_url(target):
        try:
            return PostgresDatabase(str(target))
        except ImportError:
            raise CLIError(
                "PostgreSQL needs the psycopg driver: pip install 'deplog[postgres]'"
            ) from None
    return SqliteDatabase(Path(target))
