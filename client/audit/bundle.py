"""Export files: every leaf of a log, in order, as one C2SP tlog-tiles entry bundle.

The encoding is the one tlog-tiles v0.1.0 gives entry bundles ("Log entries"):
each entry is a big-endian uint16 length followed by that many bytes. One file
holds the whole log instead of 256-entry tiles, so an auditor can replay it
with a single sequential read; cutting it into tiles is a matter of counting.
The uint16 prefix is why no leaf may exceed 65535 bytes
(:data:`client.entries.MAX_ENTRY_BYTES`).

Reading streams one entry at a time, so memory stays bounded by the largest
entry whatever the file's size. A file that ends inside a length prefix or an
entry (truncation, or trailing bytes after the last whole entry) is refused
with :class:`BundleFormatError`, naming the index of the entry where it broke.
Writing is atomic: a reader sees the old file or the complete new one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

from deplog.client.errors import ErrorCode, FormatError

__all__ = [
    "MAX_BUNDLE_ENTRY",
    "BundleFormatError",
    "read_entries",
    "write_atomic",
    "write_entries",
]

MAX_BUNDLE_ENTRY: Final = 0xFFFF
"""Longest entry a uint16 length prefix can describe."""

_PREFIX: Final = 2
_BUFFER: Final = 1 << 16


class BundleFormatError(FormatError):
    """A bundle that does not decode, or an entry that cannot be encoded; ``index`` says where."""

    codes = frozenset({ErrorCode.MALFORMED_BUNDLE, ErrorCode.ENTRY_TOO_LARGE})
    code = ErrorCode.MALFORMED_BUNDLE

    def __init__(self, index: int, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(code, message)
        self.index = index


def write_atomic(path: Path, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to ``path`` so that it is either untouched or completely replaced.

    The data goes to a temporary file in the same directory, is fsynced, then
    renamed over ``path``, and the directory is fsynced so the rename survives
    a crash. If ``chunks`` raises, the temporary file is removed and ``path``
    is unchanged. Exports are public data, so the file is made world-readable.
    """
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb", buffering=_BUFFER) as out:
            for chunk in chunks:
                out.write(chunk)
            out.flush()
            os.fchmod(out.fileno(), 0o644)
            os.fsync(out.fileno())
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_entries(path: Path, leaves: Iterable[bytes]) -> int:
    """Write ``leaves`` as one entry bundle, atomically; returns how many were written.

    ``leaves`` is consumed once, as it is written, so it may be a stream. An
    entry over 65535 bytes raises BundleFormatError ``entry_too_large`` and
    leaves ``path`` untouched.
    """
    count = 0

    def encoded() -> Iterator[bytes]:
        nonlocal count
        for leaf in leaves:
            if len(leaf) > MAX_BUNDLE_ENTRY:
                raise BundleFormatError(
                    count, "entry is over 65535 bytes", ErrorCode.ENTRY_TOO_LARGE
                )
            yield len(leaf).to_bytes(_PREFIX, "big")
            yield bytes(leaf)
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
        index = 0
        while True:
            prefix = src.read(_PREFIX)
            if not prefix:
                return
            if len(prefix) < _PREFIX:
                raise BundleFormatError(index, f"bundle ends inside the length of entry {index}")
            length = int.from_bytes(prefix, "big")
            data = src.read(length)
            if len(data) < length:
                raise BundleFormatError(index, f"bundle ends inside entry {index}")
            yield data
            index += 1
