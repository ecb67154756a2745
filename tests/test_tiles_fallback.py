"""The spec's fallback for a partial tile that is gone: its full tile, cut to its width."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deplog.client.errors import ErrorCode
from deplog.client.follow.tiles import cut_to_width, full_tile, max_tile_bytes
from deplog.client.tlog.proofs import leaf_hash
from deplog.client.tlog.tiles import (
    BundleFormatError,
    EntryTile,
    HashTile,
    encode_entry_bundle,
    encode_hash_tile,
)

_entries = st.lists(st.binary(max_size=40), min_size=256, max_size=256)


@given(_entries, st.integers(1, 255))
def test_a_cut_full_bundle_is_the_partial_bundle(entries: list[bytes], width: int) -> None:
    full = encode_entry_bundle(EntryTile(3), entries)
    assert cut_to_width(EntryTile(3, width), full) == encode_entry_bundle(
        EntryTile(3, width), entries[:width]
    )


@given(_entries, st.integers(1, 255), st.integers(0, 3))
def test_a_cut_full_hash_tile_is_the_partial_tile(
    entries: list[bytes], width: int, level: int
) -> None:
    hashes = [leaf_hash(entry) for entry in entries]
    full = encode_hash_tile(HashTile(level, 5), hashes)
    partial = HashTile(level, 5, width)
    assert cut_to_width(partial, full) == encode_hash_tile(partial, hashes[:width])
    assert full_tile(partial) == HashTile(level, 5)


def test_a_full_hash_tile_of_the_wrong_length_is_left_for_the_length_check() -> None:
    assert cut_to_width(HashTile(0, 0, 3), bytes(100)) == bytes(100)


def test_a_full_bundle_that_does_not_decode_is_malformed_bundle() -> None:
    with pytest.raises(BundleFormatError) as refused:
        cut_to_width(EntryTile(0, 2), b"\x00\x05ab")
    assert refused.value.code == ErrorCode.MALFORMED_BUNDLE


@pytest.mark.parametrize(
    ("tile", "bound"),
    [
        (HashTile(0, 0), 8192),
        (HashTile(2, 1, 3), 96),
        (EntryTile(0), 256 * 65537),
        (EntryTile(7, 1), 65537),
    ],
)
def test_the_bound_of_a_tile_is_the_spec_maximum(tile: HashTile | EntryTile, bound: int) -> None:
    assert max_tile_bytes(tile) == bound
