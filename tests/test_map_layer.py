"""A writer that holds the map's rows back (``client.map.stored`` rule *rows held back*):
every batch folds into a layer above the tables, the tables stay a map at a committed size
until the layer is written, readers prove through the layer as committed, and a rollback
goes back to it.

Real SQLite files, real notices; the reference is an in-memory ``VerifiableMap`` folded
from scratch, and every proof is checked by the client's verifier."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from deplog.client.map.cache import MapCache
from deplog.client.map.errors import MapProofError, MapStorageError
from deplog.client.map.layer import MapView, ViewMoved
from deplog.client.map.proof import verify_map_proof
from deplog.client.map.stored import StoredMap
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.tlog.note import Signer
from tests.builders import admitted, advance_leaves, make_envelope, notice_leaf

TOOLS = [f"tool:org.acme/t{i}" for i in range(80)]
NEVER = "tool:org.acme/never-named"


def holding(
    max_group_bytes: int = 1 << 24,
    entries: int = 10_000,
    groups: int = 10_000,
    record_bytes: int = 1 << 24,
) -> MapCache:
    return MapCache(
        max_group_bytes, layer_entries=entries, layer_groups=groups, layer_record_bytes=record_bytes
    )


class Writer:
    """A holding writer, its reference fold, and a reader on a connection of its own."""

    def __init__(self, path: Path, cache: MapCache, seed: int = 1) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        StoredMap.create_schema(self.conn)
        self.map = StoredMap(self.conn, cache)
        self.cache = cache
        self.reader = sqlite3.connect(path, isolation_level=None)
        self.reference = VerifiableMap()
        self.publisher = Signer.generate("acme")
        self.rng = random.Random(seed)
        self.size = 0
        self.leaves_folded: list[bytes] = []

    def leaves(self, count: int) -> list[bytes]:
        return [
            notice_leaf(
                make_envelope(self.publisher, self.size + i + 1, tool=self.rng.choice(TOOLS))
            )
            for i in range(count)
        ]

    def fold(self, count: int | None = None, *, commit: bool = True) -> list[bytes]:
        """One batch in a transaction of its own, committed (and the reference folded) or
        rolled back."""
        batch = self.leaves(self.rng.randint(1, 40) if count is None else count)
        self.conn.execute("BEGIN IMMEDIATE")
        advance_leaves(self.map, self.size, batch)
        if not commit:
            self.conn.execute("ROLLBACK")
            return batch
        self.conn.execute("COMMIT")
        self.map.committed()
        self.reference.fold(admitted(batch, self.size))
        self.leaves_folded += batch
        self.size += len(batch)
        return batch

    def flush(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.map.flush()
        self.conn.execute("COMMIT")
        self.map.committed()

    def tables(self) -> tuple[int, bytes]:
        """The size and root of the map as its tables hold it, read by the reader."""
        stored = StoredMap(self.reader)
        return stored.size() or 0, stored.root()

    def assert_proves(self, view: MapView, size: int, root: bytes) -> None:
        """Proofs read by the reader with the writer's ``view`` are of the map at ``size``,
        whose root is ``root``: the client's verifier accepts them, present and absent."""
        for tool_id in [*self.rng.sample(TOOLS, 6), NEVER]:
            read_at, proof = StoredMap(self.reader).prove_at_size(tool_id, view)
            assert read_at == size
            assert verify_map_proof(root, tool_id, proof) == self.reference.records.get(tool_id)
            assert proof == self.reference.prove(tool_id)


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Writer]:
    opened = Writer(tmp_path / "map.db", holding())
    yield opened
    opened.conn.close()
    opened.reader.close()


def test_batches_fold_into_the_layer_and_the_tables_keep_their_committed_size(
    writer: Writer,
) -> None:
    writer.fold(5)
    writer.flush()
    written = writer.tables()
    for _ in range(12):
        writer.fold()
        assert (writer.map.size(), writer.map.root()) == (writer.size, writer.reference.root())
        assert writer.tables() == written
    assert writer.map.unwritten == writer.size - 5


