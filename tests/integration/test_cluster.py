"""Three ``authority serve`` processes on one PostgreSQL log (issue 17, part D).

Real processes on a real throwaway cluster (``tests/pgcluster.py``), one shared
keys directory, each process with its own data directory and port: what one
process acknowledges, every other serves (checkpoint, entries, proofs, push),
every receipt verifies with the client's verifier, followers of any process
agree, and a process killed mid-load loses nothing it acknowledged. The witness
failover test kills a process in the middle of a witnessing round.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psycopg
import pytest

from deplog.authority.storage.cluster import ROUND_LOCK
from deplog.authority.witness.core import WitnessState
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from deplog.client.tlog.cosignature import cosignatures
from deplog.client.tlog.note import Signer, Verifier
from deplog.client.tlog.proofs import InclusionProof, leaf_hash
from deplog.client.tlog.receipt import Receipt, verify_receipt
from deplog.client.tlog.tiles import (
    EntryTile,
    HashTile,
    decode_entry_bundle,
    decode_hash_tile,
)
from tests.builders import make_envelope, notice_leaf
from tests.conftest import migrated
from tests.integration.harness import ORIGIN, AuthorityProcess, WitnessProcess, deplog, post
from tests.pgcluster import PgCluster

pytestmark = pytest.mark.slow  # authority processes sharing a PostgreSQL log

LEARN_BOUND = 5.0
"""Seconds within which every process serves what one of them published (notification,
else the one-second poll)."""


@dataclass
class ClusterAuthority(AuthorityProcess):
    """An authority process of the cluster: its own data directory, the shared keys."""

    shared_keys: Path | None = None
    db: str = ""

    @property
    def keys(self) -> Path:
        assert self.shared_keys is not None
        return self.shared_keys

    def command(self) -> list[str]:
        return [*super().command(), "--db", self.db]


@pytest.fixture
def cluster_files(tmp_path: Path, pg_url: str) -> list[ClusterAuthority]:
    """Three initialized authorities (one keys directory) for one migrated database."""
    keys = tmp_path / "keys"
    db = migrated(pg_url)
    authorities = [ClusterAuthority(tmp_path / name, shared_keys=keys, db=db) for name in "abc"]
    for authority in authorities:
        authority.init()
    return authorities


def start_all(authorities: list[ClusterAuthority], publisher: Signer, *args: str) -> None:
    """Start every process, then register acme (through the first one's admin socket)."""
    for authority in authorities:
        authority.extra_args = list(args)
        authority.start()
    authorities[0].add_publisher(publisher, "org.acme")


@pytest.fixture
def cluster(
    cluster_files: list[ClusterAuthority], publisher: Signer
) -> Iterator[list[ClusterAuthority]]:
    try:
        start_all(cluster_files, publisher, "--witness-refresh", "0.5")
        yield cluster_files
    finally:
        for authority in cluster_files:
            authority.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


async def served(http: aiohttp.ClientSession, authority: ClusterAuthority) -> Checkpoint:
    async with http.get(authority.url + "/checkpoint") as response:
        assert response.status == 200
        checkpoint, _ = open_checkpoint(await response.read(), authority.log_verifier)
        return checkpoint


async def serving_at_least(
    http: aiohttp.ClientSession, authority: ClusterAuthority, size: int
) -> Checkpoint:
    """The authority's served checkpoint once it has ``size`` leaves, within LEARN_BOUND."""
    deadline = time.monotonic() + LEARN_BOUND
    while True:
        checkpoint = await served(http, authority)
        if checkpoint.size >= size:
            return checkpoint
        assert time.monotonic() < deadline, f"{authority.url} still serves {checkpoint.size}"
        await asyncio.sleep(0.05)


async def test_a_notice_posted_to_one_process_is_served_by_every_other_with_its_proofs(
    cluster: list[ClusterAuthority], publisher: Signer, http: aiohttp.ClientSession
) -> None:
    a, b, c = cluster
    envelope = make_envelope(publisher, 1)
    status, body = await post(http, a.url, envelope.canonical_bytes())
    assert status == 201
    receipt = Receipt.parse(body)
    leaf = notice_leaf(envelope)
    for other in (b, c):
        checkpoint = await serving_at_least(http, other, receipt.index + 1)
        query = f"start={receipt.index}&end={receipt.index + 1}"
        async with http.get(f"{other.url}/v1/entries?{query}") as response:
            assert response.status == 200
            entries = (await response.json())["entries"]
        assert [base64.b64decode(e) for e in entries] == [leaf]
        query = f"index={receipt.index}&size={checkpoint.size}"
        async with http.get(f"{other.url}/v1/proofs/inclusion?{query}") as response:
            assert response.status == 200
            proof = await response.json()
        parsed = InclusionProof.from_json(proof)
        assert parsed.leaf_hash == leaf_hash(leaf)
        parsed.verify(checkpoint.root_hash)


async def test_tiles_and_the_explorer_of_every_process_come_from_the_database(
    cluster: list[ClusterAuthority], publisher: Signer, http: aiohttp.ClientSession
) -> None:
    """No tiles directory on PostgreSQL: each process reads a tile from the shared database,
    for trees up to the checkpoint it serves, so a tile of A's entries is at C."""
    a, _, c = cluster
    envelopes = [make_envelope(publisher, seq) for seq in (1, 2, 3)]
    for envelope in envelopes:
        status, _ = await post(http, a.url, envelope.canonical_bytes())
        assert status == 201
    size = (await serving_at_least(http, c, 4)).size
    async with http.get(f"{c.url}/v1/entries?start=0&end={size}") as response:
        leaves = [base64.b64decode(e) for e in (await response.json())["entries"]]
    bundle, hashes = EntryTile(0, size), HashTile(0, 0, size)
    async with http.get(f"{c.url}/{bundle.path}") as response:
        assert response.status == 200
        assert decode_entry_bundle(bundle, await response.read()) == leaves
    async with http.get(f"{c.url}/{hashes.path}") as response:
        assert response.status == 200
        assert decode_hash_tile(hashes, await response.read()) == [leaf_hash(x) for x in leaves]
    assert notice_leaf(envelopes[-1]) in leaves
    async with http.get(f"{c.url}/{EntryTile(0, size + 1).path}") as response:
        assert response.status == 404  # a tree larger than the served one
    async with http.get(c.url + "/") as response:
        assert response.status == 200


async def test_a_published_row_that_does_not_verify_is_never_served(
    cluster_files: list[ClusterAuthority], publisher: Signer, http: aiohttp.ClientSession
) -> None:
    """The row is the database's word: a note there not signed by the log key (written by
    whoever can write the database) is counted and refused by every process. (No refresh
    loop here: its next sharing would replace the row with an honest note.)"""
    cluster = cluster_files
    try:
        await asyncio.to_thread(start_all, cluster, publisher, "--witness-refresh", "0")
        status, _ = await post(http, cluster[0].url, make_envelope(publisher, 1).canonical_bytes())
        assert status == 201
        honest = await serving_at_least(http, cluster[2], 2)
        forged = sign_checkpoint(
            Checkpoint(ORIGIN, honest.size, bytes(32)), Signer.generate(ORIGIN)
        )
        with psycopg.connect(cluster[0].db, autocommit=True) as conn:
            conn.execute("UPDATE published SET note = %s WHERE id = 1", (forged,))
            conn.execute("SELECT pg_notify('deplog_published', 'forged')")
        for authority in cluster:
            deadline = time.monotonic() + LEARN_BOUND
            while _counter(await _metrics(http, authority), "deplog_published_rejected_total") < 1:
                assert time.monotonic() < deadline, f"{authority.url} did not refuse the row"
                await asyncio.sleep(0.05)
            assert (await served(http, authority)).root_hash == honest.root_hash
    finally:
        for authority in cluster:
            authority.stop()


async def test_a_statement_appended_by_the_command_line_is_served_by_every_process_at_once(
    cluster_files: list[ClusterAuthority], publisher: Signer, http: aiohttp.ClientSession
) -> None:
    """No refresh comes (its interval is an hour): the command's ``NOTIFY deplog_signed``
    is what makes the processes publish the checkpoint over its statement."""
    try:
        start_all(cluster_files, publisher, "--witness-refresh", "3600")
        for authority in cluster_files:
            assert (await serving_at_least(http, authority, 1)).size == 1
    finally:
        for authority in cluster_files:
            authority.stop()


async def test_with_the_listening_connections_lost_every_process_still_learns_by_polling(
    cluster: list[ClusterAuthority], publisher: Signer, http: aiohttp.ClientSession
) -> None:
    """The listeners' backends are terminated: each process counts the failure (and
    restarts the listener), and meanwhile learns A's publication by polling."""
    with psycopg.connect(cluster[0].db, autocommit=True) as conn:
        ended = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE query LIKE 'LISTEN deplog_published;%'"
        ).fetchone()
    assert ended == (3,)
    status, body = await post(http, cluster[0].url, make_envelope(publisher, 1).canonical_bytes())
    assert status == 201
    for authority in cluster[1:]:
        await serving_at_least(http, authority, Receipt.parse(body).index + 1)
        failures = _counter(
            await _metrics(http, authority),
            'deplog_background_failures_total{task="published_listener"}',
        )
        assert failures >= 1


