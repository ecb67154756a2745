"""Export files: every leaf of a log, in order, as one C2SP tlog-tiles entry bundle.

The encoding is the one tlog-tiles v0.1.0 gives entry bundles ("Log entries"),
and :mod:`client.tlog.tiles` owns its codec: each entry is a big-endian uint16
length followed by that many bytes. One file holds the whole log instead of
256-entry tiles, so an auditor can replay it with a single sequential read;
cutting it into tiles is a matter of counting. The uint16 prefix is why no leaf
may exceed 65535 bytes (:data:`client.entries.MAX_ENTRY_BYTES`).

Reading streams one entry at a time, so memory stays bounded by the largest
entry whatever the file's size. A file that ends inside a length prefix or an
entry (truncation, or trailing bytes after the last whole entry) is refused
with :class:`BundleFormatError`, naming the index of the entry where it broke.
Writing is atomic (:func:`deplog.client.plumbing.files.write_atomic`): a reader sees the
old file or the complete new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

from deplog.client.plumbing.files import write_atomic
from deplog.client.tlog.tiles import (
    MAX_ENTRY_SIZE,
    BundleFormatError,
    decode_entries,
    encode_entries,
)

__all__ = [
    "MAX_BUNDLE_ENTRY",
    "BundleFormatError",
    "read_entries",
    "write_entries",
]

MAX_BUNDLE_ENTRY: Final = MAX_ENTRY_SIZE
"""Longest entry a uint16 length prefix can describe."""

_BUFFER: Final = 1 << 16


def write_entries(path: Path, leaves: Iterable[bytes]) -> int:
    """Write ``leaves`` as one entry bundle, atomically; returns how many were written.

    ``leaves`` is consumed once, as it is written, so it may be a stream. An
    entry over 65535 bytes raises BundleFormatError ``entry_too_large`` and
    leaves ``path`` untouched.
    """
    count = 0

    def encoded() -> Iterator[bytes]:
        nonlocal count
        for entry in encode_entries(leaves):
            yield entry
            count += 1

    write_atomic(path, encoded())
    return count


def read_entries(path: Path) -> Iterator[bytes]:
    """Yield the entries of the bundle at ``path`` in order, one at a time.

    The file is read sequentially and never held whole. BundleFormatError
    (``malformed_bundle``) is raised at the first entry whose length prefix or
    bytes are cut short; every entry before it has been yielded already.
    """
    with open(path, "rb", buffering=_BUFFER) as src:
        yield from decode_entries(src.read)
