"""Tests for client/map/groups.py: the stored form of the map's inner nodes.

Decoding reads back exactly what a store wrote, and refuses everything else as altered
storage (``MapStorageError``), never with another exception and never as a row; a batch
over altered group bytes either gives the root it would give anyway or raises that error
and writes nothing.
"""

from __future__ import annotations

import random
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.map.errors import MapStorageError
from deplog.client.map.groups import decode_group, encode_group, group_id
from deplog.client.map.nodes import ChildRef, InnerNode
from deplog.client.map.sqlstore import SqliteNodeStore
from deplog.client.map.stored import StoredMap
from deplog.client.map.tree import PrefixTree
from tests.test_mapstore import start_map


def stored_map(keys: int, seed: int) -> tuple[SqliteNodeStore, dict[bytes, bytes]]:
    """A store without a cache on a map of ``keys`` random keys, and its items."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    StoredMap.create_schema(conn)
    start_map(conn)
    rng = random.Random(seed)
    items = {rng.randbytes(32): rng.randbytes(32) for _ in range(keys)}
    store = SqliteNodeStore(conn)
    PrefixTree(store).update(items)
    return store, items


def stored_groups(store: SqliteNodeStore) -> dict[bytes, bytes]:
    return {
        bytes(gid): bytes(blob)
        for gid, blob in store.conn.execute("SELECT id, nodes FROM map_group").fetchall()
    }


GROUPS = stored_groups(stored_map(400, seed=6)[0])


def altered(data: st.DataObject, stored: bytes) -> bytes:
    """``stored`` cut short, grown, or with one byte flipped."""
    blob = bytearray(stored)
    change = data.draw(st.sampled_from(["cut", "grow", "flip"]))
    if change == "cut":
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
    elif change == "grow":
        blob += data.draw(st.binary(min_size=1, max_size=80))
    else:
        at = data.draw(st.integers(0, len(blob) - 1))
        blob[at] ^= data.draw(st.integers(1, 255))
    return bytes(blob)


def test_stored_groups_decode_to_their_rows_and_encode_back_to_their_bytes() -> None:
    """Every group of a real map: its rows are under its id, and re-encoding them (each
    row as it was read) gives the stored bytes, byte for byte."""
    assert len(GROUPS) > 100
    for gid, blob in GROUPS.items():
        rows = decode_group(blob)
        assert 0 < len(rows) <= 15
        assert all(group_id(nid) == gid and type(row[0]) is InnerNode for nid, row in rows.items())
        assert encode_group(rows) == blob


def test_rows_rewritten_encode_as_rows_read() -> None:
    """A row without its bytes (a batch's new row) encodes as the row read would."""
    for blob in list(GROUPS.values())[:50]:
        rows = decode_group(blob)
        fresh = {nid: (node, lv, rv, None) for nid, (node, lv, rv, _) in rows.items()}
        assert encode_group(fresh) == blob


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_altered_group_bytes_decode_to_rows_or_a_storage_error(data: st.DataObject) -> None:
    """Cut, grown or flipped bytes: decoding gives well-formed rows or raises the stores'
    ``MapStorageError``; no other exception escapes it."""
    blob = altered(data, data.draw(st.sampled_from(sorted(GROUPS.values()))))
    try:
        rows = decode_group(blob)
    except MapStorageError as err:
        assert str(err) == "map group malformed"
        return
    for node, _, _, raw in rows.values():
        assert type(node.left) is ChildRef and type(node.right) is ChildRef
        assert raw is not None and raw.startswith(node.id)


def a_row(bit: int, prefix: int) -> bytes:
    """One stored row: node (``bit``, ``prefix`` in its first byte) over two leaves."""
    leaf = b"\xff" + bytes([prefix]) * 32 + b"v" * 32
    return bytes([bit]) + bytes([prefix]) * ((bit + 7) // 8) + leaf + leaf


@pytest.mark.parametrize(
    "blob",
    [
        a_row(8, 1) + a_row(8, 1),  # a node twice
        b"".join(a_row(8, p) for p in range(16)),  # sixteen nodes: a group holds fifteen
    ],
    ids=["twice", "sixteen"],
)
def test_a_group_no_store_writes_is_refused(blob: bytes) -> None:
    with pytest.raises(MapStorageError, match="map group malformed"):
        decode_group(blob)


ALTERED, ALTERED_ITEMS = stored_map(400, seed=9)
ALTERED_GROUPS = stored_groups(ALTERED)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_batch_over_altered_group_bytes_gives_a_root_or_a_storage_error(
    data: st.DataObject,
) -> None:
    """A group on a batch's path cut, grown or flipped: the batch raises the stores'
    ``MapStorageError`` or gives a root, never another exception, and a batch that
    raised wrote nothing."""
    gid = data.draw(st.sampled_from(sorted(ALTERED_GROUPS)))
    blob = altered(data, ALTERED_GROUPS[gid])
    keys = data.draw(st.lists(st.sampled_from(sorted(ALTERED_ITEMS)), min_size=1, max_size=20))
    batch = {key: bytes(32) for key in keys}
    batch[data.draw(st.binary(min_size=32, max_size=32))] = b"\x01" * 32
    conn = ALTERED.conn
    conn.execute("BEGIN")
    try:
        conn.execute("UPDATE map_group SET nodes = ? WHERE id = ?", (blob, gid))
        before = stored_groups(ALTERED), ALTERED.root()
        try:
            PrefixTree(ALTERED).update(batch)
        except MapStorageError:
            assert (stored_groups(ALTERED), ALTERED.root()) == before
    finally:
        conn.execute("ROLLBACK")
