"""Where the log lives: the interface every storage backend implements.

A backend is a driver behind this one interface (``sqlite.py``, ``postgres.py``), chosen by
``backends.open_database``; everything above storage runs the same SQL on any of them
(``client.plumbing.dbapi``) and, where they differ, asks the ``Database`` what it can do
(docs/architecture.md, "A new storage backend", has the table).

Rules, cited by name:
  * **Names.** ``describe()`` never shows a secret, ``redact`` masks one in a driver's
    message, and only ``passed_to_child`` reopens it: a secret then travels in the child's
    environment, never its argv.
  * **Order.** ``begin_write`` starts the one kind of transaction that may write the log,
    in its order, and ``set_head`` records the new size there; ``begin_unordered`` starts
    a write that needs no place in the order (a checkpoint row, the published note).
  * **Schema.** ``prepare`` makes a database usable by ``Log`` or refuses;
    ``require_current`` refuses, read-only, a database without a log of this version.
  * **Shared.** ``shared``: other processes append to the same log at once, ordered by the
    database; plain reads then need a snapshot (``begin_read``).
  * **Failures at start.** A failure to open the database at start is one line for its
    operator, never a traceback.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from deplog.client.errors import CLIError
from deplog.client.plumbing.dbapi import Connection, Query

if TYPE_CHECKING:
    from deplog.authority.storage.cluster import Cluster

DATABASE_UNAVAILABLE_EXIT = 69
"""Exit status when the database cannot be reached at start (sysexits ``EX_UNAVAILABLE``,
as for a listen address)."""


@dataclass(frozen=True)
class WitnessStore:
    """Where the embedded witness keeps its state in the log's own database
    (``WitnessState.over``): connections with its tables in reach, the first statement of a
    write, the driver's errors, the statements creating the tables, a name for messages."""

    name: str
    connect: Callable[[], Connection]
    begin: str
    errors: tuple[type[Exception], ...]
    schema: Sequence[str]


class Database(ABC):
    """One log database: its connections, and what it can do (the module's rules)."""

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
        """A child process's argument for this database, and variables for its environment
        (a secret travels in ``variable``, the argument then ``-``: *Names*)."""

    def redact(self, text: str) -> str:
        """``text`` (a driver's message) with the database's secret, if any, masked."""
        return text

    def exists(self) -> bool:
        """Whether there is a database to open (a file may not exist yet)."""
        return True

    def cannot_create(self) -> str | None:
        """Why a database that does not exist cannot be created, or None if it can."""
        return None

    def discard(self) -> None:
        """Remove what a failed attempt created of a database that did not exist (if any)."""
        return None

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
    def begin_write(
        self, conn: Connection, reads: Sequence[Query] = ()
    ) -> tuple[int | None, list[list[Any]]]:
        """Start a write in the log's order (*Order*): the committed size if kept (else
        None), and the rows of ``reads`` run next, under the order (with the start, in one
        round trip, where the database is distant)."""

    @abstractmethod
    def begin_unordered(self, conn: Connection) -> None:
        """Start a write transaction that needs no place in the log's order (*Order*)."""

    @abstractmethod
    def begin_read(self, conn: Connection) -> None:
        """Start a read transaction whose reads all see one committed snapshot."""

    def set_head(self, conn: Connection, size: int) -> None:
        """Record in the open write that the log now has ``size`` leaves (*Order*)."""
        return None

    def limit_size(self, conn: Connection, max_bytes: int) -> None:
        """Cap the database at ``max_bytes`` where the backend has a quota."""
        return None

    def broken(self, conn: Connection) -> bool:
        """True when ``conn`` can no longer be used (lost, closed): reconnect."""
        return False

    # -- failures at start (*Failures at start*) -----------------------------------------------

    @abstractmethod
    def fault(self, err: Exception) -> CLIError:
        """What ``err`` (one of ``errors``) means to the operator at start, in one line."""

    @contextlib.contextmanager
    def opening(self, close: Callable[[], None]) -> Iterator[None]:
        """A failure to open or first read the database inside is its ``fault``, after ``close``."""
        try:
            yield
        except self.errors as err:
            close()
            raise self.fault(err) from None

    def unreachable(self, err: BaseException) -> CLIError | None:
        """``err`` as the one line of a database that cannot be reached, or None."""
        return None

    # -- processes sharing the log (*Shared*) ---------------------------------------

    @property
    def holds_map_rows(self) -> bool:
        """Whether the writer may hold the map's rows back: no other process reads its tables."""
        return not self.shared

    def cluster(self) -> Cluster | None:
        """How the processes sharing this log agree on what is published (*Shared*)."""
        return None

    def embedded_witness_store(self) -> WitnessStore | None:
        """The embedded witness's state in this database (*Shared*), or None: its own file."""
        return None

    def __str__(self) -> str:
        return self.describe()


def unavailable(db: Database, err: BaseException) -> CLIError:
    """The one line for a database that cannot be used at start: the database (never its
    password), the driver's first line of evidence, and what to do."""
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
    """A failure to reach the database inside is :func:`unavailable`'s one line (exit 69)."""
    try:
        yield
    except Exception as err:
        fault = db.unreachable(err)
        if fault is not None:
            raise fault from None
        raise
