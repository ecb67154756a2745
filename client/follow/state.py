"""The follower's local state: one SQLite file, changed only by whole verified advances.

Holds the trusted checkpoint (its signed note, size, root and the tree's right
edge), the publisher registry replayed from the log, and every notice folded
so far, indexed by tool and by (publisher, sequence) for the uniqueness rule.
An advance writes all of that in one transaction, committed only after the
new entries verified against the new root, so after a crash or kill the file
holds either the old trusted state or the new one, never a mix. The file's
own integrity is assumed (it is local and ours); what came from the network
is never trusted before verification.

Memory is bounded: notices live in the file, and tool statuses are folded on
demand from one tool's notices and cached in a bounded LRU.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.model import canonical
from deplog.client.model.notice import Notice
from deplog.client.model.registry import PublisherRegistry
from deplog.client.model.status import StatusIndex
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.proofs import EMPTY_ROOT, TreeFrontier

__all__ = [
    "SCHEMA",
    "STATUS_CACHE_TOOLS",
    "AdvanceWriter",
    "LocalState",
    "StateError",
    "TrustedCheckpoint",
]

STATUS_CACHE_TOOLS = 4096

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS trusted (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        origin TEXT NOT NULL,
        note BLOB NOT NULL,
        size INTEGER NOT NULL,
        root BLOB NOT NULL,
        frontier TEXT NOT NULL,
        registry TEXT NOT NULL,
        verified_at REAL NOT NULL
    ) STRICT""",
    """CREATE TABLE IF NOT EXISTS notices (
        idx INTEGER PRIMARY KEY,
        tool_id TEXT NOT NULL,
        notice BLOB NOT NULL,
        processed_at REAL NOT NULL
    ) STRICT""",
    "CREATE INDEX IF NOT EXISTS notices_by_tool ON notices (tool_id, idx)",
    """CREATE TABLE IF NOT EXISTS sequences (
        publisher TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        PRIMARY KEY (publisher, sequence)
    ) STRICT, WITHOUT ROWID""",
)


