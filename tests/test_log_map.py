"""The log keeps the tool-status map: folded in each batch's transaction, committed to by
exactly one line in every checkpoint it signs, brought up once on a database without it.

Runs on both backends (``backend``), but for what only SQLite has (a database from before
the map, a size quota)."""

from __future__ import annotations

import logging
import random
import sqlite3
from pathlib import Path

import pytest

from deplog.authority.log import Log
from deplog.authority.storage.backends import open_database
from deplog.authority.storage.copy import copy_log
from deplog.authority.storage.errors import StorageError
from deplog.client.errors import CLIError
from deplog.client.map.groups import decode_group, encode_group, group_id
from deplog.client.map.hashing import EMPTY_ROOT
from deplog.client.map.layer import MapView
from deplog.client.map.line import map_line, require_map_root
from deplog.client.map.proof import verify_map_proof
from deplog.client.map.sqlstore import STORE_FORMAT
from deplog.client.map.stored import StoredMap
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.model.notice import Envelope
from deplog.client.plumbing.storage_faults import CORRUPT, StorageFault
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from deplog.client.tlog.note import Signer
from tests.builders import ORIGIN, admitted, make_envelope, register
from tests.conftest import POSTGRESQL, Backend
from tests.map_formats import (
    write_first_draft_map,
    write_format_two_map,
    write_format_two_tables,
)

TOOLS = ("tool:org.acme/search", "tool:org.acme/fetch", "tool:org.acme/write")


@pytest.fixture
def db_path(backend: Backend) -> str:
    return backend.db


# What only SQLite has: a database from before the map, a page quota.
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.fixture
def log(db_path: str, log_signer: Signer, publisher: Signer) -> Log:
    opened = Log(db_path, log_signer, ORIGIN)
    register(opened, publisher)
    opened.publish()
    return opened


def batch(publisher: Signer, first: int, count: int) -> list[Envelope]:
    return [
        make_envelope(publisher, seq, tool_id=TOOLS[seq % len(TOOLS)])
        for seq in range(first, first + count)
    ]


def signed(log: Log, log_signer: Signer) -> Checkpoint:
    assert log.published is not None
    checkpoint, _ = open_checkpoint(log.published.note, log_signer.verifier())
    return checkpoint


def reference_root(log: Log, size: int) -> bytes:
    """The root of a fold of the prefix ``[0, size)`` from scratch, in memory."""
    return VerifiableMap().fold(admitted(log.tree.leaf_data(0, size)))


def test_a_new_logs_checkpoint_commits_to_the_empty_map(db_path: str, log_signer: Signer) -> None:
    checkpoint = signed(Log(db_path, log_signer, ORIGIN), log_signer)
    assert checkpoint.extensions == (map_line(EMPTY_ROOT),)


def test_every_checkpoint_carries_one_line_with_the_root_of_its_prefix(
    log: Log, log_signer: Signer, publisher: Signer
) -> None:
    for first in (1, 4, 11):
        log.sequence(batch(publisher, first, first + 2))
        checkpoint = signed(log, log_signer)
        assert len(checkpoint.extensions) == 1
        assert require_map_root(checkpoint) == reference_root(log, checkpoint.size)


def test_a_publisher_entry_advances_the_map_without_changing_its_root(
    log: Log, log_signer: Signer, publisher: Signer
) -> None:
    log.sequence(batch(publisher, 1, 2))
    before = require_map_root(signed(log, log_signer))
    register(log, Signer.generate("other"))
    log.publish()
    checkpoint = signed(log, log_signer)
    assert checkpoint.size == 4 and log.map.size() == 4
    assert require_map_root(checkpoint) == before


def test_the_map_reopens_at_the_size_and_root_it_was_committed_at(
    db_path: str, log: Log, log_signer: Signer, publisher: Signer
) -> None:
    log.sequence(batch(publisher, 1, 5))
    root = log.map.root()
    log.close()
    reopened = Log(db_path, log_signer, ORIGIN)
    assert (reopened.map.size(), reopened.map.root()) == (6, root)


def test_leaves_committed_without_a_checkpoint_bring_their_map_along(
    db_path: str, log: Log, log_signer: Signer, publisher: Signer
) -> None:
    """A crash between the batch's commit and its checkpoint: the map is already there."""
    log.admit_notices(batch(publisher, 1, 3))
    log.close()
    reopened = Log(db_path, log_signer, ORIGIN)
    checkpoint = signed(reopened, log_signer)
    assert checkpoint.size == 4
    assert require_map_root(checkpoint) == reference_root(reopened, 4)


