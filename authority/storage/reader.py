"""The read side of the log: proofs, entries and tool status from committed data.

A ``LogReader`` owns a read-only connection and is used by one thread at a
time. Callers bound every size by the latest *published* checkpoint, so a
reader never reveals a leaf that no signed checkpoint covers, and stored data
that fails its own hash check is never served: the log's ``IntegrityError``
(``storage_corrupt``), the same finding as the writer's.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from deplog.authority.log import IntegrityError
from deplog.authority.storage import store
from deplog.authority.storage.tree import StoredHashTree, TreeCorruptError
from deplog.client.errors import DeplogError
from deplog.client.mapstore import StoredMap
from deplog.client.model.entries import NoticeEntry, decode_entry
from deplog.client.model.status import StatusIndex
from deplog.client.model.vmap import MapProof
from deplog.client.tlog.proofs import ConsistencyProof, InclusionProof, leaf_hash

__all__ = [
    "MAX_TOOL_NOTICES",
    "LogReader",
]

# A tool with more notices than this is answered from its first ones only and
# flagged ``truncated``; no publisher needs thousands of notices for one tool.
MAX_TOOL_NOTICES = 4096


class LogReader:
    """Proofs and entries over a read-only connection to the log database."""

    def __init__(self, path: Path) -> None:
        self.conn = store.connect(path, readonly=True)
        self.tree = StoredHashTree(self.conn)
        self.map = StoredMap(self.conn)

    def close(self) -> None:
        self.conn.close()

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

    def tool(self, tool_id: str, size: int, now: datetime) -> dict[str, Any]:
        """The status of a tool at tree ``size``, folded from that tool's notices only."""
        indexes = store.tool_entry_indexes(self.conn, tool_id, size, MAX_TOOL_NOTICES + 1)
        truncated = len(indexes) > MAX_TOOL_NOTICES
        index = StatusIndex()
        for i in indexes[:MAX_TOOL_NOTICES]:
            entry = decode_entry(self.entries(i, i + 1)[0])
            if isinstance(entry, NoticeEntry):
                index.apply(i, entry.envelope.notice)
        described = index.describe(tool_id, now)
        described["size"] = size
        if truncated:
            described["truncated"] = True
        return described

    def map_proof(self, tool_id: str) -> tuple[int, MapProof]:
        """The proof of ``tool_id`` in the map as committed, and the log size that map is at
        (read in one snapshot: the caller compares it with the served checkpoint)."""
        try:
            return self.map.prove_at_size(tool_id)
        except (KeyError, DeplogError):  # a missing row, a stored record that does not decode
            raise IntegrityError() from None

    def publishers(self) -> dict[str, Any]:
        """Every publisher with its namespaces and keys, as of the latest registry change."""
        snapshot = store.registry_snapshot(self.conn)
        if snapshot is None:
            return {"publishers": []}
        state: dict[str, Any] = json.loads(snapshot[1])
        return {"publishers": state["publishers"]}
