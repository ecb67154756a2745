"""The writer's map cache never changes a root or a proof: the cached log agrees with an
uncached reader and with a fold from scratch over random batches, across batches that
fail mid-way (a quota hit, an aborting trigger) and restarts after them. On SQLite the
log holds its map rows back (``client.map.stored`` rule *rows held back*): each test runs
with rows held (``held``, the reader proving through the writer's layer) and with rows
written by every batch (``written``, as on PostgreSQL)."""

from __future__ import annotations

import contextlib
import random
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from deplog.authority.log import Log
from deplog.authority.storage.errors import StorageError
from deplog.client.map.cache import MapCache
from deplog.client.map.groups import group_id
from deplog.client.map.proof import verify_map_proof
from deplog.client.map.stored import StoredMap
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.model.notice import Envelope
from deplog.client.tlog.note import Signer
from tests.builders import ORIGIN, admitted, advance_leaves, make_envelope, notice_leaf, register


class Batches:
    """Random batches of notices about a pool of tools, with fresh sequence numbers."""

    def __init__(self, publisher: Signer, seed: int, tools: int = 60) -> None:
        self.publisher = publisher
        self.rng = random.Random(seed)
        self.tools = [f"tool:org.acme/t{i}" for i in range(tools)]
        self.sequence = 0

    def next(self, largest: int = 40) -> list[Envelope]:
        out = []
        for _ in range(self.rng.randint(1, largest)):
            self.sequence += 1
            out.append(
                make_envelope(self.publisher, self.sequence, tool=self.rng.choice(self.tools))
            )
        return out


