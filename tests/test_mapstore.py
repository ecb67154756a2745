"""The map's SQLite tables: the same roots and proofs as the reference, batch by batch,
written only in the caller's transaction and advanced only from the size folded."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from deplog.client.mapstore import STORE_FORMAT, SqliteNodeStore, StoredMap
from deplog.client.model.vmap import EMPTY_ROOT, PrefixTree, VerifiableMap, verify_map_proof
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope, notice_leaf
from tests.map_formats import write_first_draft_map
from tests.vmap_reference import reference_root


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    StoredMap.create_schema(conn)
    return conn


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    return connect(tmp_path / "map.db")


@pytest.fixture
def publisher() -> Signer:
    return Signer.generate("acme")


def leaves_for(publisher: Signer, count: int, tools: int) -> list[bytes]:
    """``count`` notice entries by ``acme`` about ``tools`` tools, round robin."""
    return [
        notice_leaf(make_envelope(publisher, i + 1, tool_id=f"tool:org.acme/t{i % tools}"))
        for i in range(count)
    ]


def test_a_stored_tree_matches_the_reference_after_every_random_batch(
    conn: sqlite3.Connection,
) -> None:
    rng = random.Random(7)
    tree = PrefixTree(SqliteNodeStore(conn))
    conn.execute("INSERT INTO map_state (id, format, size) VALUES (1, 2, 0)")
    items: dict[bytes, bytes] = {}
    for _ in range(30):
        known = list(items)
        batch = {rng.randbytes(32): rng.randbytes(32) for _ in range(rng.randint(1, 60))}
        batch.update({k: rng.randbytes(32) for k in rng.sample(known, min(len(known), 10))})
        items.update(batch)
        assert tree.update(batch) == reference_root(items)
    for key in rng.sample(list(items), 20):
        path = tree.lookup(key)
        assert (path.leaf_key, path.leaf_value) == (key, items[key])


def test_a_row_missing_on_a_changed_path_is_a_key_error(conn: sqlite3.Connection) -> None:
    """Read ahead (``inner_many``) or one by one, an altered store is never a wrong root."""
    rng = random.Random(8)
    store = SqliteNodeStore(conn)
    tree = PrefixTree(store)
    conn.execute("INSERT INTO map_state (id, format, size) VALUES (1, 2, 0)")
    items = {rng.randbytes(32): rng.randbytes(32) for _ in range(64)}
    tree.update(items)
    root = store.root()
    assert root is not None
    conn.execute("DELETE FROM map_inner WHERE id = ?", (root.id,))
    with pytest.raises(KeyError):
        store.inner_many([root.id])
    with pytest.raises(KeyError):
        tree.update({next(iter(items)): rng.randbytes(32)})


def test_a_stored_map_folds_to_the_in_memory_maps_root_and_proves_the_same(
    conn: sqlite3.Connection, publisher: Signer
) -> None:
    leaves = leaves_for(publisher, 40, 7)
    stored, memory = StoredMap(conn), VerifiableMap()
    for start in range(0, 40, 9):  # uneven batches
        stored.advance(start, leaves[start : start + 9])
    memory.fold(enumerate(leaves))
    assert stored.root() == memory.root()
    assert stored.size() == 40
    for tool_id in ("tool:org.acme/t3", "tool:org.acme/absent"):
        assert stored.prove(tool_id) == memory.prove(tool_id)
        assert verify_map_proof(stored.root(), tool_id, stored.prove(tool_id)) == (
            memory.records.get(tool_id)
        )


def test_a_withdraw_lands_in_its_targets_record(
    conn: sqlite3.Connection, publisher: Signer
) -> None:
    tool = "tool:org.acme/search"
    leaves = [
        notice_leaf(make_envelope(publisher, 1, tool_id=tool)),
        notice_leaf(
            make_envelope(
                publisher,
                2,
                tool_id=tool,
                action="withdraw",
                affected=None,
                withdraws=0,
                reasons=["other"],
            )
        ),
    ]
    stored = StoredMap(conn)
    stored.advance(0, leaves[:1])
    stored.advance(1, leaves[1:])
    assert [item.index for item in stored.records[tool].notices] == [0, 1]


def test_a_map_advances_only_from_the_size_it_folded(
    conn: sqlite3.Connection, publisher: Signer
) -> None:
    stored = StoredMap(conn)
    assert stored.size() is None
    with pytest.raises(ValueError):
        stored.advance(1, leaves_for(publisher, 1, 1))
    stored.advance(0, leaves_for(publisher, 2, 1))
    with pytest.raises(ValueError):
        stored.advance(3, [])


def test_publisher_free_entries_advance_the_size_and_keep_the_root(
    conn: sqlite3.Connection,
) -> None:
    stored = StoredMap(conn)
    stored.advance(0, [])
    assert (stored.size(), stored.root()) == (0, EMPTY_ROOT)


def test_a_rolled_back_batch_leaves_the_map_as_it_was(tmp_path: Path, publisher: Signer) -> None:
    conn = connect(tmp_path / "map.db")
    stored = StoredMap(conn)
    leaves = leaves_for(publisher, 6, 3)
    conn.execute("BEGIN")
    stored.advance(0, leaves[:3])
    conn.execute("COMMIT")
    before = stored.root()
    conn.execute("BEGIN")
    stored.advance(3, leaves[3:])
    conn.execute("ROLLBACK")
    reopened = StoredMap(connect(tmp_path / "map.db"))
    assert (reopened.size(), reopened.root()) == (3, before)
    assert reopened.prove("tool:org.acme/t0") == stored.prove("tool:org.acme/t0")


def test_a_snapshot_proof_carries_the_size_it_was_read_at(
    conn: sqlite3.Connection, publisher: Signer
) -> None:
    stored = StoredMap(conn)
    stored.advance(0, leaves_for(publisher, 5, 2))
    size, proof = stored.prove_at_size("tool:org.acme/t1")
    assert size == 5
    assert verify_map_proof(stored.root(), "tool:org.acme/t1", proof) is not None


def test_a_database_without_a_map_cannot_prove(conn: sqlite3.Connection) -> None:
    with pytest.raises(KeyError):
        StoredMap(conn).prove_at_size("tool:org.acme/t1")


def test_a_tool_never_leaves_the_map(conn: sqlite3.Connection, publisher: Signer) -> None:
    stored = StoredMap(conn)
    stored.advance(0, leaves_for(publisher, 1, 1))
    with pytest.raises(TypeError):
        del stored.records["tool:org.acme/t0"]
    assert list(stored.records) == ["tool:org.acme/t0"]


def test_a_map_of_another_record_format_is_dropped_whole_and_this_formats_is_kept(
    tmp_path: Path, publisher: Signer
) -> None:
    """Rule 4: the first draft's tables (JSON records, no format column) are never read or
    extended; ``create_schema`` drops them in one go and the map folds again from 0."""
    leaves = leaves_for(publisher, 6, 3)
    conn = connect(tmp_path / "old.db")
    old_root = write_first_draft_map(conn, leaves)
    assert StoredMap(conn).format() == 1
    with pytest.raises(KeyError):  # never proven from
        StoredMap(conn).prove_at_size("tool:org.acme/t0")
    assert StoredMap.create_schema(conn) is True
    stored = StoredMap(conn)
    assert (stored.size(), len(stored.records)) == (None, 0)
    root = stored.advance(0, leaves)
    assert root == VerifiableMap().fold(enumerate(leaves)) != old_root
    assert (stored.format(), StoredMap.create_schema(conn)) == (STORE_FORMAT, False)
    assert (stored.size(), stored.root()) == (6, root)
