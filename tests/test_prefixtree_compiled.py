"""Tests for client/model/_prefixtree.c: the compiled batch update is vmap.py's, exactly.

``PrefixTree(compiled=False)`` runs the Python ``_Batch`` (the function's definition,
itself held to tests/vmap_reference.py by test_vmap.py); the compiled one must give the
same root and hand the store the same rows in the same order (a group's stored bytes
follow that order), batch after batch, for any keys, including adversarial ones. Its
SHA-256 is checked against hashlib on both compressions (the CPU's SHA extensions and
the portable one). Rows that break the tree's invariants raise the stores' ``KeyError``
(altered storage), never crash.

CI builds the extension (``.ci/run`` installs a C compiler); elsewhere, an install
without one runs the Python update and these tests skip, saying so.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import random
from collections.abc import Iterator, Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.model.vmap import (
    ChildRef,
    InnerNode,
    MemoryNodeStore,
    PrefixTree,
    node_id,
)
from tests.vmap_reference import reference_root

try:
    from deplog.client.model import _prefixtree as compiled
except ImportError:
    if os.environ.get("CI"):
        raise  # CI installs a C compiler: an update left uncompiled there is a failure
    pytest.skip("the compiled map update is not built (no C compiler)", allow_module_level=True)

Batch = dict[bytes, bytes]


class RecordingStore(MemoryNodeStore):
    """A ``MemoryNodeStore`` that keeps every ``write``: the root and the rows, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[ChildRef | None, list[InnerNode]]] = []

    def write(
        self, root: ChildRef | None, inners: Sequence[InnerNode], leaves: Mapping[bytes, bytes]
    ) -> None:
        self.writes.append((root, list(inners)))
        super().write(root, inners, leaves)


def run(batches: Sequence[Batch], *, use_compiled: bool) -> RecordingStore:
    store = RecordingStore()
    tree = PrefixTree(store, compiled=use_compiled)
    for changes in batches:
        tree.update(changes)
    return store


def assert_same_updates(batches: Sequence[Batch]) -> None:
    python, native = run(batches, use_compiled=False), run(batches, use_compiled=True)
    assert native.writes == python.writes
    for _, rows in native.writes:
        assert all(type(row) is InnerNode for row in rows)
        assert all(type(row.left) is ChildRef and type(row.right) is ChildRef for row in rows)


def flip(key: bytes, bit: int) -> bytes:
    out = bytearray(key)
    out[bit >> 3] ^= 0x80 >> (bit & 7)
    return bytes(out)


@contextlib.contextmanager
def sha_extensions(wanted: bool) -> Iterator[None]:
    """The compiled SHA-256 on the CPU's SHA extensions (when it has them) or not."""
    before = compiled.use_sha_extensions(wanted)
    try:
        yield
    finally:
        compiled.use_sha_extensions(before)


COMPRESSIONS = pytest.mark.parametrize("extensions", [True, False], ids=["cpu", "portable"])


# --- SHA-256 ----------------------------------------------------------------------------


@COMPRESSIONS
@given(data=st.binary(max_size=119))
def test_its_sha256_is_hashlibs(extensions: bool, data: bytes) -> None:
    with sha_extensions(extensions):
        assert compiled.sha256(data) == hashlib.sha256(data).digest()


@COMPRESSIONS
@pytest.mark.parametrize("length", [0, 55, 56, 63, 64, 65, 66, 119])
def test_its_sha256_pads_at_every_block_boundary(extensions: bool, length: int) -> None:
    data = bytes(range(length))
    with sha_extensions(extensions):
        assert compiled.sha256(data) == hashlib.sha256(data).digest()


@COMPRESSIONS
def test_batches_hash_alike_on_either_compression(extensions: bool) -> None:
    rng = random.Random(5)
    items = {rng.randbytes(32): rng.randbytes(32) for _ in range(300)}
    with sha_extensions(extensions):
        assert PrefixTree(compiled=True).update(items) == reference_root(items)


def test_its_sha256_refuses_inputs_longer_than_two_blocks() -> None:
    with pytest.raises(ValueError):
        compiled.sha256(bytes(120))


# --- the same function as the Python ----------------------------------------------------


def test_a_first_batch_builds_the_reference_root() -> None:
    rng = random.Random(1)
    items = {rng.randbytes(32): rng.randbytes(32) for _ in range(2000)}
    tree = PrefixTree(compiled=True)
    assert tree.update(items) == reference_root(items)


def test_random_batches_write_the_pythons_rows_in_its_order() -> None:
    rng = random.Random(2)
    keys = [rng.randbytes(32) for _ in range(3000)]
    batches = [
        {
            (rng.choice(keys) if rng.random() < 0.5 else rng.randbytes(32)): rng.randbytes(32)
            for _ in range(rng.choice((1, 2, 3, 25, 50, 400)))
        }
        for _ in range(120)
    ]
    assert_same_updates(batches)


