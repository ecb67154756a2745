"""The map's SQLite tables: the same roots and proofs as the reference, batch by batch,
written only in the caller's transaction and advanced only from the size folded."""

from __future__ import annotations

import hashlib
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.map.cache import MapCache
from deplog.client.map.errors import MapStorageError
from deplog.client.map.groups import group_id
from deplog.client.map.hashing import EMPTY_ROOT, bit_of, map_key
from deplog.client.map.nodes import InnerNode
from deplog.client.map.proof import verify_map_proof
from deplog.client.map.sqlstore import STORE_FORMAT, SqliteNodeStore
from deplog.client.map.stored import StoredMap
from deplog.client.map.tree import PrefixTree, root_from_path
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.tlog.note import Signer
from tests.builders import admitted, advance_leaves, make_envelope, notice_leaf
from tests.map_formats import (
    write_first_draft_map,
    write_format_two_map,
    write_format_two_tables,
)
from tests.vmap_reference import reference_root


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    StoredMap.create_schema(conn)
    return conn


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    return connect(tmp_path / "map.db")


def leaves_for(publisher: Signer, count: int, tools: int) -> list[bytes]:
    """``count`` notice entries by ``acme`` about ``tools`` tools, round robin."""
    return [
        notice_leaf(make_envelope(publisher, i + 1, tool_id=f"tool:org.acme/t{i % tools}"))
        for i in range(count)
    ]


def start_map(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO map_state (id, format, size) VALUES (1, ?, 0)", (STORE_FORMAT,))


@pytest.mark.parametrize("cache", [None, MapCache(max_group_bytes=2_500)], ids=["reader", "writer"])
def test_a_stored_tree_matches_the_reference_after_every_random_batch(
    conn: sqlite3.Connection, cache: MapCache | None
) -> None:
    """Roots after every batch, and lookups of present and absent keys (the leaf each
    reaches and its value, kept in its parent's group) equal the in-memory tree's."""
    rng = random.Random(7)
    tree, memory = PrefixTree(SqliteNodeStore(conn, cache)), PrefixTree()
    reader = PrefixTree(SqliteNodeStore(conn))
    start_map(conn)
    items: dict[bytes, bytes] = {}
    for round_ in range(30):
        known = list(items)
        batch = {rng.randbytes(32): rng.randbytes(32) for _ in range(rng.randint(1, 60))}
        batch.update({k: rng.randbytes(32) for k in rng.sample(known, min(len(known), 10))})
        if round_ == 0:
            batch = dict(list(batch.items())[:1])  # a one-key map: its root is a leaf
        items.update(batch)
        assert tree.update(batch) == memory.update(batch) == reference_root(items)
        for key in [*rng.sample(list(items), min(len(items), 5)), rng.randbytes(32)]:
            assert reader.lookup(key) == tree.lookup(key) == memory.lookup(key)


def test_groups_hold_at_most_fifteen_nodes_of_four_split_bits_under_one_prefix(
    conn: sqlite3.Connection,
) -> None:
    rng = random.Random(9)
    store = SqliteNodeStore(conn)
    start_map(conn)
    PrefixTree(store).update({rng.randbytes(32): rng.randbytes(32) for _ in range(3000)})
    groups: dict[bytes, list[InnerNode]] = {}
    todo = [store.root()]
    while todo:
        ref = todo.pop()
        assert ref is not None
        if ref.bits < 256:
            node = store.inner(ref.id)
            groups.setdefault(group_id(node.id), []).append(node)
            todo += [node.left, node.right]
    stored = {bytes(row[0]) for row in conn.execute("SELECT id FROM map_group")}
    assert stored == set(groups)
    for gid, nodes in groups.items():
        top = gid[0]
        assert top % 4 == 0 and all(top <= node.bit < top + 4 for node in nodes)
        assert all(node.id[1:].startswith(gid[1:-1]) for node in nodes)
    sizes = [len(nodes) for nodes in groups.values()]
    assert max(sizes) == 15 and min(sizes) == 1  # full groups at the top, lone nodes below


def test_keys_sharing_every_prefix_length_are_stored_and_proven_like_the_reference(
    conn: sqlite3.Connection,
) -> None:
    """Nodes at every split bit 0..255 (so in every group, the deepest under a 252-bit
    prefix, and leaf children at every depth), set one key a batch, deepest first: each
    batch inserts a node above a stored leaf, whose value moves to a new parent's group."""
    base = hashlib.sha256(b"grouped base").digest()
    flipped = [
        (int.from_bytes(base, "big") ^ (1 << (255 - bit))).to_bytes(32, "big") for bit in range(256)
    ]
    items = {key: hashlib.sha256(key).digest() for key in [base, *flipped]}
    start_map(conn)
    writer, reader = (
        PrefixTree(SqliteNodeStore(conn, MapCache())),
        PrefixTree(SqliteNodeStore(conn)),
    )
    writer.update({base: items[base]})
    for key in reversed(flipped):
        writer.update({key: items[key]})
    assert writer.root() == reference_root(items)
    path = reader.lookup(base)
    assert [step.bit for step in path.steps] == list(range(255, -1, -1))
    for key in items:
        assert reader.lookup(key) == writer.lookup(key)
        assert root_from_path(key, reader.lookup(key)) == writer.root()


@settings(max_examples=25, deadline=None)
@given(
    prefix=st.integers(0, 255),
    tails=st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=40, unique=True),
    batches=st.integers(1, 6),
)
def test_property_clustered_keys_in_batches_match_the_in_memory_tree(
    tmp_path_factory: pytest.TempPathFactory, prefix: int, tails: list[bytes], batches: int
) -> None:
    """Keys forced to share their first ``prefix`` bits, in ``batches`` batches, through a
    writer with a cache of two groups (so it reads and evicts), proven by a reader."""
    conn = connect(tmp_path_factory.mktemp("clustered") / "map.db")
    head = int.from_bytes(hashlib.sha256(b"cluster").digest(), "big")
    mask = (1 << 256) - (1 << (256 - prefix)) if prefix else 0
    keys = sorted(
        {((head & mask) | (int.from_bytes(t, "big") & ~mask)).to_bytes(32, "big") for t in tails}
    )
    start_map(conn)
    writer = PrefixTree(SqliteNodeStore(conn, MapCache(max_group_bytes=2_000)))
    memory, reader = PrefixTree(), PrefixTree(SqliteNodeStore(conn))
    for part in range(batches):
        # This part's keys, and the first key again: a present leaf gets a new value.
        chosen = [*keys[part::batches], keys[0]]
        batch = {key: hashlib.sha256(key + bytes((part,))).digest() for key in chosen}
        assert writer.update(batch) == memory.update(batch)
    for key in keys:
        assert reader.lookup(key) == memory.lookup(key)
    conn.close()