def test_a_reader_proves_through_the_committed_layer_what_the_reference_proves(
    writer: Writer,
) -> None:
    for _ in range(10):
        writer.fold()
        assert writer.map.layer is not None and writer.map.layer.size == writer.size
        writer.assert_proves(writer.map.view, writer.size, writer.reference.root())


def test_written_rows_prove_alone_what_the_layer_proved(writer: Writer) -> None:
    for _ in range(6):
        writer.fold()
    writer.flush()
    assert writer.map.layer is None and writer.map.unwritten == 0
    assert writer.tables() == (writer.size, writer.reference.root())
    writer.assert_proves(MapView(), writer.size, writer.reference.root())


@pytest.mark.parametrize(
    "bound", [{"entries": 30}, {"groups": 20}, {"record_bytes": 2000}], ids=lambda b: next(iter(b))
)
def test_an_advance_that_takes_the_layer_past_a_bound_writes_it(
    tmp_path: Path, bound: dict[str, int]
) -> None:
    writer = Writer(tmp_path / "map.db", holding(**bound))
    written = 0
    for _ in range(25):
        writer.fold()
        assert not writer.cache.full()  # an advance never leaves the layer past a bound
        size, root = writer.tables()
        if writer.map.unwritten == 0:
            assert (size, root) == (writer.size, writer.reference.root())
            written += 1
        else:
            assert size < writer.size
    assert written > 2
    writer.assert_proves(writer.map.view, writer.size, writer.reference.root())


def test_a_rolled_back_batch_goes_back_to_the_layer_of_the_last_commit(writer: Writer) -> None:
    for _ in range(4):
        writer.fold()
    committed = writer.map.layer
    writer.fold(commit=False)
    writer.map.forget()
    assert (writer.map.size(), writer.map.root()) == (writer.size, writer.reference.root())
    assert not writer.cache.groups.entries  # the rows read for the rolled-back batch went too
    assert writer.map.layer is committed
    writer.fold()
    assert writer.map.root() == writer.reference.root()


def test_a_rolled_back_write_of_the_layer_keeps_its_rows_held(writer: Writer) -> None:
    for _ in range(4):
        writer.fold()
    before = writer.tables()
    writer.conn.execute("BEGIN IMMEDIATE")
    writer.map.flush()
    writer.conn.execute("ROLLBACK")
    writer.map.forget()
    assert writer.tables() == before
    assert writer.map.unwritten == writer.size
    writer.flush()
    assert writer.tables() == (writer.size, writer.reference.root())


def test_a_reader_whose_layer_was_written_since_reads_the_tables_alone(writer: Writer) -> None:
    """The interleaving of a proof with a write of the layer: the reader took the layer,
    then the writer wrote it and folded on; the tables are past the layer's size, and
    the reader proves from them, at their size."""
    for _ in range(3):
        writer.fold()
    taken = writer.map.view
    writer.fold()
    writer.flush()
    assert taken.layer is not None and writer.size > taken.layer.size
    writer.assert_proves(taken, writer.size, writer.reference.root())


def test_a_layer_handed_to_readers_never_changes_as_the_writer_folds_on(writer: Writer) -> None:
    writer.fold(20)
    writer.flush()
    for _ in range(3):
        writer.fold()
    view, root = writer.map.view, writer.reference.root()
    taken = view.layer
    assert taken is not None
    seen = (
        taken.size,
        taken.root,
        dict(taken.records),
        dict(taken.groups.items()),
    )
    proofs = {tool_id: writer.reference.prove(tool_id) for tool_id in [*TOOLS[:8], NEVER]}
    for _ in range(6):
        writer.fold()
    assert (
        taken.size,
        taken.root,
        dict(taken.records),
        dict(taken.groups.items()),
    ) == seen
    for tool_id, proof in proofs.items():
        read_at, read = StoredMap(writer.reader).prove_at_size(tool_id, view)
        assert (read_at, read) == (taken.size, proof)
        verify_map_proof(root, tool_id, read)


