"""A read-only view of a follower's state file, for any number of worker processes.

One follower per host (``deplog follow``) writes the file; each worker opens it with
``StateReader`` and hands it to a ``Guard``. Rules:

1. The reader never writes (``mode=ro``, ``query_only``), so it cannot corrupt the state
   or block the follower.
2. Every read first asks whether the follower committed since the last one (``PRAGMA
   data_version``); if so the trusted checkpoint is reloaded and the folds dropped.
3. Freshness is the guard's, from the stored ``verified_at``: a worker whose follower
   died goes stale.
4. A fold made while the follower committed again is not kept.
5. Folds stop at the trusted size, and keep at most ``memory_mib`` MiB of notices.
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

from deplog.client.errors import ErrorCode
from deplog.client.follow.state import (
    DEFAULT_MEMORY_BUDGET_MIB,
    FoldCache,
    Folded,
    StateError,
    TrustedCheckpoint,
    _fold_tool,
    status_budget,
)
from deplog.client.tlog.checkpoint import Checkpoint

__all__ = ["StateReader"]


class StateReader:
    """The trusted checkpoint and tool statuses of a state file another process writes."""

    def __init__(self, path: Path | str, *, memory_mib: float = DEFAULT_MEMORY_BUDGET_MIB) -> None:
        self.path = Path(path)
        self._folds = FoldCache(status_budget(memory_mib))
        if not self.path.exists():
            raise StateError(ErrorCode.NO_STATE, "no follower state at that path")
        self._conn = sqlite3.connect(
            f"{self.path.resolve().as_uri()}?mode=ro",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
        )
        self._lock = threading.RLock()
        self._version: int | None = None
        self._trusted: TrustedCheckpoint | None = None
        self.origin: str | None = None
        try:
            self._conn.execute("PRAGMA query_only = 1")
            self._conn.execute("PRAGMA busy_timeout = 5000")
            self._refresh()
        except BaseException:  # not a state (or not a database): leave no connection open
            self._conn.close()
            raise

    def close(self) -> None:
        self._conn.close()

    def _data_version(self) -> int:
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def _refresh(self) -> None:
        """Reload the trusted checkpoint if the follower committed since the last read."""
        version = self._data_version()
        if version == self._version:
            return
        row = self._conn.execute(
            "SELECT origin, note, size, root, verified_at FROM trusted"
        ).fetchone()
        self._folds.clear()
        self._version = version
        if row is None:
            self._trusted = None
            return
        origin, note, size, root, verified_at = row
        if self.origin is not None and origin != self.origin:
            raise StateError(
                ErrorCode.STATE_FOR_ANOTHER_LOG, "the state file belongs to another log"
            )
        self.origin = str(origin)
        self._trusted = TrustedCheckpoint(
            bytes(note),
            Checkpoint(self.origin, int(size), bytes(root)),
            datetime.fromtimestamp(verified_at, UTC),
        )

    @property
    def trusted(self) -> TrustedCheckpoint | None:
        with self._lock:
            self._refresh()
            return self._trusted

    def tool_status(self, tool_id: str) -> Folded:
        """The fold of one tool's notices as of the follower's latest commit."""
        with self._lock:
            self._refresh()
            folded = self._folds.get(tool_id)
            if folded is None:
                size = 0 if self._trusted is None else self._trusted.size
                folded = _fold_tool(self._conn, tool_id, size)  # rule 5
                if self._data_version() == self._version:  # rule 4
                    self._folds.keep(tool_id, folded)
            return folded
