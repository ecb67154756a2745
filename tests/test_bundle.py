"""Entry bundles: the tlog-tiles length-prefixed encoding, streamed and written atomically."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deplog.client.audit.bundle import read_entries, write_entries
from deplog.client.tlog.tiles import BundleFormatError

entry_lists = st.lists(st.binary(max_size=300), max_size=20)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return tmp_path / "entries"


@given(leaves=entry_lists)
def test_written_entries_read_back_in_order(
    tmp_path_factory: pytest.TempPathFactory, leaves: list[bytes]
) -> None:
    path = tmp_path_factory.mktemp("bundle") / "entries"
    assert write_entries(path, leaves) == len(leaves)
    assert list(read_entries(path)) == leaves


def test_encoding_is_a_big_endian_u16_length_then_the_entry(bundle: Path) -> None:
    """tlog-tiles "Log entries": the bytes other ecosystems' readers expect."""
    write_entries(bundle, [b"ab", b"", b"\x00" * 258])
    assert bundle.read_bytes() == b"\x00\x02ab" + b"\x00\x00" + b"\x01\x02" + b"\x00" * 258


def test_largest_entry_round_trips(bundle: Path) -> None:
    write_entries(bundle, [b"x" * 0xFFFF])
    assert [len(e) for e in read_entries(bundle)] == [0xFFFF]


def test_entry_too_long_for_u16_is_refused_and_keeps_the_old_file(bundle: Path) -> None:
    write_entries(bundle, [b"old"])
    with pytest.raises(BundleFormatError) as caught:
        write_entries(bundle, [b"a", b"x" * 0x10000])
    assert (caught.value.code, caught.value.index) == ("entry_too_large", 1)
    assert list(read_entries(bundle)) == [b"old"]


def test_failing_source_leaves_no_file_and_no_temporary(bundle: Path) -> None:
    def broken() -> Iterator[bytes]:
        yield b"first"
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError):
        write_entries(bundle, broken())
    assert list(bundle.parent.iterdir()) == []


@pytest.mark.parametrize(
    ("tail", "index"),
    [
        (b"\x00", 2),  # a lone length byte
        (b"\x00\x05abc", 2),  # an entry cut short
        (b"\x00\x01", 2),  # a length with no entry at all
    ],
)
def test_truncated_or_trailing_bytes_name_the_broken_index(
    bundle: Path, tail: bytes, index: int
) -> None:
    write_entries(bundle, [b"one", b"two"])
    with bundle.open("ab") as f:
        f.write(tail)
    with pytest.raises(BundleFormatError) as caught:
        list(read_entries(bundle))
    assert (caught.value.code, caught.value.index) == ("malformed_bundle", index)


def test_entries_before_the_break_are_yielded_first(bundle: Path) -> None:
    """Streaming: a reader acts on good entries without reading the file whole."""
    bundle.write_bytes(b"\x00\x01a\x00\x01b\x00\x09cut")
    reader = read_entries(bundle)
    assert [next(reader), next(reader)] == [b"a", b"b"]
    with pytest.raises(BundleFormatError):
        next(reader)


def test_empty_file_is_an_empty_log(bundle: Path) -> None:
    bundle.write_bytes(b"")
    assert list(read_entries(bundle)) == []
