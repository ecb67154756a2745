"""Many writers, one log: ``Log`` objects in threads and in separate processes appending to
one PostgreSQL database interleave into one valid log, in the order the database decides.

Checked on the final database: indices contiguous, every appended notice exactly once, one
root per size and every stored checkpoint signed over the tree's own root at its size, every
checkpoint consistent with the final one (the client's verifier), registry changes made by
one writer enforced by the others' next batch, and a writer SIGKILLed in the middle of its
transaction leaves no trace and releases the order at once.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from deplog.authority.log import Log
from deplog.authority.storage.postgres import SESSION, WRITER_IDLE
from deplog.authority.storage.reader import LogReader
from deplog.client.errors import ErrorCode
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import verify_consistency
from tests.builders import ORIGIN, make_envelope, notice_leaf, register
from tests.conftest import migrated

pytestmark = pytest.mark.slow  # PostgreSQL, writers in processes

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def url(pg_url: str) -> str:
    """A migrated, empty database."""
    return migrated(pg_url)


def publishers(url: str, log_signer: Signer, count: int) -> list[Signer]:
    """``count`` publishers p0.. registered (each owning org.p<i>) by one writer."""
    keys = [Signer.generate(f"p{i}") for i in range(count)]
    log = Log(url, log_signer, ORIGIN)
    for key in keys:
        register(log, key)
    log.publish()
    log.close()
    return keys


def assert_one_valid_log(url: str, log_signer: Signer, leaves: list[bytes]) -> int:
    """The whole database is one log holding each of ``leaves`` exactly once; its size."""
    reader = LogReader(url)
    try:
        indices = [row[0] for row in reader.conn.execute("SELECT idx FROM leaves ORDER BY idx")]
        size = len(indices)
        assert indices == list(range(size))
        assert reader.conn.execute("SELECT size FROM log_head").fetchone() == (size,)
        stored = collections.Counter(reader.entries(0, size))
        for leaf in leaves:
            assert stored[leaf] == 1
        rows = reader.conn.execute("SELECT size, root, note FROM checkpoints ORDER BY size")
        checkpoints = [(int(s), bytes(r), bytes(n)) for s, r, n in rows.fetchall()]
        assert len({s for s, _, _ in checkpoints}) == len(checkpoints)
        final_size, final_root, _ = checkpoints[-1]
        assert final_size == size
        reader.tree.pin(size)
        assert reader.tree.root_at(size) == final_root
        for old_size, old_root, note in checkpoints:
            checkpoint, _ = open_checkpoint(note, log_signer.verifier())
            assert (checkpoint.size, checkpoint.root_hash) == (old_size, old_root)
            if old_size:
                assert reader.tree.root_at(old_size) == old_root
            proof = reader.consistency(old_size, final_size).hashes
            verify_consistency(old_size, final_size, old_root, final_root, proof)
        return size
    finally:
        reader.close()


def test_writers_in_threads_interleave_into_one_log(url: str, log_signer: Signer) -> None:
    keys = publishers(url, log_signer, 4)
    per_writer, batch = 30, 5
    envelopes = {
        key.name: [make_envelope(key, s) for s in range(1, per_writer + 1)] for key in keys
    }
    acknowledged: dict[str, list[int]] = {key.name: [] for key in keys}
    failures: list[BaseException] = []

    def writer(key: Signer) -> None:
        try:
            log = Log(url, log_signer, ORIGIN)
            mine = envelopes[key.name]
            for start in range(0, per_writer, batch):
                for result in log.sequence(mine[start : start + batch]):
                    assert result.index is not None and result.created, result.error
                    acknowledged[key.name].append(result.index)
            log.close()
        except BaseException as err:
            failures.append(err)

    threads = [threading.Thread(target=writer, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures
    every = [leaf for key in keys for leaf in map(notice_leaf, envelopes[key.name])]
    size = assert_one_valid_log(url, log_signer, every)
    assert size == len(keys) + len(every)
    indices = sorted(i for acked in acknowledged.values() for i in acked)
    assert indices == list(range(len(keys), size))
    # The writers really interleaved: no writer's notices are one contiguous run.
    runs = [max(acked) - min(acked) + 1 for acked in acknowledged.values()]
    assert any(run > per_writer for run in runs)


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.pg_writer", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


def test_writers_in_separate_processes_interleave_into_one_log(
    url: str, log_signer: Signer
) -> None:
    keys = publishers(url, log_signer, 3)
    per_writer = 40
    processes = [
        spawn("append", url, log_signer.skey(), key.skey(), "1", str(per_writer), "4")
        for key in keys
    ]
    acknowledged = []
    for process in processes:
        out, err = process.communicate(timeout=180)
        assert process.returncode == 0, err
        acknowledged += [json.loads(line)["index"] for line in out.splitlines()]
    assert len(acknowledged) == len(keys) * per_writer
    # Each process signed its own envelopes: they are identified by (publisher, sequence).
    reader = LogReader(url)
    try:
        rows = reader.conn.execute("SELECT publisher, sequence, idx FROM notices").fetchall()
    finally:
        reader.close()
    assert sorted(int(r[2]) for r in rows) == sorted(acknowledged)
    assert collections.Counter((r[0], r[1]) for r in rows) == collections.Counter(
        {(key.name, s): 1 for key in keys for s in range(1, per_writer + 1)}
    )
    size = assert_one_valid_log(url, log_signer, [])
    assert size == len(keys) + len(keys) * per_writer


def test_a_publisher_revoked_by_one_writer_is_refused_by_the_others_next_batch(
    url: str, log_signer: Signer
) -> None:
    [key] = publishers(url, log_signer, 1)
    other = Log(url, log_signer, ORIGIN)
    [accepted] = other.sequence([make_envelope(key, 1)])
    assert accepted.index is not None
    # Another process (its own Log, its own connection) revokes the publisher.
    revoker = subprocess.run(
        [sys.executable, "-c", REVOKE, url, log_signer.skey(), key.name],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert revoker.returncode == 0, revoker.stderr
    [refused] = other.sequence([make_envelope(key, 2)])
    assert refused.index is None and refused.error is not None
    assert refused.error.code == ErrorCode.PUBLISHER_REVOKED
    other.close()
    assert_one_valid_log(url, log_signer, [])


REVOKE = """
import sys
from deplog.authority.log import Log
from deplog.client.tlog.note import Signer
from tests.builders import publisher_statement
url, skey, name = sys.argv[1:]
signer = Signer.parse(skey)
log = Log(url, signer, signer.name)
log.append_publisher(publisher_statement("revoke_publisher", name))
log.publish()
log.close()
"""


def test_a_writer_killed_mid_transaction_leaves_no_trace_and_frees_the_order_at_once(
    url: str, log_signer: Signer
) -> None:
    [key, other_key] = publishers(url, log_signer, 2)
    holder = spawn("hold", url, log_signer.skey(), key.skey(), "1", "5")
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "holding"
    waiter = Log(url, log_signer, ORIGIN)
    done = threading.Event()
    results = []

    def append() -> None:
        results.extend(waiter.sequence([make_envelope(other_key, 1)]))
        done.set()

    thread = threading.Thread(target=append)
    thread.start()
    assert not done.wait(0.5), "the order was not held by the other process's transaction"
    killed = time.monotonic()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    assert done.wait(10)
    freed = time.monotonic() - killed
    thread.join()
    waiter.close()
    [result] = results
    # The killed transaction's five notices are nowhere; the waiter's is right after the
    # two registrations.
    assert result.index == 2
    size = assert_one_valid_log(url, log_signer, [])
    assert size == 3
    print(f"order freed {freed * 1000:.1f} ms after SIGKILL of its holder")
    assert freed < 5.0  # a bound on a hang, not a speed figure (bench/ measures speed)


def test_a_stopped_writer_loses_the_order_after_the_idle_transaction_timeout(
    url: str, log_signer: Signer
) -> None:
    """A writer frozen mid-transaction (SIGSTOP: alive, connected, silent) holds the order
    only until ``idle_in_transaction_session_timeout``, within the waiter's lock timeout."""
    [key, other_key] = publishers(url, log_signer, 2)
    holder = spawn("hold", url, log_signer.skey(), key.skey(), "1", "5")
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "holding"
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        waiter = Log(url, log_signer, ORIGIN)
        started = time.monotonic()
        [result] = waiter.sequence([make_envelope(other_key, 1)])
        waited = time.monotonic() - started
        waiter.close()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
    assert result.index == 2
    idle = float(WRITER_IDLE.rstrip("s"))
    assert idle - 0.5 < waited < idle + 1.5 < float(SESSION["lock_timeout"].rstrip("s"))
    assert assert_one_valid_log(url, log_signer, []) == 3
