"""The log's PostgreSQL schema: the database itself refuses what would fork or rewrite the
log (real SQL against a real cluster; each refusal is the database's, not Python's)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deplog.authority.log import Log
from deplog.authority.storage import schema_postgres, store
from deplog.authority.storage.backends import open_database
from deplog.authority.storage.errors import StorageError
from deplog.authority.storage.postgres import PostgresDatabase
from deplog.client.errors import CLIError
from deplog.client.plumbing.dbapi import Connection, write
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope, register
from tests.conftest import migrated

pytestmark = pytest.mark.slow  # PostgreSQL

ORIGIN = "pg.deplog.example/log"


@pytest.fixture
def url(pg_url: str) -> Iterator[str]:
    """A migrated database holding a log of 3 entries (a publisher and 2 notices), signed."""
    migrated(pg_url)
    signer = Signer.generate(ORIGIN)
    publisher = Signer.generate("acme")
    log = Log(pg_url, signer, ORIGIN)
    register(log, publisher)
    log.sequence([make_envelope(publisher, 1), make_envelope(publisher, 2)])
    log.close()
    yield pg_url


def refused(url: str, sql: str) -> psycopg.Error:
    """Run ``sql`` in its own transaction; it must fail, and change nothing."""
    with psycopg.connect(url) as conn:
        before = conn.execute("SELECT size FROM log_head").fetchone()
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(sql.encode())
        conn.rollback()
        assert conn.execute("SELECT size FROM log_head").fetchone() == before
    return caught.value


@pytest.mark.parametrize("table", ["leaves", "nodes", "checkpoints", "notices", "tool_entries"])
def test_stored_rows_cannot_be_updated_deleted_or_truncated(url: str, table: str) -> None:
    column = {"leaves": "data", "nodes": "hash", "checkpoints": "note"}.get(table, "idx")
    value = "'\\x00'::bytea" if column != "idx" else "idx + 1"
    for sql in (
        f"UPDATE {table} SET {column} = {value}",
        f"DELETE FROM {table}",
        f"TRUNCATE {table} CASCADE",
    ):
        err = refused(url, sql)
        assert "append-only" in str(err)


def test_a_leaf_must_be_the_next_index(url: str) -> None:
    err = refused(url, "INSERT INTO leaves VALUES (7, '\\x00', '\\x00')")
    assert "not the next index" in str(err)
    err = refused(url, "INSERT INTO leaves VALUES (1, '\\x00', '\\x00')")
    assert isinstance(err, psycopg.errors.IntegrityError)


def test_leaves_cannot_commit_without_moving_the_head(url: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(b"INSERT INTO leaves VALUES (3, '\\x00', '\\x00')")
        with pytest.raises(psycopg.errors.CheckViolation, match="without moving log_head"):
            conn.commit()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM leaves").fetchone() == (3,)


def test_the_head_is_the_number_of_leaves_and_never_moves_back(url: str) -> None:
    assert "committed leaves" in str(refused(url, "UPDATE log_head SET size = 2"))
    assert "committed leaves" in str(refused(url, "UPDATE log_head SET size = 4"))
    assert "only moves forward" in str(refused(url, "DELETE FROM log_head"))
    with psycopg.connect(url) as conn:
        conn.execute(b"INSERT INTO leaves VALUES (3, '\\x00', '\\x00')")
        conn.execute("UPDATE log_head SET size = 4")
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT size FROM log_head").fetchone() == (4,)


def test_a_second_root_for_a_size_is_refused(url: str) -> None:
    err = refused(url, "INSERT INTO checkpoints VALUES (3, '\\x00', '\\x00', 'now')")
    assert isinstance(err, psycopg.errors.UniqueViolation)


def test_no_checkpoint_for_a_size_the_log_has_not_committed(url: str) -> None:
    err = refused(url, "INSERT INTO checkpoints VALUES (4, '\\x00', '\\x00', 'now')")
    assert "beyond the committed log" in str(err)


def test_the_published_note_never_moves_to_a_smaller_size(url: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO published VALUES (1, 3, '\\x00')")
    assert "never moves back" in str(refused(url, "UPDATE published SET size = 2"))
    assert "never moves back" in str(refused(url, "DELETE FROM published"))


def test_migrate_is_idempotent_and_refuses_a_newer_schema(pg_url: str) -> None:
    db = open_database(pg_url)
    conn = db.connect()
    try:
        current = schema_postgres.CURRENT_VERSION
        assert schema_postgres.migrate(conn, db.describe()) == (0, current)
        assert schema_postgres.migrate(conn, db.describe()) == (current, current)
        conn.execute("UPDATE schema_version SET version = 99")
        with pytest.raises(CLIError) as newer:
            schema_postgres.migrate(conn, db.describe())
        assert newer.value.exit_status == 78
        assert "newer than this authority's" in newer.value.message
        assert schema_postgres.schema_version(conn) == 99
    finally:
        conn.close()


def test_version_two_lays_the_map_out_again_under_the_same_signed_root(pg_url: str) -> None:
    """A version 1 database (format 2's map: one row per inner node, a leaf table) migrates
    to version 2, whose authority folds the map again from the log at start: the root the
    latest checkpoint's line carries (start-up refuses any other), and appends go on."""
    signer, publisher = Signer.generate(ORIGIN), Signer.generate("acme")
    log = Log(migrated(pg_url), signer, ORIGIN)
    register(log, publisher)
    log.sequence([make_envelope(publisher, 1), make_envelope(publisher, 2)])
    signed_root = log.map.root()
    log.close()
    v1_map_tables = ("map_inner", "map_leaf", "map_record", "map_state")
    with psycopg.connect(pg_url) as conn:  # back to version 1's map tables, format 2 rows
        for table in ("map_group", "map_record", "map_state"):
            conn.execute(f"DROP TABLE {table}".encode())
        for statement in schema_postgres.MIGRATIONS[1]:
            if any(f"CREATE TABLE {table} " in statement for table in v1_map_tables):
                conn.execute(statement.encode())
        conn.execute("INSERT INTO map_state VALUES (1, 2, 3, NULL, NULL, NULL)")
        conn.execute("INSERT INTO map_leaf VALUES ('\\x00', '\\x00')")
        conn.execute(b"DROP INDEX notices_by_idx")  # and version 3's objects
        conn.execute(b"DROP TABLE invalid_entries")
        conn.execute(b"DROP TABLE tools")  # and version 4's
        conn.execute("UPDATE schema_version SET version = 1")
    with pytest.raises(CLIError, match="authority migrate"):
        Log(pg_url, signer, ORIGIN)
    db = open_database(pg_url)
    conn = db.connect()
    try:
        assert schema_postgres.migrate(conn, db.describe()) == (1, schema_postgres.CURRENT_VERSION)
        tables = {str(r[0]) for r in conn.execute("SELECT tablename FROM pg_tables").fetchall()}
    finally:
        conn.close()
    assert "map_group" in tables and not tables & {"map_inner", "map_leaf"}
    log = Log(pg_url, signer, ORIGIN)
    assert (log.map.size(), log.map.root()) == (3, signed_root)
    log.sequence([make_envelope(publisher, 3)])
    assert log.map.size() == 4 and log.map.root() != signed_root
    log.close()


def test_version_four_fills_the_tools_table_from_the_logged_notices(pg_url: str) -> None:
    signer, publisher = Signer.generate(ORIGIN), Signer.generate("acme")
    log = Log(migrated(pg_url), signer, ORIGIN)
    register(log, publisher)
    log.sequence([make_envelope(publisher, 1), make_envelope(publisher, 2, tool="tool:org.acme/b")])
    log.sequence([make_envelope(publisher, 3)])
    log.close()
    with psycopg.connect(pg_url) as conn:  # back to version 3
        conn.execute(b"DROP TABLE tools")
        conn.execute("UPDATE schema_version SET version = 3")
    db = open_database(pg_url)
    conn = db.connect()
    try:
        assert schema_postgres.migrate(conn, db.describe()) == (3, 4)
        rows = conn.execute("SELECT tool_id, first_idx FROM tools ORDER BY tool_id").fetchall()
    finally:
        conn.close()
    assert [(str(t), int(i)) for t, i in rows] == [
        ("tool:org.acme/b", 2),
        ("tool:org.acme/search", 1),
    ]


def test_a_log_refuses_a_database_without_the_schema(pg_cluster: object, pg_url: str) -> None:
    password_url = pg_url.replace("postgres@", "postgres:hunter2@")
    with pytest.raises(CLIError) as caught:
        Log(password_url, Signer.generate(ORIGIN), ORIGIN)
    assert caught.value.exit_status == 78
    assert "authority migrate" in caught.value.message
    assert "hunter2" not in caught.value.message
    assert PostgresDatabase(password_url).describe() in caught.value.message


def test_an_unreachable_database_is_one_line_exit_69_without_the_password() -> None:
    with pytest.raises(CLIError) as caught:
        Log("postgresql://u:hunter2@127.0.0.1:9/nowhere", Signer.generate(ORIGIN), ORIGIN)
    assert caught.value.exit_status == 69
    message = caught.value.message
    assert "\n" not in message and "hunter2" not in message
    assert "postgresql://u@127.0.0.1:9/nowhere" in message


def test_a_database_is_described_without_any_password() -> None:
    def described(url: str) -> str:
        return PostgresDatabase(url).describe()

    assert described("postgresql://a:b@h:1/d") == "postgresql://a@h:1/d"
    assert described("postgresql://h/d?password=x&sslmode=require") == (
        "postgresql://h/d?sslmode=require"
    )
    assert described("postgresql://a@h/d") == "postgresql://a@h/d"


def test_concurrent_migrations_are_serialized(pg_url: str) -> None:
    db = open_database(pg_url)
    outcomes: list[tuple[int, int]] = []

    def migrate() -> None:
        conn = db.connect()
        try:
            outcomes.append(schema_postgres.migrate(conn, db.describe()))
        finally:
            conn.close()

    threads = [threading.Thread(target=migrate) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    current = schema_postgres.CURRENT_VERSION
    assert sorted(outcomes) == [(0, current), (current, current), (current, current)]


def test_a_writer_whose_connection_was_terminated_reconnects_on_its_next_batch(
    pg_url: str,
) -> None:
    url = migrated(pg_url)
    log = Log(url, Signer.generate(ORIGIN), ORIGIN)
    publisher = Signer.generate("acme")
    register(log, publisher)
    _terminate_writers(url)
    with pytest.raises(StorageError):
        log.sequence([make_envelope(publisher, 1)])
    [result] = log.sequence([make_envelope(publisher, 1)])
    assert result.index == 1 and result.checkpoint is not None
    assert result.checkpoint.size == 2
    log.close()


def _terminate_writers(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def test_a_connection_lost_in_the_batch_transaction_is_a_storage_error_then_recovers(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lost after the checkpoint is signed, before the commit: 503, never a raw driver error
    (the sequencer would log it as a bug), and nothing of the batch stays; the resubmission
    logs the notice under a checkpoint of its own."""
    url = migrated(pg_url)
    log = Log(url, Signer.generate(ORIGIN), ORIGIN)
    publisher = Signer.generate("acme")
    register(log, publisher)
    insert_checkpoint = store.insert_checkpoint

    def lose_the_connection_first(conn: Connection, *row: Any) -> None:
        monkeypatch.setattr(store, "insert_checkpoint", insert_checkpoint)
        _terminate_writers(url)
        insert_checkpoint(conn, *row)

    monkeypatch.setattr(store, "insert_checkpoint", lose_the_connection_first)
    envelope = make_envelope(publisher, 1)  # once: a second one may carry a later issued_at
    with pytest.raises(StorageError):
        log.sequence([envelope])
    [result] = log.sequence([envelope])
    assert (result.index, result.created) == (1, True)
    assert result.checkpoint is not None and result.checkpoint.size == 2
    log.close()


@pytest.fixture
def kept(pg_url: str) -> Iterator[Connection]:
    """A connection of the adapter, and a table ``kept`` to write to."""
    conn = PostgresDatabase(pg_url).connect()
    conn.execute("CREATE TABLE kept (t TEXT, b BYTEA, n BIGINT)")
    yield conn
    conn.close()


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00")),
    data=st.binary(max_size=300),
    number=st.integers(-(2**63), 2**63 - 1),
)
def test_a_deferred_write_stores_its_parameters_exactly(
    kept: Connection, text: str, data: bytes, number: int
) -> None:
    """Rule 7 quotes parameters as literals: every text, byte string and integer survives."""
    write(kept, "BEGIN")
    write(kept, "INSERT INTO kept (t, b, n) VALUES (?, ?, ?)", (text, data, number))
    row = kept.execute("SELECT t, b, n FROM kept").fetchone()
    kept.execute("ROLLBACK")
    assert (row[0], bytes(row[1]), row[2]) == (text, data, number)


def test_a_rollback_drops_the_deferred_writes(kept: Connection) -> None:
    write(kept, "BEGIN")
    write(kept, "INSERT INTO kept (n) VALUES (?)", (1,))
    kept.execute("ROLLBACK")
    assert not kept.in_transaction
    assert kept.execute("SELECT count(*) FROM kept").fetchone() == (0,)


def test_a_failing_deferred_write_fails_the_read_it_goes_with_and_what_follows_it(
    kept: Connection,
) -> None:
    write(kept, "BEGIN")
    write(kept, "INSERT INTO missing (n) VALUES (?)", (1,))
    write(kept, "INSERT INTO kept (n) VALUES (?)", (2,))
    with pytest.raises(psycopg.errors.UndefinedTable):
        kept.execute("SELECT count(*) FROM kept")
    kept.execute("ROLLBACK")
    assert kept.execute("SELECT count(*) FROM kept").fetchone() == (0,)


@pytest.mark.parametrize("last", ["execute", "executemany", "deferred"])
def test_a_transaction_left_idle_after_any_statement_ends_at_the_idle_timeout(
    pg_url: str, last: str
) -> None:
    """Rules 5 and 7 of authority/storage/postgres.py: a writer frozen after a pipelined
    ``executemany``, or after deferred writes went with a read, loses its transaction (and
    the log's order) like after any other."""
    conn = PostgresDatabase(pg_url).connect()
    try:
        conn.execute("SET idle_in_transaction_session_timeout = '1s'")
        conn.execute("CREATE TABLE frozen (a integer)")
        write(conn, "BEGIN")
        if last == "execute":
            conn.execute("INSERT INTO frozen VALUES (?)", (1,))
        elif last == "executemany":
            conn.executemany("INSERT INTO frozen VALUES (?)", [(1,), (2,)])
        else:
            write(conn, "INSERT INTO frozen VALUES (?)", (1,))
            assert conn.execute("SELECT count(*) FROM frozen").fetchone() == (1,)
        time.sleep(2)
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
            conn.execute("SELECT 1")
    finally:
        conn.close()
