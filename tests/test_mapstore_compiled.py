"""Tests for the compiled batch over stored groups (``_prefixtree.c``'s ``update_groups``)
and the compiled decoding of a group (``decode_group``): the Python (``StoredTree`` with
``compiled`` False: ``PrefixTree``'s batch over ``SqliteNodeStore``, the definition) and
the compiled code give the same root, the same groups in the same order and the same
stored bytes, batch after batch, with and without a writer's cache; altered stored bytes
raise the stores' ``KeyError`` (altered storage) and change nothing.

CI builds the extension; elsewhere, without a C compiler, these tests skip, saying so.
"""

from __future__ import annotations

import gc
import os
import random
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.mapstore import (
    MapCache,
    SqliteNodeStore,
    StoredMap,
    StoredTree,
    _decode_group_in_python,
    group_id,
)
from deplog.client.model.vmap import KEY_BITS, ChildRef, InnerNode, PrefixTree
from tests.test_mapstore import connect, start_map
from tests.vmap_reference import reference_root

try:
    from deplog.client.model import _prefixtree as compiled
except ImportError:
    if os.environ.get("CI"):
        raise  # CI installs a C compiler: a map update left uncompiled there is a failure
    pytest.skip("the compiled map update is not built (no C compiler)", allow_module_level=True)

Kept = tuple[ChildRef | None, bytes | None, dict[bytes, bytes]]


class ComparingStore(SqliteNodeStore):
    """Runs every batch both ways over the same rows, then keeps the compiled one's."""

    compared = 0

    def update_groups(self, keys: list[bytes], values: list[bytes]) -> ChildRef:
        native = compiled.update_groups(
            keys, values, self.root(), self.root_value(), (), self.group, ChildRef
        )
        python: list[Kept] = []

        def capture(root: ChildRef | None, value: bytes | None, groups: Mapping[bytes, bytes]):
            python.append((root, value, dict(groups)))

        self.keep = capture  # type: ignore[method-assign]
        try:
            StoredTree(self, compiled=False).update(dict(zip(keys, values, strict=True)))
        finally:
            del self.keep
        assert (native[0], native[1]) == python[0][:2]
        assert list(native[2].items()) == list(python[0][2].items())  # bytes, and their order
        ComparingStore.compared += 1
        self.keep(*native)
        return native[0]


def random_batches(seed: int, rounds: int, shared_prefix: bool = False) -> list[dict[bytes, bytes]]:
    rng = random.Random(seed)
    keys: list[bytes] = []
    out = []
    for round_ in range(rounds):
        fresh = []
        for _ in range(rng.randint(1, 40) if round_ else 1):  # a one-key map first: a root leaf
            key = rng.randbytes(32)
            if shared_prefix and keys:
                base = rng.choice(keys)
                cut = rng.randint(1, 31)
                key = base[:cut] + bytes([base[cut] ^ (1 << rng.randint(0, 7))]) + key[cut + 1 :]
            fresh.append(key)
        batch = {key: rng.randbytes(32) for key in fresh}
        batch.update({k: rng.randbytes(32) for k in rng.sample(keys, min(len(keys), 8))})
        keys += fresh
        out.append(batch)
    return out


def caches() -> dict[str | None, MapCache | None]:
    return {
        None: None,
        "writer": MapCache(max_group_bytes=3_000),
        "holding": MapCache(layer_entries=10**6, layer_groups=10**6, layer_record_bytes=10**9),
    }


@pytest.mark.parametrize("shared_prefix", [False, True], ids=["random", "shared-prefix"])
@pytest.mark.parametrize("cache", [None, "writer", "holding"])
def test_the_compiled_batch_gives_the_pythons_root_groups_and_bytes_in_its_order(
    tmp_path: Path, cache: str | None, shared_prefix: bool
) -> None:
    conn = connect(tmp_path / "map.db")
    start_map(conn)
    store = ComparingStore(conn, caches()[cache])
    if cache == "holding":
        assert store.cache is not None
        store.cache.open_layer(0, None, None)
    tree, items = StoredTree(store), {}
    before = ComparingStore.compared
    for batch in random_batches(11, 40, shared_prefix):
        items.update(batch)
        assert tree.update(batch) == reference_root(items)
    assert ComparingStore.compared - before == 40


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), rounds=st.integers(1, 12))
def test_any_batches_give_the_same_groups_both_ways(seed: int, rounds: int) -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    StoredMap.create_schema(conn)
    start_map(conn)
    tree, items = StoredTree(ComparingStore(conn, MapCache(max_group_bytes=2_000))), {}
    for batch in random_batches(seed, rounds, shared_prefix=seed % 2 == 1):
        items.update(batch)
        assert tree.update(batch) == reference_root(items)