@sqlite_only
def test_a_failed_batch_leaves_the_map_at_the_last_committed_size(
    log: Log, publisher: Signer
) -> None:
    log.sequence(batch(publisher, 1, 2))
    size, root = log.map.size(), log.map.root()
    log.conn.execute("PRAGMA max_page_count = 1")  # a full disk
    with pytest.raises(StorageError):
        log.sequence(batch(publisher, 3, 200))
    assert (log.map.size(), log.map.root()) == (size, root)
    log.conn.execute("PRAGMA max_page_count = 1073741823")
    log.sequence(batch(publisher, 3, 1))
    assert log.map.root() == reference_root(log, 4)


def drop_map(db_path: str) -> None:
    """Make the database one from before the map: its tables gone."""
    conn = sqlite3.connect(db_path)
    for table in ("map_group", "map_record", "map_state"):
        conn.execute(f"DROP TABLE {table}")
    conn.commit()
    conn.close()


@sqlite_only
def test_a_database_from_before_the_map_is_brought_up_once_at_start(
    db_path: str,
    log: Log,
    log_signer: Signer,
    publisher: Signer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    log.sequence(batch(publisher, 1, 7))
    log.close()
    drop_map(db_path)
    with caplog.at_level(logging.INFO, logger="deplog.authority"):
        reopened = Log(db_path, log_signer, ORIGIN)
    assert "building the tool-status map over 8 log entries" in caplog.messages
    assert (reopened.map.size(), reopened.map.root()) == (8, reference_root(reopened, 8))
    reopened.sequence(batch(publisher, 8, 1))
    assert require_map_root(signed(reopened, log_signer)) == reference_root(reopened, 9)


def test_open_refuses_a_map_root_altered_on_disk(
    backend: Backend, db_path: str, log: Log, log_signer: Signer, publisher: Signer
) -> None:
    log.sequence(batch(publisher, 1, 3))
    log.close()
    backend.alter(
        "UPDATE map_state SET root_hash = zeroblob(32)",
        "UPDATE map_state SET root_hash = decode(repeat('00', 32), 'hex')",
    )
    with pytest.raises(StorageFault) as refused:
        Log(db_path, log_signer, ORIGIN)
    assert refused.value.kind is CORRUPT
    assert refused.value.evidence.startswith("stored_root_mismatch: ")


def test_open_refuses_a_map_ahead_of_the_log(
    backend: Backend, db_path: str, log: Log, log_signer: Signer, publisher: Signer
) -> None:
    log.sequence(batch(publisher, 1, 3))
    log.close()
    backend.alter("UPDATE map_state SET size = size + 1")
    with pytest.raises(StorageFault) as refused:
        Log(db_path, log_signer, ORIGIN)
    assert refused.value.kind is CORRUPT
    assert refused.value.evidence.startswith("storage_corrupt: ")


@sqlite_only
def test_a_format_two_map_is_laid_out_again_under_the_same_signed_root(
    db_path: str,
    log: Log,
    log_signer: Signer,
    publisher: Signer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A database from before grouped nodes (format 2): the map is folded again from the
    log at start, to the root its latest checkpoint already carries, and appends go on."""
    log.sequence(batch(publisher, 1, 5))
    size, root = log.map.size(), log.map.root()
    log.close()
    conn = sqlite3.connect(db_path)
    leaves = [bytes(r[0]) for r in conn.execute("SELECT data FROM leaves ORDER BY idx")]
    assert write_format_two_map(conn, leaves) == root
    conn.close()
    with caplog.at_level(logging.INFO, logger="deplog.authority"):
        reopened = Log(db_path, log_signer, ORIGIN)
    assert any("dropped a tool-status map of another store format" in m for m in caplog.messages)
    assert any(f"building the tool-status map over {size}" in m for m in caplog.messages)
    assert reopened.map.format() == STORE_FORMAT
    assert (reopened.map.size(), reopened.map.root()) == (size, root)
    assert require_map_root(signed(reopened, log_signer)) == root
    reopened.sequence(batch(publisher, 6, 2))
    assert reopened.map.root() == reference_root(reopened, reopened.tree.size)
    reopened.close()


@sqlite_only
def test_a_log_whose_format_two_tables_never_got_a_row_folds_and_appends(
    db_path: str, log: Log, log_signer: Signer, publisher: Signer
) -> None:
    """What an older ``authority init`` leaves before its first start: empty format 2
    tables. The start drops them, folds the log, and appends go on."""
    log.close()
    conn = sqlite3.connect(db_path)
    write_format_two_tables(conn)
    conn.close()
    reopened = Log(db_path, log_signer, ORIGIN)
    reopened.sequence(batch(publisher, 1, 2))
    assert reopened.map.root() == reference_root(reopened, reopened.tree.size)
    reopened.close()


@sqlite_only
def test_a_format_two_log_is_copied_only_once_a_start_laid_its_map_out_again(
    db_path: str, log: Log, log_signer: Signer, publisher: Signer, tmp_path: Path
) -> None:
    """``authority copy`` reads a source's tables as they are: a format 2 map is refused,
    nothing written, until the authority has started on it once."""
    log.sequence(batch(publisher, 1, 3))
    log.close()
    conn = sqlite3.connect(db_path)
    write_format_two_map(conn, [bytes(r[0]) for r in conn.execute("SELECT data FROM leaves")])
    conn.close()
    target = tmp_path / "copy.db"
    with pytest.raises(CLIError, match="start the authority on it once"):
        copy_log(open_database(db_path), open_database(target), log_signer.verifier())
    assert not target.exists()
    Log(db_path, log_signer, ORIGIN).close()
    report = copy_log(open_database(db_path), open_database(target), log_signer.verifier())
    assert report.size == 4 and report.rows["map_group"] > 0


@sqlite_only  # no PostgreSQL database holds the first draft's map
def test_a_map_of_another_record_format_is_folded_again_and_the_next_checkpoint_commits(
    db_path: str,
    log: Log,
    log_signer: Signer,
    publisher: Signer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A database whose map holds the first draft's records, under a checkpoint signed with
    that map's root: the map is dropped and folded from the log, never extended; the
    signed checkpoint stays (one body per size) until the next append commits the new root."""
    log.sequence(batch(publisher, 1, 5))
    log.close()
    conn = sqlite3.connect(db_path)
    size = int(conn.execute("SELECT max(size) FROM checkpoints").fetchone()[0])
    leaves = [bytes(r[0]) for r in conn.execute("SELECT data FROM leaves ORDER BY idx")]
    old_root = write_first_draft_map(conn, leaves[:size])
    honest, _ = open_checkpoint(
        bytes(conn.execute("SELECT note FROM checkpoints WHERE size = ?", (size,)).fetchone()[0]),
        log_signer.verifier(),
    )
    old = Checkpoint(honest.origin, honest.size, honest.root_hash, (map_line(old_root),))
    conn.execute(
        "UPDATE checkpoints SET note = ? WHERE size = ?", (sign_checkpoint(old, log_signer), size)
    )
    conn.commit()
    conn.close()
    with caplog.at_level(logging.INFO, logger="deplog.authority"):
        reopened = Log(db_path, log_signer, ORIGIN)
    assert any(f"rebuilt in record format {STORE_FORMAT}" in m for m in caplog.messages)
    assert reopened.map.format() == STORE_FORMAT
    assert (reopened.map.size(), reopened.map.root()) == (size, reference_root(reopened, size))
    assert require_map_root(signed(reopened, log_signer)) == old_root  # until the next append
    reopened.sequence(batch(publisher, 6, 1))
    checkpoint = signed(reopened, log_signer)
    assert require_map_root(checkpoint) == reference_root(reopened, size + 1)
    record = verify_map_proof(require_map_root(checkpoint), TOOLS[0], reopened.map.prove(TOOLS[0]))
    assert record is not None and record.notices


# -- rows held back (client.map.stored) --------------------------------------------------


def tables(db_path: str) -> tuple[int, bytes]:
    """The map as its tables hold it (size, root), read on a connection of its own."""
    conn = open_database(db_path).connect(readonly=True)
    try:
        stored = StoredMap(conn)
        return stored.size() or 0, stored.root()
    finally:
        conn.close()


@sqlite_only
def test_on_sqlite_batches_fold_in_memory_and_flush_map_writes_their_rows(
    db_path: str, log: Log, log_signer: Signer, publisher: Signer
) -> None:
    written = tables(db_path)
    for first in (1, 4, 7):
        log.sequence(batch(publisher, first, 3))
        assert require_map_root(signed(log, log_signer)) == reference_root(log, log.tree.size)
        assert tables(db_path) == written
    assert log.map.unwritten == log.tree.size - written[0] == 10  # the registration too
    log.flush_map()
    assert log.map.unwritten == 0
    assert tables(db_path) == (log.tree.size, reference_root(log, log.tree.size))


@pytest.mark.parametrize("backend", [POSTGRESQL], indirect=True)
def test_on_postgresql_every_batch_writes_its_rows(
    db_path: str, log: Log, publisher: Signer
) -> None:
    """Other processes read and extend the map's tables there: none are held back."""
    for first in (1, 4):
        log.sequence(batch(publisher, first, 3))
        assert log.map.unwritten == 0 and log.map.layer is None
        assert tables(db_path) == (log.tree.size, reference_root(log, log.tree.size))


@sqlite_only
def test_close_writes_the_rows_held(db_path: str, log: Log, publisher: Signer) -> None:
    log.sequence(batch(publisher, 1, 4))
    assert log.map.unwritten
    log.close()
    assert tables(db_path) == (5, VerifiableMap().fold(admitted(leaf_rows(db_path))))


def leaf_rows(db_path: str) -> list[bytes]:
    conn = sqlite3.connect(db_path)
    try:
        return [bytes(r[0]) for r in conn.execute("SELECT data FROM leaves ORDER BY idx")]
    finally:
        conn.close()


@sqlite_only
def test_rows_lost_with_the_process_are_folded_again_at_start(
    db_path: str,
    log: Log,
    log_signer: Signer,
    publisher: Signer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What a SIGKILL leaves (tests/integration/test_crash.py does it for real): batches
    committed and signed, their map rows never written. The start folds those entries
    again, to the root the latest checkpoint carries, and writes them."""
    log.sequence(batch(publisher, 1, 3))
    log.flush_map()
    log.sequence(batch(publisher, 4, 5))
    signed_root = require_map_root(signed(log, log_signer))
    log.conn.close()  # no close(): the held rows go with the process
    assert tables(db_path)[0] == 4
    with caplog.at_level(logging.INFO, logger="deplog.authority"):
        reopened = Log(db_path, log_signer, ORIGIN)
    assert (
        "folding the tool-status map's last 5 log entries (not written before the last stop)"
        in (caplog.messages)
    )
    assert (reopened.map.size(), reopened.map.root()) == (9, signed_root)
    assert tables(db_path) == (9, signed_root)
    reopened.sequence(batch(publisher, 9, 2))
    assert reopened.map.root() == reference_root(reopened, 11)
    reopened.close()


@sqlite_only
def test_a_failed_write_of_the_held_rows_changes_nothing_and_keeps_them(
    db_path: str, log: Log, publisher: Signer
) -> None:
    log.sequence(batch(publisher, 1, 4))
    before, held = tables(db_path), log.map.unwritten
    log.conn.execute(
        "CREATE TEMP TRIGGER refuse BEFORE UPDATE ON map_state "
        "BEGIN SELECT RAISE(ABORT, 'injected'); END"
    )
    with pytest.raises(StorageError):
        log.flush_map()
    assert tables(db_path) == before and log.map.unwritten == held
    log.sequence(batch(publisher, 5, 2))  # appends go on meanwhile
    log.conn.execute("DROP TRIGGER temp.refuse")
    log.flush_map()
    assert tables(db_path) == (log.tree.size, reference_root(log, log.tree.size))


@sqlite_only
def test_a_map_behind_the_committed_log_catches_up_from_its_entries(
    log: Log, log_signer: Signer, publisher: Signer
) -> None:
    """What a commit that reported a failure and still took effect leaves: the held rows
    went back to an older commit's (here: none held, the tables' size) while the log kept
    the batch. The next batch folds the missing entries from the log first."""
    log.sequence(batch(publisher, 1, 3))
    assert log.map.cache is not None
    log.map.cache.view = MapView()
    log.map.forget()
    assert (log.map.size() or 0) < log.tree.size
    log.sequence(batch(publisher, 4, 2))
    assert log.map.size() == log.tree.size == 6
    assert require_map_root(signed(log, log_signer)) == reference_root(log, 6)


def test_warm_map_fills_the_writers_cache_with_the_maps_top(log: Log, publisher: Signer) -> None:
    log.sequence(batch(publisher, 1, 40))
    log.flush_map()
    assert log.map.cache is not None
    log.map.forget()
    assert not log.map.cache.groups.entries
    assert log.warm_map() == len(log.map.cache.groups.entries) > 0
    root = log.map.nodes.root()
    assert root is not None and group_id(root.id) in log.map.cache.groups.entries


@sqlite_only
def test_warm_map_refuses_a_map_group_altered_on_disk(
    db_path: str, log: Log, log_signer: Signer, publisher: Signer
) -> None:
    log.sequence(batch(publisher, 1, 40))
    log.close()
    conn = sqlite3.connect(db_path)
    conn.execute(
        "UPDATE map_group SET nodes = x'00' WHERE rowid = (SELECT min(rowid) FROM map_group)"
    )
    conn.commit()
    conn.close()
    reopened = Log(db_path, log_signer, ORIGIN)  # its checks read no group
    with pytest.raises(StorageFault) as refused:
        reopened.warm_map()
    assert refused.value.kind is CORRUPT
    assert refused.value.evidence == "storage_corrupt: a stored map group does not decode"


@sqlite_only
def test_a_rollback_that_finds_the_log_past_the_map_folds_the_gap_and_signs_its_root(
    log: Log, log_signer: Signer, publisher: Signer
) -> None:
    """The same state found by a rollback's reload (a commit reported failed that took
    effect, then a publication before any batch): the entries are folded again in
    memory, and the checkpoint of the log's size carries the root of its whole prefix."""
    log.admit_notices(batch(publisher, 1, 3))  # committed, no checkpoint yet
    assert log.map.cache is not None
    log.map.cache.view = MapView()  # the rows held go back to the tables' (older) size
    log.conn.execute("BEGIN IMMEDIATE")
    log._rollback()
    assert log.map.size() == log.tree.size == 4
    checkpoint = log.publish()
    assert checkpoint.size == 4
    assert require_map_root(signed(log, log_signer)) == reference_root(log, 4)
    log.sequence(batch(publisher, 4, 2))
    assert require_map_root(signed(log, log_signer)) == reference_root(log, 6)


@sqlite_only
def test_a_rollback_after_a_batch_that_wrote_the_layer_folds_no_notice_twice(
    db_path: str, log: Log, log_signer: Signer, publisher: Signer
) -> None:
    """A commit reported failed that took effect, of a batch that took the layer past its
    bound and so wrote it whole: the tables hold that batch's records, the layer goes
    back to the last commit's, and the reload folds the batch again over those records,
    dropping their items from it first (repair), so the signed root is the reference's."""
    cache = log.map.cache
    assert cache is not None
    log.sequence([make_envelope(publisher, 1, tool_id=TOOLS[0])])
    before = cache.view
    assert before.layer is not None  # held, not written
    cache.layer_entries = 1  # the next batch takes the layer past it: written whole
    fresh = [make_envelope(publisher, seq, tool_id=f"tool:org.acme/new{seq}") for seq in (2, 3)]
    log.admit_notices(fresh)  # committed, with the layer written: new tools' records
    assert tables(db_path)[0] == log.tree.size == 4
    cache.view = before  # as if the commit had failed: back to the layer before it
    log.conn.execute("BEGIN IMMEDIATE")
    log._rollback()
    log.publish()
    assert require_map_root(signed(log, log_signer)) == reference_root(log, 4)
    log.flush_map()
    assert tables(db_path) == (4, reference_root(log, 4))


SPREAD = tuple(f"tool:org.acme/s{i}" for i in range(60))


def spread(publisher: Signer, first: int, count: int) -> list[Envelope]:
    """Notices about 60 tools in turn: a map of many groups, written in many slices."""
    return [
        make_envelope(publisher, seq, tool_id=SPREAD[seq % len(SPREAD)])
        for seq in range(first, first + count)
    ]


def slicing_small(log: Log) -> None:
    """The log's map writes its rows held in small slices once past 120 entries."""
    cache = log.map.cache
    assert cache is not None
    cache.layer_entries, cache.slice_groups, cache.slice_record_bytes = 160, 3, 120


@sqlite_only
@pytest.mark.parametrize("phase", ["groups", "records"])
def test_a_kill_in_the_middle_of_a_write_in_slices_is_folded_again_without_doubling_a_record(
    db_path: str, log: Log, log_signer: Signer, publisher: Signer, phase: str
) -> None:
    """SIGKILL while slices of the held rows are in the tables (some groups, deepest first,
    or some records) but the tables' size is not moved yet: the start
    folds the entries past that size again over those rows, dropping from the records
    the items the slices had written, and gets the latest checkpoint's root and the
    reference's records."""
    slicing_small(log)
    first = 1
    while True:
        log.sequence(spread(publisher, first, 6))
        first += 6
        writing = log.map.cache.writing if log.map.cache is not None else None
        if writing is None or writing.finished:
            continue
        if phase == "groups" and 0 < writing.next_group < len(writing.groups):
            break
        if phase == "records" and 0 < writing.next_record < len(writing.records):
            break
        assert first < 2000, "no write in slices reached the phase"
    signed_root = require_map_root(signed(log, log_signer))
    size = log.tree.size
    log.conn.close()  # as a kill
    assert tables(db_path)[0] < size
    reopened = Log(db_path, log_signer, ORIGIN)
    assert tables(db_path) == (size, signed_root) == (size, reference_root(reopened, size))
    reference = VerifiableMap()
    reference.fold(admitted(reopened.tree.leaf_data(0, size)))
    conn = open_database(db_path).connect(readonly=True)
    try:
        stored = StoredMap(conn)
        for tool_id in SPREAD:
            assert stored.records.get(tool_id) == reference.records.get(tool_id)
            proven = verify_map_proof(signed_root, tool_id, stored.prove(tool_id))
            assert proven == reference.records.get(tool_id)
    finally:
        conn.close()
    reopened.sequence(spread(publisher, first, 4))
    assert require_map_root(signed(reopened, log_signer)) == reference_root(reopened, size + 4)
    reopened.close()


@sqlite_only
def test_a_failed_batch_in_the_middle_of_a_write_in_slices_changes_nothing(
    db_path: str, log: Log, publisher: Signer
) -> None:
    slicing_small(log)
    first = 1
    while log.map.cache is None or log.map.cache.writing is None:
        log.sequence(spread(publisher, first, 6))
        first += 6
    before, held = tables(db_path), log.map.unwritten
    log.conn.execute("PRAGMA max_page_count = 1")  # a full disk
    with pytest.raises(StorageError):
        log.sequence(spread(publisher, first, 200))
    log.conn.execute("PRAGMA max_page_count = 1073741823")
    assert tables(db_path) == before and log.map.unwritten == held
    for _ in range(20):
        log.sequence(spread(publisher, first, 6))
        first += 6
    log.flush_map()
    assert tables(db_path) == (log.tree.size, reference_root(log, log.tree.size))


@sqlite_only
@pytest.mark.parametrize("seed", range(6))
def test_kills_at_random_slices_while_tools_keep_joining_the_map_start_at_the_signed_root(
    db_path: str, log: Log, log_signer: Signer, publisher: Signer, seed: int
) -> None:
    """New tools join every batch (keys inserted under the rows the slices write, and
    leaves moving to new parents), and the kill comes after a random number of slices:
    whatever part of the held rows is in the tables, the start gets the signed root."""
    slicing_small(log)
    rng = random.Random(seed)
    assert log.map.cache is not None
    stop_after = log.map.slices + rng.randint(1, 25)
    first = 1
    while log.map.slices < stop_after:
        envelopes = [
            make_envelope(publisher, seq, tool_id=f"tool:org.acme/n{rng.randrange(10_000)}")
            for seq in range(first, first + 6)
        ]
        log.sequence(envelopes)
        first += 6
    size, signed_root = log.tree.size, require_map_root(signed(log, log_signer))
    log.conn.close()  # as a kill
    reopened = Log(db_path, log_signer, ORIGIN)
    assert tables(db_path) == (size, signed_root) == (size, reference_root(reopened, size))
    reopened.close()


@sqlite_only
def test_a_cyclic_map_row_in_the_writers_cache_fails_the_batch_as_altered_storage(
    log: Log, publisher: Signer
) -> None:
    """A row whose child names the row again (memory or storage altered): the batch update
    refuses it as a row it cannot read (``MapStorageError``), so the batch fails
    ``storage_unavailable`` and rolls back (no traceback as a bug, no endless walk), and
    nothing is appended."""
    log.sequence(batch(publisher, 1, 40))
    cache = log.map.cache
    assert cache is not None
    root = log.map.nodes.root()
    assert root is not None
    gid = group_id(root.id)
    rows = decode_group(log.map.nodes.group(gid) or b"")
    node, left, _, _ = rows[root.id]
    rows[root.id] = (
        node._replace(right=node.right._replace(id=root.id, bits=node.bit)),
        left,
        None,
        None,
    )
    cyclic = encode_group(rows)
    if cache.layer is not None and gid in cache.layer.groups:
        cache.live.set_group(gid, cyclic)
    else:
        cache.groups.put(gid, cyclic)
    size = log.tree.size
    with pytest.raises(StorageError):
        log.sequence(batch(publisher, 41, 30))
    assert log.tree.size == size
