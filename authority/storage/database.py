"""Where the log lives: the interface every storage backend implements.

A backend is a driver behind this one interface (``sqlite.py``, the embedded default;
``postgres.py``, a database many authority processes share), chosen at start by
``backends.open_database`` from ``--db``. Everything above storage (``Log``,
``LogReader``, the audit, the copy, tiles, the map, publication) runs the same SQL on
any of them (``client.plumbing.dbapi``, their common subset) and never names one: where a
backend differs, the code asks its ``Database`` what it can do, and each backend's own
SQL (its DDL, its few statements of its own) stays in its module.

Rules, cited by name:
  * **Names.** ``describe()`` names the database for messages and logs, never with a
    secret (a PostgreSQL URL without its password, nor a ``password=`` parameter);
    ``redact`` masks one in a driver's message. Only ``passed_to_child`` gives what
    reopens it, and then a secret goes in the child's environment, never in its argv.
  * **Order.** ``begin_write`` starts the one kind of transaction that may write the
    log, in the log's order, and returns the committed log size where the database
    keeps it (a writer that is not the only one compares it with its in-memory state);
    ``set_head`` records the new size in that transaction. ``begin_unordered`` starts
    a write that needs no place in the order (a checkpoint row over committed leaves,
    the published note).
  * **Schema.** ``prepare`` makes a database usable by ``Log`` (create what is missing,
    or check a schema made by ``authority migrate``) and refuses otherwise;
    ``require_current`` refuses, read-only, a database that holds no log of this
    version.
  * **Shared.** ``shared``: other processes append to the same log at the same time and
    the database orders them. Then plain reads need a snapshot (``begin_read``) to
    agree with each other, commands append beside running servers, publication is a
    round among the processes (``cluster``), tiles are read from the database, the
    embedded witness keeps its state there (``embedded_witness_store``), and the
    writer never holds the map's rows back (``holds_map_rows``).
  * **Failures at start.** A failure to open the database at start is one line for its
    operator (``fault``, ``opening``, ``unreachable``), never a traceback: classified by
    evidence for a file, "cannot use the database" (exit 69) for a server.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from deplog.client.errors import CLIError
from deplog.client.plumbing.dbapi import Connection

if TYPE_CHECKING:
    from deplog.authority.storage.cluster import Cluster

__all__ = [
    "DATABASE_UNAVAILABLE_EXIT",
    "Database",
    "WitnessStore",
    "reaching",
    "unavailable",
]

DATABASE_UNAVAILABLE_EXIT = 69
"""Exit status when the database cannot be reached at start (sysexits ``EX_UNAVAILABLE``,
as for a listen address)."""


@dataclass(frozen=True)
class WitnessStore:
    """Where the embedded witness keeps its state when that is the log's own database
    (``witness.core.WitnessState.over`` takes it): ``connect`` makes a connection with
    the witness's tables in reach, ``begin`` starts its write transaction, ``errors``
    are what its driver raises, ``schema`` creates the tables if they are missing;
    ``name`` is for messages."""

    name: str
    connect: Callable[[], Connection]
    begin: str
    errors: tuple[type[Exception], ...]
    schema: Sequence[str]


class Database(ABC):
    """One log database, chosen at start; connections to it are made here, and it says
    what it can do (the module's rules)."""

    errors: tuple[type[Exception], ...]
    """Exceptions meaning "the database failed" (not "the data is wrong")."""
    shared: ClassVar[bool]
    """Whether other processes append to this log at the same time (*Shared*)."""

    # -- where it is (*Names*) -----------------------------------------------------

    @abstractmethod
    def describe(self) -> str:
        """The database, for messages: a path, or a URL without its password."""

    @abstractmethod
    def passed_to_child(self, variable: str) -> tuple[str, dict[str, str]]:
        """How a child process is told this database: its command-line argument and the
        variables to add to its environment. A target with a secret (a URL's password)
        travels in ``variable``, and the argument is then ``-``."""

    def redact(self, text: str) -> str:
        """``text`` (a driver's message) with the database's secret, if any, masked."""
        return text

    def exists(self) -> bool:
        """Whether there is a database to open (a file may not exist yet)."""
        return True

    def cannot_create(self) -> str | None:
        """Why a database that does not exist cannot be created, or None if it can."""
        return None

    @abstractmethod
    def discard(self) -> None:
        """Remove what a failed attempt created of a database that did not exist
        (``exists`` was false), so nothing half-made is left."""

    # -- connections and transactions (*Order*, *Schema*) -----------------------------

    @abstractmethod
    def connect(self, readonly: bool = False) -> Connection:
        """A new connection; transactions are the caller's."""

    def connect_writer(self) -> Connection:
        """A connection for the log's writer (tuned for it where the backend can be)."""
        return self.connect()

    @abstractmethod
    def prepare(self, conn: Connection) -> None:
        """Make the schema usable, or refuse (*Schema*)."""

    @abstractmethod
    def require_current(self, conn: Connection) -> None:
        """Refuse (``CLIError``) a database without a log of this version (*Schema*)."""

    @abstractmethod
    def begin_write(self, conn: Connection) -> int | None:
        """Start a write transaction in the log's order (*Order*); the committed log size
        where the database keeps one, else None."""

    @abstractmethod
    def begin_unordered(self, conn: Connection) -> None:
        """Start a write transaction that needs no place in the log's order (*Order*)."""

    @abstractmethod
    def begin_read(self, conn: Connection) -> None:
        """Start a read transaction whose reads all see one committed snapshot."""

    @abstractmethod
    def set_head(self, conn: Connection, size: int) -> None:
        """Record, in the open write transaction, that the log now has ``size`` leaves
        (*Order*), where the database keeps that count apart from the leaves."""

    @abstractmethod
    def limit_size(self, conn: Connection, max_bytes: int) -> None:
        """Cap the database at ``max_bytes``, where the backend has such a quota, so it is
        reached as a clean refusal rather than a full disk."""

    def broken(self, conn: Connection) -> bool:
        """True when ``conn`` can no longer be used (lost, closed): reconnect."""
        return False

    # -- failures at start (*Failures at start*) -----------------------------------------------

    @abstractmethod
    def fault(self, err: Exception) -> CLIError:
        """What ``err`` (one of ``errors``) means to the operator at start, in one line."""

    @contextlib.contextmanager
    def opening(self, close: Callable[[], None]) -> Iterator[None]:
        """Open or first read the database inside this block: a failure becomes its
        ``fault``, after ``close`` ran."""
        try:
            yield
        except self.errors as err:
            close()
            raise self.fault(err) from None

    def unreachable(self, err: BaseException) -> CLIError | None:
        """``err`` as the one line of a database that cannot be reached, or None when it
        is not that (a file's failures are classified by evidence: ``opening``)."""
        return None

    # -- processes sharing the log (*Shared*) ---------------------------------------

    @property
    def holds_map_rows(self) -> bool:
        """Whether the writer may fold the map in memory and write its rows later
        (``client.map.stored`` *Rows held back*): only where no other process reads or extends the
        map's tables."""
        return not self.shared

    def cluster(self) -> Cluster | None:
        """How the processes sharing this log agree on what is published, or None when
        one process owns it."""
        return None

    def embedded_witness_store(self) -> WitnessStore | None:
        """Where the embedded witness keeps its state when the processes sharing this log
        are one witness, or None: then it keeps its own file."""
        return None

    def __str__(self) -> str:
        return self.describe()


def unavailable(db: Database, err: BaseException) -> CLIError:
    """The one line for a database that cannot be used at start: it names the database
    (never its password), the driver's first line of evidence, and what to do."""
    text = str(err).strip()
    reason = text.splitlines()[0] if text else type(err).__name__
    return CLIError(
        f"storage_unavailable: cannot use the database {db.describe()} "
        f"({type(err).__name__}: {db.redact(reason)}): start it or check --db, "
        "then start again",
        DATABASE_UNAVAILABLE_EXIT,
    )


@contextlib.contextmanager
def reaching(db: Database) -> Iterator[None]:
    """Inside this block, a failure to reach the database is :func:`unavailable`'s one
    line (exit 69); a file's failures are left to ``storage_faults``, which classifies
    them by evidence."""
    try:
        yield
    except Exception as err:
        fault = db.unreachable(err)
        if fault is not None:
            raise fault from None
        raise