def test_a_stored_map_updates_over_the_groups_bytes_unless_told_not_to(tmp_path: Path) -> None:
    """``StoredMap``'s tree is a ``StoredTree``: compiled, a batch reads no decoded row."""
    conn = connect(tmp_path / "map.db")
    start_map(conn)
    stored = StoredMap(conn)
    decoded: list[bytes] = []
    stored.nodes.inner_many = lambda nodes: decoded.extend(nodes) or []  # type: ignore[method-assign]
    stored.nodes.inner = lambda node: decoded.append(node)  # type: ignore[method-assign,assignment]
    for batch in random_batches(3, 5):
        stored.tree.update(batch)
    assert isinstance(stored.tree, StoredTree) and not decoded


def stored_groups(seed: int, keys: int) -> list[bytes]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    StoredMap.create_schema(conn)
    start_map(conn)
    rng = random.Random(seed)
    PrefixTree(SqliteNodeStore(conn)).update(
        {rng.randbytes(32): rng.randbytes(32) for _ in range(keys)}
    )
    return [bytes(row[0]) for row in conn.execute("SELECT nodes FROM map_group")]


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


def decoded_both_ways(blob: bytes) -> tuple[object, object]:
    """What each decoder gives: its rows, or the KeyError it raised."""
    outcomes = []
    for decode in (_decode_group_in_python, decode_compiled):
        try:
            outcomes.append(list(decode(blob).items()))
        except KeyError as err:
            outcomes.append(err)
    return outcomes[0], outcomes[1]


def decode_compiled(blob: bytes) -> dict[bytes, Any]:
    return compiled.decode_group(blob, ChildRef, InnerNode)


def test_stored_groups_decode_to_the_pythons_rows() -> None:
    blobs = stored_groups(5, 3000)
    assert len(blobs) > 100
    for blob in blobs:
        python, native = decoded_both_ways(blob)
        assert native == python and isinstance(native, list)
        rows = dict(native)
        assert all(type(row[0]) is InnerNode and not gc.is_tracked(row) for row in rows.values())


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_altered_group_bytes_are_refused_where_the_python_refuses_them(
    data: st.DataObject,
) -> None:
    """Cut, grown or flipped bytes: both decoders give the same rows or both raise the
    stores' ``KeyError``."""
    python, native = decoded_both_ways(altered(data, data.draw(st.sampled_from(GROUPS))))
    if isinstance(python, KeyError):
        assert isinstance(native, KeyError) and native.args == ("map group malformed",)
    else:
        assert native == python


GROUPS = stored_groups(6, 400)


def test_decode_group_refuses_bad_arguments() -> None:
    with pytest.raises(TypeError):
        compiled.decode_group(bytearray(b"\x00"), ChildRef, InnerNode)
    with pytest.raises(TypeError):
        compiled.decode_group(b"", dict, InnerNode)