def test_a_cache_smaller_than_its_layer_evicts_only_rows_already_written(
    tmp_path: Path,
) -> None:
    writer = Writer(tmp_path / "map.db", holding(max_group_bytes=2_000, entries=120), seed=4)
    for _ in range(20):
        writer.fold()
        cache = writer.cache
        assert writer.map.root() == writer.reference.root()
        assert cache.groups.total <= 2_000
        held = {} if cache.layer is None else cache.layer.groups
        assert not set(held) & set(cache.groups.entries)
        stored = dict(writer.map.conn.execute("SELECT id, nodes FROM map_group").fetchall())
        assert all(stored[gid] == blob for gid, blob in cache.groups.entries.items())
    writer.flush()
    assert writer.tables() == (writer.size, writer.reference.root())


# -- the layer written in slices --------------------------------------------------------


def slicing(groups: int = 3, record_bytes: int = 200) -> MapCache:
    """A holding cache that writes its layer in small slices once past 120 entries."""
    return MapCache(
        layer_entries=160,
        layer_groups=10_000,
        layer_record_bytes=1 << 24,
        slice_groups=groups,
        slice_record_bytes=record_bytes,
    )


def test_a_layer_past_three_quarters_of_a_bound_is_written_in_slices_and_readers_stay_right(
    tmp_path: Path,
) -> None:
    """No batch writes the whole layer: slices go to the tables a few groups at a time,
    deepest first, while the tables' size stays where it was until the last one; every
    proof a reader makes through the writer's view meanwhile is the reference's."""
    writer = Writer(tmp_path / "map.db", slicing(), seed=2)
    whole: list[int] = []
    written = writer.cache.written
    writer.cache.written = lambda groups: (whole.append(len(groups)), written(groups))  # type: ignore[method-assign, func-returns-value]
    sizes, slices = {writer.tables()[0]}, 0
    for _ in range(80):
        writer.fold(8)
        writing = writer.cache.writing
        if writing is not None:
            tops = [gid[0] for gid in writing.groups]
            assert tops == sorted(tops, reverse=True)  # children before parents
        sizes.add(writer.tables()[0])
        slices = writer.map.slices
        writer.assert_proves(writer.map.view, writer.size, writer.reference.root())
    assert slices > 5 and len(sizes) > 3 and not whole  # never a batch writing all of it
    size, root = writer.tables()
    assert root == VerifiableMap().fold(admitted(writer.leaves_folded[:size]))


def test_a_write_in_slices_is_spread_over_the_batches_left_before_the_bound(
    tmp_path: Path,
) -> None:
    """Paced (``MapCache.pace``): begun past three quarters of the bound, the write takes
    several batches, not one, and its last slice comes before the layer reaches the bound."""
    writer = Writer(tmp_path / "map.db", slicing(groups=1, record_bytes=1), seed=6)
    while writer.cache.writing is None:
        writer.fold(8)
    writing, batches = writer.cache.writing, 1  # the batch that began it wrote a slice
    while writer.cache.writing is writing:
        layer = writer.cache.layer
        assert layer is not None and layer.size - layer.base + 8 <= 160
        writer.fold(8)
        batches += 1
    assert batches > 1 and writing.finished
    size = writing.layer.size
    assert writer.tables() == (size, VerifiableMap().fold(admitted(writer.leaves_folded[:size])))


def test_a_reader_whose_view_predates_a_slice_is_told_to_read_again(tmp_path: Path) -> None:
    writer = Writer(tmp_path / "map.db", slicing(), seed=3)
    while not writer.map.slices:
        writer.fold(8)
    view = writer.map.view
    while writer.map.slices == view.slices:
        writer.fold(8)
    with pytest.raises(ViewMoved):
        StoredMap(writer.reader).prove_at_size(
            TOOLS[0], view, moved=lambda: writer.map.slices != view.slices
        )
    fresh = writer.map.view
    read_at, proof = StoredMap(writer.reader).prove_at_size(
        TOOLS[0], fresh, moved=lambda: writer.map.slices != fresh.slices
    )
    assert (read_at, proof) == (writer.size, writer.reference.prove(TOOLS[0]))


