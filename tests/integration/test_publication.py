"""The publication path of a real authority: what is served, pushed and receipted, under load
and under faults of the embedded witness.

The promises under test (docs/operators.md, "What a receipt promises" and "Health"):
every served, pushed or receipted checkpoint carries the embedded witness's cosignature
for its own size; the served size never goes back; an append that cannot get that
cosignature fails with 503 ``embedded_witness_unavailable`` and a resubmission returns the
receipt once the witness is back; ``/healthz`` says so while it lasts.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp
import pytest

from deplog.client.follow.http import HttpLogSource
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.cosignature import cosignatures
from deplog.client.tlog.note import Signer, Verifier
from deplog.client.tlog.receipt import Receipt, verify_receipt
from tests.builders import make_envelope, notice_leaf
from tests.integration.attached_faults import injected, needs_strace
from tests.integration.harness import AuthorityProcess, post
from tests.scrape import sample

pytestmark = pytest.mark.slow  # real authority processes

PUBLISHERS = 20
LOAD_SECONDS = 4.0


def embedded_witness(authority: AuthorityProcess) -> Verifier:
    pub = authority.keys / "test.deplog.example_log-witness.pub"
    return Verifier.parse_cosigner(pub.read_text().strip())


@dataclass
class Observed:
    """Checkpoints one observer saw, in order, and those lacking the embedded cosignature."""

    sizes: list[int] = field(default_factory=list)
    bare: list[int] = field(default_factory=list)

    def see(self, note: bytes, authority: AuthorityProcess, embedded: Verifier) -> None:
        checkpoint, _ = open_checkpoint(note, authority.log_verifier)
        self.sizes.append(checkpoint.size)
        if embedded.name not in {c.name for c in cosignatures(note, [embedded])}:
            self.bare.append(checkpoint.size)

    @property
    def went_back(self) -> bool:
        return any(b < a for a, b in zip(self.sizes, self.sizes[1:], strict=False))


@pytest.fixture
def publishers(authority_files: AuthorityProcess) -> Iterator[list[Signer]]:
    signers = [Signer.generate(f"pub{i}") for i in range(PUBLISHERS)]
    for signer in signers:
        authority_files.add_publisher(signer, f"org.{signer.name}")
    authority_files.start()
    yield signers
    authority_files.stop()


async def healthz(http: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, object]]:
    async with http.get(url + "/healthz") as response:
        return response.status, await response.json()


@pytest.mark.both_backends
async def test_every_served_and_pushed_checkpoint_carries_the_embedded_cosignature_for_its_size(
    authority_files: AuthorityProcess, publishers: list[Signer], http: aiohttp.ClientSession
) -> None:
    embedded = embedded_witness(authority_files)
    url = authority_files.url
    polled, pushed = Observed(), Observed()
    deadline = time.monotonic() + LOAD_SECONDS

    async def publish(signer: Signer) -> None:
        sequence = 1
        while time.monotonic() < deadline:
            status, _ = await post(http, url, make_envelope(signer, sequence).canonical_bytes())
            assert status == 201
            sequence += 1

    async def poll() -> None:
        while time.monotonic() < deadline:
            async with http.get(url + "/checkpoint") as response:
                polled.see(await response.read(), authority_files, embedded)

    async def subscribe() -> None:
        async with HttpLogSource(url) as source:
            async for note in source.checkpoints():
                pushed.see(note, authority_files, embedded)

    subscriber = asyncio.create_task(subscribe())
    await asyncio.gather(*(publish(s) for s in publishers), poll())
    await asyncio.sleep(0.2)  # the last pushes arrive
    subscriber.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await subscriber
    assert len(polled.sizes) > 100 and len(pushed.sizes) > 10
    assert (polled.bare, pushed.bare) == ([], [])
    assert not polled.went_back and not pushed.went_back


@contextlib.contextmanager
def locked_database(path: str) -> Iterator[None]:
    """Hold SQLite's write lock on a database: its other writers fail with "database is
    locked" (a real ``sqlite3.OperationalError``), as they would on a stuck or failing disk."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


async def test_appends_fail_closed_while_the_embedded_witness_cannot_cosign_then_recover(
    authority_files: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    authority_files.extra_args = ["--witness-timeout", "0.5", "--witness-refresh", "0.3"]
    authority_files.start()
    try:
        url = authority_files.url
        embedded = embedded_witness(authority_files)
        assert (await healthz(http, url))[0] == 200
        witness_db = str(authority_files.data / "embedded-witness.db")
        envelopes = [make_envelope(publisher, n) for n in range(1, 6)]
        bodies = [envelope.canonical_bytes() for envelope in envelopes]
        with locked_database(witness_db):
            answers = [await post(http, url, body) for body in bodies]
            status, report = await healthz(http, url)
        assert {s for s, _ in answers} == {503}
        assert {a for _, a in answers} == {b'{"error": "embedded_witness_unavailable"}'}
        assert status == 503 and report["status"] == "degraded"
        assert "embedded_witness_unavailable" in report["reasons"]  # type: ignore[operator]
        async with http.get(url + "/metrics") as response:
            metrics = await response.text()
        failures = sample(
            metrics, "deplog_publication_failures_total", reason="embedded_witness_unavailable"
        )
        assert failures is not None and failures >= len(bodies)
        receipts = [await post(http, url, body) for body in bodies]
        assert {s for s, _ in receipts} == {200}  # durable while refused: now receipted
        for envelope, (_, receipt) in zip(envelopes, receipts, strict=True):
            parsed = Receipt.parse(receipt)
            verify_receipt(parsed, notice_leaf(envelope), authority_files.log_verifier)
            assert cosignatures(parsed.checkpoint, [embedded])
        assert (await healthz(http, url))[0] == 200
        out = authority_files.output.read_text()
        assert "Traceback" not in out
    finally:
        assert authority_files.stop() == 0


@needs_strace
async def test_no_receipt_lacks_the_embedded_cosignature_while_its_database_fsync_fails(
    authority_files: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    """The issue's fault: EIO from fsync on the embedded witness's database and WAL."""
    authority_files.start()
    try:
        url = authority_files.url
        embedded = embedded_witness(authority_files)
        envelopes = [make_envelope(publisher, n) for n in range(1, 21)]
        witness_files = [authority_files.data / f"embedded-witness.db{s}" for s in ("", "-wal")]
        assert authority_files.process is not None
        with injected(authority_files.process.pid, witness_files, ["fsync", "fdatasync"]):
            during = [await post(http, url, e.canonical_bytes()) for e in envelopes[:10]]
            status, report = await healthz(http, url)
        assert {s for s, _ in during} == {503}
        assert {a for _, a in during} == {b'{"error": "embedded_witness_unavailable"}'}
        assert (status, report["status"]) == (503, "degraded")
        after = [await post(http, url, e.canonical_bytes()) for e in envelopes]
        assert [s for s, _ in after] == [200] * 10 + [201] * 10
        for envelope, (_, body) in zip(envelopes, after, strict=True):
            receipt = Receipt.parse(body)
            verify_receipt(receipt, notice_leaf(envelope), authority_files.log_verifier)
            assert [c.name for c in cosignatures(receipt.checkpoint, [embedded])] == [embedded.name]
        assert (await healthz(http, url))[0] == 200
    finally:
        assert authority_files.stop() == 0
    out = authority_files.output.read_text()
    assert "Traceback" not in out
    assert out.count("not published: embedded_witness_unavailable") == 1