async def test_after_a_database_outage_every_process_learns_again_within_its_poll_interval(
    cluster: list[ClusterAuthority],
    publisher: Signer,
    http: aiohttp.ClientSession,
    pg_cluster: PgCluster,
) -> None:
    """Polls that fail while the database is down are counted, and do not stretch the
    interval: once it is back, B and C serve what A publishes within LEARN_BOUND."""
    await asyncio.to_thread(pg_cluster.stop)
    try:
        await asyncio.sleep(2.5)  # a few polls of every process fail
    finally:
        await asyncio.to_thread(pg_cluster.start)
    deadline = time.monotonic() + 30
    envelope = make_envelope(publisher, 1).canonical_bytes()  # the same bytes every try
    while True:  # A's first append after the restart may still meet a dropped connection
        status, body = await post(http, cluster[0].url, envelope)
        if status in (200, 201):  # 200: committed by a try that answered 503 (docs)
            break
        assert status == 503 and time.monotonic() < deadline
        await asyncio.sleep(0.2)
    for authority in cluster[1:]:
        await serving_at_least(http, authority, Receipt.parse(body).index + 1)
        exposition = await _metrics(http, authority)
        assert _counter(exposition, "deplog_published_poll_failures_total") >= 1


def _counter(exposition: str, name: str) -> float:
    [value] = [line.split()[1] for line in exposition.splitlines() if line.startswith(name + " ")]
    return float(value)


