"""The tiles directory writer: what a real log's directory holds, read back by a spec reader.

A real ``Log`` in a temporary SQLite file with a real key; leaves are appended
raw (the writer copies whatever the database holds, so notices would only slow
the large trees down). Every directory is checked by ``SpecReader``, the
tlog-tiles client of tests/test_tiles.py written from the spec alone.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from deplog.authority.log import Log
from deplog.authority.tiles import CHECKPOINT_FILE, TilesDirectory, partial_tiles
from deplog.client.plumbing.storage_faults import StorageFault
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Signer
from deplog.client.tlog.tiles import EntryTile, HashTile
from tests.test_tiles import SpecReader, flip

ORIGIN = "example.com/tiles"


def append(log: Log, count: int) -> None:
    """Commit ``count`` more leaves in one transaction and sign a checkpoint of them.

    The leaves bypass admission (they are not entries), so the tool-status map is
    moved past them by hand, in the same transaction, as holding no notice."""
    log.conn.execute("BEGIN")
    start = log.tree.size
    for _ in range(count):
        log.tree.append_entry(b"leaf %d" % log.tree.size)
    log.map.advance_notices(start, log.tree.size, [])
    log.conn.execute("COMMIT")
    log.publish()


def files(root: Path) -> dict[str, bytes]:
    """Every visible file of the directory by its path relative to it."""
    out = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


class Authority:
    """A log and its tiles directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.signer = Signer.generate(ORIGIN)
        self.db = tmp_path / "log.db"
        self.root = tmp_path / "tiles"
        self.log = Log(self.db, self.signer, ORIGIN)
        self.tiles = self.open()

    def open(self) -> TilesDirectory:
        return TilesDirectory.open(self.root, self.log)

    def reopen(self) -> TilesDirectory:
        self.tiles.close()
        self.log.close()
        self.log = Log(self.db, self.signer, ORIGIN)
        self.tiles = self.open()
        return self.tiles

    def batch(self, count: int) -> None:
        """What the sequencer and the server do for one batch: commit, tiles, checkpoint."""
        append(self.log, count)
        published = self.log.published
        assert published is not None
        self.tiles.extend(published.size)
        self.tiles.publish_checkpoint(published.size, published.note)

    def read(self) -> SpecReader:
        """The directory as a spec reader sees it, at the size its checkpoint file names."""
        note = (self.root / CHECKPOINT_FILE).read_bytes()
        checkpoint, _ = open_checkpoint(note, self.signer.verifier())
        reader = SpecReader(files(self.root), checkpoint.size)
        reader.check()
        assert reader.root() == checkpoint.root_hash
        return reader


@pytest.fixture
def authority(tmp_path: Path) -> Iterator[Authority]:
    authority = Authority(tmp_path)
    yield authority
    authority.tiles.close()
    authority.log.close()


@pytest.mark.parametrize("batches", [[1], [255, 1], [256], [300, 212, 1, 1], [511, 2, 0, 700]])
def test_the_directory_is_the_specs_tiles_of_the_database_after_every_batch(
    authority: Authority, batches: list[int]
) -> None:
    for count in batches:
        authority.batch(count)
        reader = authority.read()
        assert reader.entries() == authority.log.tree.leaf_data(0, authority.log.tree.size)


def test_level_one_and_two_tiles_hold_the_stored_subtree_hashes(authority: Authority) -> None:
    authority.batch(65536 + 257)
    reader = authority.read()
    assert len(reader.level(1)) == 257 and len(reader.level(2)) == 1
    assert (authority.root / "tile/2/000.p/1").stat().st_size == 32


def test_every_file_is_world_readable_whatever_the_umask(authority: Authority) -> None:
    """A web server's own user (nginx's ``nobody``) must read the directory."""
    old = os.umask(0o077)
    try:
        authority.batch(300)
    finally:
        os.umask(old)
    for directory, _, names in os.walk(authority.root / "tile"):
        assert Path(directory).stat().st_mode & 0o777 == 0o755
        for name in names:
            assert Path(directory, name).stat().st_mode & 0o777 == 0o644


