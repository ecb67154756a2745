"""The sequencer: batches share a commit, every submission gets its own answer, no caller hangs.

``authority.sequencer.Sequencer`` over a real ``Log`` in a temporary SQLite
file or PostgreSQL database (every test runs on both, ``tests.builders.LocalLog``), with
real keys; every receipt is checked by the
client's verifier. Where a test needs several submissions in one batch it
queues them before the sequencer starts (or while a batch is held in
publication), so batching is deterministic rather than a matter of timing.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import psycopg
import pytest

from deplog.authority.log import Log
from deplog.authority.sequencer import (
    OverloadedError,
    Published,
    Receipted,
    Sequencer,
    SequencerLimits,
    ShuttingDownError,
)
from deplog.authority.storage.errors import StorageError
from deplog.authority.storage.store import StoredCheckpoint
from deplog.authority.storage.tree import StoredHashTree
from deplog.authority.witnessing import QuorumUnavailableError
from deplog.client.model.notice import Envelope
from deplog.client.model.registry import AuthorizationError
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import Signer
from deplog.client.tlog.receipt import Receipt, verify_receipt
from tests.builders import LocalLog, make_envelope, notice_leaf, register_statement
from tests.conftest import Backend

CLOSED = (sqlite3.ProgrammingError, psycopg.OperationalError)
"""What using a closed connection raises, on SQLite and on PostgreSQL."""


class Publication:
    """The ``publish`` step, as the server's witnessing would run it, under the test's control.

    ``failure`` is raised instead of publishing (a witness quorum that is not
    met raises ``QuorumUnavailableError``); with ``hold`` set, publication
    waits until the test releases it, so a batch stays in flight.
    """

    def __init__(self) -> None:
        self.failure: Exception | None = None
        self.hold: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.published: list[int] = []

    async def __call__(self, checkpoint: StoredCheckpoint) -> Published:
        self.entered.set()
        if self.hold is not None:
            await self.hold.wait()
        if self.failure is not None:
            raise self.failure
        self.published.append(checkpoint.size)
        return Published(checkpoint, checkpoint.note)


@pytest.fixture
def local(tmp_path: Path, backend: Backend, log_signer: Signer) -> LocalLog:
    """Every test runs on both backends: the log in SQLite, or in PostgreSQL."""
    return LocalLog(tmp_path, None if backend.kind == "sqlite" else backend.db, log_signer)


@pytest.fixture
def log(local: LocalLog) -> Log:
    """A log holding acme's registration (index 0); the sequencer closes it on stop."""
    return local.log


@pytest.fixture
def publisher(local: LocalLog) -> Signer:
    return local.publisher


@pytest.fixture
def publication() -> Publication:
    return Publication()


@pytest.fixture
async def sequencer(log: Log, publication: Publication) -> AsyncIterator[Sequencer]:
    """A sequencer that is not started yet."""
    opened = Sequencer(log, publish=publication)
    yield opened
    await opened.stop()


def submitted(sequencer: Sequencer, envelopes: Iterable[Envelope]) -> list[asyncio.Task[Receipted]]:
    """One waiting caller per envelope."""
    return [asyncio.create_task(sequencer.submit(envelope)) for envelope in envelopes]


async def queued(sequencer: Sequencer, envelopes: list[Envelope]) -> list[asyncio.Task[Receipted]]:
    """Callers whose envelopes are all in the queue when this returns."""
    tasks = submitted(sequencer, envelopes)
    await asyncio.sleep(0)
    assert sequencer.pending == len(envelopes)
    return tasks


def verified(receipted: Receipted, envelope: Envelope, log_signer: Signer) -> Checkpoint:
    """The checkpoint a receipt proves ``envelope``'s leaf into, checked by the client."""
    receipt = Receipt.parse(receipted.receipt)
    assert receipt.index == receipted.index
    return verify_receipt(receipt, notice_leaf(envelope), log_signer.verifier())


def stored_size(log: Log) -> int:
    """The number of leaves committed to the log's database, read on a connection of its own."""
    conn = log.db.connect(readonly=True)
    try:
        return StoredHashTree(conn).size
    finally:
        conn.close()


# -- batches ---------------------------------------------------------------------------


async def test_submissions_queued_together_share_one_commit_and_each_gets_its_receipt(
    sequencer: Sequencer, publisher: Signer, log_signer: Signer
) -> None:
    envelopes = [make_envelope(publisher, sequence) for sequence in (1, 2, 3)]
    callers = await queued(sequencer, envelopes)
    await sequencer.start()

    answers = await asyncio.gather(*callers)
    assert sequencer.batches == 1
    assert [(a.index, a.created) for a in answers] == [(1, True), (2, True), (3, True)]
    checkpoints = {verified(a, e, log_signer) for a, e in zip(answers, envelopes, strict=True)}
    assert [checkpoint.size for checkpoint in checkpoints] == [4]