async def _metrics(http: aiohttp.ClientSession, authority: ClusterAuthority) -> str:
    async with http.get(authority.url + "/metrics") as response:
        return await response.text()


async def test_push_on_one_process_carries_a_checkpoint_another_process_published(
    cluster: list[ClusterAuthority], publisher: Signer, http: aiohttp.ClientSession
) -> None:
    a, _, c = cluster
    async with http.get(c.url + "/v1/checkpoints/stream") as stream:
        assert stream.status == 200
        first = await _next_event(stream)  # the current checkpoint, at once
        status, body = await post(http, a.url, make_envelope(publisher, 1).canonical_bytes())
        assert status == 201
        index = Receipt.parse(body).index
        deadline = time.monotonic() + LEARN_BOUND
        while True:
            note = await asyncio.wait_for(_next_event(stream), deadline - time.monotonic())
            checkpoint, _ = open_checkpoint(note, c.log_verifier)
            if checkpoint.size > index:
                break
    assert open_checkpoint(first, c.log_verifier)[0].size <= index


async def _next_event(stream: aiohttp.ClientResponse) -> bytes:
    """The note of the next ``checkpoint`` event (its ``data:`` lines, newline-ended)."""
    lines: list[str] = []
    while True:
        raw = await stream.content.readline()
        assert raw, "the stream ended"
        line = raw.decode().rstrip("\n")
        if line.startswith("data: "):
            lines.append(line[len("data: ") :])
        elif line == "" and lines:
            return ("\n".join(lines) + "\n").encode()


