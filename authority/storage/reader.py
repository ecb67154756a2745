"""The read side of the log: proofs, entries and tool status from committed data.

A ``LogReader`` owns a read-only connection, for one thread at a time. Callers bound every
size by the latest *published* checkpoint, so no leaf is revealed that no signed checkpoint
covers, and stored data that fails its own hash check is ``IntegrityError``. A
``ReaderPool`` runs reads on threads of their own, each with its reader; a database failure
is ``StorageError`` and drops that thread's reader, so the next read reconnects.
"""

from __future__ import annotations

import asyncio
import base64
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
from deplog.client.map.record import StatusRecord
from deplog.client.map.stored import StoredMap
from deplog.client.model.entries import NoticeEntry
from deplog.client.model.notice import Notice
from deplog.client.model.rules import decode_leaf
from deplog.client.model.status import StatusIndex
from deplog.client.model.table import tool_status
from deplog.client.tlog.proofs import ConsistencyProof, InclusionProof, leaf_hash

_T = TypeVar("_T")

MAX_NOTICES_PAGE = 100
"""The most notices one page of a tool's status details (``GET /v1/tools/{id}?limit=``)."""
MAX_SEARCH_ROWS = 200
"""The most rows one listing query returns (every query the explorer makes)."""
MAX_SCANNED_LEAVES = 65536
"""The most leaves one ``leaves_containing`` reads (no index holds advisories)."""