def test_the_checkpoint_file_is_the_note_it_was_given(authority: Authority) -> None:
    authority.batch(3)
    assert (authority.root / CHECKPOINT_FILE).read_bytes() == authority.log.published.note  # type: ignore[union-attr]


def test_a_checkpoint_file_for_an_older_size_first_writes_the_partial_tiles_it_names(
    authority: Authority,
) -> None:
    append(authority.log, 5)
    older = authority.log.published
    assert older is not None
    append(authority.log, 5)
    authority.tiles.extend(10)
    assert not (authority.root / "tile/0/000.p/5").exists()  # only the tree of 10 was written
    authority.tiles.publish_checkpoint(older.size, older.note)
    assert authority.read().size == 5


def test_full_tiles_are_written_once_and_never_replaced(authority: Authority) -> None:
    authority.batch(256)
    full = authority.root / "tile/0/000"
    inode = full.stat().st_ino
    authority.batch(300)
    authority.reopen()
    assert full.stat().st_ino == inode


def test_every_partial_tile_stays_until_its_full_tile_exists(authority: Authority) -> None:
    """tlog-tiles: the partial tiles of every checkpoint's size are served until then."""
    for count in (10, 10, 1, 200):
        authority.batch(count)
    for width in (10, 20, 21, 221):
        assert (authority.root / f"tile/0/000.p/{width}").exists()
        assert (authority.root / f"tile/entries/000.p/{width}").exists()


def test_the_partial_tiles_go_once_a_checkpoint_names_a_tree_with_their_full_tile(
    authority: Authority,
) -> None:
    authority.batch(10)
    append(authority.log, 300)
    authority.tiles.extend(310)  # the full tile exists, no checkpoint names its tree yet
    assert (authority.root / "tile/0/000.p/10").exists()
    published = authority.log.published
    assert published is not None
    authority.tiles.publish_checkpoint(published.size, published.note)
    assert not (authority.root / "tile/0/000.p").exists()
    assert not (authority.root / "tile/entries/000.p").exists()
    assert (authority.root / "tile/0/001.p/54").exists()
    assert (authority.root / "tile/1/000.p/1").exists()


def test_an_older_checkpoint_verifies_from_its_own_partial_tiles_after_the_log_grew(
    authority: Authority,
) -> None:
    """The issue's failure: a reader of an older signed checkpoint, by the spec's paths."""
    authority.batch(11)
    older = authority.log.published
    assert older is not None
    for count in (5, 100, 3):
        authority.batch(count)
    checkpoint, _ = open_checkpoint(older.note, authority.signer.verifier())
    reader = SpecReader(files(authority.root), checkpoint.size)
    reader.check()
    assert reader.root() == checkpoint.root_hash
    assert reader.entries() == authority.log.tree.leaf_data(0, 11)


def test_start_up_writes_the_tiles_a_crash_left_unwritten(authority: Authority) -> None:
    authority.batch(100)
    append(authority.log, 200)  # committed, then the process died before its tiles
    authority.reopen()
    published = authority.log.published
    assert published is not None
    authority.tiles.publish_checkpoint(published.size, published.note)
    assert authority.read().size == 300


def test_start_up_rewrites_a_missing_tile_after_the_checkpoint_files_tree(
    authority: Authority,
) -> None:
    authority.batch(100)
    append(authority.log, 200)
    authority.tiles.extend(300)
    (authority.root / "tile/0/001.p/44").unlink()  # the crash came between two tile writes
    authority.reopen()
    assert (authority.root / "tile/0/001.p/44").exists()


def test_start_up_removes_temporary_files_a_crash_left(authority: Authority) -> None:
    authority.batch(10)
    torn = [authority.root / "tile/0/.000.abc.tmp", authority.root / ".checkpoint.xyz.tmp"]
    for path in torn:
        path.write_bytes(b"half a")
    authority.reopen()
    assert not any(path.exists() for path in torn)