async def test_a_refused_envelope_gets_its_error_and_the_rest_of_its_batch_is_receipted(
    sequencer: Sequencer, publisher: Signer, log_signer: Signer, log: Log
) -> None:
    impostor = Signer.generate(publisher.name)  # claims to be acme, with a key acme never had
    envelopes = [
        make_envelope(publisher, 1),
        make_envelope(impostor, 2),
        make_envelope(publisher, 2),
    ]
    callers = await queued(sequencer, envelopes)
    await sequencer.start()

    first, refused, third = await asyncio.gather(*callers, return_exceptions=True)
    assert isinstance(refused, AuthorizationError) and refused.code == "unknown_key"
    assert isinstance(first, Receipted) and isinstance(third, Receipted)
    assert (first.index, third.index) == (1, 2)
    verified(first, envelopes[0], log_signer)
    verified(third, envelopes[2], log_signer)
    assert sequencer.batches == 1
    assert log.tree.size == 3


# -- publication --------------------------------------------------------------------------


async def test_receipts_prove_into_the_published_checkpoint_when_it_is_larger_than_the_batch(
    log: Log, publisher: Signer, log_signer: Signer
) -> None:
    """As when another process on the same database published a larger checkpoint first: the
    batch's receipts carry that one, and their proofs lead into it."""
    later = make_envelope(publisher, 9)

    async def publish_larger(checkpoint: StoredCheckpoint) -> Published:
        assert checkpoint.size == 3
        await sequencer.call(log.sequence, [later])  # the next entry, committed and signed
        assert log.published is not None and log.published.size == 4
        return Published(log.published, log.published.note)

    sequencer = Sequencer(log, publish=publish_larger)
    envelopes = [make_envelope(publisher, seq) for seq in (1, 2)]
    callers = await queued(sequencer, envelopes)
    await sequencer.start()
    try:
        answers = await asyncio.gather(*callers)
    finally:
        await sequencer.stop()
    for answer, envelope in zip(answers, envelopes, strict=True):
        assert verified(answer, envelope, log_signer).size == 4


async def test_a_publish_failure_fails_every_submission_of_its_batch(
    sequencer: Sequencer, publication: Publication, publisher: Signer
) -> None:
    publication.failure = QuorumUnavailableError()
    callers = await queued(sequencer, [make_envelope(publisher, seq) for seq in (1, 2, 3)])
    await sequencer.start()

    answers = await asyncio.gather(*callers, return_exceptions=True)
    assert [type(a) for a in answers] == [QuorumUnavailableError] * 3
    assert {a.code for a in answers if isinstance(a, QuorumUnavailableError)} == {
        "witness_quorum_unavailable"
    }


async def test_a_batch_whose_publication_failed_is_durable_and_receipted_on_resubmission(
    sequencer: Sequencer,
    publication: Publication,
    publisher: Signer,
    log_signer: Signer,
    log: Log,
) -> None:
    """Committed and checkpointed, only unacknowledged: a 201 can still come later."""
    publication.failure = QuorumUnavailableError()
    envelopes = [make_envelope(publisher, seq) for seq in (1, 2)]
    callers = await queued(sequencer, envelopes)
    await sequencer.start()
    await asyncio.gather(*callers, return_exceptions=True)
    assert stored_size(log) == 3
    assert log.published is not None and log.published.size == 3

    publication.failure = None
    again = await sequencer.submit(envelopes[1])
    assert (again.index, again.created) == (2, False)
    assert verified(again, envelopes[1], log_signer).size == 3
    assert log.tree.size == 3