async def test_receipts_from_every_process_verify_against_the_checkpoint_they_carry(
    cluster: list[ClusterAuthority], publisher: Signer, http: aiohttp.ClientSession
) -> None:
    """Concurrent submissions to all three: each receipt's checkpoint is signed by the log
    key and cosigned by the embedded witness, whichever process published it."""
    envelopes = [make_envelope(publisher, seq) for seq in range(1, 31)]
    answers = await asyncio.gather(
        *(
            post(http, cluster[i % 3].url, envelope.canonical_bytes())
            for i, envelope in enumerate(envelopes)
        )
    )
    assert [status for status, _ in answers] == [201] * len(envelopes)
    verifier = cluster[0].log_verifier
    embedded = _embedded_witness(cluster[0])
    indexes = set()
    for (_, body), envelope in zip(answers, envelopes, strict=True):
        receipt = Receipt.parse(body)
        checkpoint = verify_receipt(receipt, notice_leaf(envelope), verifier)
        assert checkpoint.size > receipt.index
        assert [c.name for c in cosignatures(receipt.checkpoint, [embedded])] == [embedded.name]
        indexes.add(receipt.index)
    assert len(indexes) == len(envelopes)  # one leaf each, none twice


def _embedded_witness(authority: ClusterAuthority) -> Verifier:
    from deplog.authority.config import AuthorityConfig
    from deplog.client.tlog.keyfile import load_signer
    from deplog.client.tlog.note import SIG_TYPE_COSIGNATURE_V1

    config = AuthorityConfig.load(authority.data / "config.json")
    stem = config.embedded_witness_key
    return load_signer(authority.keys, stem, SIG_TYPE_COSIGNATURE_V1).verifier()


async def test_following_any_process_ends_at_the_same_root(
    cluster: list[ClusterAuthority],
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    for seq in range(1, 7):
        status, _ = await post(
            http, cluster[seq % 3].url, make_envelope(publisher, seq).canonical_bytes()
        )
        assert status == 201
    size = (await served(http, cluster[0])).size
    roots = set()
    for n, authority in enumerate(cluster):
        checkpoint = await serving_at_least(http, authority, size)
        assert checkpoint.size == size
        roots.add(checkpoint.root_hash)
        follower = tmp_path / f"follower{n}"
        follower.mkdir()
        key = authority.log_verifier.vkey()
        followed = deplog("follow", authority.url, "--log-key", key, "--once", cwd=follower)
        assert followed.returncode == 0, followed.stderr
        assert followed.stdout.strip() == f"trusted {ORIGIN} at size {size}"
    assert len(roots) == 1


async def test_a_process_killed_mid_load_loses_no_acknowledged_notice(
    cluster: list[ClusterAuthority], publisher: Signer, http: aiohttp.ClientSession
) -> None:
    """Twenty publishers spread over the three processes; A is SIGKILLed in the middle.
    Every 201 from any process (A's included) is in the log, at its index, exactly once."""
    a, b, c = cluster
    acknowledged: dict[int, bytes] = {}
    killed = asyncio.Event()
    sequences = iter(range(1, 100_000))

    async def publish(worker: int) -> None:
        targets = [a, b, c]
        for _ in range(15):
            envelope = make_envelope(publisher, next(sequences))
            target = targets[(worker + len(acknowledged)) % 3]
            if killed.is_set() and target is a:
                target = b
            try:
                status, body = await post(http, target.url, envelope.canonical_bytes())
            except aiohttp.ClientError:
                continue  # the killed process: never acknowledged
            if status == 201:
                acknowledged[Receipt.parse(body).index] = notice_leaf(envelope)

    async def kill_a() -> None:
        while len(acknowledged) < 40:
            await asyncio.sleep(0.01)
        assert a.process is not None
        os.kill(a.process.pid, signal.SIGKILL)
        a.process.wait(timeout=30)
        a.process = None
        killed.set()

    await asyncio.gather(kill_a(), *(publish(w) for w in range(20)))
    assert len(acknowledged) > 40
    size = max(acknowledged) + 1
    for survivor in (b, c):
        await serving_at_least(http, survivor, size)
    for start in range(0, size, 1000):
        query = f"start={start}&end={min(size, start + 1000)}"
        async with http.get(f"{b.url}/v1/entries?{query}") as response:
            assert response.status == 200
            entries = [base64.b64decode(e) for e in (await response.json())["entries"]]
        for offset, leaf in enumerate(entries):
            if start + offset in acknowledged:
                assert leaf == acknowledged[start + offset]
    leaves = set(acknowledged.values())
    assert len(leaves) == len(acknowledged)  # no notice acknowledged at two indexes


# -- witnessing across processes ------------------------------------------------------------


@pytest.fixture
def external_witness(
    tmp_path: Path, cluster_files: list[ClusterAuthority]
) -> Iterator[WitnessProcess]:
    witness = WitnessProcess(tmp_path / "witness")
    witness.init()
    vkey = cluster_files[0].log_verifier.vkey()
    assert witness.cli("add-log", "--origin", ORIGIN, "--key", vkey) == 0
    witness.start()
    for authority in cluster_files:
        authority.add_witness(witness.url, witness.verifier)
    yield witness
    witness.stop()


async def _round_lock_held(db: str) -> None:
    """Returns once one backend has held the publication round's lock for half a second
    (a round stalled on a witness, not a quick one), failing after 10 s."""
    deadline = time.monotonic() + 10
    with psycopg.connect(db, autocommit=True) as conn:
        holders: list[object] = []
        while True:
            row = conn.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND classid = %s::oid AND objid = 0",
                (ROUND_LOCK,),
            ).fetchone()
            holders = [*holders, row[0]][-11:] if row is not None else []
            if len(holders) == 11 and len(set(holders)) == 1:
                return
            assert time.monotonic() < deadline, "no round held the lock"
            await asyncio.sleep(0.05)


