"""The stored-hash tree computes exactly RFC 9162's roots and proofs, and survives reopening."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from deplog.authority.storage import tree as tree_module
from deplog.authority.storage.sqlite import SqliteDatabase
from deplog.authority.storage.tree import (
    StoredHashTree,
    TreeCorruptError,
    _consistency_path_from_pymerkle,
)
from deplog.client.tlog.proofs import (
    consistency_path,
    inclusion_path,
    leaf_hash,
    root_from_leaf_hashes,
    verify_consistency,
    verify_inclusion,
)

PYMERKLE = f"pymerkle {metadata.version('pymerkle')}"


def leaf(i: int) -> bytes:
    return f"leaf {i}".encode()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "log.db"


@pytest.fixture
def conn(db_path: Path) -> Iterator[sqlite3.Connection]:
    db = SqliteDatabase(db_path)
    c = db.connect()
    db.prepare(c)
    yield c
    c.close()


def grow(conn: sqlite3.Connection, n: int) -> StoredHashTree:
    tree = StoredHashTree(conn)
    for i in range(tree.size, n):
        tree.append_entry(leaf(i))
    return tree


def test_root_at_every_size_up_to_200_equals_rfc9162(conn: sqlite3.Connection) -> None:
    tree = StoredHashTree(conn)
    hashes = []
    for size in range(201):
        assert tree.root_at(size) == root_from_leaf_hashes(hashes)
        assert tree.current_root() == root_from_leaf_hashes(hashes)
        tree.append_entry(leaf(size))
        hashes.append(leaf_hash(leaf(size)))


def test_inclusion_proofs_equal_rfc9162_paths_up_to_64(conn: sqlite3.Connection) -> None:
    tree = grow(conn, 64)
    hashes = [leaf_hash(leaf(i)) for i in range(64)]
    for size in range(1, 65):
        root = root_from_leaf_hashes(hashes[:size])
        for index in range(size):
            proof = tree.inclusion_proof(index, size)
            assert proof == inclusion_path(hashes, index, size)
            verify_inclusion(hashes[index], index, size, proof, root)


def test_consistency_proofs_equal_rfc9162_proofs_up_to_64(conn: sqlite3.Connection) -> None:
    tree = grow(conn, 64)
    hashes = [leaf_hash(leaf(i)) for i in range(64)]
    for new in range(1, 65):
        new_root = root_from_leaf_hashes(hashes[:new])
        for old in range(new + 1):
            proof = tree.consistency_proof(old, new)
            assert proof == consistency_path(hashes, old, new), (
                f"{PYMERKLE}: its consistency proofs no longer convert to RFC 9162's"
            )
            verify_consistency(old, new, root_from_leaf_hashes(hashes[:old]), new_root, proof)


def test_a_pymerkle_proof_of_another_shape_is_a_loud_error_naming_its_version() -> None:
    with pytest.raises(RuntimeError, match=PYMERKLE):
        _consistency_path_from_pymerkle([0, 0], [b"\x00" * 32, b"\x01" * 32])
    with pytest.raises(RuntimeError, match=PYMERKLE):
        _consistency_path_from_pymerkle([1], [])


def test_reopened_tree_resumes_with_same_root_and_frontier(db_path: Path) -> None:
    first = SqliteDatabase(db_path).connect()
    SqliteDatabase(db_path).prepare(first)
    tree = grow(first, 77)
    root = tree.current_root()
    first.close()

    second = SqliteDatabase(db_path).connect()
    reopened = StoredHashTree(second)
    assert reopened.size == 77
    assert reopened.current_root() == root
    grow(second, 100)
    assert StoredHashTree(second).current_root() == root_from_leaf_hashes(
        [leaf_hash(leaf(i)) for i in range(100)]
    )
    second.close()


def test_uncommitted_appends_vanish_on_rollback(conn: sqlite3.Connection) -> None:
    grow(conn, 5)
    conn.execute("BEGIN")
    tree = StoredHashTree(conn)
    tree.append_entry(leaf(5))
    conn.execute("ROLLBACK")
    assert StoredHashTree(conn).size == 5


def test_stored_leaves_and_nodes_are_append_only(conn: sqlite3.Connection) -> None:
    grow(conn, 4)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE leaves SET data = x'00' WHERE idx = 0")
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("DELETE FROM nodes")


def test_verify_leaves_names_first_altered_leaf(conn: sqlite3.Connection) -> None:
    tree = grow(conn, 10)
    conn.execute("DROP TRIGGER leaves_append_only_update")
    conn.execute("UPDATE leaves SET data = x'00' WHERE idx = 6")
    assert tree.verify_leaves(0, 10) == 6
    assert tree.verify_leaves(0, 6) is None


def test_missing_subtree_hash_is_reported_as_corruption(conn: sqlite3.Connection) -> None:
    grow(conn, 8)
    conn.execute("DROP TRIGGER nodes_append_only_delete")
    conn.execute("DELETE FROM nodes WHERE level = 2 AND idx = 0")
    with pytest.raises(TreeCorruptError):
        StoredHashTree(conn).root_at(5)


def test_proofs_of_the_last_batch_read_nothing(conn: sqlite3.Connection) -> None:
    """The writer proves a batch's leaves from the hashes it wrote and its frontier: on
    PostgreSQL every read would be a round trip while the batch holds the log's order."""
    grow(conn, 1000)
    tree = StoredHashTree(conn)  # reopened: only the frontier is known
    for i in range(1000, 1032):
        tree.append_entry(leaf(i))
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    with tree.memoized():
        proofs = [tree.inclusion_proof(i, 1032) for i in range(1000, 1032)]
    conn.set_trace_callback(None)
    assert statements == []
    hashes = [leaf_hash(leaf(i)) for i in range(1032)]
    assert proofs == [inclusion_path(hashes, i, 1032) for i in range(1000, 1032)]


