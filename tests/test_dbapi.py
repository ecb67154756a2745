"""``insert_rows``: the same rows as ``executemany``, in few statements."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.plumbing.dbapi import MAX_PARAMETERS, insert_rows


@pytest.fixture
def conn() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    yield conn
    conn.close()


@pytest.fixture
def statements(conn: sqlite3.Connection) -> list[str]:
    """Every statement ``conn`` runs from here on, its values bound in."""
    ran: list[str] = []
    conn.set_trace_callback(ran.append)
    return ran


def rows_each(statements: list[str]) -> list[int]:
    return [s.count("), (") + 1 for s in statements]


def table(conn: sqlite3.Connection, name: str, width: int) -> None:
    columns = ", ".join(f"c{i} BLOB" for i in range(1, width))
    conn.execute(f"CREATE TABLE {name} (k INTEGER PRIMARY KEY{', ' if columns else ''}{columns})")


def head(name: str, width: int) -> str:
    return f"INSERT INTO {name} ({', '.join(['k', *(f'c{i}' for i in range(1, width))])})"


def rows_of(conn: sqlite3.Connection, name: str) -> list[tuple[object, ...]]:
    return conn.execute(f"SELECT * FROM {name} ORDER BY k").fetchall()


@settings(max_examples=60, deadline=None)
@given(width=st.integers(1, 5), count=st.integers(0, 700), seed=st.binary(max_size=4))
def test_the_rows_are_those_executemany_writes(width: int, count: int, seed: bytes) -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    table(conn, "one", width)
    table(conn, "many", width)
    rows = [(k, *(seed + bytes([k % 256, c]) for c in range(1, width))) for k in range(count)]
    insert_rows(conn, head("one", width), rows)
    conn.executemany(f"{head('many', width)} VALUES ({', '.join('?' * width)})", rows)
    assert rows_of(conn, "one") == rows_of(conn, "many")
    conn.close()


def test_a_batch_takes_one_statement_per_binary_digit_of_its_count(
    conn: sqlite3.Connection, statements: list[str]
) -> None:
    table(conn, "t", 2)
    statements.clear()
    insert_rows(conn, head("t", 2), [(k, b"v") for k in range(0b101101)])
    assert rows_each(statements) == [32, 8, 4, 1]


def test_no_statement_binds_more_parameters_than_the_oldest_sqlite_allows(
    conn: sqlite3.Connection, statements: list[str]
) -> None:
    table(conn, "t", 4)
    statements.clear()
    insert_rows(conn, head("t", 4), [(k, b"a", b"b", b"c") for k in range(1000)])
    assert max(rows_each(statements)) * 4 <= MAX_PARAMETERS
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 1000


def test_the_tail_makes_it_an_upsert(conn: sqlite3.Connection) -> None:
    table(conn, "t", 2)
    insert_rows(conn, head("t", 2), [(1, b"old"), (2, b"old")])
    insert_rows(
        conn,
        head("t", 2),
        [(2, b"new"), (3, b"new")],
        "ON CONFLICT (k) DO UPDATE SET c1 = excluded.c1",
    )
    assert rows_of(conn, "t") == [(1, b"old"), (2, b"new"), (3, b"new")]


def test_no_rows_run_no_statement(conn: sqlite3.Connection, statements: list[str]) -> None:
    insert_rows(conn, "INSERT INTO missing (k)", [])
    assert statements == []