def test_a_row_missing_on_a_changed_path_is_a_storage_error(conn: sqlite3.Connection) -> None:
    """Read ahead (``inner_many``) or one by one, an altered store is never a wrong root."""
    rng = random.Random(8)
    store = SqliteNodeStore(conn)
    tree = PrefixTree(store)
    start_map(conn)
    items = {rng.randbytes(32): rng.randbytes(32) for _ in range(64)}
    tree.update(items)
    root = store.root()
    assert root is not None
    conn.execute("DELETE FROM map_group WHERE id = ?", (group_id(root.id),))
    with pytest.raises(MapStorageError):
        store.inner_many([root.id])
    with pytest.raises(MapStorageError):
        tree.update({next(iter(items)): rng.randbytes(32)})


@pytest.mark.parametrize("cut", [1, 20, 64])
def test_a_truncated_group_row_is_a_storage_error_for_readers_and_writers(
    conn: sqlite3.Connection, cut: int
) -> None:
    rng = random.Random(10)
    start_map(conn)
    items = {rng.randbytes(32): rng.randbytes(32) for _ in range(64)}
    PrefixTree(SqliteNodeStore(conn)).update(items)
    root = SqliteNodeStore(conn).root()
    assert root is not None
    conn.execute(
        "UPDATE map_group SET nodes = substr(nodes, 1, length(nodes) - ?) WHERE id = ?",
        (cut, group_id(root.id)),
    )
    with pytest.raises(MapStorageError):
        for key in items:  # some path ends in the altered row's last node
            PrefixTree(SqliteNodeStore(conn)).lookup(key)
    with pytest.raises(MapStorageError):
        PrefixTree(SqliteNodeStore(conn, MapCache())).update({rng.randbytes(32): b"v" * 32})


def test_a_stored_map_folds_to_the_in_memory_maps_root_and_proves_the_same(
    conn: sqlite3.Connection, publisher: Signer
) -> None:
    leaves = leaves_for(publisher, 40, 7)
    stored, memory = StoredMap(conn), VerifiableMap()
    for start in range(0, 40, 9):  # uneven batches
        advance_leaves(stored, start, leaves[start : start + 9])
    memory.fold(admitted(leaves))
    assert stored.root() == memory.root()
    assert stored.size() == 40
    for tool_id in ("tool:org.acme/t3", "tool:org.acme/absent"):
        assert stored.prove(tool_id) == memory.prove(tool_id)
        assert verify_map_proof(stored.root(), tool_id, stored.prove(tool_id)) == (
            memory.records.get(tool_id)
        )