async def test_an_unexpected_publish_error_fails_its_batch_as_storage_unavailable_only(
    sequencer: Sequencer,
    publication: Publication,
    publisher: Signer,
    log_signer: Signer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug, not bad input: logged, its batch answered with a 503 code, the next batch served."""
    publication.failure = RuntimeError("a bug in publication")
    await sequencer.start()
    with (
        caplog.at_level(logging.ERROR, logger="deplog.sequencer"),
        pytest.raises(StorageError) as failed,
    ):
        await sequencer.submit(make_envelope(publisher, 1))
    assert failed.value.code == "storage_unavailable"
    assert "sequencing failed" in caplog.text

    publication.failure = None
    envelope = make_envelope(publisher, 2)
    answer = await sequencer.submit(envelope)
    assert (answer.index, answer.created) == (2, True)
    verified(answer, envelope, log_signer)


# -- overload --------------------------------------------------------------------------------


async def test_a_full_queue_refuses_a_submission_at_once_with_overloaded(
    log: Log, publication: Publication, publisher: Signer
) -> None:
    sequencer = Sequencer(log, SequencerLimits(max_pending=2), publish=publication)
    waiting = await queued(sequencer, [make_envelope(publisher, seq) for seq in (1, 2)])

    with pytest.raises(OverloadedError) as refused:
        await sequencer.submit(make_envelope(publisher, 3))
    assert refused.value.code == "overloaded"
    assert sequencer.pending == 2

    await sequencer.start()
    assert [a.index for a in await asyncio.gather(*waiting)] == [1, 2]
    await sequencer.stop()
    assert stored_size(log) == 3


# -- stop ------------------------------------------------------------------------------------


async def test_stop_sequences_every_queued_submission_before_closing_the_log(
    sequencer: Sequencer, publication: Publication, publisher: Signer, log_signer: Signer, log: Log
) -> None:
    """A batch is in flight and two more submissions wait behind it when stop is called."""
    publication.hold = asyncio.Event()
    envelopes = [make_envelope(publisher, seq) for seq in (1, 2, 3)]
    await sequencer.start()
    [in_flight] = submitted(sequencer, envelopes[:1])
    await publication.entered.wait()
    behind = await queued(sequencer, envelopes[1:])

    stopping = asyncio.create_task(sequencer.stop())
    await asyncio.sleep(0.05)
    assert not stopping.done()  # the batch in flight is never cut short
    publication.hold.set()
    await asyncio.wait_for(stopping, timeout=30)

    answers = [await caller for caller in (in_flight, *behind)]
    assert [a.index for a in answers] == [1, 2, 3]
    for answer, envelope in zip(answers, envelopes, strict=True):
        verified(answer, envelope, log_signer)
    assert publication.published == [2, 4]
    with pytest.raises(CLOSED):  # closed once everything was answered
        log.conn.execute("SELECT 1")


async def test_stop_answers_submissions_queued_before_the_sequencer_ever_started(
    sequencer: Sequencer, publisher: Signer, log_signer: Signer
) -> None:
    envelopes = [make_envelope(publisher, seq) for seq in (1, 2)]
    callers = await queued(sequencer, envelopes)

    await asyncio.wait_for(sequencer.stop(), timeout=30)
    answers = [caller.result() for caller in callers]
    assert [a.index for a in answers] == [1, 2]
    verified(answers[1], envelopes[1], log_signer)


async def test_a_submission_once_stop_began_is_refused_with_shutting_down(
    sequencer: Sequencer, publisher: Signer, log: Log
) -> None:
    await sequencer.start()
    await sequencer.stop()

    with pytest.raises(ShuttingDownError) as refused:
        await sequencer.submit(make_envelope(publisher, 1))
    assert refused.value.code == "shutting_down"
    assert sequencer.pending == 0
    assert stored_size(log) == 1


async def test_stop_of_an_idle_sequencer_closes_the_log_at_once_and_a_second_stop_too(
    sequencer: Sequencer, log: Log
) -> None:
    await sequencer.start()
    await asyncio.wait_for(sequencer.stop(), timeout=5)
    with pytest.raises(CLOSED):
        log.conn.execute("SELECT 1")
    await asyncio.wait_for(sequencer.stop(), timeout=5)


# -- the map's rows held back (client.map.stored, rows held back; SQLite only) ----------

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def tables_size(log: Log) -> int:
    """The log size the map's tables are at, read on a connection of its own."""
    conn = log.db.connect(readonly=True)
    try:
        return int(conn.execute("SELECT size FROM map_state").fetchone()[0])
    finally:
        conn.close()


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    """Poll ``condition`` until it holds; fail after ``within`` seconds."""
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


@sqlite_only
async def test_an_idle_sequencer_writes_the_map_rows_its_batches_held(
    sequencer: Sequencer, publisher: Signer, log: Log
) -> None:
    await sequencer.start()
    await sequencer.submit(make_envelope(publisher, 1))
    await until(lambda: tables_size(log) == 2)
    assert log.map.unwritten == 0 and sequencer.map_flush_failures == 0


@sqlite_only
async def test_a_failed_write_of_the_held_rows_is_counted_logged_once_and_appends_go_on(
    sequencer: Sequencer,
    publisher: Signer,
    log: Log,
    log_signer: Signer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    log.conn.execute(
        "CREATE TEMP TRIGGER refuse BEFORE UPDATE ON map_state "
        "BEGIN SELECT RAISE(ABORT, 'injected'); END"
    )
    await sequencer.start()
    with caplog.at_level(logging.WARNING, logger="deplog.sequencer"):
        for sequence in (1, 2, 3):
            envelope = make_envelope(publisher, sequence)
            verified(await sequencer.submit(envelope), envelope, log_signer)
            await until(lambda: sequencer.map_flush_failures == sequence)  # noqa: B023
    warned = [r for r in caplog.records if "map's rows failed" in r.getMessage()]
    assert len(warned) == 1 and "storage_unavailable" in warned[0].getMessage()
    assert tables_size(log) == 0 and log.map.unwritten == 4  # acme's registration too
    await sequencer.call(log.conn.execute, "DROP TRIGGER temp.refuse")
    envelope = make_envelope(publisher, 4)
    verified(await sequencer.submit(envelope), envelope, log_signer)
    await until(lambda: tables_size(log) == 5)


@sqlite_only
async def test_an_admin_append_writes_the_map_rows_held_once_it_is_published(
    sequencer: Sequencer, log: Log
) -> None:
    await sequencer.start()
    beta = Signer.generate("beta")
    index = await sequencer.append_publisher(register_statement("beta", ("org.beta",), (beta,)))
    assert index == 1
    assert tables_size(log) == 2 and log.map.unwritten == 0
