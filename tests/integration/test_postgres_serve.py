"""``authority serve --db postgresql://...``: a real authority process on a real cluster.

Migrate (idempotent, ``--json``), serve, publish with receipts that verify, check; a
database without the schema, or one that cannot be reached, refuses to start with one
line naming it (never its password) and its exit status; while serving, a stopped
database is 503 ``storage_unavailable`` and the service comes back by itself when the
database does, with nothing acknowledged lost.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import aiohttp
import psycopg
import pytest

from deplog.authority.cli import main as authority_main
from deplog.authority.storage import schema_postgres
from deplog.authority.storage.reader import ReaderPool
from deplog.client.tlog.note import Signer
from deplog.client.tlog.receipt import Receipt, verify_receipt
from tests.builders import make_envelope, notice_leaf
from tests.conftest import migrated
from tests.integration.harness import ORIGIN, AuthorityProcess, authority_command, publish
from tests.pgcluster import PgCluster

pytestmark = pytest.mark.slow  # PostgreSQL and real processes

JSON = {"Content-Type": "application/json"}


def with_password(url: str) -> str:
    """The same database, named with a password (trust authentication ignores it)."""
    return url.replace("postgres@", "postgres:s3cr3t-pw@")


@pytest.fixture
def pg_authority(tmp_path: Path, pg_url: str, publisher: Signer) -> AuthorityProcess:
    """An initialized authority whose log is in a migrated PostgreSQL database."""
    url = with_password(pg_url)
    assert authority_command("migrate", "--db", url).returncode == 0
    authority = AuthorityProcess(tmp_path / "authority", extra_args=["--db", url])
    files = ["--data", str(authority.data), "--keys", str(authority.keys)]
    assert authority_main(["init", *files, "--origin", ORIGIN, "--db", url]) == 0
    add = ["publisher", "add", publisher.name, *files, "--db", url, "--namespace", "org.acme"]
    assert authority_main([*add, "--key", publisher.verifier().vkey()]) == 0
    return authority


def test_migrate_creates_then_finds_the_schema_current(pg_url: str) -> None:
    url = with_password(pg_url)
    first = authority_command("migrate", "--db", url, "--json")
    assert first.returncode == 0, first.stderr
    current = schema_postgres.CURRENT_VERSION
    assert json.loads(first.stdout) == {"database": pg_url, "before": 0, "after": current}
    again = authority_command("migrate", "--db", url)
    assert again.returncode == 0
    assert f"schema version {current} is current; nothing changed" in again.stdout
    assert "s3cr3t-pw" not in first.stdout + first.stderr + again.stdout + again.stderr


def test_serve_refuses_a_database_without_the_schema(tmp_path: Path, pg_url: str) -> None:
    done = authority_command(
        "serve", "--data", str(tmp_path / "d"), "--keys", str(tmp_path / "k"), "--port", "0",
        "--db", with_password(pg_url),
    )  # fmt: skip
    assert done.returncode == 78
    warning, line = done.stderr.strip().splitlines()
    assert warning.startswith("authority: warning: the --db URL holds a password")
    assert "run 'authority migrate --db URL' first" in line and pg_url in line
    assert "s3cr3t-pw" not in done.stdout + done.stderr


def test_serve_on_an_unreachable_database_is_one_line_exit_69(tmp_path: Path) -> None:
    url = "postgresql://deplog:s3cr3t-pw@127.0.0.1:9/log"
    done = authority_command(
        "serve", "--data", str(tmp_path / "d"), "--keys", str(tmp_path / "k"), "--port", "0",
        "--db", url,
    )  # fmt: skip
    assert done.returncode == 69
    warning, line = done.stderr.strip().splitlines()
    assert warning.startswith("authority: warning: the --db URL holds a password")
    assert line.startswith("authority: storage_unavailable: cannot use the database ")
    assert "postgresql://deplog@127.0.0.1:9/log" in line and "start it or check --db" in line
    assert "s3cr3t-pw" not in done.stdout + done.stderr


async def test_serve_publishes_receipts_that_verify_and_check_passes(
    pg_authority: AuthorityProcess, publisher: Signer
) -> None:
    pg_authority.start()
    try:
        async with aiohttp.ClientSession() as http:
            for sequence in (1, 2, 3):
                envelope = make_envelope(publisher, sequence)
                async with http.post(
                    pg_authority.url + "/v1/notices", data=envelope.canonical_bytes(), headers=JSON
                ) as response:
                    assert response.status == 201
                    receipt = Receipt.parse(await response.read())
                verify_receipt(receipt, notice_leaf(envelope), pg_authority.log_verifier)
                assert receipt.index == sequence  # the publisher's registration is 0
            async with http.get(pg_authority.url + "/v1/entries?start=0&end=4") as response:
                assert response.status == 200
                assert len((await response.json())["entries"]) == 4
    finally:
        assert pg_authority.stop() == 0
    url = pg_authority.extra_args[1]
    files = ["--data", str(pg_authority.data), "--keys", str(pg_authority.keys)]
    check = authority_command("check", *files, "--db", url, "--json")
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout) == {"size": 4, "problem": None}


ROUND_TRIPS_PER_RECEIPT = 9
"""Statements an authority sends PostgreSQL for a lone receipt, each a round trip: 2 for
the batch, 5 for the publication round (docs/architecture.md), and the read of the
checkpoint it then serves, with one to spare. Distance multiplies them (BENCHMARKS.md,
"Across hosts"): the receipt took about 50 before they were counted."""
_LOGGED = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] LOG:  (?:statement|execute [^:]+): (.*)$")
_POLL = "SELECT size, note FROM published WHERE id = 1"


def statements_between_markers(log: str, marker_pid: int) -> list[str]:
    """The statements ``log_statement = 'all'`` logged between the first and the last
    statement of the backend ``marker_pid``, by other backends."""
    sent = [(int(m[1]), m[2]) for m in map(_LOGGED.match, log.splitlines()) if m is not None]
    marks = [i for i, (pid, _) in enumerate(sent) if pid == marker_pid]
    return [text for pid, text in sent[marks[0] + 1 : marks[-1]] if pid != marker_pid]


async def test_a_lone_receipt_costs_a_bounded_number_of_round_trips(
    pg_cluster: PgCluster, pg_url: str, pg_authority: AuthorityProcess, publisher: Signer
) -> None:
    """Counted in the server's statement log, without the once-a-second poll of the
    published row: a change that adds a round trip to every receipt fails here, where
    distance would only make it slow."""
    database = pg_url.rsplit("/", 1)[1]
    pg_cluster.admin_execute(f"ALTER DATABASE \"{database}\" SET log_statement = 'all'")
    log = pg_cluster.dir / "server.log"
    pg_authority.start()
    counts = []
    try:
        with psycopg.connect(pg_url, autocommit=True) as marker:
            async with aiohttp.ClientSession() as http:
                for sequence in (1, 2, 3, 4):
                    start = log.stat().st_size
                    marker.execute("SELECT 'before the receipt'")
                    await publish(http, pg_authority.url, publisher, sequence)
                    marker.execute("SELECT 'after the receipt'")
                    logged = log.read_bytes()[start:].decode(errors="replace")
                    sent = statements_between_markers(logged, marker.info.backend_pid)
                    counts.append(sum(1 for text in sent if text != _POLL))
                    await asyncio.sleep(0.5)  # what follows a receipt lands before the next
    finally:
        assert pg_authority.stop() == 0
    print(f"statements per receipt: {counts}")
    assert max(counts[1:]) <= ROUND_TRIPS_PER_RECEIPT, counts  # the first warms the caches


async def test_a_stopped_database_is_503_and_service_resumes_by_itself(
    pg_authority: AuthorityProcess, publisher: Signer, pg_cluster: PgCluster
) -> None:
    pg_authority.start()
    acknowledged = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            bodies: dict[int, bytes] = {}

            async def post(sequence: int) -> int:
                # A retry resends the same envelope: one built again carries another
                # issued_at, a conflict (sequence_reused) with a try that committed.
                if sequence not in bodies:
                    bodies[sequence] = make_envelope(publisher, sequence).canonical_bytes()
                body = bodies[sequence]
                async with http.post(
                    pg_authority.url + "/v1/notices", data=body, headers=JSON
                ) as response:
                    if response.status in (200, 201):
                        acknowledged.append(Receipt.parse(await response.read()).index)
                    else:
                        # A notice committed as the database came back may find the
                        # embedded witness's connection not yet renewed: it fails closed
                        # with its own code, and the resubmission gets its receipt (200).
                        assert (await response.json())["error"] in (
                            "storage_unavailable",
                            "embedded_witness_unavailable",
                        )
                    return response.status

            assert await post(1) == 201
            pg_cluster.stop()
            try:
                assert await post(2) == 503
                async with http.get(pg_authority.url + "/v1/entries?start=0&end=1") as response:
                    assert response.status == 503
            finally:
                pg_cluster.start()
            deadline = time.monotonic() + 30
            while await post(3) not in (200, 201):
                assert time.monotonic() < deadline, "appends did not resume"
            async with http.get(pg_authority.url + "/v1/entries?start=0&end=3") as response:
                assert response.status == 200
    finally:
        assert pg_authority.stop() == 0
    assert acknowledged == [1, 2]


async def test_a_reader_whose_connection_a_restart_ended_reads_again_at_once(
    pg_url: str, pg_cluster: PgCluster
) -> None:
    """After PostgreSQL restarts, a reader thread's first read is not a 503: the connection
    the database ended is replaced and the read tried once more."""
    migrated(pg_url)
    pool = ReaderPool(pg_url, threads=1)
    try:
        assert await pool.read(lambda reader: reader.latest_checkpoint()) is None
        pg_cluster.stop()
        pg_cluster.start()
        assert await pool.read(lambda reader: reader.latest_checkpoint()) is None
    finally:
        pool.close()