def test_proofs_stay_exact_when_the_known_hashes_overflow(
    conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tree_module, "KNOWN_HASHES", 8)
    tree = grow(conn, 64)
    assert len(tree.known) <= 8
    hashes = [leaf_hash(leaf(i)) for i in range(64)]
    for size in (1, 13, 32, 63, 64):
        for index in range(size):
            assert tree.inclusion_proof(index, size) == inclusion_path(hashes, index, size)


def test_audit_passes_on_an_untouched_tree(conn: sqlite3.Connection) -> None:
    assert grow(conn, 37).audit() is None


def test_audit_reports_its_progress_every_step_and_at_the_end(
    conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tree_module, "AUDIT_PROGRESS_STEP", 16)
    heard: list[tuple[int, int]] = []
    assert grow(conn, 37).audit(lambda done, total: heard.append((done, total))) is None
    assert heard == [(0, 37), (16, 37), (32, 37), (37, 37)]


def test_audit_names_an_altered_leaf(conn: sqlite3.Connection) -> None:
    tree = grow(conn, 37)
    conn.execute("DROP TRIGGER leaves_append_only_update")
    conn.execute("UPDATE leaves SET data = x'00' WHERE idx = 21")
    assert tree.audit() == "leaf 21 does not match its stored hash"


def test_audit_names_an_altered_subtree_hash(conn: sqlite3.Connection) -> None:
    tree = grow(conn, 37)
    conn.execute("DROP TRIGGER nodes_append_only_update")
    conn.execute("UPDATE nodes SET hash = zeroblob(32) WHERE level = 3 AND idx = 2")
    assert tree.audit() == "subtree hash over leaves 16.. (level 3) is wrong"


def test_a_proof_reads_its_stored_hashes_in_one_statement(conn: sqlite3.Connection) -> None:
    """One round trip per proof on a distant database, however large the tree."""
    grow(conn, 1000)
    fresh = StoredHashTree(conn)  # nothing known but the right edge
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    inclusion = fresh.inclusion_proof(3, 777)
    consistency = fresh.consistency_proof(100, 999)
    conn.set_trace_callback(None)
    assert [s.split()[0] for s in statements] == ["SELECT", "SELECT"]
    hashes = [leaf_hash(leaf(i)) for i in range(1000)]
    assert inclusion == inclusion_path(hashes, 3, 777)
    assert consistency == consistency_path(hashes, 100, 999)
