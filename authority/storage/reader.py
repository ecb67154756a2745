"""The read side of the log: proofs, entries and tool status from committed data.

A ``LogReader`` owns a read-only connection and is used by one thread at a
time. Callers bound every size by the latest *published* checkpoint, so a
reader never reveals a leaf that no signed checkpoint covers, and stored data
that fails its own hash check is never served: ``IntegrityError``
(``storage_corrupt``), the same finding as the writer's.

A ``ReaderPool`` runs reads on a few threads of their own, never on the event loop
and never on the writer's thread: each thread keeps its own ``LogReader``, and a
database failure is ``StorageError`` (503 ``storage_unavailable``) that drops the
thread's reader, so the next read reconnects (to a restarted database, say).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from deplog.authority.storage import store
from deplog.authority.storage.backends import open_database
from deplog.authority.storage.database import Database
from deplog.authority.storage.errors import IntegrityError, StorageError
from deplog.authority.storage.tree import StoredHashTree, TreeCorruptError
from deplog.client.errors import DeplogError
from deplog.client.map.layer import MapView
from deplog.client.map.proof import MapProof
from deplog.client.map.stored import StoredMap
from deplog.client.model.entries import NoticeEntry
from deplog.client.model.rules import decode_leaf
from deplog.client.model.status import FoldNotice, InvalidMark, StatusIndex
from deplog.client.tlog.proofs import ConsistencyProof, InclusionProof, leaf_hash

__all__ = [
    "MAX_SEARCH_ROWS",
    "MAX_TOOL_NOTICES",
    "LogReader",
    "ReaderPool",
]

_T = TypeVar("_T")

# A tool with more notices than this is answered from its first ones only and
# flagged ``truncated``; no publisher needs thousands of notices for one tool.
MAX_TOOL_NOTICES = 4096

# The most rows one listing query returns (recent entries, a page of search results,
# chart points): every query the explorer makes is bounded by it.
MAX_SEARCH_ROWS = 200


class LogReader:
    """Proofs and entries over a read-only connection to the log database (SQLite or
    PostgreSQL: the queries are their common subset)."""

    def __init__(self, db: Database | Path | str) -> None:
        self.conn = open_database(db).connect(readonly=True)
        self.tree = StoredHashTree(self.conn)
        self.map = StoredMap(self.conn)

    def close(self) -> None:
        self.conn.close()

    def latest_checkpoint(self) -> store.StoredCheckpoint | None:
        """The largest signed checkpoint stored (by any process sharing the database)."""
        return store.latest_checkpoint(self.conn)

    def checkpoint_at(self, size: int) -> store.StoredCheckpoint | None:
        return store.checkpoint_at(self.conn, size)

    def inclusion(self, index: int, size: int) -> InclusionProof:
        self.tree.pin(size)
        try:
            hashes = self.tree.inclusion_proof(index, size)
            leaf = self.tree._subroot(0, index)
        except TreeCorruptError:
            raise IntegrityError() from None
        return InclusionProof(index=index, size=size, leaf_hash=leaf, hashes=tuple(hashes))

    def consistency(self, old: int, new: int) -> ConsistencyProof:
        self.tree.pin(new)
        try:
            hashes = self.tree.consistency_proof(old, new)
        except TreeCorruptError:
            raise IntegrityError() from None
        return ConsistencyProof(old=old, new=new, hashes=tuple(hashes))

    def entries(self, start: int, end: int) -> list[bytes]:
        """Leaf bytes in [start, end), each checked against its stored hash."""
        rows = self.conn.execute(
            "SELECT idx, data, hash FROM leaves WHERE idx >= ? AND idx < ? ORDER BY idx",
            (start, end),
        ).fetchall()
        if len(rows) != end - start:
            raise IntegrityError()
        out = []
        for _, data, digest in rows:
            if leaf_hash(bytes(data)) != bytes(digest):
                raise IntegrityError()
            out.append(bytes(data))
        return out

    def recent_entries(self, size: int, limit: int) -> list[tuple[int, bytes]]:
        """The last ``limit`` leaves below ``size``, newest first, each hash-checked."""
        limit = min(limit, MAX_SEARCH_ROWS)
        rows = self.conn.execute(
            "SELECT idx, data, hash FROM leaves WHERE idx < ? ORDER BY idx DESC LIMIT ?",
            (size, limit),
        ).fetchall()
        out = []
        for idx, data, digest in rows:
            if leaf_hash(bytes(data)) != bytes(digest):
                raise IntegrityError()
            out.append((int(idx), bytes(data)))
        return out

    def search_tools(self, text: str, size: int, offset: int, limit: int) -> list[str]:
        """Tool ids with a notice below ``size`` whose id contains ``text``, in id order.

        A scan of the (tool_id, idx) index, never of the leaves; callers bound
        ``offset`` and ``limit``. Every tool id starts with ``tool:`` and has no
        other colon, so text starting with it can only match as a prefix: that
        is a range of the index instead of all of it.
        """
        limit = min(limit, MAX_SEARCH_ROWS)
        if text.startswith("tool:"):
            upper = text[:-1] + chr(ord(text[-1]) + 1)
            rows = self.conn.execute(
                "SELECT DISTINCT tool_id FROM tool_entries WHERE tool_id >= ? AND tool_id < ? "
                "AND idx < ? ORDER BY tool_id LIMIT ? OFFSET ?",
                (text, upper, size, limit, offset),
            ).fetchall()
            return [str(r[0]) for r in rows]
        rows = self.conn.execute(
            "SELECT DISTINCT tool_id FROM tool_entries WHERE instr(tool_id, ?) > 0 AND idx < ? "
            "ORDER BY tool_id LIMIT ? OFFSET ?",
            (text, size, limit, offset),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def growth(self, size: int, points: int) -> list[tuple[int, str]]:
        """Up to ``points`` signed checkpoints, evenly spread over sizes 1..``size``, as
        (size, signed_at): the first checkpoint at or above each step, one indexed lookup
        per point."""
        found: dict[int, str] = {}
        points = max(1, min(points, MAX_SEARCH_ROWS))
        for step in range(1, points + 1):
            target = max(1, size * step // points)
            row = self.conn.execute(
                "SELECT size, signed_at FROM checkpoints WHERE size >= ? AND size <= ? "
                "ORDER BY size LIMIT 1",
                (target, size),
            ).fetchone()
            if row is not None:
                found[int(row[0])] = str(row[1])
        return sorted(found.items())

    def tool(self, tool_id: str, size: int, now: datetime) -> dict[str, Any]:
        """The status of a tool at tree ``size``, folded from that tool's notices only, and
        the marks of the entries about it that fail validation (docs/fold-spec.md)."""
        indexes = store.tool_entry_indexes(self.conn, tool_id, size, MAX_TOOL_NOTICES + 1)
        truncated = len(indexes) > MAX_TOOL_NOTICES
        items: list[tuple[int, FoldNotice]] = [
            (i, InvalidMark(tool_id, i))
            for i in store.invalid_entry_indexes(self.conn, tool_id, size)
        ]
        for i in indexes[:MAX_TOOL_NOTICES]:
            entry = decode_leaf(self.entries(i, i + 1)[0])
            if isinstance(entry, NoticeEntry):
                items.append((i, entry.envelope.notice))
        index = StatusIndex()
        for i, item in sorted(items, key=lambda pair: pair[0]):
            index.apply(i, item)
        described = index.describe(tool_id, now)
        described["size"] = size
        if truncated:
            described["truncated"] = True
        return described

    def map_proof(
        self, tool_id: str, view: MapView | None = None, moved: Callable[[], bool] | None = None
    ) -> tuple[int, MapProof]:
        """The proof of ``tool_id`` in the map as committed, and the log size that map is at
        (read in one snapshot: the caller compares it with the served checkpoint).
        ``view`` and ``moved``: the writer's rows not written yet (``StoredMap.prove_at_size``;
        ``ViewMoved``: read again)."""
        try:
            return self.map.prove_at_size(tool_id, view, moved)
        except DeplogError:  # a missing row (MapStorageError), a record that does not decode
            raise IntegrityError() from None

    def invalid_entry(self, index: int) -> tuple[str, str | None, str | None] | None:
        """How the entry at ``index`` fails validation (code, cause, tool id), if the
        authority found it does (``invalid_entries``)."""
        row = self.conn.execute(
            "SELECT code, cause, tool_id FROM invalid_entries WHERE idx = ?", (index,)
        ).fetchone()
        return None if row is None else (str(row[0]), row[1], row[2])

    def publishers(self) -> dict[str, Any]:
        """Every publisher with its namespaces and keys, as of the latest registry change."""
        snapshot = store.registry_snapshot(self.conn)
        if snapshot is None:
            return {"publishers": []}
        state: dict[str, Any] = json.loads(snapshot[1])
        return {"publishers": state["publishers"]}


class ReaderPool:
    """Reads of the log on ``threads`` reader threads, each with its own ``LogReader``."""

    def __init__(self, db: Database | Path | str, threads: int) -> None:
        self.db = open_database(db)
        self._threads = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="reader")
        self._local = threading.local()
        self._readers: list[LogReader] = []
        self._lock = threading.Lock()

    async def read(self, fn: Callable[[LogReader], _T]) -> _T:
        """``fn`` of this thread's reader, on a reader thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self._read, fn)

    def _reader(self) -> LogReader:
        reader: LogReader | None = getattr(self._local, "reader", None)
        if reader is None:
            reader = LogReader(self.db)
            self._local.reader = reader
            with self._lock:
                self._readers.append(reader)
        return reader

    def _read(self, fn: Callable[[LogReader], _T]) -> _T:
        """Reader thread: a database failure is ``StorageError``, and the thread's reader
        is dropped, so the next read reconnects (a restarted server)."""
        try:
            return fn(self._reader())
        except self.db.errors:
            reader: LogReader | None = getattr(self._local, "reader", None)
            if reader is not None:
                self._local.reader = None
                with self._lock:
                    self._readers.remove(reader)
                with contextlib.suppress(Exception):
                    reader.close()
            raise StorageError() from None

    def close(self) -> None:
        """Wait for the reads under way, then close every reader."""
        self._threads.shutdown(wait=True)
        for reader in self._readers:
            reader.close()
