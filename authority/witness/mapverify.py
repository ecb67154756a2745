"""``witness serve --verify-map URL``: cosign only checkpoints whose map root this witness
reproduced from the log's entries.

A ``cosignature/v1`` signs the whole note text, extension lines included, but a
stock witness states only that the tree is consistent with what it saw
(c2sp.org/tlog-cosignature: no statement about extension lines unless the
operator makes one). A witness run with ``--verify-map`` makes one more: "I
folded this log's entries ``[0, size)`` myself (docs/fold-spec.md) and got the
``deplog-map/v1`` root this checkpoint carries". A cosignature cannot say which
statements it makes, so such a witness runs under its own name and key, never a
plain witness's, and a policy that names it requires a map-verifying cosigner.

This is the one module of ``authority/witness`` that knows deplog entries
(tests/test_layout.py lets it alone import the map code). Rules:

1. The mirror (the map's tables and the tree's right edge, in its own SQLite
   file) advances only along entries whose tree root is exactly a checkpoint's
   root, so a lying entries API cannot make the witness fold other entries.
2. It advances in one transaction per checkpoint, committed only if the map
   root matches the checkpoint's line; anything else rolls back and changes
   nothing (``map_not_reproduced``).
3. A checkpoint without a line, or with a malformed or repeated one, is
   refused (``map_not_reproduced``): this witness vouches for the map, so it
   cannot cosign a checkpoint that commits to none.
4. Entries that cannot be had (the log's API is down, or serves entries only
   under its published checkpoint, which waits for the quorum's cosignatures)
   are ``entries_unavailable`` (503): the log resubmits its served checkpoint on
   its refresh interval, and the witness cosigns it then. A checkpoint below
   the mirror's size is refused the same way (the mirror holds one size).
5. A mirror whose map is in another record format (``client.mapstore`` rule 4)
   is dropped whole at start, map and tree edge in one transaction, and
   mirrored again from entry 0.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from deplog.authority.witness.core import WitnessError
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.http import HttpLogSource
from deplog.client.mapstore import StoredMap
from deplog.client.model.vmap import MapLineError, map_root_of
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.proofs import TreeFrontier, leaf_hash

__all__ = [
    "EntriesUnavailableError",
    "FetchEntries",
    "MapNotReproducedError",
    "MapVerifier",
    "http_entries",
]

FetchEntries = Callable[[int, int], Sequence[bytes]]
"""The log's entries ``[start, end)``, or fewer (a page); raises DeplogError if it cannot."""


class MapNotReproducedError(WitnessError):
    """The checkpoint's map line is missing, malformed, or not the root of its entries."""

    code = ErrorCode.MAP_NOT_REPRODUCED


class EntriesUnavailableError(WitnessError):
    """The log's entries up to the checkpoint cannot be fetched now; retry later."""

    code = ErrorCode.ENTRIES_UNAVAILABLE


_FRONTIER_SCHEMA = """CREATE TABLE IF NOT EXISTS mirror_frontier (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    size INTEGER NOT NULL,
    hashes TEXT NOT NULL
) STRICT"""


def http_entries(url: str) -> FetchEntries:
    """Entries from a deplog authority's ``/v1/entries``, through the follower's bounded
    source; for a worker thread (it runs its own event loop per page)."""

    def fetch(start: int, end: int) -> Sequence[bytes]:
        async def page() -> list[bytes]:
            source = HttpLogSource(url)
            try:
                return await source.entries(start, end)
            finally:
                await source.close()

        return asyncio.run(page())

    return fetch


class MapVerifier:
    """The mirror of one log's map; ``check`` is the witness's additional statement."""

    def __init__(self, path: Path, fetch: FetchEntries) -> None:
        self.fetch = fetch
        self._lock = threading.Lock()
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(_FRONTIER_SCHEMA)
        if StoredMap.create_schema(self.conn):  # a map of another record format went:
            self.conn.execute("DELETE FROM mirror_frontier")  # mirror again from entry 0
        self.conn.execute("COMMIT")
        self.map = StoredMap(self.conn)

    def close(self) -> None:
        self.conn.close()

    def _frontier(self) -> TreeFrontier:
        row = self.conn.execute("SELECT size, hashes FROM mirror_frontier").fetchone()
        if row is None:
            return TreeFrontier()
        return TreeFrontier(int(row[0]), [base64.b64decode(h) for h in json.loads(row[1])])

    def check(self, checkpoint: Checkpoint) -> None:
        """Refuse (raise) unless the mirror, advanced to ``checkpoint``, has its map root."""
        try:
            committed = map_root_of(checkpoint.extensions)
        except MapLineError:
            committed = None
        if committed is None:
            raise MapNotReproducedError(message="the checkpoint commits to no valid map")
        with self._lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self._advance(checkpoint, committed)
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def _advance(self, checkpoint: Checkpoint, committed: bytes) -> None:
        frontier = self._frontier()
        if checkpoint.size < frontier.size:
            raise EntriesUnavailableError(message="the mirror is past this checkpoint")
        while frontier.size < checkpoint.size:
            start = frontier.size
            try:
                page = list(self.fetch(start, checkpoint.size))[: checkpoint.size - start]
            except DeplogError:
                raise EntriesUnavailableError(
                    message="the log's entries cannot be fetched"
                ) from None
            if not page:
                raise EntriesUnavailableError(message="the log served no entries")
            for leaf in page:
                frontier.append(leaf_hash(leaf))
            if self.map.size() is None and start:
                raise MapNotReproducedError(message="the mirror lost its map")
            self.map.advance(start, page)
        if frontier.root() != checkpoint.root_hash:
            raise MapNotReproducedError(message="the served entries are not the checkpoint's")
        if self.map.size() is None:
            self.map.advance(0, [])  # the empty log: a map of no keys
        if self.map.root() != committed:
            raise MapNotReproducedError(message="the map root is not the fold of the entries")
        hashes = json.dumps([base64.b64encode(h).decode() for h in frontier.hashes])
        self.conn.execute(
            "INSERT INTO mirror_frontier (id, size, hashes) VALUES (1, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET size = excluded.size, hashes = excluded.hashes",
            (frontier.size, hashes),
        )