class LogReader:
    """Proofs and entries over a read-only connection to the log database."""

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
            with self.tree.memoized():  # the leaf's hash is read with the proof's
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
        return [data for _, data in _checked(rows)]

    def entries_page(self, start: int, end: int, max_bytes: int) -> bytes:
        """``GET /v1/entries``'s JSON: the leaves of ``[start, end)`` from ``start`` on, as
        many as fit in ``max_bytes`` of base64 (at least one), read a few at a time."""
        items: list[bytes] = []
        size, index = 0, start
        while index < end:
            for leaf in self.entries(index, min(end, index + _PAGE_READ)):
                item = b'"' + base64.b64encode(leaf) + b'"'
                size += len(item) + 2
                if items and size > max_bytes:
                    return _page(start, items)
                items.append(item)
            index = min(end, index + _PAGE_READ)
        return _page(start, items)

    def recent_entries(self, size: int, limit: int) -> list[tuple[int, bytes]]:
        """The last ``limit`` leaves below ``size``, newest first, each hash-checked."""
        limit = min(limit, MAX_SEARCH_ROWS)
        rows = self.conn.execute(
            "SELECT idx, data, hash FROM leaves WHERE idx < ? ORDER BY idx DESC LIMIT ?",
            (size, limit),
        ).fetchall()
        return _checked(rows)

    def search_tools(self, text: str, size: int, offset: int, limit: int) -> list[str]:
        """Tool ids with a notice below ``size`` containing ``text``, in id order: read from
        ``tools``, each id once, never from every notice."""
        limit = min(limit, MAX_SEARCH_ROWS)
        args: tuple[str, ...]
        if text.startswith("tool:"):  # a tool id's one colon: such text matches a prefix only
            match, args = "tool_id >= ? AND tool_id < ?", (text, text[:-1] + chr(ord(text[-1]) + 1))
        else:
            match, args = "instr(tool_id, ?) > 0", (text,)
        rows = self.conn.execute(
            f"SELECT tool_id FROM tools WHERE {match} AND first_idx < ? "
            "ORDER BY tool_id LIMIT ? OFFSET ?",
            (*args, size, limit, offset),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def leaves_containing(self, needle: bytes, size: int, limit: int) -> tuple[list[int], bool]:
        """Indexes of the newest leaves below ``size`` containing ``needle``, newest first,
        and whether older leaves were left unread."""
        limit, end = min(limit, MAX_SEARCH_ROWS), size
        found: list[int] = []
        while end > 0 and len(found) < limit and size - end < MAX_SCANNED_LEAVES:
            start = max(0, end - 4096, size - MAX_SCANNED_LEAVES)
            rows = self.conn.execute(
                "SELECT idx, data FROM leaves WHERE idx >= ? AND idx < ? ORDER BY idx DESC",
                (start, end),
            ).fetchall()
            found += [int(i) for i, data in rows if needle in bytes(data)]
            end = start
        return found[:limit], end > 0

    def growth(self, size: int, points: int) -> list[tuple[int, str]]:
        """Up to ``points`` (size, signed_at) of checkpoints spread evenly over 1..``size``."""
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

    def tool(
        self,
        tool_id: str,
        size: int,
        now: datetime,
        record: bytes | None,
        after: int = -1,
        limit: int = MAX_NOTICES_PAGE,
    ) -> dict[str, Any]:
        """A tool's status table at ``size`` folded from its map ``record`` there (None: no
        entry names it), and one page of its notices after log index ``after``: only the
        page's leaves and the deciding notices' are read, so the work is linear in the
        tool's notices, never one leaf decode per notice."""
        index = (
            StatusIndex() if record is None else StatusRecord.decode(record, tool_id).status_index()
        )
        table = tool_status(index, tool_id, now, messages=self._messages(tool_id, size))
        out = table.to_json()
        later = [n for n in out["notices"] if n["index"] > after]
        page = later[: min(limit, MAX_NOTICES_PAGE)]
        for summary in page:
            notice = self._notice(summary["index"])
            summary.update(publisher=notice.publisher, message=notice.message)
        more = len(later) > len(page)
        out.update(size=size, notices=page, next=page[-1]["index"] if more else None)
        return out

    def _messages(self, tool_id: str, size: int) -> Callable[[int], str | None]:
        """The messages of the tool's notices below ``size``, read on the first call in one
        query: one field of each hash-checked leaf, without the full decode (the map
        vouches each is an admitted notice)."""
        found: dict[int, str | None] = {}

        def message(index: int) -> str | None:
            if not found:
                rows = self.conn.execute(
                    "SELECT l.idx, l.data, l.hash FROM tool_entries t JOIN leaves l "
                    "ON l.idx = t.idx WHERE t.tool_id = ? AND t.idx < ?",
                    (tool_id, size),
                ).fetchall()
                for idx, data in _checked(rows):
                    found[idx] = json.loads(data).get("notice", {}).get("message")
            return found.get(index)

        return message

    def _notice(self, index: int) -> Notice:
        """The notice at ``index``, from its hash-checked leaf (the map vouches it is one)."""
        entry = decode_leaf(self.entries(index, index + 1)[0])
        if not isinstance(entry, NoticeEntry):
            raise IntegrityError()
        return entry.envelope.notice

    def map_proof(
        self, tool_id: str, view: MapView | None = None, moved: Callable[[], bool] | None = None
    ) -> tuple[int, MapProof]:
        """The proof of ``tool_id`` in the map as committed, and the size it is at."""
        try:
            return self.map.prove_at_size(tool_id, view, moved)
        except DeplogError:  # a missing row (MapStorageError), a record that does not decode
            raise IntegrityError() from None

    def invalid_entry(self, index: int) -> tuple[str, str | None, str | None] | None:
        """How the entry at ``index`` fails validation (code, cause, tool id), if it does."""
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


_PAGE_READ = 64
"""Leaves read in one query while a page is built: its memory is the page and these."""


def _page(start: int, items: list[bytes]) -> bytes:
    return b'{"start": %d, "entries": [%b]}' % (start, b", ".join(items))


def _checked(rows: list[tuple[int, bytes, bytes]]) -> list[tuple[int, bytes]]:
    out = []
    for idx, data, digest in rows:
        if leaf_hash(bytes(data)) != bytes(digest):
            raise IntegrityError()
        out.append((int(idx), bytes(data)))
    return out


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
        """Reader thread: a database failure drops the reader (the next one reconnects); one
        on a connection the database ended since (a restart) is tried once more at once."""
        try:
            return fn(self._reader())
        except self.db.errors:
            if not self._drop_reader():
                raise StorageError() from None
        try:  # on a new connection: the old one was ended since this thread's last read
            return fn(self._reader())
        except self.db.errors:
            self._drop_reader()
            raise StorageError() from None

    def _drop_reader(self) -> bool:
        """Close this thread's reader; whether its connection had been lost."""
        reader: LogReader | None = getattr(self._local, "reader", None)
        if reader is None:
            return False
        lost = self.db.broken(reader.conn)
        self._local.reader = None
        with self._lock:
            self._readers.remove(reader)
        with contextlib.suppress(Exception):
            reader.close()
        return lost

    def close(self) -> None:
        """Wait for the reads under way, then close every reader."""
        self._threads.shutdown(wait=True)
        for reader in self._readers:
            reader.close()