@pytest.fixture(params=["held", "written"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def opened(db_path: Path, log_signer: Signer, mode: str) -> Log:
    """The log, holding its map rows back (the default on SQLite) or writing every batch's."""
    log = Log(db_path, log_signer, ORIGIN)
    assert log.map.cache is not None and log.map.cache.holds
    if mode == "written":
        log.map.cache.layer_entries = 0
    return log


@contextlib.contextmanager
def writing_the_layer(log: Log) -> Iterator[None]:
    """The next batches write the map's rows whatever the mode: a bound they pass."""
    assert log.map.cache is not None
    kept = log.map.cache.layer_entries
    log.map.cache.layer_entries = min(kept, 1)
    try:
        yield
    finally:
        log.map.cache.layer_entries = kept


def reference(log: Log) -> VerifiableMap:
    """The map of the log's committed prefix, folded from scratch in memory."""
    folded = VerifiableMap()
    folded.fold(admitted(log.tree.leaf_data(0, log.tree.size)))
    return folded


def assert_agrees(log: Log, db_path: Path, tools: list[str]) -> None:
    """The cached writer, an uncached reader of the same file (through the writer's layer
    of rows not yet written, as the server's readers) and the reference fold give one
    root and the same verifying proofs."""
    expected = reference(log)
    reader = sqlite3.connect(db_path, isolation_level=None)
    try:
        assert log.map.root() == expected.root()
        for tool_id in [*tools, "tool:org.acme/never-named"]:
            size, proof = StoredMap(reader).prove_at_size(tool_id, log.map.view)
            assert size == log.tree.size
            assert log.map.prove(tool_id) == proof == expected.prove(tool_id)
            assert verify_map_proof(expected.root(), tool_id, proof) == (
                expected.records.get(tool_id)
            )
        if log.map.layer is None:
            assert StoredMap(reader).root() == expected.root()
    finally:
        reader.close()


def abort_folds_past(log: Log, size: int) -> None:
    """A real hook: a temporary trigger that aborts the batch's last map statement (the
    size update, after its rows, records and cache were written) past ``size``."""
    log.conn.execute(
        "CREATE TEMP TRIGGER abort_fold BEFORE UPDATE OF size ON map_state "
        f"WHEN NEW.size > {size} BEGIN SELECT RAISE(ABORT, 'injected'); END"
    )


def test_a_cached_log_matches_an_uncached_reader_across_failed_batches(
    tmp_path: Path, log_signer: Signer, publisher: Signer, mode: str
) -> None:
    """A batch walks rows it keeps decoded beside the groups' bytes: a failed batch leaves
    no row of its own behind, decoded or not."""
    db_path = tmp_path / "log.db"
    log = opened(db_path, log_signer, mode)
    register(log, publisher)
    batches = Batches(publisher, seed=11)
    failures = 0
    for round_ in range(24):
        if round_ % 3 == 2:
            size, root = log.map.size(), log.map.root()
            if round_ % 2:
                abort_folds_past(log, size or 0)
            else:  # a quota hit: whichever write grows the file first fails
                pages = int(log.conn.execute("PRAGMA page_count").fetchone()[0])
                log.conn.execute(f"PRAGMA max_page_count = {pages}")
            with writing_the_layer(log), pytest.raises(StorageError):
                log.sequence(batches.next(largest=300))
            failures += 1
            log.conn.execute("DROP TRIGGER IF EXISTS temp.abort_fold")
            log.conn.execute("PRAGMA max_page_count = 1073741823")
            assert (log.map.size(), log.map.root()) == (size, root)
            assert log.map.cache is not None and not log.map.cache.groups.entries
        log.sequence(batches.next())
        assert_agrees(log, db_path, batches.rng.sample(batches.tools, 8))
    assert failures == 8
    log.flush_map()
    assert log.map.layer is None
    assert_agrees(log, db_path, batches.tools[:8])
    log.close()


def test_the_aborting_hook_fails_the_batch_after_the_cache_took_its_rows(
    tmp_path: Path, log_signer: Signer, publisher: Signer, mode: str
) -> None:
    """The failure above is the one a stale cache would survive: the rows were cached
    (or held) before the abort, and only ``forget`` on rollback removes them."""
    log = opened(tmp_path / "log.db", log_signer, mode)
    register(log, publisher)
    batches = Batches(publisher, seed=5)
    log.sequence(batches.next())
    committed = log.map.layer
    assert log.map.cache is not None
    seen: list[int] = []
    forget = log.map.forget

    def counting_forget() -> None:
        assert log.map.cache is not None
        layer = log.map.cache.layer
        seen.append(len(log.map.cache.groups.entries) + (0 if layer is None else len(layer.groups)))
        forget()

    log.map.forget = counting_forget  # type: ignore[method-assign]
    abort_folds_past(log, log.map.size() or 0)
    with writing_the_layer(log), pytest.raises(StorageError):
        log.sequence(batches.next(largest=300))
    assert seen and seen[0] > 0
    assert not log.map.cache.groups.entries and not log.map.cache.records.entries
    assert log.map.cache.layer == (None if committed is None else committed.copy())
    log.close()


def test_a_restart_after_a_failed_batch_matches_the_reference(
    tmp_path: Path, log_signer: Signer, publisher: Signer, mode: str
) -> None:
    db_path = tmp_path / "log.db"
    log = opened(db_path, log_signer, mode)
    register(log, publisher)
    batches = Batches(publisher, seed=23)
    for _ in range(4):
        log.sequence(batches.next())
    abort_folds_past(log, log.map.size() or 0)
    with writing_the_layer(log), pytest.raises(StorageError):
        log.sequence(batches.next(largest=300))
    log.close()  # held rows: its write aborts too, and the start folds them again
    reopened = Log(db_path, log_signer, ORIGIN)
    assert_agrees(reopened, db_path, batches.tools[:10])
    for _ in range(3):
        reopened.sequence(batches.next())
    assert_agrees(reopened, db_path, batches.tools[:10])
    reopened.close()


def leaves(publisher: Signer, first: int, count: int, rng: random.Random) -> list[bytes]:
    return [
        notice_leaf(make_envelope(publisher, seq, tool=f"tool:org.acme/t{rng.randrange(500)}"))
        for seq in range(first, first + count)
    ]


def test_a_cache_smaller_than_the_tree_evicts_without_changing_a_root(
    tmp_path: Path, publisher: Signer
) -> None:
    conn = sqlite3.connect(tmp_path / "map.db", isolation_level=None)
    StoredMap.create_schema(conn)
    cache = MapCache(max_group_bytes=2_000, max_record_bytes=4096)
    small, memory = StoredMap(conn, cache), VerifiableMap()
    rng = random.Random(3)
    position = 0
    for _ in range(12):
        batch = leaves(publisher, position + 1, rng.randint(1, 60), rng)
        conn.execute("BEGIN IMMEDIATE")
        advance_leaves(small, position, batch)
        conn.execute("COMMIT")
        memory.fold(admitted(batch, position))
        position += len(batch)
        assert small.root() == memory.root()
        assert cache.groups.total <= 2_000
        assert cache.groups.total == sum(len(group) for group in cache.groups.entries.values())
        assert cache.records.total <= 4096
        assert cache.records.total == sum(len(r) for r in cache.records.entries.values())
        assert_cached_groups_are_the_stored_ones(cache, conn)
    conn.close()


def assert_cached_groups_are_the_stored_ones(cache: MapCache, conn: sqlite3.Connection) -> None:
    """Every cached group is the table's row, byte for byte: the cache never serves a group
    the tables do not hold."""
    stored = dict(conn.execute("SELECT id, nodes FROM map_group").fetchall())
    assert all(stored[gid] == blob for gid, blob in cache.groups.entries.items())


@pytest.mark.parametrize("max_group_bytes", [1_000, 4_000, 1 << 24])
def test_the_cached_groups_are_the_stored_ones_after_every_put_and_eviction(
    tmp_path: Path, publisher: Signer, max_group_bytes: int
) -> None:
    conn = sqlite3.connect(tmp_path / "map.db", isolation_level=None)
    StoredMap.create_schema(conn)
    cache = MapCache(max_group_bytes=max_group_bytes)
    writer, rng, position = StoredMap(conn, cache), random.Random(max_group_bytes), 0
    for _ in range(10):
        batch = leaves(publisher, position + 1, rng.randint(1, 40), rng)
        conn.execute("BEGIN IMMEDIATE")
        advance_leaves(writer, position, batch)
        conn.execute("COMMIT")
        position += len(batch)
        assert cache.groups.total <= max_group_bytes
        assert_cached_groups_are_the_stored_ones(cache, conn)
    cache.forget()
    assert not cache.groups.entries and cache.groups.total == 0
    conn.close()


def test_a_writer_that_forgets_after_another_writer_moved_the_map_folds_on_correctly(
    tmp_path: Path, publisher: Signer
) -> None:
    """Two writers take turns on one file (what a shared backend does): each forgets its
    cache before writing after the other."""
    path = tmp_path / "map.db"
    conns = [sqlite3.connect(path, isolation_level=None) for _ in range(2)]
    StoredMap.create_schema(conns[0])
    writers = [StoredMap(conn, MapCache()) for conn in conns]
    memory = VerifiableMap()
    rng = random.Random(8)
    position = 0
    for turn in range(10):
        writer = writers[turn % 2]
        writer.forget()
        batch = leaves(publisher, position + 1, rng.randint(1, 40), rng)
        writer.conn.execute("BEGIN IMMEDIATE")
        advance_leaves(writer, position, batch)
        writer.conn.execute("COMMIT")
        memory.fold(admitted(batch, position))
        position += len(batch)
        writers[(turn + 1) % 2].forget()  # rule 1: it did not write the last commit
        assert writers[0].root() == writers[1].root() == memory.root()
    for conn in conns:
        conn.close()


def test_forget_empties_the_cache_and_a_map_without_one_has_nothing_to_forget(
    tmp_path: Path, publisher: Signer
) -> None:
    conn = sqlite3.connect(tmp_path / "map.db", isolation_level=None)
    StoredMap.create_schema(conn)
    cache = MapCache()
    cached = StoredMap(conn, cache)
    advance_leaves(cached, 0, leaves(publisher, 1, 30, random.Random(1)))
    assert cache.groups.entries and cache.records.total > 0
    cached.forget()
    assert not cache.groups.entries and not cache.records.entries and cache.records.total == 0
    StoredMap(conn).forget()
    assert StoredMap(conn).root() == cached.root()
    conn.close()


@pytest.mark.parametrize("max_group_bytes", [4_000, 1 << 24])
def test_warm_fills_the_cache_with_the_shallowest_groups_up_to_its_bound(
    tmp_path: Path, publisher: Signer, max_group_bytes: int
) -> None:
    conn = sqlite3.connect(tmp_path / "map.db", isolation_level=None)
    StoredMap.create_schema(conn)
    advance_leaves(StoredMap(conn), 0, leaves(publisher, 1, 400, random.Random(6)))
    cache = MapCache(max_group_bytes=max_group_bytes)
    warmed = StoredMap(conn, cache)
    read = warmed.warm()
    stored = {
        bytes(gid): bytes(blob) for gid, blob in conn.execute("SELECT id, nodes FROM map_group")
    }
    assert read == len(cache.groups.entries) > 0
    assert cache.groups.total <= max_group_bytes
    assert_cached_groups_are_the_stored_ones(cache, conn)
    root = warmed.nodes.root()
    assert root is not None and group_id(root.id) in cache.groups.entries
    depth = max(gid[0] for gid in cache.groups.entries)
    assert all(gid[0] >= depth for gid in stored.keys() - cache.groups.entries.keys())
    if (
        max_group_bytes > 1 << 20
    ):  # the whole map: a batch reads no stored group, only asks for new ones
        assert cache.groups.entries.keys() == stored.keys()
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        advance_leaves(warmed, 400, leaves(publisher, 401, 20, random.Random(7)))
        conn.set_trace_callback(None)
        asked = {
            bytes.fromhex(literal)
            for sql in statements
            if sql.startswith("SELECT id, nodes FROM map_group")
            for literal in re.findall(r"x'([0-9a-f]*)'", sql)
        }
        assert not asked & stored.keys()
    conn.close()


def test_a_writer_reads_the_map_state_row_once_until_it_forgets(
    tmp_path: Path, publisher: Signer
) -> None:
    """Rule 5: batches after the first read no ``map_state`` row (a round trip each on a
    distant database); after ``forget`` (another writer may have moved it) the next reads
    it again, once."""
    conn = sqlite3.connect(tmp_path / "map.db", isolation_level=None)
    StoredMap.create_schema(conn)
    writer, rng = StoredMap(conn, MapCache()), random.Random(5)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    position = 0

    def batch() -> int:
        nonlocal position
        statements.clear()
        added = leaves(publisher, position + 1, 3, rng)
        conn.execute("BEGIN IMMEDIATE")
        advance_leaves(writer, position, added)
        writer.root()
        conn.execute("COMMIT")
        writer.committed()
        position += len(added)
        return sum(1 for s in statements if re.search(r"SELECT .* FROM map_state", s))

    assert [batch(), batch(), batch()] == [1, 0, 0]
    writer.forget()
    assert [batch(), batch()] == [1, 0]
    conn.close()
