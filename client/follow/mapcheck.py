"""The follower's own tool-status map: folded from the entries it verifies, held against
the root every checkpoint commits to. Rules:

1. The map lives in the state file (``client.map.stored``) and advances in the advance's
   own transactions with exactly the verified entries: a committed chunk holds the map
   through its last entry, a rolled-back one rolls back its rows.
2. A checkpoint whose ``deplog-map/v1`` root is not the fold of its entries is a log
   that signed a false statement: ``MapMismatchError`` (a proven fork, evidence).
3. A malformed or repeated line is refused (``malformed_map_line``), never read as "no
   map"; a checkpoint without a line commits to nothing and is not checked.
4. A map is recomputed only from entry 0: a state that followed the log before it kept
   one, or whose map is of another record format, or whose interrupted advance was
   dropped past size 0, keeps none and checks nothing.
5. ``MapProver`` proves from that map at the trusted checkpoint only, read in one
   snapshot with the map's size.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from deplog.client.map.errors import MapStorageError
from deplog.client.map.line import map_root_of
from deplog.client.map.proof import MapProofDocument
from deplog.client.map.stored import StoredMap
from deplog.client.model.notice import Notice
from deplog.client.model.status import InvalidMark
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import parse_note


class FollowerMap:
    """The map beside one advance: ``add`` each verified page, then ``matches``."""

    def __init__(self, conn: sqlite3.Connection, start: int) -> None:
        """The map of the state on ``conn`` for an advance that goes on from entry ``start``."""
        StoredMap.discard_other_format(conn)  # rule 4: another format's map cannot go on
        has_map = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'map_state'"
        ).fetchone()
        if has_map is None and start == 0:
            StoredMap.create_schema(conn)  # inside the advance: it commits with it
            has_map = (1,)
        self.map = StoredMap(conn) if has_map is not None else None
        if self.map is not None and (self.map.size() or 0) != start:
            self.map = None  # rule 4: a map that is not at the advance's start cannot go on

    def add(
        self, start: int, end: int, notices: Sequence[tuple[int, Notice | InvalidMark]]
    ) -> None:
        """Fold the verified entries ``[start, end)``, as ``fold_item`` made them."""
        if self.map is not None:
            self.map.advance_notices(start, end, notices)

    def matches(self, checkpoint: Checkpoint) -> bool:
        """Whether the checkpoint's line, if any, is the folded map's root (rules 2, 3)."""
        committed = map_root_of(checkpoint.extensions)
        return self.map is None or committed is None or committed == self.map.root()


class MapProver:
    """JSON map proofs from a state file's map (rule 5), on a query-only connection of its own."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA query_only = 1")
        self.conn.execute("PRAGMA busy_timeout = 5000")
        self._lock = threading.Lock()

    def close(self) -> None:
        self.conn.close()

    def prove(self, note: bytes, size: int, tool_id: str) -> bytes | None:
        """The proof of ``tool_id`` at the trusted checkpoint ``note``, or None (ask again)."""
        text, _ = parse_note(note)
        if map_root_of(Checkpoint.from_text(text).extensions) is None:
            return None
        with self._lock:
            try:
                folded, proof = StoredMap(self.conn).prove_at_size(tool_id)
            except (MapStorageError, sqlite3.OperationalError):  # no map (or tables) here
                return None
        if folded != size:
            return None
        return MapProofDocument(note, tool_id, proof).encode()
