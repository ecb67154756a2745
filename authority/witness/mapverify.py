"""``witness serve --verify-map URL``: cosign only checkpoints whose map root this witness
reproduced from the log's entries.

A stock witness's cosignature states nothing about extension lines
(c2sp.org/tlog-cosignature). This one states more: "I folded this log's entries
``[0, size)`` myself (docs/fold-spec.md) and got the ``deplog-map/v1`` root this checkpoint
carries". A cosignature cannot say which statements it makes, so such a witness runs under
its own name and key. This is the one module of ``authority/witness`` that knows deplog
entries (tests/test_layout.py). Rules:

1. The mirror (the map's tables and the tree's right edge, in its own SQLite file) advances
   only along entries whose tree root is exactly the checkpoint's.
2. It advances in one transaction per checkpoint, committed only if the map root matches
   the checkpoint's line; anything else changes nothing (``map_not_reproduced``).
3. A checkpoint without one well-formed map line is refused (``map_not_reproduced``).
4. Entries that cannot be had, or a checkpoint below the mirror's size, are
   ``entries_unavailable`` (503): the log resubmits on its refresh interval. A deplog
   authority serves the entries of every checkpoint it sends out (``publication.py``:
   *Entries before publication*), so this witness can be in its publication quorum.
5. A mirror of another record format (``client.map.stored`` *One format*), or without the
   history of rule 6, is dropped whole at start and mirrored again from entry 0.
6. Every entry is judged by the one validator (``client.model.rules``), with the registry,
   sequence numbers and withdraw targets kept in the mirror's history: an invalid entry is
   folded as every verifier folds it (docs/fold-spec.md) and kept in ``mirror_invalid``.
7. The mirror follows one log, whose origin and key it records; another log's checkpoint
   is refused (``map_not_reproduced``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from deplog.authority.witness.core import WitnessError
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.http import HttpLogSource
from deplog.client.map.errors import MapLineError
from deplog.client.map.line import map_root_of
from deplog.client.map.stored import StoredMap
from deplog.client.model.entries import NoticeEntry
from deplog.client.model.notice import Notice
from deplog.client.model.registry import PublisherRegistry
from deplog.client.model.rules import EntryChecker, InvalidEntry, fold_item
from deplog.client.model.status import InvalidMark
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.proofs import TreeFrontier, leaf_hash

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
_HISTORY_SCHEMA = (
    """CREATE TABLE mirror_log (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        origin TEXT NOT NULL,
        log_key TEXT NOT NULL,
        registry TEXT NOT NULL
    ) STRICT""",
    """CREATE TABLE mirror_notices (
        idx INTEGER PRIMARY KEY,
        publisher TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        tool_id TEXT NOT NULL,
        action TEXT NOT NULL,
        UNIQUE (publisher, sequence)
    ) STRICT""",
    """CREATE TABLE mirror_invalid (
        idx INTEGER PRIMARY KEY,
        code TEXT NOT NULL,
        cause TEXT,
        tool_id TEXT
    ) STRICT""",
)


class _Target(NamedTuple):
    publisher: str
    tool_id: str
    action: str


def http_entries(url: str) -> FetchEntries:
    """Entries from a deplog authority's ``/v1/entries``, for a worker thread."""

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

    def __init__(
        self, path: Path, fetch: FetchEntries, log_key: Callable[[str], Verifier | None]
    ) -> None:
        """The mirror in ``path``, fed by ``fetch``; ``log_key`` finds an origin's key."""
        self.fetch = fetch
        self.log_key = log_key
        self._lock = threading.Lock()
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(_FRONTIER_SCHEMA)
        has_history = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'mirror_log'"
        ).fetchone()
        if StoredMap.create_schema(self.conn) or has_history is None:  # rule 5
            self.conn.execute("DELETE FROM mirror_frontier")  # mirror again from entry 0
            StoredMap.drop_unless_at(self.conn, 0)
            StoredMap.create_schema(self.conn)
            for table in ("mirror_log", "mirror_notices", "mirror_invalid"):
                self.conn.execute(f"DROP TABLE IF EXISTS {table}")
            for statement in _HISTORY_SCHEMA:
                self.conn.execute(statement)
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
        history = self._history(checkpoint.origin)
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
            if self.map.size() is None and start:
                raise MapNotReproducedError(message="the mirror lost its map")
            items: list[tuple[int, Notice | InvalidMark]] = []
            for index, leaf in enumerate(page, start):
                frontier.append(leaf_hash(leaf))
                judged = history.judge(index, leaf)
                if isinstance(judged, InvalidEntry):
                    self._keep_invalid(judged)
                elif isinstance(judged, NoticeEntry):
                    self._keep_notice(index, judged.envelope.notice)
                if (item := fold_item(judged)) is not None:
                    items.append((index, item))
            self.map.advance_notices(start, start + len(page), items)
        if frontier.root() != checkpoint.root_hash:
            raise MapNotReproducedError(message="the served entries are not the checkpoint's")
        if self.map.size() is None:
            self.map.advance_notices(0, 0, [])  # the empty log: a map of no keys
        if self.map.root() != committed:
            raise MapNotReproducedError(message="the map root is not the fold of the entries")
        hashes = json.dumps([base64.b64encode(h).decode() for h in frontier.hashes])
        self.conn.execute(
            "INSERT INTO mirror_frontier (id, size, hashes) VALUES (1, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET size = excluded.size, hashes = excluded.hashes",
            (frontier.size, hashes),
        )
        self.conn.execute(
            "UPDATE mirror_log SET registry = ?",
            (json.dumps(history.registry.to_json(), sort_keys=True),),
        )

    def _history(self, origin: str) -> EntryChecker:
        """The validator over the mirror's history (rule 6) for ``origin``'s log (rule 7)."""
        key = self.log_key(origin)
        if key is None:
            raise MapNotReproducedError(message="the witness has no key for this log")
        row = self.conn.execute("SELECT origin, log_key, registry FROM mirror_log").fetchone()
        if row is None:
            registry = PublisherRegistry()
            self.conn.execute(
                "INSERT INTO mirror_log (id, origin, log_key, registry) VALUES (1, ?, ?, ?)",
                (origin, key.vkey(), json.dumps(registry.to_json(), sort_keys=True)),
            )
        elif row[0] != origin or row[1] != key.vkey():
            raise MapNotReproducedError(message="the mirror verifies another log's map")
        else:
            registry = PublisherRegistry.from_json(json.loads(row[2]))
        return EntryChecker(registry, key, self._target, self._sequence_used)

    def _target(self, index: int) -> _Target | None:
        row = self.conn.execute(
            "SELECT publisher, tool_id, action FROM mirror_notices WHERE idx = ?", (index,)
        ).fetchone()
        return None if row is None else _Target(*row)

    def _sequence_used(self, publisher: str, sequence: int) -> bool:
        query = "SELECT 1 FROM mirror_notices WHERE publisher = ? AND sequence = ?"
        return self.conn.execute(query, (publisher, sequence)).fetchone() is not None

    def _keep_notice(self, index: int, notice: Notice) -> None:
        self.conn.execute(
            "INSERT INTO mirror_notices (idx, publisher, sequence, tool_id, action) "
            "VALUES (?, ?, ?, ?, ?)",
            (index, notice.publisher, notice.sequence, notice.tool_id, notice.action),
        )

    def _keep_invalid(self, entry: InvalidEntry) -> None:
        self.conn.execute(
            "INSERT INTO mirror_invalid (idx, code, cause, tool_id) VALUES (?, ?, ?, ?)",
            (entry.index, str(entry.code), entry.cause and str(entry.cause), entry.tool_id),
        )