def stored_map(keys: int, seed: int = 1) -> tuple[SqliteNodeStore, dict[bytes, bytes]]:
    """A store without a cache on a map of ``keys`` random keys, and its items."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    StoredMap.create_schema(conn)
    start_map(conn)
    rng = random.Random(seed)
    items = {rng.randbytes(32): rng.randbytes(32) for _ in range(keys)}
    store = SqliteNodeStore(conn)
    StoredTree(store).update(items)
    return store, items


def updated(store: SqliteNodeStore, batch: dict[bytes, bytes], *, native: bool) -> object:
    """What one batch gives, compiled or by the Python: ``(root, root value, groups)``, or
    the KeyError it raised. Nothing is kept."""
    keys = sorted(batch)
    try:
        if native:
            return compiled.update_groups(
                keys,
                [batch[k] for k in keys],
                store.root(),
                store.root_value(),
                (),
                store.group,
                ChildRef,
            )
        python: list[Kept] = []

        def capture(root: ChildRef | None, value: bytes | None, groups: Mapping[bytes, bytes]):
            python.append((root, value, dict(groups)))

        store.keep = capture  # type: ignore[method-assign]
        try:
            StoredTree(store, compiled=False).update(batch)
        finally:
            del store.keep
        return python[0]
    except KeyError as err:
        return err


def test_a_missing_group_on_the_path_is_the_stores_key_error() -> None:
    store, items = stored_map(200)
    root = store.root()
    assert root is not None
    store.conn.execute("DELETE FROM map_group WHERE id = ?", (group_id(root.id),))
    with pytest.raises(KeyError, match="map node missing"):
        StoredTree(store).update({next(iter(items)): b"v" * 32})


def test_a_group_read_that_is_not_bytes_is_the_stores_key_error() -> None:
    store, items = stored_map(50)
    key = next(iter(items))
    with pytest.raises(KeyError, match="map group malformed"):
        compiled.update_groups(
            [key], [b"v" * 32], store.root(), None, (), lambda gid: "x", ChildRef
        )


def test_an_error_reading_a_group_reaches_the_caller_as_it_was_raised() -> None:
    store, items = stored_map(50)

    def broken(gid: bytes) -> bytes:
        raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError):
        compiled.update_groups(
            [next(iter(items))], [b"v" * 32], store.root(), None, (), broken, ChildRef
        )


def test_a_root_leaf_without_its_value_is_the_stores_key_error() -> None:
    leaf = ChildRef(b"k" * 32, KEY_BITS, b"h" * 32)
    for value in (None, b"v" * 31, "v" * 32):
        with pytest.raises(KeyError, match="malformed"):
            compiled.update_groups(
                [b"j" * 32], [b"w" * 32], leaf, value, (), lambda gid: None, ChildRef
            )


@pytest.mark.parametrize(
    "args",
    [
        ([b"k" * 32], [b"v" * 32], None, None, (), lambda gid: None),  # one short
        ((b"k" * 32,), [b"v" * 32], None, None, (), lambda gid: None, ChildRef),  # keys a tuple
        ([b"k" * 32], [b"v" * 32], None, None, (), "not callable", ChildRef),
        ([b"k" * 32], [b"v" * 32], None, None, (), lambda gid: None, dict),
        ([b"k" * 32], [b"v" * 32], None, None, [{}], lambda gid: None, ChildRef),  # held a list
        ([b"k" * 32], [b"v" * 32], None, None, ({}, []), lambda gid: None, ChildRef),
    ],
)
def test_update_groups_refuses_arguments_of_the_wrong_types(args: tuple[Any, ...]) -> None:
    with pytest.raises(TypeError):
        compiled.update_groups(*args)


@pytest.mark.parametrize(
    "keys, values",
    [
        ([], []),
        ([b"k" * 32], []),
        ([b"k" * 31], [b"v" * 32]),
        ([b"k" * 32], [b"v" * 33]),
        ([b"k" * 32, b"j" * 32], [b"v" * 32, b"v" * 32]),  # not sorted
        ([b"k" * 32, b"k" * 32], [b"v" * 32, b"v" * 32]),  # not distinct
    ],
)
def test_update_groups_refuses_a_batch_that_is_not_sorted_distinct_32_byte_keys(
    keys: list[bytes], values: list[bytes]
) -> None:
    with pytest.raises(ValueError):
        compiled.update_groups(keys, values, None, None, (), lambda gid: None, ChildRef)


ALTERED, ALTERED_ITEMS = stored_map(400, seed=9)
ALTERED_GROUPS = dict(ALTERED.conn.execute("SELECT id, nodes FROM map_group").fetchall())


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_altered_group_bytes_give_what_the_python_gives_or_its_key_error(
    data: st.DataObject,
) -> None:
    """A group on a batch's path cut, grown or flipped: the compiled batch gives the same
    root and groups as the Python, or both raise the stores' ``KeyError``; never a crash
    or a read out of bounds (CI runs these under the same build as production)."""
    gid = data.draw(st.sampled_from(sorted(ALTERED_GROUPS)))
    blob = altered(data, ALTERED_GROUPS[gid])
    keys = data.draw(st.lists(st.sampled_from(sorted(ALTERED_ITEMS)), min_size=1, max_size=20))
    batch = {key: bytes(32) for key in keys}
    batch[data.draw(st.binary(min_size=32, max_size=32))] = b"\x01" * 32
    conn = ALTERED.conn
    conn.execute("BEGIN")
    try:
        conn.execute("UPDATE map_group SET nodes = ? WHERE id = ?", (blob, gid))
        python = updated(ALTERED, batch, native=False)
        native = updated(ALTERED, batch, native=True)
    finally:
        conn.execute("ROLLBACK")
    if isinstance(python, KeyError):
        assert isinstance(native, KeyError)
    else:
        assert native == python


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
def test_a_group_no_store_writes_is_refused_by_every_reader(blob: bytes) -> None:
    for decode in (_decode_group_in_python, decode_compiled):
        with pytest.raises(KeyError, match="map group malformed"):
            decode(blob)
    key = bytes([1]) * 32
    root = ChildRef(b"\x08\x01", 8, b"h" * 32)
    with pytest.raises(KeyError, match="map group malformed"):
        compiled.update_groups([key], [b"w" * 32], root, None, (), lambda gid: blob, ChildRef)


def test_groups_held_in_memory_are_read_before_the_store_in_the_order_given() -> None:
    """``held`` dicts are looked in first, in order: ``read`` is asked only for the rest."""
    store, items = stored_map(300)
    stored = dict(store.conn.execute("SELECT id, nodes FROM map_group").fetchall())
    first = dict(list(stored.items())[::2])
    asked: list[bytes] = []

    def read(gid: bytes) -> bytes | None:
        asked.append(gid)
        return store.group(gid)

    batch = dict(sorted(items.items())[:40])
    keys = sorted(batch)
    values = [b"w" * 32 for _ in keys]
    from_store = compiled.update_groups(keys, values, store.root(), None, (), store.group, ChildRef)
    held = compiled.update_groups(keys, values, store.root(), None, (first, stored), read, ChildRef)
    assert held == from_store and not asked
    wrong = {gid: b"" for gid in stored}  # a first dict's bytes win over a later one's
    with pytest.raises(KeyError, match="map node missing"):
        compiled.update_groups(keys, values, store.root(), None, (wrong, stored), read, ChildRef)
