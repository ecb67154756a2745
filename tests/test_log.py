"""The log: admission rules, durable checkpoints, and refusing to run on altered storage.

Every test runs on both backends (the ``backend`` fixture): SQLite and PostgreSQL.
"""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from deplog.authority.log import Log
from deplog.authority.storage import store
from deplog.authority.storage.errors import StorageError
from deplog.client.map.line import require_map_root
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.model.notice import Envelope
from deplog.client.model.rules import InvalidEntry, LogReplay
from deplog.client.plumbing.storage_faults import CORRUPT, StorageFault
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Signer
from deplog.client.tlog.receipt import Receipt, verify_receipt
from tests.builders import ORIGIN, admitted, make_envelope, notice_leaf, register
from tests.conftest import Backend


@pytest.fixture
def db_path(backend: Backend) -> str:
    return backend.db


@pytest.fixture
def log(db_path: str, log_signer: Signer, publisher: Signer) -> Log:
    opened = Log(db_path, log_signer, ORIGIN)
    register(opened, publisher)
    opened.publish()
    return opened


def test_a_new_log_publishes_a_signed_empty_checkpoint(db_path: str, log_signer: Signer) -> None:
    log = Log(db_path, log_signer, ORIGIN)
    assert log.published is not None
    checkpoint, _ = open_checkpoint(log.published.note, log_signer.verifier())
    assert (checkpoint.origin, checkpoint.size) == (ORIGIN, 0)


def test_sequenced_notices_get_receipts_that_verify(
    log: Log, log_signer: Signer, publisher: Signer
) -> None:
    envelopes = [make_envelope(publisher, seq) for seq in (1, 2, 3)]
    results = log.sequence(envelopes)
    assert [r.index for r in results] == [1, 2, 3]
    for envelope, result in zip(envelopes, results, strict=True):
        assert result.created and result.checkpoint is not None
        checkpoint = verify_receipt(
            Receipt.parse(result.receipt(result.checkpoint.note)),
            notice_leaf(envelope),
            log_signer.verifier(),
        )
        assert checkpoint.size == 4


def test_a_refused_notice_in_a_batch_does_not_stop_the_others(log: Log, publisher: Signer) -> None:
    stranger = Signer.generate("stranger")
    results = log.sequence(
        [make_envelope(publisher, 1), make_envelope(stranger, 1), make_envelope(publisher, 2)]
    )
    assert [r.error.code if r.error else r.index for r in results] == [1, "unknown_publisher", 2]


def test_duplicate_in_one_batch_is_logged_once(log: Log, publisher: Signer) -> None:
    envelope = make_envelope(publisher, 1)
    first, second = log.sequence([envelope, envelope])
    assert (first.index, first.created) == (1, True)
    assert (second.index, second.created) == (1, False)
    assert log.tree.size == 2


def withdraw_of(publisher: Signer, sequence: int, target: int) -> Envelope:
    return make_envelope(
        publisher, sequence, action="withdraw", affected=None, withdraws=target, reasons=["other"]
    )


def test_a_withdraw_of_a_notice_admitted_earlier_in_its_batch_is_admitted(
    log: Log, log_signer: Signer, publisher: Signer
) -> None:
    """Verifiers judge the log entry by entry: a withdraw of the notice just before it is
    valid there, whichever batch brought the two, so the authority admits it too (it used to
    look the target up among committed notices only, and refused it bad_withdraw_target)."""
    target = log.tree.size
    results = log.sequence([make_envelope(publisher, 1), withdraw_of(publisher, 2, target)])
    assert [r.error.code if r.error else r.index for r in results] == [target, target + 1]
    leaves = log.tree.leaf_data(0, target + 2)
    history = LogReplay(log_signer.verifier())
    judged = [history.judge(index, leaf) for index, leaf in enumerate(leaves)]
    assert not [j for j in judged if isinstance(j, InvalidEntry)]
    # The map the checkpoint commits to is the verifiers' fold: the notice, withdrawn.
    assert results[1].checkpoint is not None
    checkpoint, _ = open_checkpoint(results[1].checkpoint.note, log_signer.verifier())
    reference = VerifiableMap()
    assert require_map_root(checkpoint) == reference.fold(admitted(leaves))


def test_a_withdraw_of_a_batch_mate_that_is_not_its_valid_notice_is_refused(
    log: Log, publisher: Signer
) -> None:
    """The batch-mate is another publisher's, or was refused (its index went to the next
    one): the withdraw is refused as the verifiers would find it invalid."""
    other = Signer.generate("other")
    register(log, other)
    log.publish()
    target = log.tree.size
    results = log.sequence(
        [
            make_envelope(other, 1),
            withdraw_of(publisher, 1, target),  # other's notice
            make_envelope(publisher, 2, tool="tool:org.acme/fetch"),
            make_envelope(publisher, 2),  # reuses sequence 2: refused
            withdraw_of(publisher, 3, target + 2),  # the index the refused one did not get
        ]
    )
    assert [r.error.code if r.error else r.index for r in results] == [
        target,
        "bad_withdraw_target",
        target + 1,
        "sequence_reused",
        "bad_withdraw_target",
    ]