def test_a_holder_without_a_cache_keeps_a_batchs_groups_for_that_batch_only(
    conn: sqlite3.Connection, publisher: Signer
) -> None:
    """A follower's or a witness's map (no cache across transactions: ``client.map.cache``
    rule *the cache holds what its transaction sees*) keeps the groups it reads for one
    batch, and nothing after it, whether the batch folded or failed."""
    stored = StoredMap(conn)
    advance_leaves(stored, 0, leaves_for(publisher, 30, 30))
    assert stored.nodes.cache is None
    conn.execute("DELETE FROM map_group WHERE id = ?", (group_id(stored.nodes.root().id),))  # type: ignore[union-attr]
    with pytest.raises(MapStorageError):
        advance_leaves(stored, 30, leaves_for(publisher, 31, 31)[30:])
    assert stored.nodes.cache is None


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
    advance_leaves(stored, 0, leaves[:1])
    advance_leaves(stored, 1, leaves[1:])
    assert [item.index for item in stored.records[tool].notices] == [0, 1]


def test_a_map_advances_only_from_the_size_it_folded(
    conn: sqlite3.Connection, publisher: Signer
) -> None:
    stored = StoredMap(conn)
    assert stored.size() is None
    with pytest.raises(ValueError):
        advance_leaves(stored, 1, leaves_for(publisher, 1, 1))
    advance_leaves(stored, 0, leaves_for(publisher, 2, 1))
    with pytest.raises(ValueError):
        advance_leaves(stored, 3, [])


def test_publisher_free_entries_advance_the_size_and_keep_the_root(
    conn: sqlite3.Connection,
) -> None:
    stored = StoredMap(conn)
    advance_leaves(stored, 0, [])
    assert (stored.size(), stored.root()) == (0, EMPTY_ROOT)


def test_a_rolled_back_batch_leaves_the_map_as_it_was(tmp_path: Path, publisher: Signer) -> None:
    conn = connect(tmp_path / "map.db")
    stored = StoredMap(conn)
    leaves = leaves_for(publisher, 6, 3)
    conn.execute("BEGIN")
    advance_leaves(stored, 0, leaves[:3])
    conn.execute("COMMIT")
    before = stored.root()
    conn.execute("BEGIN")
    advance_leaves(stored, 3, leaves[3:])
    conn.execute("ROLLBACK")
    reopened = StoredMap(connect(tmp_path / "map.db"))
    assert (reopened.size(), reopened.root()) == (3, before)
    assert reopened.prove("tool:org.acme/t0") == stored.prove("tool:org.acme/t0")


def test_a_snapshot_proof_carries_the_size_it_was_read_at(
    conn: sqlite3.Connection, publisher: Signer
) -> None:
    stored = StoredMap(conn)
    advance_leaves(stored, 0, leaves_for(publisher, 5, 2))
    size, proof = stored.prove_at_size("tool:org.acme/t1")
    assert size == 5
    assert verify_map_proof(stored.root(), "tool:org.acme/t1", proof) is not None


def test_a_snapshot_proof_reads_each_group_on_its_path_once(
    conn: sqlite3.Connection, publisher: Signer
) -> None:
    stored = StoredMap(conn)
    advance_leaves(stored, 0, leaves_for(publisher, 400, 400))
    path = stored.tree.lookup(map_key("tool:org.acme/t7"))
    reads: list[str] = []
    conn.set_trace_callback(reads.append)
    _, proof = stored.prove_at_size("tool:org.acme/t7")
    conn.set_trace_callback(None)
    group_reads = [sql for sql in reads if "FROM map_group" in sql]
    groups = {group_id(node) for node in _path_node_ids(stored)}
    assert len(proof.path) == len(path.steps) > 4
    assert len(group_reads) == len(groups) < len(path.steps)


def _path_node_ids(stored: StoredMap) -> list[bytes]:
    """The ids of the inner nodes from the root to the leaf ``tool:org.acme/t7`` reaches."""
    key, ids = map_key("tool:org.acme/t7"), []
    ref = stored.nodes.root()
    while ref is not None and ref.bits < 256:
        ids.append(ref.id)
        node = stored.nodes.inner(ref.id)
        ref = node.right if bit_of(key, node.bit) else node.left
    return ids