def test_a_rolled_back_slice_is_written_again_by_the_next_batch(tmp_path: Path) -> None:
    writer = Writer(tmp_path / "map.db", slicing(), seed=4)
    while writer.cache.writing is None or not writer.cache.writing.next_group:
        writer.fold(8)
    writing = writer.cache.writing
    cursor = (writing.next_group, writing.next_record)
    writer.fold(8, commit=False)  # its slice went with it
    writer.map.forget()
    assert writer.cache.writing is writing
    assert (writing.next_group, writing.next_record) == cursor and not writing.finished
    for _ in range(30):
        writer.fold(8)
    writer.flush()
    assert writer.tables() == (writer.size, writer.reference.root())


def test_a_layer_written_whole_is_not_written_again_in_slices_by_the_same_transaction(
    tmp_path: Path,
) -> None:
    """Two advances in one transaction, the first writing the layer whole (past a bound):
    the second starts no write in slices of the layer as last committed, which is older
    than the rows now in the tables."""
    writer = Writer(tmp_path / "map.db", slicing(), seed=7)
    while not writer.cache.due():
        writer.fold(8)
    assert writer.cache.writing is None  # due from the next advance on
    first, second = writer.leaves(60), writer.leaves(8)
    writer.conn.execute("BEGIN IMMEDIATE")
    advance_leaves(writer.map, writer.size, first)  # past the bound: written whole
    advance_leaves(writer.map, writer.size + 60, second)
    writer.conn.execute("COMMIT")
    writer.map.committed()
    writer.reference.fold(admitted(first + second, writer.size))
    writer.size += 68
    writer.flush()
    assert writer.tables() == (writer.size, writer.reference.root())
    for tool_id in [*TOOLS, NEVER]:  # every row in the tables is the latest map's
        assert StoredMap(writer.reader).prove(tool_id) == writer.reference.prove(tool_id)


def test_after_a_rolled_back_slice_a_view_taken_now_is_not_told_to_read_again(
    tmp_path: Path,
) -> None:
    writer = Writer(tmp_path / "map.db", slicing(), seed=4)
    while writer.cache.writing is None or not writer.cache.writing.next_group:
        writer.fold(8)
    writer.fold(8, commit=False)  # a slice counted, then undone
    writer.map.forget()
    view = writer.map.view
    read_at, proof = StoredMap(writer.reader).prove_at_size(
        TOOLS[0], view, moved=lambda: writer.map.slices != view.slices
    )
    assert read_at == writer.size
    assert verify_map_proof(writer.reference.root(), TOOLS[0], proof) is not None


def test_a_reader_that_ignored_slices_after_its_view_would_prove_a_mixture(
    tmp_path: Path,
) -> None:
    """Why readers ask ``moved``: a view taken before a write in slices began does not
    shadow the groups that write lays down, so its proofs would mix two sizes of the map:
    rows it cannot find, or paths that fail against the root they claim."""
    writer = Writer(tmp_path / "map.db", holding(), seed=5)
    writer.fold(60)
    writer.flush()
    writer.fold(2)  # the view: a layer of the few groups two notices changed
    view, root = writer.map.view, writer.reference.root()
    assert view.layer is not None
    writer.fold(40)
    committed = writer.map.layer
    assert committed is not None
    writer.cache.slice_groups = len(committed.groups) - 1  # all but the root's group
    writer.conn.execute("BEGIN IMMEDIATE")
    assert not writer.map.write_slice()
    writer.conn.execute("COMMIT")
    writer.map.committed()
    assert writer.tables()[0] == 60  # the write in slices is under way
    failed = 0
    for tool_id in TOOLS:
        try:  # a row of the later map where the view's has none, or a path that is false
            read_at, proof = StoredMap(writer.reader).prove_at_size(tool_id, view)
            assert read_at == view.layer.size
            verify_map_proof(root, tool_id, proof)
        except (MapStorageError, MapProofError):
            failed += 1
    assert failed > 0
    with pytest.raises(ViewMoved):
        StoredMap(writer.reader).prove_at_size(
            TOOLS[0], view, moved=lambda: writer.map.slices != view.slices
        )
