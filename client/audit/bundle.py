"""Export files: every leaf of a log, in order, as one C2SP tlog-tiles entry bundle.

Rules:

1. The encoding is tlog-tiles' entry bundle (``client.tlog.tiles`` owns the codec): each
   entry a big-endian uint16 length and its bytes, so no leaf exceeds 65535 bytes
   (``entry_too_large``), in one file replayed with one sequential read.
2. Reading streams an entry at a time; a file that ends inside an entry is
   ``BundleFormatError`` at the index where it broke, after every entry before it.
3. Writing is atomic: a reader sees the old file or the complete new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

from deplog.client.plumbing.files import write_atomic
from deplog.client.tlog.tiles import decode_entries, encode_entries

_BUFFER: Final = 1 << 16


def write_entries(path: Path, leaves: Iterable[bytes]) -> int:
    """Write ``leaves``, a stream or not, as one entry bundle, atomically; how many."""
    count = 0

    def encoded() -> Iterator[bytes]:
        nonlocal count
        for entry in encode_entries(leaves):
            yield entry
            count += 1

    write_atomic(path, encoded())
    return count


def read_entries(path: Path) -> Iterator[bytes]:
    """The entries of the bundle at ``path`` in order, read one at a time."""
    with open(path, "rb", buffering=_BUFFER) as src:
        yield from decode_entries(src.read)
