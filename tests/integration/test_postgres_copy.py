"""``authority copy``: a real log, SQLite -> PostgreSQL -> SQLite, bytes and signatures
unchanged, verified before done; the PostgreSQL copy is served; a non-empty target is
refused and left as it was."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import aiohttp
import psycopg
import pytest

from deplog.authority.storage.copy import TABLES
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Signer
from deplog.client.tlog.receipt import Receipt, verify_receipt
from tests.builders import make_envelope, notice_leaf
from tests.integration.harness import AuthorityProcess, authority_command
from tests.integration.test_postgres_serve import JSON, with_password

pytestmark = pytest.mark.slow  # PostgreSQL and real processes

NOTICES = 12


def sqlite_rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    conn = sqlite3.connect(path)
    try:
        return {
            table: [
                tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                for row in conn.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {key}")
            ]
            for table, cols, key in TABLES
        }
    finally:
        conn.close()


def postgres_rows(url: str) -> dict[str, list[tuple[object, ...]]]:
    with psycopg.connect(url) as conn:
        return {
            table: [
                tuple(row)
                for row in conn.execute(
                    f"SELECT {', '.join(cols)} FROM {table} ORDER BY {key}".encode()
                )
            ]
            for table, cols, key in TABLES
        }


async def test_a_log_round_trips_through_postgresql_byte_for_byte_and_is_served(
    authority: AuthorityProcess, publisher: Signer, pg_url: str, tmp_path: Path
) -> None:
    receipts = []
    async with aiohttp.ClientSession() as http:
        for sequence in range(1, NOTICES + 1):
            envelope = make_envelope(publisher, sequence, tool=f"tool:org.acme/t{sequence % 3}")
            async with http.post(
                authority.url + "/v1/notices", data=envelope.canonical_bytes(), headers=JSON
            ) as response:
                assert response.status == 201
                receipts.append((envelope, Receipt.parse(await response.read())))
    assert authority.stop() == 0
    original = sqlite_rows(authority.data / "log.db")
    assert len(original["leaves"]) == NOTICES + 1
    assert len(original["checkpoints"]) > NOTICES // 4  # a batch or more, each signed

    url = with_password(pg_url)
    migrate = authority_command("migrate", "--db", url)
    assert migrate.returncode == 0, migrate.stderr
    to_pg = authority.run_cli(
        "copy", "--from", str(authority.data / "log.db"), "--to", url, "--json"
    )
    assert to_pg.returncode == 0, to_pg.stderr
    report = json.loads(to_pg.stdout)
    assert (report["size"], report["to"]) == (NOTICES + 1, pg_url)
    assert "s3cr3t-pw" not in to_pg.stdout + to_pg.stderr
    assert postgres_rows(pg_url) == original

    back = tmp_path / "back.db"
    to_sqlite = authority.run_cli("copy", "--from", url, "--to", str(back))
    assert to_sqlite.returncode == 0, to_sqlite.stderr
    assert "the copy verified" in to_sqlite.stdout
    assert sqlite_rows(back) == original

    again = authority.run_cli("copy", "--from", str(back), "--to", url)
    assert again.returncode == 1
    assert "already holds a log" in again.stderr and "s3cr3t-pw" not in again.stderr
    assert postgres_rows(pg_url) == original

    # The PostgreSQL copy serves the same log: old receipts verify against it, and it grows.
    authority.extra_args = ["--db", url]
    authority.start()
    async with aiohttp.ClientSession() as http:
        async with http.get(authority.url + "/checkpoint") as response:
            served, _ = open_checkpoint(await response.read(), authority.log_verifier)
        assert (served.size, served.root_hash) == original["checkpoints"][-1][:2]
        envelope = make_envelope(publisher, NOTICES + 1)
        async with http.post(
            authority.url + "/v1/notices", data=envelope.canonical_bytes(), headers=JSON
        ) as response:
            assert response.status == 201
            receipt = Receipt.parse(await response.read())
    assert receipt.index == NOTICES + 1
    verify_receipt(receipt, notice_leaf(envelope), authority.log_verifier)
    for envelope, old in receipts:
        verify_receipt(old, notice_leaf(envelope), authority.log_verifier)
