"""Fixtures shared by the tests: real keys, a settable clock, a real local log and a
follower state fed by it, ports on 127.0.0.1, PostgreSQL databases. The values they hold
are built by ``tests/builders.py``."""

from __future__ import annotations

import os
import socket
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import TrustedState
from deplog.client.model.notice import Envelope
from deplog.client.tlog.note import Signer
from tests.builders import ORIGIN, Clock, LocalLog, make_notice, unused_port
from tests.pgcluster import PgCluster, PostgresMissing

# No per-example deadline: a deadline is a timing assertion, and these machines are shared
# and noisy (speed is measured in bench/). The fast lane's share of a heavy property test is a
# few examples, where its thorough run (the same check on the full count, marked slow) runs
# in the full suite.
settings.register_profile("default", deadline=None)
settings.load_profile("default")
settings.register_profile("fast", max_examples=15, deadline=None)


@pytest.fixture(scope="session")
def authority() -> Signer:
    """The authority's log key, which signs publisher statements (under tests/integration,
    ``authority`` is a running authority server instead)."""
    return Signer.generate("log.example.org")


@pytest.fixture
def log_signer() -> Signer:
    """A log's key, named for ``ORIGIN``: it signs checkpoints and registry changes (and is
    ``local``'s log key)."""
    return Signer.generate(ORIGIN)


@pytest.fixture
def publisher() -> Signer:
    """Publisher ``acme``'s key (``register`` gives it ``org.acme``)."""
    return Signer.generate("acme")


@pytest.fixture(scope="session")
def publisher_key() -> Signer:
    """The publisher's signing key."""
    return Signer.generate("example-key-1")


@pytest.fixture
def signed_envelope(publisher_key: Signer) -> Envelope:
    """A valid deprecate notice signed by ``publisher_key``."""
    return Envelope.sign(make_notice(), publisher_key)


@pytest.fixture
def clock() -> Clock:
    """A settable clock, starting now."""
    return Clock()


@pytest.fixture
def local(tmp_path: Path, log_signer: Signer) -> LocalLog:
    """An authority log in a temporary SQLite file, signed by ``log_signer``, publisher acme
    owning org.acme."""
    return LocalLog(tmp_path, signer=log_signer)


@pytest.fixture
def trusted(tmp_path: Path, local: LocalLog) -> Iterator[TrustedState]:
    """A follower's trusted state for ``local``'s log; nothing synced yet."""
    state = LocalState(tmp_path / "follower.db", ORIGIN)
    yield TrustedState(state, local.signer.verifier())
    state.close()


# -- ports on 127.0.0.1 --------------------------------------------------------------------


@pytest.fixture
def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on, for a server the test starts (``unused_port``)."""
    return unused_port()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another socket is listening on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


# -- PostgreSQL ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """A throwaway PostgreSQL cluster for the session (tests/pgcluster.py). Without
    PostgreSQL or psycopg the tests that need it skip loudly; under CI=true they fail."""
    try:
        cluster = PgCluster()
    except PostgresMissing as err:
        if os.environ.get("CI") == "true":
            raise RuntimeError(f"{err}: CI must install it (.ci/run) and run these tests") from None
        pytest.skip(f"POSTGRESQL IS MISSING: the PostgreSQL tests did not run ({err})")
    try:
        yield cluster
    finally:
        cluster.destroy()


def running_cluster(request: pytest.FixtureRequest) -> PgCluster:
    """The session's cluster, running. A test on PostgreSQL is slow (a cluster per worker,
    a database per test): one not marked slow fails here, so that the fast lane,
    ``-m "not slow"``, never starts a cluster."""
    if request.node.get_closest_marker("slow") is None:
        pytest.fail(f"{request.node.nodeid} uses PostgreSQL: mark it, or its parameter, slow")
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    if not cluster.running:
        cluster.start()  # a previous test stopped it and failed before restarting
    return cluster


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    """A fresh, empty database on the session's cluster (its ``postgresql://`` URL)."""
    return running_cluster(request).create_database()


@dataclass(frozen=True)
class Backend:
    """Where a test's log lives: ``kind`` is "sqlite" or "postgresql", ``db`` the ``--db``
    value (a SQLite file path or a PostgreSQL URL)."""

    kind: str
    db: str

    def alter(self, sqlite_sql: str, postgres_sql: str | None = None) -> None:
        """Change stored data behind the log's back: ``;``-separated statements, in one
        transaction, as the database's owner (triggers may be dropped or disabled first)."""
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.db)
            for statement in sqlite_sql.split(";"):
                conn.execute(statement)
            conn.commit()
            conn.close()
            return
        import psycopg

        with psycopg.connect(self.db) as pg:
            for statement in (postgres_sql or sqlite_sql).split(";"):
                pg.execute(statement.encode())


def migrated(url: str) -> str:
    """``url``'s database with the log's schema (what ``authority migrate`` does)."""
    from deplog.authority.storage import schema_postgres
    from deplog.authority.storage.backends import open_database

    db = open_database(url)
    conn = db.connect()
    try:
        schema_postgres.migrate(conn, db.describe())
    finally:
        conn.close()
    return url


@pytest.fixture(scope="session")
def pg_template(pg_cluster: PgCluster) -> str:
    """The name of a migrated, never-connected database that ``backend`` copies: a copy
    costs one CREATE DATABASE, a fresh database CREATE DATABASE and the migration (about
    a quarter more, measured on this machine: 527 ms against 690 ms, medians under load)."""
    url = migrated(pg_cluster.create_database())
    return url.rsplit("/", 1)[1]


POSTGRESQL = pytest.param("postgresql", marks=pytest.mark.slow)
"""The PostgreSQL half of a test on both backends: slow, so the fast lane keeps SQLite's."""
BACKENDS = ("sqlite", POSTGRESQL)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``both_backends`` that uses ``authority_db`` runs on each backend."""
    if "authority_db" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "both_backends"
    ):
        metafunc.parametrize("authority_db", BACKENDS, indirect=True)


@pytest.fixture
def authority_db(request: pytest.FixtureRequest) -> str | None:
    """An authority's ``--db``: None (SQLite in its data directory) unless the test is
    marked ``both_backends`` and runs on PostgreSQL: then a fresh, empty database's URL
    (``authority migrate`` or ``migrated`` gives it the schema). For tests where only
    some cases run on both backends; ``backend`` parametrizes every test that uses it."""
    if getattr(request, "param", "sqlite") == "sqlite":
        return None
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Parametrises a storage-level test over both backends, each with a fresh database
    ready for a ``Log`` (on PostgreSQL: a copy of the migrated ``pg_template``)."""
    if request.param == "sqlite":
        return Backend("sqlite", str(tmp_path / "log.db"))
    return Backend("postgresql", request.getfixturevalue("pg_migrated_url"))


@pytest.fixture
def pg_migrated_url(request: pytest.FixtureRequest) -> str:
    """A fresh database with the log's schema (a copy of ``pg_template``): its URL."""
    cluster = running_cluster(request)
    return cluster.create_database(request.getfixturevalue("pg_template"))