# --- what the collector scans --------------------------------------------------------------


def test_the_rows_it_makes_are_left_to_reference_counting() -> None:
    """Rows hold only bytes, ints and rows: no cycle can run through them, so the compiled
    update leaves them untracked, as the collector would on its first scan of each."""
    rng = random.Random(12)
    store = RecordingStore()
    tree = PrefixTree(store, compiled=True)
    for _ in range(3):
        tree.update({rng.randbytes(32): rng.randbytes(32) for _ in range(200)})
    root = store.root()
    assert root is not None and not gc.is_tracked(root)
    rows = [row for _, written in store.writes for row in written]
    assert len(rows) > 500
    assert not any(gc.is_tracked(row) or gc.is_tracked(row.left) for row in rows)


def test_a_row_over_a_tracked_child_stays_tracked() -> None:
    """A child the collector still tracks (made in Python, not scanned yet) keeps the row
    that holds it tracked: only rows of untracked parts are left out."""
    rng = random.Random(13)
    left, right = b"\x00" + rng.randbytes(31), b"\x80" + rng.randbytes(31)
    new = right[:31] + bytes([right[31] ^ 1])  # splits off ``right`` at its last bit
    gc.disable()
    try:
        made_in_python = ChildRef(right, 256, rng.randbytes(32))
        assert gc.is_tracked(made_in_python)
        node = InnerNode(b"\x00", 0, ChildRef(left, 256, rng.randbytes(32)), made_in_python)
        written: list[InnerNode] = []
        compiled.update(
            [new],
            [b"v" * 32],
            ChildRef(b"\x00", 0, rng.randbytes(32)),
            {b"\x00": node},
            lambda _: node,
            written,
            ChildRef,
            InnerNode,
        )
        split, top = written
        assert made_in_python in split and gc.is_tracked(split) and gc.is_tracked(top)
        new_leaf = split.left if split.left.id == new else split.right
        assert new_leaf.id == new and not gc.is_tracked(new_leaf)
    finally:
        gc.enable()


def test_batches_of_shared_prefix_keys_match_the_python() -> None:
    """Keys that share 0..255 leading bits with one base: a path 256 rows deep."""
    rng = random.Random(3)
    base = rng.randbytes(32)
    keys = [base, *(flip(base, bit) for bit in range(256))]
    rng.shuffle(keys)
    batches = [{key: rng.randbytes(32) for key in keys[i : i + 17]} for i in range(0, 257, 17)]
    batches += [{key: rng.randbytes(32) for key in rng.sample(keys, 40)} for _ in range(5)]
    assert_same_updates(batches)
    native = PrefixTree(compiled=True)
    for changes in batches:
        native.update(changes)
    final: dict[bytes, bytes] = {}
    for changes in batches:
        final.update(changes)
    assert native.root() == reference_root(final)


def test_its_root_is_independent_of_how_keys_are_batched() -> None:
    rng = random.Random(4)
    items = {rng.randbytes(32): rng.randbytes(32) for _ in range(500)}
    pairs = list(items.items())
    one_by_one = PrefixTree(compiled=True)
    for key, value in pairs:
        one_by_one.update({key: value})
    assert one_by_one.root() == PrefixTree(compiled=True).update(items) == reference_root(items)


keys32 = st.binary(min_size=32, max_size=32)


@st.composite
def batch_sequences(draw: st.DrawFn) -> list[Batch]:
    """Batches over a small pool of keys, some near each other (a flipped bit of another),
    so updates, splits above and below existing nodes, and new values all occur."""
    pool = draw(st.lists(keys32, min_size=1, max_size=12, unique=True))
    bits = st.lists(st.integers(0, 255), max_size=3)
    near = [flip(key, bit) for key in pool for bit in draw(bits)]
    pool = list(dict.fromkeys(pool + near))
    batches = draw(
        st.lists(
            st.dictionaries(st.sampled_from(pool), keys32, min_size=1, max_size=len(pool)),
            min_size=1,
            max_size=8,
        )
    )
    return batches


@settings(max_examples=300, deadline=None)
@given(batch_sequences())
def test_any_batches_match_the_python(batches: list[Batch]) -> None:
    assert_same_updates(batches)


# --- rows that break the tree's invariants ------------------------------------------------


def one_row_tree() -> tuple[MemoryNodeStore, bytes, bytes]:
    """A map of two keys that part at bit 0: one inner row, the root."""
    low, high = bytes(32), b"\x80" + bytes(31)
    store = MemoryNodeStore()
    PrefixTree(store, compiled=True).update({low: b"a" * 32, high: b"b" * 32})
    return store, low, high