def witness_size(witness: WitnessProcess) -> int:
    state = WitnessState(witness.data / "witness.db")
    try:
        recorded = state.recorded(ORIGIN)
        return 0 if recorded is None else recorded.size
    finally:
        state.close()


async def test_a_process_killed_mid_round_never_shows_the_witness_a_rollback(
    cluster_files: list[ClusterAuthority],
    external_witness: WitnessProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
) -> None:
    """Publication needs the external witness (quorum 1). A's round is stalled on the
    witness (SIGSTOP) and A is SIGKILLed inside it; then B's round succeeds, and the
    witness's recorded size never decreases."""
    a, b, _ = cluster_files
    try:
        await asyncio.to_thread(
            start_all, [a, b], publisher, "--publication-quorum", "1", "--witness-timeout", "3"
        )
        sizes = [witness_size(external_witness)]
        status, _ = await post(http, a.url, make_envelope(publisher, 1).canonical_bytes())
        assert status == 201
        sizes.append(witness_size(external_witness))

        assert external_witness.process is not None
        os.kill(external_witness.process.pid, signal.SIGSTOP)
        in_round = asyncio.create_task(
            post(http, a.url, make_envelope(publisher, 2).canonical_bytes())
        )
        await _round_lock_held(a.db)  # A's round, waiting for the stopped witness
        assert not in_round.done()
        assert a.process is not None
        os.kill(a.process.pid, signal.SIGKILL)
        a.process.wait(timeout=30)
        a.process = None
        with pytest.raises(aiohttp.ClientError):
            await in_round
        os.kill(external_witness.process.pid, signal.SIGCONT)

        third = make_envelope(publisher, 3)
        status, body = await post(http, b.url, third.canonical_bytes())
        assert status == 201, body
        receipt = Receipt.parse(body)
        checkpoint = verify_receipt(receipt, notice_leaf(third), b.log_verifier)
        assert [w.name for w in cosignatures(receipt.checkpoint, [external_witness.verifier])] == [
            external_witness.verifier.name
        ]
        sizes.append(witness_size(external_witness))
        assert sizes == sorted(sizes)
        assert sizes[-1] == checkpoint.size
    finally:
        for authority in (a, b):
            authority.stop()