def test_start_up_removes_the_partial_tiles_a_crash_left_beside_their_full_tile(
    authority: Authority,
) -> None:
    authority.batch(10)
    append(authority.log, 5)
    authority.tiles.extend(15)
    append(authority.log, 300)
    authority.tiles.extend(315)  # then the process died before the checkpoint file
    authority.reopen()
    assert os.listdir(authority.root / "tile/0/000.p") == ["10"]  # the checkpoint file's
    assert (authority.root / "tile/0/001.p/59").exists()
    authority.read()


@pytest.mark.parametrize("path", ["tile/0/001.p/44", "tile/entries/001.p/44", "tile/1/000.p/1"])
def test_a_tile_that_differs_from_the_database_stops_start_up_naming_it(
    authority: Authority, path: str
) -> None:
    authority.batch(100)
    append(authority.log, 200)
    authority.tiles.extend(300)
    target = authority.root / path
    target.write_bytes(flip(target.read_bytes(), 5))
    with pytest.raises(StorageFault) as refused:
        authority.reopen()
    assert refused.value.exit_status == 65 and str(target) in str(refused.value)


def alter_leaf(db: Path, index: int) -> None:
    """Change a stored leaf's bytes (not its hash) behind the log's back."""
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER leaves_append_only_update")
    conn.execute("UPDATE leaves SET data = ? WHERE idx = ?", (b"altered", index))
    conn.commit()
    conn.close()


def test_a_leaf_altered_in_the_database_leaves_its_written_bundle_as_it_is(
    authority: Authority,
) -> None:
    """The database is damaged, not the tile: start-up goes on (the storage audit reports it)."""
    authority.batch(10)
    bundle = authority.root / "tile/entries/000.p/10"
    written = bundle.read_bytes()
    authority.log.close()
    alter_leaf(authority.db, 2)
    authority.reopen()
    assert bundle.read_bytes() == written


def test_a_missing_bundle_is_never_written_from_an_altered_leaf(authority: Authority) -> None:
    authority.batch(10)
    (authority.root / "tile/entries/000.p/10").unlink()
    authority.log.close()
    alter_leaf(authority.db, 2)
    with pytest.raises(StorageFault) as refused:
        authority.reopen()
    assert refused.value.exit_status == 65 and str(authority.db) in str(refused.value)
    assert "leaf 2 does not match its stored hash" in str(refused.value)


def test_a_partial_tile_the_checkpoint_file_names_is_checked_at_start_up(
    authority: Authority,
) -> None:
    authority.batch(300)
    target = authority.root / "tile/0/001.p/44"
    target.write_bytes(target.read_bytes()[:-32])
    with pytest.raises(StorageFault) as refused:
        authority.reopen()
    assert refused.value.exit_status == 65


def test_a_checkpoint_file_of_another_log_stops_start_up(authority: Authority) -> None:
    authority.batch(3)
    other = Log(authority.db.parent / "other.db", Signer.generate(ORIGIN), ORIGIN)
    append(other, 3)
    assert other.published is not None
    (authority.root / CHECKPOINT_FILE).write_bytes(other.published.note)
    other.close()
    with pytest.raises(StorageFault) as refused:
        authority.reopen()
    assert refused.value.exit_status == 65 and "checkpoint" in str(refused.value)


def test_a_checkpoint_file_past_the_database_stops_start_up(authority: Authority) -> None:
    """Same key, same leaves, but a larger tree: a database restored from an older copy."""
    authority.batch(3)
    longer = Log(authority.db.parent / "longer.db", authority.signer, ORIGIN)
    append(longer, 5)
    assert longer.published is not None
    (authority.root / CHECKPOINT_FILE).write_bytes(longer.published.note)
    longer.close()
    with pytest.raises(StorageFault) as refused:
        authority.reopen()
    assert refused.value.exit_status == 65 and "not the database's" in str(refused.value)


def test_the_partial_tiles_of_a_tree_are_one_per_level_and_a_bundle() -> None:
    assert partial_tiles(0) == []
    assert partial_tiles(256) == [HashTile(1, 0, 1)]
    assert partial_tiles(65536 + 257) == [
        HashTile(0, 257, 1),
        HashTile(1, 1, 1),
        HashTile(2, 0, 1),
        EntryTile(257, 1),
    ]