class RootHeldStore(RecordingStore):
    """Holds only the root's row in memory (``held``): every other row the update walks
    through is read through ``inner``, as a store's rows outside its cache are."""

    def held(self) -> dict[bytes, InnerNode]:
        root = self.root()
        return (
            {} if root is None or root.id not in self._inners else {root.id: self._inners[root.id]}
        )


def test_rows_not_held_are_read_through_the_store() -> None:
    rng = random.Random(6)
    keys = [rng.randbytes(32) for _ in range(400)]
    batches = [{key: rng.randbytes(32) for key in keys}]
    batches += [{key: rng.randbytes(32) for key in rng.sample(keys, 30)} for _ in range(10)]
    stores = []
    for use_compiled in (False, True):
        store = RootHeldStore()
        tree = PrefixTree(store, compiled=use_compiled)
        for changes in batches:
            tree.update(changes)
        stores.append(store)
    assert stores[0].writes == stores[1].writes


def test_a_row_the_store_has_lost_raises_its_error_and_changes_nothing() -> None:
    rng = random.Random(7)
    store = RootHeldStore()
    keys = [rng.randbytes(32) for _ in range(50)]
    PrefixTree(store, compiled=True).update({key: rng.randbytes(32) for key in keys})
    root = store.root()
    assert root is not None
    for node in [node for node in store._inners if node != root.id]:
        del store._inners[node]  # every row below the root gone from storage
    before = (store.root(), dict(store._inners), len(store.writes))
    with pytest.raises(KeyError):
        PrefixTree(store, compiled=True).update({keys[0]: b"c" * 32})
    assert (store.root(), dict(store._inners), len(store.writes)) == before


def left_with(row: InnerNode, **fields: object) -> ChildRef:
    return row.left._replace(**fields)


@pytest.mark.parametrize(
    "bad_row",
    [
        pytest.param(lambda row: (row.id, row.bit, row.left), id="three-members"),
        pytest.param(lambda row: row._replace(left=(row.left.id, 256)), id="child-two-members"),
        pytest.param(lambda row: row._replace(left=left_with(row, hash=b"short")), id="short-hash"),
        pytest.param(lambda row: row._replace(left=left_with(row, bits="256")), id="bits-a-str"),
        pytest.param(lambda row: row._replace(left=left_with(row, id=b"x" * 31)), id="short-id"),
        pytest.param(lambda row: row._replace(left=row), id="a-row-as-its-own-child"),
        pytest.param(
            lambda row: row._replace(left=ChildRef(row.id, row.bit, row.left.hash)),
            id="a-child-pointing-back-up",
        ),
        pytest.param(
            lambda row: row._replace(left=ChildRef(node_id(9, bytes(32))[:1], 9, row.left.hash)),
            id="inner-id-too-short",
        ),
    ],
)
def test_a_malformed_row_raises_the_stores_error_and_changes_nothing(bad_row: object) -> None:
    store, low, high = one_row_tree()
    (root_id,) = store._inners
    store._inners[root_id] = bad_row(store._inners[root_id])  # type: ignore[operator]
    before = (store.root(), dict(store._inners))
    for changes in ({low: b"c" * 32}, {low: b"c" * 32, high: b"d" * 32}):
        with pytest.raises(KeyError, match="map node malformed"):
            PrefixTree(store, compiled=True).update(changes)
    assert (store.root(), dict(store._inners)) == before


def test_a_cycle_of_rows_raises_instead_of_recursing() -> None:
    """A stored row whose child names the row again (altered storage) must not loop."""
    store, _, high = one_row_tree()
    (root_id,) = store._inners
    row = store._inners[root_id]
    store._inners[root_id] = row._replace(right=ChildRef(root_id, 0, row.right.hash))
    with pytest.raises(KeyError, match="map node malformed"):
        PrefixTree(store, compiled=True).update({high: b"c" * 32, flip(high, 200): b"d" * 32})


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(([], [], None), id="no-keys"),
        pytest.param(([bytes(32)], [], None), id="no-value"),
        pytest.param(([bytes(31)], [bytes(32)], None), id="short-key"),
        pytest.param(([bytes(32), bytes(32)], [bytes(32)] * 2, None), id="repeated-key"),
        pytest.param(([b"\x01" * 32, bytes(32)], [bytes(32)] * 2, None), id="unsorted"),
    ],
)
def test_bad_arguments_are_refused(args: tuple[list[bytes], list[bytes], None]) -> None:
    with pytest.raises((ValueError, TypeError)):
        compiled.update(*args, {}, lambda node: None, [], ChildRef, InnerNode)