def test_checkpoints_and_leaves_survive_reopening(
    db_path: str, log: Log, log_signer: Signer, publisher: Signer
) -> None:
    log.sequence([make_envelope(publisher, 1)])
    published = log.published
    log.close()
    reopened = Log(db_path, log_signer, ORIGIN)
    assert reopened.published == published
    assert reopened.tree.size == 2
    # The registry came back from its snapshot: the publisher can still publish.
    assert reopened.sequence([make_envelope(publisher, 2)])[0].index == 2


def test_a_batch_commits_its_checkpoint_with_its_leaves(
    db_path: str, log: Log, log_signer: Signer, publisher: Signer
) -> None:
    """No crash falls between the leaves' commit and their checkpoint's: one transaction."""
    log.admit_notices([make_envelope(publisher, 1)])
    assert log.published is not None and log.published.size == 2
    assert store.checkpoint_at(log.conn, 2) == log.published


def test_leaves_committed_without_a_checkpoint_are_covered_on_open(
    backend: Backend, db_path: str, log: Log, log_signer: Signer, publisher: Signer
) -> None:
    """Leaves an older version committed before a crash, without their checkpoint, get one."""
    log.admit_notices([make_envelope(publisher, 1)])
    log.close()
    backend.alter(
        "DELETE FROM checkpoints WHERE size = 2",
        "ALTER TABLE checkpoints DISABLE TRIGGER USER;DELETE FROM checkpoints WHERE size = 2",
    )
    reopened = Log(db_path, log_signer, ORIGIN)
    assert reopened.published is not None and reopened.published.size == 2


def test_a_second_root_for_a_signed_size_is_refused_by_storage(log: Log) -> None:
    assert log.published is not None
    with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError)):
        log.conn.execute(
            "INSERT INTO checkpoints (size, root, note, signed_at) VALUES (?, ?, ?, ?)",
            (log.published.size, b"\x00" * 32, b"x", "now"),
        )


def test_open_refuses_a_tree_whose_root_no_longer_matches(
    backend: Backend, db_path: str, log: Log, log_signer: Signer, publisher: Signer
) -> None:
    log.sequence([make_envelope(publisher, seq) for seq in range(1, 4)])
    log.close()
    backend.alter(
        "DROP TRIGGER nodes_append_only_update;"
        "UPDATE nodes SET hash = zeroblob(32) WHERE level = 2 AND idx = 0",
        "ALTER TABLE nodes DISABLE TRIGGER USER;"
        "UPDATE nodes SET hash = decode(repeat('00', 32), 'hex') WHERE level = 2 AND idx = 0",
    )
    with pytest.raises(StorageFault) as refused:
        Log(db_path, log_signer, ORIGIN)
    assert refused.value.kind is CORRUPT
    assert refused.value.evidence.startswith("stored_root_mismatch: ")


def test_open_refuses_a_truncated_tree(
    backend: Backend, db_path: str, log: Log, log_signer: Signer, publisher: Signer
) -> None:
    log.sequence([make_envelope(publisher, 1)])
    log.close()
    backend.alter(
        "DROP TRIGGER leaves_append_only_delete; DELETE FROM leaves WHERE idx = 1",
        "ALTER TABLE leaves DISABLE TRIGGER USER; ALTER TABLE log_head DISABLE TRIGGER USER;"
        "DELETE FROM leaves WHERE idx = 1; UPDATE log_head SET size = 1",
    )
    with pytest.raises(StorageFault) as refused:
        Log(db_path, log_signer, ORIGIN)
    assert refused.value.kind is CORRUPT
    assert refused.value.evidence.startswith("tree_truncated: ")


def test_open_refuses_checkpoints_signed_by_another_key(
    db_path: str, log: Log, publisher: Signer
) -> None:
    log.close()
    with pytest.raises(StorageFault) as refused:
        Log(db_path, Signer.generate(ORIGIN), ORIGIN)
    assert refused.value.kind is CORRUPT
    assert refused.value.evidence.startswith("checkpoint_invalid: ")


def test_storage_failure_rolls_back_the_whole_batch(
    backend: Backend, log: Log, publisher: Signer
) -> None:
    size, published = log.tree.size, log.published
    if backend.kind == "sqlite":
        # The database may not grow by a page any more: a full disk.
        log.conn.execute("PRAGMA max_page_count = 1")
    else:
        # The hundredth insert of the batch fails in the database.
        log.conn.execute("ALTER TABLE notices ADD CONSTRAINT fail CHECK (sequence < 100)")
    with pytest.raises(StorageError):
        log.sequence([make_envelope(publisher, seq) for seq in range(1, 201)])
    assert log.tree.size == size and log.published == published
    if backend.kind == "sqlite":
        log.conn.execute("PRAGMA max_page_count = 1073741823")
    else:
        log.conn.execute("ALTER TABLE notices DROP CONSTRAINT fail")
        assert log.conn.execute("SELECT size FROM log_head").fetchone() == (size,)
    assert log.sequence([make_envelope(publisher, 1)])[0].index == size