def test_format_two_tables_without_a_row_yet_are_another_format(
    conn: sqlite3.Connection, publisher: Signer
) -> None:
    """Told by the columns, not only by ``map_state.format``: an older ``authority init``
    leaves the tables empty, and this format's writes need its own columns."""
    write_format_two_tables(conn)
    assert StoredMap.other_format(conn) is True
    assert StoredMap.create_schema(conn) is True
    assert StoredMap.other_format(conn) is False
    stored = StoredMap(conn)
    assert advance_leaves(stored, 0, leaves_for(publisher, 1, 1)) != EMPTY_ROOT
    assert StoredMap.create_schema(conn) is False


@pytest.mark.parametrize("layout", ["this format", "format 2"])
def test_a_map_past_the_size_kept_is_dropped_whatever_its_format(
    conn: sqlite3.Connection, publisher: Signer, layout: str
) -> None:
    """``drop_unless_at``: a follower's map that went past the size it keeps goes whole,
    also when an older deplog wrote it; a map at that size stays."""
    leaves = leaves_for(publisher, 6, 3)
    if layout == "format 2":
        write_format_two_map(conn, leaves)
    else:
        advance_leaves(StoredMap(conn), 0, leaves)
    StoredMap.drop_unless_at(conn, 6)
    assert StoredMap(conn).size() == 6
    StoredMap.drop_unless_at(conn, 4)
    tables = {str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master")}
    assert not {name for name in tables if name.startswith("map_")}


def test_a_database_without_a_map_cannot_prove(conn: sqlite3.Connection) -> None:
    with pytest.raises(MapStorageError):
        StoredMap(conn).prove_at_size("tool:org.acme/t1")


def test_a_tool_never_leaves_the_map(conn: sqlite3.Connection, publisher: Signer) -> None:
    stored = StoredMap(conn)
    advance_leaves(stored, 0, leaves_for(publisher, 1, 1))
    with pytest.raises(TypeError):
        del stored.records["tool:org.acme/t0"]
    assert list(stored.records) == ["tool:org.acme/t0"]


@pytest.mark.parametrize(
    ("write_old", "old_format"), [(write_first_draft_map, 1), (write_format_two_map, 2)]
)
def test_a_map_of_another_format_is_dropped_whole_and_this_formats_is_kept(
    tmp_path: Path,
    publisher: Signer,
    write_old: Callable[[sqlite3.Connection, list[bytes]], bytes],
    old_format: int,
) -> None:
    """Rule 4: the first draft's tables (JSON records, no format column) and format 2's
    (one row per inner node) are never read or extended; ``create_schema`` drops them in
    one go and the map folds again from 0 (to format 2's root: only the layout moved)."""
    leaves = leaves_for(publisher, 6, 3)
    conn = connect(tmp_path / "old.db")
    old_root = write_old(conn, leaves)
    assert StoredMap(conn).format() == old_format
    with pytest.raises(MapStorageError):  # never proven from
        StoredMap(conn).prove_at_size("tool:org.acme/t0")
    assert StoredMap.create_schema(conn) is True
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert not tables & {"map_inner", "map_leaf"}
    stored = StoredMap(conn)
    assert (stored.size(), len(stored.records)) == (None, 0)
    root = advance_leaves(stored, 0, leaves)
    assert root == VerifiableMap().fold(admitted(leaves))
    assert (root == old_root) is (old_format == 2)
    assert (stored.format(), StoredMap.create_schema(conn)) == (STORE_FORMAT, False)
    assert (stored.size(), stored.root()) == (6, root)


def test_a_writers_held_nodes_are_the_nodes_of_its_cached_groups(conn: sqlite3.Connection) -> None:
    """``held()`` (the Python batch's walk) maps every node of every cached group, and only
    those, to the node stored; a store without a cache holds none."""
    rng = random.Random(12)
    start_map(conn)
    PrefixTree(SqliteNodeStore(conn)).update(
        {rng.randbytes(32): rng.randbytes(32) for _ in range(300)}
    )
    store = SqliteNodeStore(conn, MapCache(max_group_bytes=3_000))
    reader = SqliteNodeStore(conn)
    root = store.root()
    assert root is not None and store.inner(root.id) == reader.inner(root.id)  # caches its group
    held = store.held()
    cached = store.cache.groups.entries if store.cache is not None else {}
    assert cached and len(held) == len(list(held)) > 0
    assert {group_id(node) for node in held} == set(cached)
    assert all(held[node] == reader.inner(node) for node in held)
    absent = bytes([255]) + bytes(32)
    assert held.get(absent) is None and absent not in held
    with pytest.raises(KeyError):
        held[absent]
    assert not SqliteNodeStore(conn).held()
