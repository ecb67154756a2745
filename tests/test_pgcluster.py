"""The throwaway PostgreSQL cluster the backend tests run on (tests/pgcluster.py)."""

from __future__ import annotations

import psycopg
import pytest

from tests.conftest import Backend
from tests.pgcluster import PgCluster

pytestmark = pytest.mark.slow  # PostgreSQL


def test_each_test_gets_a_fresh_empty_database(pg_cluster: PgCluster, pg_url: str) -> None:
    other = pg_cluster.create_database()
    assert other != pg_url
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE t (x integer)")
        conn.execute("INSERT INTO t VALUES (1)")
    with psycopg.connect(other) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
    assert row == (0,)


def test_the_cluster_runs_with_fsync_on(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SHOW fsync").fetchone() == ("on",)


def test_a_stopped_cluster_refuses_connections_and_restarts_with_its_data(
    pg_cluster: PgCluster, pg_url: str
) -> None:
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE kept (x integer)")
        conn.execute("INSERT INTO kept VALUES (7)")
    pg_cluster.stop()
    try:
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(pg_url, connect_timeout=2)
    finally:
        pg_cluster.start()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT x FROM kept").fetchone() == (7,)


def test_a_password_in_the_url_is_accepted(pg_cluster: PgCluster, pg_url: str) -> None:
    dbname = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_cluster.url(dbname, password="s3cret")) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_backend_names_a_fresh_database_of_its_kind(backend: Backend) -> None:
    if backend.kind == "sqlite":
        assert backend.db.endswith("log.db")
    else:
        assert backend.db.startswith("postgresql://")
        with psycopg.connect(backend.db) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
