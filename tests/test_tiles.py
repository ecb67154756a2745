"""C2SP tlog-tiles: paths, which tiles a tree has, tile and bundle bytes, proofs from tiles.

Two oracles are written here, apart from ``client.tlog.tiles``: ``rfc_mth``, the RFC 9162
hash of a range of leaves computed from the leaf hashes alone, and ``SpecReader``, a tiles
client written from the spec text without importing deplog, which reads the files a log
published, checks every hash the spec promises, and rebuilds the root and every proof.
``PublishedLog`` grows a log the authority's way (``TreeFrontier`` completions as its
stored hashes) and publishes tiles incrementally at each checkpoint size, as a writer will.
"""

from __future__ import annotations

import functools
import hashlib
import io
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.audit.bundle import write_entries
from deplog.client.tlog.proofs import (
    EMPTY_ROOT,
    MAX_TREE_SIZE,
    ProofError,
    TreeFrontier,
    consistency_path,
    inclusion_path,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from deplog.client.tlog.tiles import (
    MAX_ENTRY_SIZE,
    BundleFormatError,
    EntryTile,
    HashTile,
    ReadTile,
    TileError,
    TileFormatError,
    TilePathError,
    consistency_tiles,
    decode_entries,
    decode_entry_bundle,
    decode_hash_tile,
    encode_entries,
    encode_entry_bundle,
    encode_hash_tile,
    entry_bundle_tiles,
    entry_bundles_tiles,
    entry_tiles,
    hash_tiles,
    inclusion_tiles,
    parse_tile_path,
    prove_consistency,
    prove_inclusion,
    verify_entry_bundle,
    verify_entry_bundles,
)

MAX_LEAVES = 2**18 + 1
POWERS_OF_TWO = sorted(
    {n for k in range(19) for n in (2**k - 1, 2**k, 2**k + 1)} | {70_000, MAX_LEAVES}
)
PUBLISHED = sorted(set(range(1001)) | set(POWERS_OF_TWO))
READER_SIZES = [*range(0, 1001, 7), 1000, 65535, 65536, 65537, 70_000, MAX_LEAVES]


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


LEAVES = [b"leaf %d" % i for i in range(MAX_LEAVES)]
LEAF_HASHES = [sha256(b"\x00" + leaf) for leaf in LEAVES]
_SUBTREE_CACHE: dict[tuple[int, int], bytes] = {}


def rfc_mth(lo: int, hi: int) -> bytes:
    """MTH(D[lo:hi]) of RFC 9162 section 2.1.1 over LEAF_HASHES; big subtrees remembered."""
    n = hi - lo
    if n == 0:
        return sha256(b"")
    if n == 1:
        return LEAF_HASHES[lo]
    if (lo, hi) in _SUBTREE_CACHE:
        return _SUBTREE_CACHE[lo, hi]
    k = 1 << ((n - 1).bit_length() - 1)
    result = sha256(b"\x01" + rfc_mth(lo, lo + k) + rfc_mth(lo + k, hi))
    if n >= 256:
        _SUBTREE_CACHE[lo, hi] = result
    return result


def level_hash(level: int, i: int) -> bytes:
    """The spec's formal tile contents: MTH(D[i * 256**level : (i + 1) * 256**level])."""
    return rfc_mth(i * 256**level, (i + 1) * 256**level)


class PublishedLog:
    """A log grown leaf by leaf the authority's way, publishing tiles at each checkpoint.

    Stored hashes are the leaf hashes and the subtrees ``TreeFrontier.append`` reports
    complete (kept at tile heights only); publishing writes the tiles and bundles the
    new size has and the last published one lacked, by path, into ``files``.
    """

    def __init__(self, leaves: Sequence[bytes]) -> None:
        self.leaves = leaves
        self.nodes: dict[tuple[int, int], bytes] = {}
        frontier = TreeFrontier()
        for index, leaf in enumerate(leaves):
            hashed = leaf_hash(leaf)
            self.nodes[0, index] = hashed
            for height, node_index, node in frontier.append(hashed):
                if height % 8 == 0:
                    self.nodes[height, node_index] = node
        self.files: dict[str, bytes] = {}
        self.published = 0

    def publish(self, size: int) -> None:
        for tile in hash_tiles(size, since=self.published):
            stored = [self.nodes[tile.node_height, i] for i in tile.node_indices]
            self.files[tile.path] = encode_hash_tile(tile, stored)
        for bundle in entry_tiles(size, since=self.published):
            entries = [self.leaves[i] for i in bundle.leaf_indices]
            self.files[bundle.path] = encode_entry_bundle(bundle, entries)
        self.published = size

    def read_tile(self, tile: HashTile) -> bytes:
        """The static file server: whatever is at the tile's path."""
        return self.files[tile.path]


@pytest.fixture(scope="module")
def log() -> PublishedLog:
    """The MAX_LEAVES-leaf log, published at every size in PUBLISHED, in order."""
    published = PublishedLog(LEAVES)
    for size in PUBLISHED:
        published.publish(size)
    return published


class SpecReader:
    """A tlog-tiles client written from the spec alone: it imports nothing of deplog.

    It reads the tiles of a tree of ``size`` leaves by the paths the spec spells,
    checks what the spec promises (full tiles are 8,192 bytes; a partial tile at level
    l has floor(size / 256**l) mod 256 hashes; each hash at level l + 1 is the MTH of
    the full tile below it; entry bundles hold big-endian uint16-prefixed entries that
    hash to the level-0 tiles), and rebuilds the root and RFC 9162 proofs from level 0.
    """

    def __init__(self, files: Mapping[str, bytes], size: int) -> None:
        self.files = files
        self.size = size
        self.leaf_hashes = self.level(0)
        self.memo: dict[tuple[int, int], bytes] = {}

    @staticmethod
    def path(level: int | str, n: int, width: int) -> str:
        digits = str(n)
        digits = digits.zfill(-(-len(digits) // 3) * 3)
        groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
        encoded = "/".join(["x" + group for group in groups[:-1]] + [groups[-1]])
        return f"tile/{level}/{encoded}" + ("" if width == 256 else f".p/{width}")

    def _tiles(self, level: int | str, count: int) -> Iterator[tuple[int, bytes]]:
        """(width, bytes) of the full tiles, then the partial one, of a level of ``count``."""
        for n in range(count // 256):
            yield 256, self.files[self.path(level, n, 256)]
        if count % 256:
            n, width = count // 256, count % 256
            try:
                yield width, self.files[self.path(level, n, width)]
            except KeyError:  # gone once its full tile exists: the spec's fallback
                yield width, self._cut(level, self.files[self.path(level, n, 256)], width)

    @staticmethod
    def _cut(level: int | str, full: bytes, width: int) -> bytes:
        """A full tile's first ``width`` hashes or entries: its partial tile's bytes."""
        if level != "entries":
            return full[: 32 * width]
        at = 0
        for _ in range(width):
            at += 2 + int.from_bytes(full[at : at + 2], "big")
        return full[:at]

    def level(self, level: int) -> list[bytes]:
        hashes: list[bytes] = []
        for width, data in self._tiles(level, self.size // 256**level):
            assert len(data) == 32 * width
            hashes.extend(data[i : i + 32] for i in range(0, len(data), 32))
        return hashes

    def entries(self) -> list[bytes]:
        entries = []
        for width, data in self._tiles("entries", self.size):
            at, count = 0, 0
            while at < len(data):
                length = int.from_bytes(data[at : at + 2], "big")
                entries.append(data[at + 2 : at + 2 + length])
                at, count = at + 2 + length, count + 1
            assert (at, count) == (len(data), width)
        return entries

    def check(self) -> None:
        """Every tile hash promised by the spec, at every level, and every entry."""
        level = 0
        while self.size >= 256 ** (level + 1):
            below, above = self.level(level), self.level(level + 1)
            for i, hashed in enumerate(above):
                assert hashed == self.mth(below[i * 256 : (i + 1) * 256])
            level += 1
        assert [sha256(b"\x00" + entry) for entry in self.entries()] == self.leaf_hashes

    def mth(self, hashes: Sequence[bytes]) -> bytes:
        if len(hashes) == 1:
            return hashes[0]
        k = 1 << ((len(hashes) - 1).bit_length() - 1)
        return sha256(b"\x01" + self.mth(hashes[:k]) + self.mth(hashes[k:]))

    def range_hash(self, lo: int, hi: int) -> bytes:
        """MTH(D[lo:hi]) by RFC 9162 section 2.1.1, remembering subtrees of 256 leaves or more."""
        n = hi - lo
        if n == 0:
            return sha256(b"")
        if n == 1:
            return self.leaf_hashes[lo]
        if (lo, hi) not in self.memo:
            k = 1 << ((n - 1).bit_length() - 1)
            left, right = self.range_hash(lo, lo + k), self.range_hash(lo + k, hi)
            if n < 256:
                return sha256(b"\x01" + left + right)
            self.memo[lo, hi] = sha256(b"\x01" + left + right)
        return self.memo[lo, hi]

    def root(self) -> bytes:
        return self.range_hash(0, self.size)

    def inclusion(self, m: int, lo: int = 0, hi: int | None = None) -> list[bytes]:
        """PATH(m, D[lo:hi]) of RFC 9162 section 2.1.3.1."""
        hi = self.size if hi is None else hi
        if hi - lo == 1:
            return []
        k = 1 << ((hi - lo - 1).bit_length() - 1)
        if m < k:
            return [*self.inclusion(m, lo, lo + k), self.range_hash(lo + k, hi)]
        return [*self.inclusion(m - k, lo + k, hi), self.range_hash(lo, lo + k)]

    def consistency(self, m: int) -> list[bytes]:
        """PROOF(m, D[0:size]) of RFC 9162 section 2.1.4.1."""

        def subproof(m: int, lo: int, hi: int, complete: bool) -> list[bytes]:
            if m == hi - lo:
                return [] if complete else [self.range_hash(lo, hi)]
            k = 1 << ((hi - lo - 1).bit_length() - 1)
            if m <= k:
                return [*subproof(m, lo, lo + k, complete), self.range_hash(lo + k, hi)]
            return [*subproof(m - k, lo + k, hi, False), self.range_hash(lo, lo + k)]

        return [] if m in (0, self.size) else subproof(m, 0, self.size, True)


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def serving(
    read: Callable[[HashTile], bytes], tampered: HashTile, change: Callable[[bytes], bytes]
) -> Callable[[HashTile], bytes]:
    """A source that serves ``tampered`` changed by ``change`` and every other tile as is."""
    return lambda tile: change(read(tile)) if tile == tampered else read(tile)


def sample_indices(size: int) -> list[int]:
    """Tile edges, the ends and a spread between: where tile arithmetic goes wrong."""
    edges = {0, size - 1, size // 2, size // 3}
    edges |= {edge + d for edge in (255, 256, 65535, 65536) for d in (-1, 0, 1)}
    edges |= set(range(0, size, max(1, size // 37)))
    return sorted(i for i in edges if 0 <= i < size)


# Paths (tlog-tiles "Merkle Tree" and "Log entries")


@pytest.mark.parametrize(
    ("tile", "path"),
    [
        (HashTile(0, 0), "tile/0/000"),
        (HashTile(0, 1234067), "tile/0/x001/x234/067"),
        (HashTile(2, 5, 17), "tile/2/005.p/17"),
        (HashTile(1, 1000), "tile/1/x001/000"),
        (HashTile(0, 10**12), "tile/0/x001/x000/x000/x000/000"),
        (HashTile(0, 10**12 - 1, 255), "tile/0/x999/x999/x999/999.p/255"),
        (HashTile(7, 0, 127), "tile/7/000.p/127"),
        (EntryTile(0, 1), "tile/entries/000.p/1"),
        (EntryTile(1234067), "tile/entries/x001/x234/067"),
    ],
)
def test_paths_are_the_specs_encoding(tile: HashTile | EntryTile, path: str) -> None:
    assert tile.path == path
    assert parse_tile_path(path) == tile


def max_index(level: int, width: int) -> int:
    """The last tile index a tree of at most 2^63 - 1 leaves has at this level and width."""
    return ((MAX_TREE_SIZE >> (8 * level)) - width) // 256


@st.composite
def hash_tile_coordinates(draw: st.DrawFn) -> HashTile:
    level = draw(st.integers(0, 7))
    width = draw(st.integers(1, 127 if level == 7 else 256))
    return HashTile(level, draw(st.integers(0, max_index(level, width))), width)


@given(tile=hash_tile_coordinates())
def test_every_hash_tile_path_round_trips(tile: HashTile) -> None:
    assert parse_tile_path(tile.path) == tile
    assert tile.path == SpecReader.path(tile.level, tile.index, tile.width)


@given(index=st.integers(0, max_index(0, 256)), width=st.integers(1, 256))
def test_every_entry_bundle_path_round_trips(index: int, width: int) -> None:
    bundle = EntryTile(index, width)
    assert parse_tile_path(bundle.path) == bundle


@pytest.mark.parametrize("index", [0, 999, 1000, 10**6 - 1, 10**6, 10**9, 10**12, 10**15])
def test_index_groups_are_three_digits_x_prefixed_but_the_last(index: int) -> None:
    *leading, last = HashTile(0, index).path.split("/")[2:]
    assert all(len(g) == 4 and g[0] == "x" and g[1:].isdigit() for g in leading)
    assert len(last) == 3 and last.isdigit()
    assert int("".join(g[1:] for g in leading) + last) == index
    assert not leading or leading[0] != "x000"


def test_the_largest_indices_allowed_by_2_63_leaves_parse_and_one_more_does_not() -> None:
    for level in range(8):
        width = 127 if level == 7 else 256
        last = HashTile(level, max_index(level, width), width)
        assert parse_tile_path(last.path) == last
        with pytest.raises(TilePathError):
            HashTile(level, last.index + 1, width)
    with pytest.raises(TilePathError):
        parse_tile_path(SpecReader.path(0, max_index(0, 256) + 1, 256))


@pytest.mark.parametrize(
    "path",
    [
        "",
        "tile",
        "tile/0",
        "tile/0/",
        "tile/0/5",  # index groups are three digits
        "tile/0/0005",
        "tile/0/x000/005",  # a leading zero group is not canonical
        "tile/0/x000/x001/000",
        "tile/0/001/234",  # all but the last group carry x
        "tile/0/x001/x234",  # the last group does not
        "tile/0/X001/234",
        "tile/00/000",  # levels have no leading zeros
        "tile/01/000",
        "tile/64/000",  # levels stop at 63
        "tile/8/000.p/1",  # and no tree under 2^63 leaves reaches level 8
        "tile/7/000.p/128",
        "tile/7/000",
        "tile/-1/000",
        "tile/+1/000",
        "tile/0/-01",
        "tile/0/000.p/0",  # widths are 1..255
        "tile/0/000.p/256",
        "tile/0/000.p/010",
        "tile/0/000.p/",
        "tile/0/000.p",
        "tile/0/000.P/5",
        "tile/0/000/.p/5",
        "tile/entries/000.p/256",
        "tile/entries/5",
        "tile/entries/x000/000",
        "tile/data/000",
        "tile/entry/000",
        "/tile/0/000",
        "tile/0/000/",
        "tile//0/000",
        "tile/0/000\n",
        " tile/0/000",
        "tile/0/0\u0660\u0660",  # only ASCII digits are digits
        "tile/\u0661/000",
        "tile/0/x001/x002/x003/x004/x005/x006/x007/000",  # more digits than 2^63 needs
    ],
)
def test_non_canonical_or_impossible_paths_are_refused(path: str) -> None:
    with pytest.raises(TilePathError) as caught:
        parse_tile_path(path)
    assert caught.value.code == "malformed_tile_path"


def test_a_path_must_be_text() -> None:
    with pytest.raises(TilePathError):
        parse_tile_path(b"tile/0/000")  # type: ignore[arg-type]


@given(text=st.text(alphabet="tile/entrsxp.0123456789", max_size=40))
def test_any_text_parses_to_the_tile_whose_path_it_is_or_is_refused(text: str) -> None:
    try:
        tile = parse_tile_path(text)
    except TilePathError:
        return
    assert tile.path == text


@pytest.mark.parametrize(
    ("level", "index", "width"),
    [(0, 0, 0), (0, 0, 257), (0, -1, 1), (-1, 0, 1), (64, 0, 1), (True, 0, 1), (0, 0, True)],
)
def test_tile_coordinates_outside_the_spec_are_refused(level: int, index: int, width: int) -> None:
    with pytest.raises(TilePathError):
        HashTile(level, index, width)


# Which tiles a tree has ("Partial Tiles")


def test_a_tree_of_70000_leaves_has_the_specs_tiles() -> None:
    shapes = Counter((tile.level, tile.width) for tile in hash_tiles(70_000))
    assert shapes == {(0, 256): 273, (0, 112): 1, (1, 256): 1, (1, 17): 1, (2, 1): 1}


def test_a_tree_of_256_leaves_has_one_full_tile_and_a_partial_one_above() -> None:
    assert list(hash_tiles(256)) == [HashTile(0, 0), HashTile(1, 0, 1)]


def test_the_empty_tree_has_no_tiles() -> None:
    assert list(hash_tiles(0)) == []
    assert list(entry_tiles(0)) == []


@settings(max_examples=50)
@given(size=st.integers(0, 2**20))
def test_each_level_is_full_tiles_then_one_partial_of_the_specs_width(size: int) -> None:
    tiles = list(hash_tiles(size))
    for level in range(4):
        at_level = [t for t in tiles if t.level == level]
        assert [t.index for t in at_level] == list(range(len(at_level)))
        assert all(not t.partial for t in at_level[: size // 256 ** (level + 1)])
        assert sum(t.width for t in at_level) == size // 256**level
        width = size // 256**level % 256
        assert [t.width for t in at_level if t.partial] == ([width] if width else [])


@settings(max_examples=60)
@given(sizes=st.lists(st.integers(0, 2**20), min_size=2, max_size=2))
def test_since_lists_exactly_the_tiles_the_older_tree_lacks(sizes: list[int]) -> None:
    old, new = sorted(sizes)
    added = list(hash_tiles(new, since=old))
    assert set(added) == set(hash_tiles(new)) - set(hash_tiles(old))
    assert len(added) == len(set(added))
    bundles = {(b.index, b.width) for b in entry_tiles(new, since=old)}
    assert bundles == {(t.index, t.width) for t in added if t.level == 0}


def test_sizes_out_of_order_or_range_are_refused() -> None:
    for size, since in [(5, 6), (-1, 0), (MAX_TREE_SIZE + 1, 0)]:
        with pytest.raises(ProofError) as caught:
            list(hash_tiles(size, since=since))
        assert caught.value.code == "bad_proof_request"


# Hash tile bytes: the RFC 9162 hashes of their level, at every level


@functools.cache
def expected_tile(level: int, index: int, width: int) -> bytes:
    return b"".join(level_hash(level, index * 256 + i) for i in range(width))


@pytest.mark.parametrize("size", PUBLISHED)
def test_published_tiles_hold_the_rfc9162_hashes_of_their_level(
    log: PublishedLog, size: int
) -> None:
    for tile in hash_tiles(size):
        assert log.files[tile.path] == expected_tile(tile.level, tile.index, tile.width)


def test_a_tile_holds_its_width_of_32_byte_hashes() -> None:
    tile = HashTile(0, 0, 3)
    with pytest.raises(TileFormatError):
        encode_hash_tile(tile, [bytes(32)] * 2)
    with pytest.raises(TileFormatError):
        encode_hash_tile(tile, [bytes(32), bytes(31), bytes(32)])
    assert decode_hash_tile(tile, encode_hash_tile(tile, [bytes([i]) * 32 for i in range(3)])) == [
        bytes([i]) * 32 for i in range(3)
    ]


@pytest.mark.parametrize("length", [0, 31, 32 * 3 - 1, 32 * 3 + 1, 32 * 4, 8192])
def test_tile_bytes_of_another_length_are_malformed(length: int) -> None:
    with pytest.raises(TileFormatError) as caught:
        decode_hash_tile(HashTile(0, 0, 3), bytes(length))
    assert caught.value.code == "malformed_tile"


# Entry bundles ("Log entries")


def test_a_bundle_is_each_entry_after_its_big_endian_u16_length() -> None:
    bundle = encode_entry_bundle(EntryTile(0, 3), [b"ab", b"", b"\x00" * 258])
    assert bundle == b"\x00\x02ab" + b"\x00\x00" + b"\x01\x02" + b"\x00" * 258


@given(entries=st.lists(st.binary(max_size=300), min_size=1, max_size=256))
def test_bundles_round_trip(entries: list[bytes]) -> None:
    bundle = EntryTile(7, len(entries))
    assert decode_entry_bundle(bundle, encode_entry_bundle(bundle, entries)) == entries


@pytest.mark.parametrize("entries", [[], [b"a", b"b"], [b"a", b"b", b"c", b"d"]])
def test_a_bundle_encodes_exactly_its_width_of_entries(entries: list[bytes]) -> None:
    with pytest.raises(BundleFormatError) as caught:
        encode_entry_bundle(EntryTile(0, 3), entries)
    assert caught.value.index == min(len(entries), 3)


def test_the_largest_entry_fits_and_one_byte_more_does_not() -> None:
    largest = b"x" * MAX_ENTRY_SIZE
    assert decode_entry_bundle(EntryTile(0, 1), encode_entry_bundle(EntryTile(0, 1), [largest]))
    with pytest.raises(BundleFormatError) as caught:
        encode_entry_bundle(EntryTile(0, 2), [b"a", largest + b"x"])
    assert (caught.value.code, caught.value.index) == ("entry_too_large", 1)


@pytest.mark.parametrize(
    ("data", "index"),
    [
        (b"\x00\x01a\x00\x01b\x00", 2),  # ends inside a length
        (b"\x00\x01a\x00\x01b\x00\x05abc", 2),  # ends inside an entry
        (b"\x00\x01a\x00\x01b\x00\x01c\x00\x01d", 3),  # more entries than the width
        (b"\x00\x01a\x00\x01b", 2),  # fewer
        (b"", 0),
    ],
)
def test_malformed_bundles_name_the_entry_where_they_break(data: bytes, index: int) -> None:
    with pytest.raises(BundleFormatError) as caught:
        decode_entry_bundle(EntryTile(0, 3), data)
    assert (caught.value.code, caught.value.index) == ("malformed_bundle", index)


@given(data=st.binary(max_size=600))
def test_any_bytes_decode_to_entries_that_re_encode_to_them_or_are_refused(data: bytes) -> None:
    try:
        decoded = list(decode_entries(io.BytesIO(data).read))
    except BundleFormatError:
        return
    assert b"".join(encode_entries(decoded)) == data


def test_the_export_file_is_one_entry_bundle_of_the_same_codec(tmp_path: Path) -> None:
    """client/audit/bundle.py writes with this codec: one implementation, two uses."""
    leaves = LEAVES[:300]
    write_entries(tmp_path / "entries", leaves)
    full, rest = EntryTile(0), EntryTile(1, 44)
    expected = encode_entry_bundle(full, leaves[:256]) + encode_entry_bundle(rest, leaves[256:])
    assert (tmp_path / "entries").read_bytes() == expected


# The independent reader: the published files, read from the spec alone


@pytest.mark.parametrize("size", READER_SIZES)
def test_an_independent_reader_rebuilds_the_root_from_the_published_tiles(
    log: PublishedLog, size: int
) -> None:
    reader = SpecReader(log.files, size)
    reader.check()
    assert reader.entries() == LEAVES[:size]
    assert reader.root() == rfc_mth(0, size)


@pytest.mark.parametrize("size", [1, 2, 3, 255, 256, 257, 1000, 65537, 70_000, MAX_LEAVES])
def test_proofs_from_tiles_equal_the_independent_readers(log: PublishedLog, size: int) -> None:
    reader = SpecReader(log.files, size)
    root = reader.root()
    for index in sample_indices(size):
        proof = prove_inclusion(index, size, root, log.read_tile)
        assert proof == reader.inclusion(index)
        verify_inclusion(LEAF_HASHES[index], index, size, proof, root)
    for old in [*sample_indices(size), size]:
        proof = prove_consistency(old, size, root, log.read_tile)
        assert proof == reader.consistency(old)
        verify_consistency(old, size, rfc_mth(0, old), root, proof)


# Proofs from tiles: the reference paths, verified


@pytest.mark.parametrize("size", [*range(1, 41), 255, 256, 257])
def test_every_inclusion_proof_from_tiles_is_the_reference_path(
    log: PublishedLog, size: int
) -> None:
    root = rfc_mth(0, size)
    for index in range(size):
        proof = prove_inclusion(index, size, root, log.read_tile)
        assert proof == inclusion_path(LEAF_HASHES, index, size)
        verify_inclusion(LEAF_HASHES[index], index, size, proof, root)


@pytest.mark.parametrize("size", [*range(0, 41), 255, 256, 257])
def test_every_consistency_proof_from_tiles_is_the_reference_path(
    log: PublishedLog, size: int
) -> None:
    root = rfc_mth(0, size)
    for old in range(size + 1):
        proof = prove_consistency(old, size, root, log.read_tile)
        assert proof == consistency_path(LEAF_HASHES, old, size)
        verify_consistency(old, size, rfc_mth(0, old), root, proof)


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_proofs_at_published_sizes_verify(log: PublishedLog, data: st.DataObject) -> None:
    size = data.draw(st.sampled_from(PUBLISHED[1:]))
    index = data.draw(st.integers(0, size - 1))
    old = data.draw(st.integers(0, size))
    root = rfc_mth(0, size)
    verify_inclusion(
        LEAF_HASHES[index], index, size, prove_inclusion(index, size, root, log.read_tile), root
    )
    proof = prove_consistency(old, size, root, log.read_tile)
    verify_consistency(old, size, rfc_mth(0, old), root, proof)


def recording(read: Callable[[HashTile], bytes], calls: list[HashTile]) -> Callable[..., bytes]:
    def read_and_record(tile: HashTile) -> bytes:
        calls.append(tile)
        return read(tile)

    return read_and_record


@pytest.mark.parametrize("size", [1, 256, 257, 70_000, MAX_LEAVES])
def test_each_listed_tile_is_read_once_and_no_other(log: PublishedLog, size: int) -> None:
    """The contract an async source relies on: fetch the list first, then answer."""
    root = rfc_mth(0, size)
    for index in sample_indices(size)[:12]:
        calls: list[HashTile] = []
        prove_inclusion(index, size, root, recording(log.read_tile, calls))
        assert calls == inclusion_tiles(index, size)
        calls.clear()
        prove_consistency(index, size, root, recording(log.read_tile, calls))
        assert calls == consistency_tiles(index, size)


def test_an_async_source_can_prefetch_the_listed_tiles(log: PublishedLog) -> None:
    size, index = 70_000, 66_000
    fetched = {tile: log.read_tile(tile) for tile in inclusion_tiles(index, size)}
    proof = prove_inclusion(index, size, rfc_mth(0, size), fetched.__getitem__)
    assert proof == SpecReader(log.files, size).inclusion(index)


@given(size=st.integers(1, MAX_TREE_SIZE), data=st.data())
def test_a_proof_reads_at_most_two_tiles_per_level(size: int, data: st.DataObject) -> None:
    """One tile on the leaf's way up and the tree's partial one: 256 leaves per request."""
    index = data.draw(st.integers(0, size - 1))
    old = data.draw(st.integers(0, size))
    for tiles in (inclusion_tiles(index, size), consistency_tiles(old, size)):
        assert max(Counter(tile.level for tile in tiles).values()) <= 2


ROOT_300 = rfc_mth(0, 300)
OUTSIDE_THE_TREE: dict[str, Callable[[ReadTile], object]] = {
    "leaf at the size": lambda read: prove_inclusion(300, 300, ROOT_300, read),
    "negative leaf": lambda read: prove_inclusion(-1, 300, ROOT_300, read),
    "old size past the size": lambda read: prove_consistency(301, 300, ROOT_300, read),
    "leaf of the empty tree": lambda read: prove_inclusion(0, 0, EMPTY_ROOT, read),
    "empty tree, other root": lambda read: prove_consistency(0, 0, ROOT_300, read),
    "short root": lambda read: prove_inclusion(0, 300, ROOT_300[:31], read),
    "size past 2^63 - 1": lambda read: inclusion_tiles(0, MAX_TREE_SIZE + 1),
    "bundle past the size": lambda read: entry_bundle_tiles(EntryTile(2), 300),
    "full bundle of a partial": lambda read: entry_bundle_tiles(EntryTile(1), 300),
    "partial bundle of a full": lambda read: entry_bundle_tiles(EntryTile(0, 200), 300),
}


@pytest.mark.parametrize("request_", OUTSIDE_THE_TREE.values(), ids=OUTSIDE_THE_TREE.keys())
def test_requests_outside_the_tree_are_refused(
    log: PublishedLog, request_: Callable[[ReadTile], object]
) -> None:
    with pytest.raises(ProofError) as caught:
        request_(log.read_tile)
    assert caught.value.code == "bad_proof_request"


def test_the_empty_tree_needs_no_tiles() -> None:
    def no_tiles(tile: HashTile) -> bytes:
        raise AssertionError("the empty tree has no tiles")

    assert prove_consistency(0, 0, EMPTY_ROOT, no_tiles) == []


# Untrusted tiles: every tampered, swapped, stale or wrong-width tile is refused by name


@pytest.mark.parametrize(("size", "index"), [(1000, 517), (600, 599), (257, 256), (256, 3)])
def test_every_hash_of_every_tile_read_is_authenticated(
    log: PublishedLog, size: int, index: int
) -> None:
    root = rfc_mth(0, size)
    for tile in inclusion_tiles(index, size):
        for at in range(0, tile.width * 32, 32):
            source = serving(log.read_tile, tile, lambda data: flip(data, at + 31))  # noqa: B023
            with pytest.raises(TileError) as caught:
                prove_inclusion(index, size, root, source)
            assert caught.value.code == "bad_tile"


@pytest.mark.parametrize("size", [70_000, MAX_LEAVES])
def test_tampered_tiles_at_every_level_are_refused(log: PublishedLog, size: int) -> None:
    root = rfc_mth(0, size)
    index = size - 300
    for tile in consistency_tiles(index, size):
        for at in sorted({0, tile.width // 2 * 32 + 7, tile.width * 32 - 1}):
            source = serving(log.read_tile, tile, lambda data: flip(data, at))  # noqa: B023
            with pytest.raises(TileError):
                prove_consistency(index, size, root, source)


@pytest.mark.parametrize(
    "change",
    [
        lambda data: data[:-32],
        lambda data: data + data[:32],
        lambda data: data[:-1],
        lambda data: data + b"\x00",
        lambda data: b"",
        lambda data: data * 2,
    ],
    ids=["a hash short", "a hash long", "a byte short", "a byte long", "empty", "doubled"],
)
def test_a_tile_of_the_wrong_width_is_malformed(
    log: PublishedLog, change: Callable[[bytes], bytes]
) -> None:
    size, index = 70_000, 1234
    root = rfc_mth(0, size)
    for tile in inclusion_tiles(index, size):
        with pytest.raises(TileFormatError) as caught:
            prove_inclusion(index, size, root, serving(log.read_tile, tile, change))
        assert caught.value.code == "malformed_tile"


def test_a_full_tile_served_for_a_partial_one_is_malformed(log: PublishedLog) -> None:
    size = 1000  # level 0 has tile 3 at width 232; a later tree has it full
    root = rfc_mth(0, size)
    full = log.read_tile(HashTile(0, 3))
    source = serving(log.read_tile, HashTile(0, 3, 232), lambda data: full)
    with pytest.raises(TileFormatError):
        prove_inclusion(900, size, root, source)


def test_a_partial_tile_may_be_answered_with_the_first_hashes_of_the_full_one(
    log: PublishedLog,
) -> None:
    """The spec's fallback when a log has deleted a partial tile: the hashes are the same."""
    size = 1000
    full = log.read_tile(HashTile(0, 3))
    source = serving(log.read_tile, HashTile(0, 3, 232), lambda data: full[: 232 * 32])
    proof = prove_inclusion(900, size, rfc_mth(0, size), source)
    assert proof == inclusion_path(LEAF_HASHES, 900, size)


def test_a_tile_swapped_for_another_of_the_same_width_is_refused(log: PublishedLog) -> None:
    size, index = 70_000, 1000
    root = rfc_mth(0, size)
    other = log.read_tile(HashTile(0, 100))
    source = serving(log.read_tile, HashTile(0, index // 256), lambda data: other)
    with pytest.raises(TileError):
        prove_inclusion(index, size, root, source)


def test_tiles_of_another_log_are_refused(log: PublishedLog) -> None:
    """A CDN serving a forked or unrelated tree, with every length right."""
    other = PublishedLog([b"other %d" % i for i in range(1000)])
    other.publish(1000)
    root = rfc_mth(0, 1000)
    for tile in inclusion_tiles(500, 1000):
        source = serving(log.read_tile, tile, lambda data: other.read_tile(tile))  # noqa: B023
        with pytest.raises(TileError):
            prove_inclusion(500, 1000, root, source)


def test_tiles_are_refused_against_another_root(log: PublishedLog) -> None:
    with pytest.raises(TileError):
        prove_inclusion(5, 1000, rfc_mth(0, 999), log.read_tile)


# Entry bundles from untrusted sources


@pytest.mark.parametrize("size", [1, 255, 256, 300, 70_000])
def test_every_bundle_of_a_tree_verifies_to_its_leaves(log: PublishedLog, size: int) -> None:
    root = rfc_mth(0, size)
    for bundle in entry_tiles(size, since=max(0, size - 600)):
        data = log.files[bundle.path]
        entries = verify_entry_bundle(bundle, data, size, root, log.read_tile)
        assert entries == [LEAVES[i] for i in bundle.leaf_indices]


def bundle_changes() -> list[tuple[str, Callable[[list[bytes]], list[bytes]], str]]:
    return [
        ("an entry changed", lambda e: [e[0] + b"!", *e[1:]], "bad_tile"),
        ("two entries swapped", lambda e: [e[1], e[0], *e[2:]], "bad_tile"),
        ("an entry dropped", lambda e: e[:-1], "malformed_bundle"),
        ("an entry added", lambda e: [*e, b"extra"], "malformed_bundle"),
        ("another log's", lambda e: [b"other %d" % i for i in range(len(e))], "bad_tile"),
    ]


@pytest.mark.parametrize(
    ("change", "code"),
    [(change, code) for _, change, code in bundle_changes()],
    ids=[name for name, _, _ in bundle_changes()],
)
def test_a_tampered_bundle_is_refused_by_name(
    log: PublishedLog, change: Callable[[list[bytes]], list[bytes]], code: str
) -> None:
    size = 1000
    for bundle in (EntryTile(1), EntryTile(3, 232)):
        entries = change([LEAVES[i] for i in bundle.leaf_indices])
        data = b"".join(encode_entries(entries))
        with pytest.raises((TileError, BundleFormatError)) as caught:
            verify_entry_bundle(bundle, data, size, rfc_mth(0, size), log.read_tile)
        assert caught.value.code == code


def test_a_stale_partial_bundle_is_refused(log: PublishedLog) -> None:
    """The bundle of an older checkpoint, served for the newer tree's wider one."""
    stale = log.files[EntryTile(3, 200).path]
    with pytest.raises(BundleFormatError):
        verify_entry_bundle(EntryTile(3, 232), stale, 1000, rfc_mth(0, 1000), log.read_tile)


def test_a_bundle_is_refused_when_its_level_0_tile_is_tampered(log: PublishedLog) -> None:
    bundle = EntryTile(1)
    source = serving(log.read_tile, HashTile(0, 1), lambda data: flip(data, 40))
    with pytest.raises(TileError):
        verify_entry_bundle(bundle, log.files[bundle.path], 1000, rfc_mth(0, 1000), source)


def test_a_bundle_reads_its_listed_tiles_only(log: PublishedLog) -> None:
    bundle, size = EntryTile(5), 70_000
    calls: list[HashTile] = []
    data = log.files[bundle.path]
    verify_entry_bundle(bundle, data, size, rfc_mth(0, size), recording(log.read_tile, calls))
    assert calls == entry_bundle_tiles(bundle, size)
    assert HashTile(0, 5) in calls


@pytest.mark.parametrize("size", [1, 255, 256, 1000, 70_000])
def test_many_bundles_verify_to_their_leaves_reading_no_level_0_tile(
    log: PublishedLog, size: int
) -> None:
    bundles = list(entry_tiles(size, since=max(0, size - 1100)))
    calls: list[HashTile] = []
    verified = verify_entry_bundles(
        [(bundle, log.files[bundle.path]) for bundle in bundles],
        size,
        rfc_mth(0, size),
        recording(log.read_tile, calls),
    )
    assert verified == [[LEAVES[i] for i in bundle.leaf_indices] for bundle in bundles]
    assert calls == entry_bundles_tiles(bundles, size)
    assert not any(tile.level == 0 and tile.index in {b.index for b in bundles} for tile in calls)


@pytest.mark.parametrize(
    ("change", "code"),
    [(change, code) for _, change, code in bundle_changes()],
    ids=[name for name, _, _ in bundle_changes()],
)
def test_one_tampered_bundle_among_many_refuses_them_all(
    log: PublishedLog, change: Callable[[list[bytes]], list[bytes]], code: str
) -> None:
    size = 1000
    bundles = list(entry_tiles(size))
    given_ = [(bundle, log.files[bundle.path]) for bundle in bundles]
    for at in (1, 3):  # a full bundle, the partial one
        entries = change([LEAVES[i] for i in bundles[at].leaf_indices])
        tampered = [
            *given_[:at],
            (bundles[at], b"".join(encode_entries(entries))),
            *given_[at + 1 :],
        ]
        with pytest.raises((TileError, BundleFormatError)) as caught:
            verify_entry_bundles(tampered, size, rfc_mth(0, size), log.read_tile)
        assert caught.value.code == code


def test_many_bundles_are_refused_when_a_tile_above_is_tampered(log: PublishedLog) -> None:
    size = 70_000
    bundles = [EntryTile(0), EntryTile(1)]
    source = serving(log.read_tile, HashTile(1, 0), lambda data: flip(data, 40))
    with pytest.raises(TileError):
        verify_entry_bundles(
            [(b, log.files[b.path]) for b in bundles], size, rfc_mth(0, size), source
        )


# Trees of up to 2^63 - 1 leaves


class BlockTree:
    """A tree of any size whose hashes are cheap: leaves repeat within blocks.

    Leaf i's hash depends on i >> shift only, with at most about 1024 blocks, so a
    subtree inside one block is a chain of doublings and the few subtrees above the
    blocks are hashed once each: enough to serve every tile of a 2^62-leaf tree.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.shift = max(0, size.bit_length() - 10)
        self.memo: dict[tuple[int, int], bytes] = {}

    def leaf(self, index: int) -> bytes:
        return sha256(b"\x00block %d" % (index >> self.shift))

    def node(self, height: int, index: int) -> bytes:
        """The hash of the perfect subtree of 2^height leaves starting at index * 2^height."""
        key = (height, index) if height > self.shift else (height, index >> (self.shift - height))
        if key not in self.memo:
            if height == 0:
                self.memo[key] = self.leaf(index)
            elif height <= self.shift:
                below = self.node(height - 1, 2 * index)
                self.memo[key] = sha256(b"\x01" + below + below)
            else:
                left, right = self.node(height - 1, 2 * index), self.node(height - 1, 2 * index + 1)
                self.memo[key] = sha256(b"\x01" + left + right)
        return self.memo[key]

    def root(self, size: int) -> bytes:
        """MTH(D[0:size]): the perfect subtrees of size's set bits, folded from the right."""
        nodes, start = [], 0
        for height in reversed(range(size.bit_length())):
            if size >> height & 1:
                nodes.append(self.node(height, start >> height))
                start += 1 << height
        root = sha256(b"") if not nodes else nodes.pop()
        while nodes:
            root = sha256(b"\x01" + nodes.pop() + root)
        return root

    def read_tile(self, tile: HashTile) -> bytes:
        first = tile.index * 256
        return b"".join(self.node(8 * tile.level, first + i) for i in range(tile.width))


HUGE_SIZES = [
    2**24 - 1,
    2**24,
    2**24 + 1,
    2**32 + 12345,
    2**40 - 1,
    10**12,
    2**48 + 2**40 + 1,
    2**56 - 1,
    2**56,
    2**62 + 2**55 + 3,
    MAX_TREE_SIZE,
]


@pytest.mark.parametrize("size", HUGE_SIZES)
def test_proofs_from_tiles_verify_in_trees_of_up_to_2_63_leaves(size: int) -> None:
    tree = BlockTree(size)
    root = tree.root(size)
    points = sorted({0, 1, size // 3, size // 2, 256**3 - 1, 2**40, size - 256, size - 1})
    for index in (p for p in points if p < size):
        proof = prove_inclusion(index, size, root, tree.read_tile)
        verify_inclusion(tree.leaf(index), index, size, proof, root)
    for old in (p for p in points if p <= size):
        proof = prove_consistency(old, size, root, tree.read_tile)
        verify_consistency(old, size, tree.root(old), root, proof)


@pytest.mark.parametrize("size", [2**40 - 1, MAX_TREE_SIZE])
def test_a_tampered_tile_is_refused_at_every_level_of_a_huge_tree(size: int) -> None:
    tree = BlockTree(size)
    root = tree.root(size)
    index = size // 3
    tiles = inclusion_tiles(index, size)
    assert {tile.level for tile in tiles} == set(range((size.bit_length() + 7) // 8))
    for tile in tiles:
        source = serving(tree.read_tile, tile, lambda data: flip(data, len(data) - 1))
        with pytest.raises(TileError):
            prove_inclusion(index, size, root, source)