def _index_sequences(conn: sqlite3.Connection) -> None:
    """Fill the ``sequences`` table from the notices of a state file written before it
    existed (under the increasing rule), so the uniqueness check sees every one."""
    has_table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sequences'"
    ).fetchone()
    if has_table is not None:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in SCHEMA:
            conn.execute(statement)
        for (notice,) in conn.execute("SELECT notice FROM notices").fetchall():
            parsed = Notice.from_json(canonical.loads(bytes(notice)))
            conn.execute(
                "INSERT INTO sequences (publisher, sequence) VALUES (?, ?)",
                (parsed.publisher, parsed.sequence),
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _fold_tool(
    conn: sqlite3.Connection, tool_id: str, below: int | None = None
) -> tuple[StatusIndex, dict[int, float]]:
    """Fold a tool's stored notices (those before index ``below``) in log order.

    Returns the status index and, per notice index, when it was processed.
    """
    index = StatusIndex()
    processed: dict[int, float] = {}
    limit = (1 << 63) - 1 if below is None else below
    for idx, notice, processed_at in conn.execute(
        "SELECT idx, notice, processed_at FROM notices WHERE tool_id = ? AND idx < ? ORDER BY idx",
        (tool_id, limit),
    ):
        index.apply(idx, Notice.from_json(canonical.loads(bytes(notice))))
        processed[idx] = processed_at
    return index, processed


class StateError(DeplogError):
    """The local state file is unusable (absent, another log's, or inconsistent)."""

    codes = frozenset({ErrorCode.NO_STATE, ErrorCode.STATE_FOR_ANOTHER_LOG, ErrorCode.BAD_STATE})


@dataclass(frozen=True)
class TrustedCheckpoint:
    """A checkpoint that passed every verification step, and when it last did."""

    note: bytes
    checkpoint: Checkpoint
    verified_at: datetime

    @property
    def size(self) -> int:
        return self.checkpoint.size


class LocalState:
    """The persisted trusted state of one log; written only by ``client.trust``."""

    def __init__(self, path: Path | str, origin: str | None) -> None:
        """Open or create the state of the log ``origin``; ``None`` opens an existing
        state file for whichever log it follows (read-only uses such as ``deplog status``)."""
        self.path = Path(path)
        if origin is None and not self.path.exists():
            raise StateError(ErrorCode.NO_STATE, "no follower state at that path")
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        self._conn.execute("PRAGMA busy_timeout = 5000")
        _index_sequences(self._conn)
        # Reads go through their own connection, which sees committed data only:
        # an advance in progress (its transaction is open across awaits on the
        # same thread) must never be visible to the guard or to reports.
        self._reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._reader.execute("PRAGMA query_only = 1")
        self._reader.execute("PRAGMA busy_timeout = 5000")
        self._lock = threading.RLock()
        self._statuses: OrderedDict[str, tuple[StatusIndex, dict[int, float]]] = OrderedDict()
        if origin is None:
            row = self._conn.execute("SELECT origin FROM trusted").fetchone()
            if row is None:
                raise StateError(ErrorCode.NO_STATE, "the follower state holds no checkpoint yet")
            origin = str(row[0])
        self.origin: str = origin
        self.trusted: TrustedCheckpoint | None = None
        self.frontier = TreeFrontier()
        self.registry = PublisherRegistry()
        self._load()

    def close(self) -> None:
        self._reader.close()
        self._conn.close()

    def _load(self) -> None:
        row = self._conn.execute(
            "SELECT origin, note, size, root, frontier, registry, verified_at FROM trusted"
        ).fetchone()
        if row is None:
            return
        origin, note, size, root, frontier, registry, verified_at = row
        if origin != self.origin:
            raise StateError(
                ErrorCode.STATE_FOR_ANOTHER_LOG, "the state file belongs to another log"
            )
        hashes = [base64.b64decode(h) for h in json.loads(frontier)]
        self.frontier = TreeFrontier(size, hashes)
        if self.frontier.root() != bytes(root):
            raise StateError(ErrorCode.BAD_STATE, "stored frontier does not match the stored root")
        self.registry = PublisherRegistry.from_json(json.loads(registry))
        checkpoint = Checkpoint(origin, size, bytes(root))
        self.trusted = TrustedCheckpoint(
            bytes(note), checkpoint, datetime.fromtimestamp(verified_at, UTC)
        )

    # -- reads ---------------------------------------------------------------

    @property
    def size(self) -> int:
        return 0 if self.trusted is None else self.trusted.size

    @property
    def root(self) -> bytes:
        return EMPTY_ROOT if self.trusted is None else self.trusted.checkpoint.root_hash

    def notice_at(self, index: int) -> Notice | None:
        row = self._reader.execute("SELECT notice FROM notices WHERE idx = ?", (index,)).fetchone()
        return None if row is None else Notice.from_json(canonical.loads(bytes(row[0])))

    def tool_status(self, tool_id: str) -> tuple[StatusIndex, dict[int, float]]:
        """The fold of one tool's notices, and when each notice was processed."""
        with self._lock:
            cached = self._statuses.get(tool_id)
            if cached is not None:
                self._statuses.move_to_end(tool_id)
                return cached
            folded = _fold_tool(self._reader, tool_id)
            self._statuses[tool_id] = folded
            if len(self._statuses) > STATUS_CACHE_TOOLS:
                self._statuses.popitem(last=False)
            return folded

    def tool_status_at(self, tool_id: str, size: int) -> StatusIndex:
        """The fold of one tool's notices in the first ``size`` entries (not cached)."""
        with self._lock:
            return _fold_tool(self._reader, tool_id, below=size)[0]

    # -- the one write path ------------------------------------------------------

    def begin(self) -> AdvanceWriter:
        """Open the transaction of one advance; nothing persists unless ``commit``."""
        self._lock.acquire()
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._lock.release()
            raise
        return AdvanceWriter(self._conn)

    def rollback(self, writer: AdvanceWriter) -> None:
        try:
            self._conn.execute("ROLLBACK")
        finally:
            self._lock.release()

    def commit(self, writer: AdvanceWriter) -> None:
        """Make the advance durable, then let the in-memory view follow it."""
        try:
            self._conn.execute("COMMIT")
            for tool_id, folded in writer.statuses.items():  # every tool the advance touched
                self._statuses.pop(tool_id, None)
                self._statuses[tool_id] = folded
            while len(self._statuses) > STATUS_CACHE_TOOLS:
                self._statuses.popitem(last=False)
            if writer.after_commit is not None:
                note, checkpoint, frontier, registry, verified_at = writer.after_commit
                self.frontier, self.registry = frontier, registry
                self.trusted = TrustedCheckpoint(note, checkpoint, verified_at)
        finally:
            self._lock.release()

    def save_trusted(
        self,
        writer: AdvanceWriter,
        note: bytes,
        checkpoint: Checkpoint,
        frontier: TreeFrontier,
        registry: PublisherRegistry,
        verified_at: datetime,
    ) -> None:
        """Record the new trusted checkpoint inside the advance's transaction."""
        writer.conn.execute(
            "INSERT INTO trusted (id, origin, note, size, root, frontier, registry, verified_at) "
            "VALUES (1, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET note = excluded.note, "
            "size = excluded.size, root = excluded.root, frontier = excluded.frontier, "
            "registry = excluded.registry, verified_at = excluded.verified_at",
            (
                self.origin,
                note,
                checkpoint.size,
                checkpoint.root_hash,
                json.dumps([base64.b64encode(h).decode() for h in frontier.hashes]),
                json.dumps(registry.to_json(), sort_keys=True),
                verified_at.timestamp(),
            ),
        )
        writer.after_commit = (note, checkpoint, frontier, registry, verified_at)

    def touch(self, note: bytes, verified_at: datetime) -> None:
        """A sync found the trusted checkpoint again (perhaps with fresher cosignatures)."""
        if self.trusted is None:
            return
        with self._lock:
            self._conn.execute(
                "UPDATE trusted SET note = ?, verified_at = ?", (note, verified_at.timestamp())
            )
        self.trusted = TrustedCheckpoint(note, self.trusted.checkpoint, verified_at)


class AdvanceWriter:
    """Writes of one advance, inside its transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        # Each touched tool's fold after the advance, for the status cache.
        self.statuses: dict[str, tuple[StatusIndex, dict[int, float]]] = {}
        self.after_commit: (
            tuple[bytes, Checkpoint, TreeFrontier, PublisherRegistry, datetime] | None
        ) = None

    def add_notices(self, rows: Iterable[tuple[int, Notice]], processed_at: datetime) -> None:
        stamp = processed_at.timestamp()
        notices = list(rows)
        batch = [(idx, n.tool_id, n.canonical_bytes(), stamp) for idx, n in notices]
        self.conn.executemany(
            "INSERT INTO notices (idx, tool_id, notice, processed_at) VALUES (?, ?, ?, ?)", batch
        )
        self.conn.executemany(
            "INSERT INTO sequences (publisher, sequence) VALUES (?, ?)",
            [(n.publisher, n.sequence) for _, n in notices],
        )

    def sequence_used(self, publisher: str, sequence: int) -> bool:
        """Whether an already added notice has this publisher and sequence number."""
        row = self.conn.execute(
            "SELECT 1 FROM sequences WHERE publisher = ? AND sequence = ?", (publisher, sequence)
        ).fetchone()
        return row is not None

    def notice_at(self, index: int) -> Notice | None:
        row = self.conn.execute("SELECT notice FROM notices WHERE idx = ?", (index,)).fetchone()
        return None if row is None else Notice.from_json(canonical.loads(bytes(row[0])))
