"""The follower's own tool-status map: recomputed from the entries it verifies, and held
against the root every checkpoint commits to.

Rules:

1. The map lives in the follower's state file (``client.map.stored`` tables)
   and advances in the advance's own transactions, page by page, with exactly
   the entries the trust state verified: it commits with each chunk of the
   advance (so a chunk on disk holds the map folded through its last entry,
   and a rolled-back chunk rolls back its map rows), and a resumed advance
   goes on from that map. A map that is not at the size the advance starts
   from cannot be continued (rule 5).
2. A checkpoint whose ``deplog-map/v1`` root is not the root of the map folded
   from its entries is a log that signed a false statement about its own
   history: ``trust.MapMismatchError``, a ``ForkError`` (proven ``map_mismatch``
   evidence is written, and the follower stops, as for two signed roots).
3. A malformed or repeated line is refused (``malformed_map_line``), so a
   broken commitment is never read as "this log has no map".
4. A checkpoint without a line commits to nothing and is not checked (a log
   without the map, or the last size an authority signed before its upgrade).
5. The map can only be recomputed from entry 0: a state file that followed the
   log before it kept a map has none, and is never checked (``checking`` is
   false); a fresh state keeps one from its first advance. A map in another
   record format (``client.map.stored`` rule *one format*) is dropped at the next advance
   and counts as none; ``MapProver`` never proves from one. Dropping an
   interrupted advance's progress (``LocalState.discard_pending``) drops the
   map too, since its rows hold that progress: a state still at size 0 then
   folds it again from entry 0, any other keeps none.
6. ``MapProver`` hands out proofs from that map at the trusted checkpoint only
   (read in one snapshot with the map's size), so a cache can give an agent the
   proof behind its decision; it has none for a checkpoint without a line.
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

__all__ = ["FollowerMap", "MapProver"]


class FollowerMap:
    """The map beside one advance: ``add`` each verified page, then ``matches``."""

    def __init__(self, conn: sqlite3.Connection, start: int) -> None:
        """The map of the state on ``conn`` for an advance that goes on from entry ``start``
        (the trusted size, or a resumed advance's last committed chunk)."""
        StoredMap.discard_other_format(conn)  # rule 5: another format's map cannot go on
        has_map = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'map_state'"
        ).fetchone()
        if has_map is None and start == 0:
            StoredMap.create_schema(conn)  # inside the advance: it commits with it
            has_map = (1,)
        self.map = StoredMap(conn) if has_map is not None else None
        if self.map is not None and (self.map.size() or 0) != start:
            self.map = None  # rule 5: a map that is not at the advance's start cannot go on

    @property
    def checking(self) -> bool:
        """Whether this state keeps a map to check checkpoints against."""
        return self.map is not None

    def add(
        self, start: int, end: int, notices: Sequence[tuple[int, Notice | InvalidMark]]
    ) -> None:
        """Fold the verified entries ``[start, end)`` into the map: what the validator made
        of them (``client.model.rules.fold_item``) as ``(index, notice or mark)``, in log
        order (judged once, by the trust state)."""
        if self.map is not None:
            self.map.advance_notices(start, end, notices)

    def matches(self, checkpoint: Checkpoint) -> bool:
        """Whether the checkpoint's line (if it has one) is the folded map's root; a
        malformed or repeated line is ``MapLineError``."""
        committed = map_root_of(checkpoint.extensions)
        return self.map is None or committed is None or committed == self.map.root()


class MapProver:
    """JSON map proofs (``deplog.map_proof/v1``) from a follower state file's map, read on
    a query-only connection of its own, so an advance in progress is never seen."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA query_only = 1")
        self.conn.execute("PRAGMA busy_timeout = 5000")
        self._lock = threading.Lock()

    def close(self) -> None:
        self.conn.close()

    def prove(self, note: bytes, size: int, tool_id: str) -> bytes | None:
        """The proof of ``tool_id`` at the trusted checkpoint ``note`` of ``size``; None if
        the checkpoint has no map line, the state keeps no map, or the map has moved on
        (an advance committed since the caller read ``note``: ask again)."""
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
