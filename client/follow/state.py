"""The follower's local state: one SQLite file, changed only by verified steps.

It holds the trusted checkpoint (note, size, root, the tree's right edge), the registry
replayed from the log, every notice folded so far (by tool, and by publisher and
sequence) and the entries that fail validation (``invalid_entries``, whose marks make
their tool ``unknown``: docs/fold-spec.md). The file itself is trusted; nothing from the
network is stored before it is verified. Rules:

1. The ``trusted`` row is the processed-through checkpoint: every entry below its size
   is verified and stored, and every read sees only entries below it.
2. A long advance commits in chunks toward its ``pending`` target (accepted by the
   policy, proven consistent): a chunk commits only once its entries passed the
   admission rules and a consistency proof showed them a prefix of the target's tree.
3. ``trusted`` moves to the target, and ``pending`` goes, in the transaction of the last
   chunk, once all the target's entries rebuild its root: a kill leaves the old trusted
   state and proven progress, never a partly processed prefix.
4. A state belongs to one log: its origin, and the verifier key its first verified step
   records (``log_key``). Another is ``StateError`` ``state_for_another_log``, never a
   fork; a state from before keys were recorded takes the key on its next verified step
   if its trusted checkpoint is signed by it.
5. The folds kept in memory hold at most ``status_budget`` notices in all.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.map.stored import StoredMap
from deplog.client.model import canonical
from deplog.client.model.notice import Notice
from deplog.client.model.registry import PublisherRegistry
from deplog.client.model.rules import InvalidEntry
from deplog.client.model.status import FoldNotice, InvalidMark, StatusIndex
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import Verifier, open_note, parse_note
from deplog.client.tlog.proofs import EMPTY_ROOT, TreeFrontier

NOTICE_BYTES = 1500
"""Resident bytes of one folded notice (parsed objects and index entries), as measured."""

DEFAULT_MEMORY_BUDGET_MIB = 32
"""The default bound on the folded statuses kept in memory."""


Folded = tuple[StatusIndex, dict[int, float]]
"""A tool's fold and, per notice index, when it was processed."""


def status_budget(memory_mib: float) -> int:
    """The notices a status cache of ``memory_mib`` MiB may hold (at least one)."""
    if memory_mib <= 0:
        raise ValueError("the memory budget must be positive")
    return max(1, int(memory_mib * 2**20) // NOTICE_BYTES)


_PENDING_TABLE = """CREATE TABLE IF NOT EXISTS pending (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        note BLOB NOT NULL,
        done INTEGER NOT NULL,
        frontier TEXT NOT NULL,
        registry TEXT NOT NULL
    ) STRICT"""

_INVALID_TABLE = (
    """CREATE TABLE IF NOT EXISTS invalid_entries (
        idx INTEGER PRIMARY KEY,
        code TEXT NOT NULL,
        cause TEXT,
        tool_id TEXT
    ) STRICT""",
    "CREATE INDEX IF NOT EXISTS invalid_by_tool ON invalid_entries (tool_id, idx)",
)

_LOG_KEY_TABLE = """CREATE TABLE IF NOT EXISTS log_key (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        vkey TEXT NOT NULL
    ) STRICT"""

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
    _PENDING_TABLE,
    *_INVALID_TABLE,
)


def _index_sequences(conn: sqlite3.Connection) -> None:
    """Fill ``sequences`` from the notices of a state file written before it existed."""
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
    conn: sqlite3.Connection,
    tool_id: str,
    below: int,
    start: int = 0,
    into: StatusIndex | None = None,
) -> Folded:
    """Fold a tool's stored items in ``[start, below)`` onto a copy of ``into`` (``Folded``)."""
    index = StatusIndex() if into is None else into.copy()
    processed: dict[int, float] = {}
    items: list[tuple[int, FoldNotice, float | None]] = [
        (int(idx), Notice.from_json(canonical.loads(bytes(notice))), float(processed_at))
        for idx, notice, processed_at in conn.execute(
            "SELECT idx, notice, processed_at FROM notices "
            "WHERE tool_id = ? AND idx >= ? AND idx < ? ORDER BY idx",
            (tool_id, start, below),
        )
    ]
    marks = [
        (int(idx), InvalidMark(tool_id, int(idx)), None)
        for (idx,) in _rows(
            conn,
            "SELECT idx FROM invalid_entries WHERE tool_id = ? AND idx >= ? AND idx < ?",
            (tool_id, start, below),
        )
    ]
    if marks:
        items = sorted([*items, *marks], key=lambda item: item[0])
    for idx, item, processed_at in items:
        index.apply(idx, item)
        if processed_at is not None:
            processed[idx] = processed_at
    return index, processed


class FoldCache:
    """Tool folds, least recently used first out, holding at most ``budget`` notices (rule 5)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._folds: OrderedDict[str, Folded] = OrderedDict()
        self._notices = 0

    def get(self, tool_id: str) -> Folded | None:
        folded = self._folds.get(tool_id)
        if folded is not None:
            self._folds.move_to_end(tool_id)
        return folded

    def keep(self, tool_id: str, folded: Folded) -> None:
        """Keep a fold that fits the budget, evicting the least recently used."""
        if len(folded[1]) > self.budget:
            return
        self._folds[tool_id] = folded
        self._notices += len(folded[1])
        while self._notices > self.budget:
            _, (_, evicted) = self._folds.popitem(last=False)
            self._notices -= len(evicted)

    def pop(self, tool_id: str) -> Folded | None:
        folded = self._folds.pop(tool_id, None)
        if folded is not None:
            self._notices -= len(folded[1])
        return folded

    def clear(self) -> None:
        self._folds.clear()
        self._notices = 0


def _rows(conn: sqlite3.Connection, query: str, args: tuple[object, ...]) -> list[Any]:
    """The rows of a query on ``invalid_entries``, none in a read-only older state file."""
    try:
        return conn.execute(query, args).fetchall()
    except sqlite3.OperationalError as err:
        if "no such table" in str(err):
            return []
        raise


def _encode_frontier(frontier: TreeFrontier) -> str:
    return json.dumps([base64.b64encode(h).decode() for h in frontier.hashes])


def _decode_frontier(size: int, text: str) -> TreeFrontier:
    return TreeFrontier(size, [base64.b64decode(h) for h in json.loads(text)])


class StateError(DeplogError):
    """The local state file is unusable; ``path`` and ``built_for`` name another log's (rule 4)."""

    codes = frozenset({ErrorCode.NO_STATE, ErrorCode.STATE_FOR_ANOTHER_LOG, ErrorCode.BAD_STATE})

    def __init__(
        self,
        code: ErrorCode | None = None,
        message: str | None = None,
        *,
        path: Path | None = None,
        built_for: str | None = None,
    ) -> None:
        super().__init__(code, message)
        self.path = path
        self.built_for = built_for


@dataclass(frozen=True)
class TrustedCheckpoint:
    """A checkpoint that passed every verification step, and when it last did."""

    note: bytes
    checkpoint: Checkpoint
    verified_at: datetime

    @property
    def size(self) -> int:
        return self.checkpoint.size


@dataclass(frozen=True)
class Pending:
    """An advance interrupted between chunks (rule 2): its target, tree edge and registry."""

    note: bytes
    frontier: TreeFrontier
    registry: PublisherRegistry


class LocalState:
    """The persisted trusted state of one log; written only by ``client.follow.trust``."""

    def __init__(
        self,
        path: Path | str,
        origin: str | None,
        *,
        memory_mib: float = DEFAULT_MEMORY_BUDGET_MIB,
    ) -> None:
        """Open or create the state of the log ``origin`` (None: an existing one, any log's)."""
        self.path = Path(path)
        self.status_budget = status_budget(memory_mib)
        if origin is None and not self.path.exists():
            raise StateError(ErrorCode.NO_STATE, "no follower state at that path")
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        self._conn.execute("PRAGMA busy_timeout = 5000")
        _index_sequences(self._conn)
        for statement in (_PENDING_TABLE, *_INVALID_TABLE, _LOG_KEY_TABLE):  # older files
            self._conn.execute(statement)
        self._log_key: Verifier | None = None
        # Reads see committed data only: an advance's open transaction is never read.
        self._reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._reader.execute("PRAGMA query_only = 1")
        self._reader.execute("PRAGMA busy_timeout = 5000")
        self._lock = threading.RLock()
        self._folds = FoldCache(self.status_budget)
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
            raise self._another_log(str(origin), bytes(note))
        self.frontier = _decode_frontier(size, frontier)
        if self.frontier.root() != bytes(root):
            raise StateError(ErrorCode.BAD_STATE, "stored frontier does not match the stored root")
        self.registry = PublisherRegistry.from_json(json.loads(registry))
        checkpoint = Checkpoint(origin, size, bytes(root))
        self.trusted = TrustedCheckpoint(
            bytes(note), checkpoint, datetime.fromtimestamp(verified_at, UTC)
        )

    # -- the log it belongs to (rule 4) --------------------------------------------

    @property
    def log_key(self) -> str | None:
        """The verifier key recorded for the state's log, if any (rule 4)."""
        row = self._conn.execute("SELECT vkey FROM log_key").fetchone()
        return None if row is None else str(row[0])

    def bind_log_key(self, key: Verifier) -> None:
        """Follow the state with ``key``, unless it is another log's (rule 4)."""
        recorded = self.log_key
        trusted = self.trusted
        if key.name != self.origin:
            raise self._another_log(self.origin, None if trusted is None else trusted.note)
        if recorded is not None and recorded != key.vkey():
            raise self._another_log(self.origin, None)
        if recorded is None and trusted is not None and not _signed_by(trusted.note, key):
            raise self._another_log(self.origin, trusted.note)
        self._log_key = key

    def _another_log(self, origin: str, note: bytes | None) -> StateError:
        """``state_for_another_log`` naming the file and the log it was built for."""
        built_for = self.log_key
        if built_for is None and note is not None:
            built_for = _signer_named(note, origin)
        return StateError(
            ErrorCode.STATE_FOR_ANOTHER_LOG,
            "the state file belongs to another log",
            path=self.path,
            built_for=f"the log key {built_for}" if built_for else f"the log {origin}",
        )

    def _record_log_key(self, conn: sqlite3.Connection) -> None:
        """Record the bound key with a verified step, if the state has none yet."""
        if self._log_key is not None:
            conn.execute(
                "INSERT INTO log_key (id, vkey) VALUES (1, ?) ON CONFLICT (id) DO NOTHING",
                (self._log_key.vkey(),),
            )

    # -- reads ---------------------------------------------------------------

    @property
    def size(self) -> int:
        return 0 if self.trusted is None else self.trusted.size

    @property
    def root(self) -> bytes:
        return EMPTY_ROOT if self.trusted is None else self.trusted.checkpoint.root_hash

    def notice_at(self, index: int) -> Notice | None:
        """The notice at ``index`` if it is one, below the trusted size (rule 1)."""
        if index >= self.size:
            return None
        row = self._reader.execute("SELECT notice FROM notices WHERE idx = ?", (index,)).fetchone()
        return None if row is None else Notice.from_json(canonical.loads(bytes(row[0])))

    def tool_status(self, tool_id: str) -> Folded:
        """The fold of one tool's notices at the trusted size, and when each was processed."""
        with self._lock:
            folded = self._folds.get(tool_id)
            if folded is None:
                folded = _fold_tool(self._reader, tool_id, self.size)
                self._folds.keep(tool_id, folded)
            return folded

    def tool_status_at(self, tool_id: str, size: int) -> StatusIndex:
        """The fold of one tool's notices in the first ``size`` entries (not cached)."""
        with self._lock:
            return _fold_tool(self._reader, tool_id, min(size, self.size))[0]

    def named_versions(self, tool_id: str, start: int, end: int) -> Iterator[str]:
        """The exact versions the tool's notices (a withdraw's target) name in ``[start, end)``."""
        with self._lock:
            rows = self._reader.execute(
                "SELECT notice FROM notices WHERE tool_id = ? AND idx >= ? AND idx < ? "
                "ORDER BY idx",
                (tool_id, start, min(end, self.size)),
            ).fetchall()
        for (data,) in rows:
            notice = Notice.from_json(canonical.loads(bytes(data)))
            if notice.action == "withdraw" and notice.withdraws is not None:
                notice = self.notice_at(notice.withdraws) or notice
            if notice.affected is not None:
                yield from (version.text for version in notice.affected.versions)

    def tools_between(self, start: int, end: int) -> list[str]:
        """Every tool a stored notice or mark in ``[start, end)`` is about, sorted."""
        with self._lock:
            rows = self._reader.execute(
                "SELECT tool_id FROM notices WHERE idx >= ? AND idx < ? UNION "
                "SELECT tool_id FROM invalid_entries WHERE tool_id IS NOT NULL "
                "AND idx >= ? AND idx < ? ORDER BY tool_id",
                (start, min(end, self.size)) * 2,
            ).fetchall()
        return [str(tool_id) for (tool_id,) in rows]

    def invalid_between(self, start: int, end: int) -> list[InvalidEntry]:
        """The verified entries in ``[start, end)`` that fail validation, in log order."""
        with self._lock:
            rows = self._reader.execute(
                "SELECT idx, code, cause, tool_id FROM invalid_entries "
                "WHERE idx >= ? AND idx < ? ORDER BY idx",
                (start, min(end, self.size)),
            ).fetchall()
        return [_invalid_entry(*row) for row in rows]

    def invalid_entries(self, limit: int = 100) -> tuple[int, list[InvalidEntry]]:
        """How many verified entries fail validation, and the first ``limit`` of them."""
        with self._lock:
            (count,) = self._reader.execute(
                "SELECT COUNT(*) FROM invalid_entries WHERE idx < ?", (self.size,)
            ).fetchone()
            rows = self._reader.execute(
                "SELECT idx, code, cause, tool_id FROM invalid_entries WHERE idx < ? "
                "ORDER BY idx LIMIT ?",
                (self.size, limit),
            ).fetchall()
        return int(count), [_invalid_entry(*row) for row in rows]

    def pending(self) -> Pending | None:
        """The interrupted advance to resume (rule 2), if there is one."""
        row = self._conn.execute("SELECT note, done, frontier, registry FROM pending").fetchone()
        if row is None:
            return None
        note, done, frontier, registry = row
        if done < self.size:
            raise StateError(ErrorCode.BAD_STATE, "pending progress is behind the trusted size")
        return Pending(
            bytes(note),
            _decode_frontier(done, frontier),
            PublisherRegistry.from_json(json.loads(registry)),
        )

    def discard_pending(self) -> None:
        """Drop an interrupted advance with its entries and map rows (rule 1: never read)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(
                    "DELETE FROM sequences WHERE (publisher, sequence) IN (SELECT "
                    "json_extract(CAST(notice AS TEXT), '$.publisher'), "
                    "json_extract(CAST(notice AS TEXT), '$.sequence') "
                    "FROM notices WHERE idx >= ?)",
                    (self.size,),
                )
                self._conn.execute("DELETE FROM notices WHERE idx >= ?", (self.size,))
                self._conn.execute("DELETE FROM invalid_entries WHERE idx >= ?", (self.size,))
                self._conn.execute("DELETE FROM pending")
                # The map cannot be rewound (``client.follow.mapcheck`` rule 4).
                StoredMap.drop_unless_at(self._conn, self.size)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    # -- the one write path ------------------------------------------------------

    def begin(self) -> AdvanceWriter:
        """Open the first transaction of one advance; it holds the state until ``end``."""
        self._lock.acquire()
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._lock.release()
            raise
        return AdvanceWriter(self._conn)

    def end(self, writer: AdvanceWriter) -> None:
        """Roll back what the advance has not committed (chunks committed stay, rule 2)."""
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        finally:
            self._lock.release()

    def commit_chunk(
        self,
        writer: AdvanceWriter,
        note: bytes,
        frontier: TreeFrontier,
        registry: PublisherRegistry,
    ) -> None:
        """Make a proven chunk durable as progress toward ``note`` (rule 2), and go on."""
        writer.conn.execute(
            "INSERT INTO pending (id, note, done, frontier, registry) VALUES (1, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET note = excluded.note, done = excluded.done, "
            "frontier = excluded.frontier, registry = excluded.registry",
            (
                note,
                frontier.size,
                _encode_frontier(frontier),
                json.dumps(registry.to_json(), sort_keys=True),
            ),
        )
        self._conn.execute("COMMIT")
        self._conn.execute("BEGIN IMMEDIATE")

    def commit(
        self,
        writer: AdvanceWriter,
        note: bytes,
        checkpoint: Checkpoint,
        frontier: TreeFrontier,
        registry: PublisherRegistry,
        verified_at: datetime,
    ) -> None:
        """Move the trusted checkpoint to the completed advance's target (rule 3)."""
        old_size = self.size
        writer.conn.execute("DELETE FROM pending")
        self._record_log_key(writer.conn)
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
                _encode_frontier(frontier),
                json.dumps(registry.to_json(), sort_keys=True),
                verified_at.timestamp(),
            ),
        )
        touched = writer.conn.execute(
            "SELECT tool_id, COUNT(*) FROM (SELECT tool_id FROM notices WHERE idx >= ? "
            "UNION ALL SELECT tool_id FROM invalid_entries WHERE idx >= ? "
            "AND tool_id IS NOT NULL) GROUP BY tool_id",
            (old_size, old_size),
        ).fetchall()
        self._conn.execute("COMMIT")
        self.frontier, self.registry = frontier, registry
        self.trusted = TrustedCheckpoint(note, checkpoint, verified_at)
        small = sum(count for _, count in touched) <= self.status_budget
        for tool_id, _ in touched:
            dropped = self._folds.pop(tool_id)
            if dropped is not None and small:  # fold the few new items into a copy
                index, processed = _fold_tool(
                    self._reader, tool_id, self.size, old_size, dropped[0]
                )
                self._folds.keep(tool_id, (index, {**dropped[1], **processed}))

    def touch(self, note: bytes, verified_at: datetime) -> None:
        """A sync found the trusted checkpoint again (perhaps with fresher cosignatures)."""
        if self.trusted is None:
            return
        with self._lock:
            self._record_log_key(self._conn)
            self._conn.execute(
                "UPDATE trusted SET note = ?, verified_at = ?", (note, verified_at.timestamp())
            )
        self.trusted = TrustedCheckpoint(note, self.trusted.checkpoint, verified_at)


def _invalid_entry(idx: int, code: str, cause: str | None, tool_id: str | None) -> InvalidEntry:
    return InvalidEntry(
        int(idx), ErrorCode(code), None if cause is None else ErrorCode(cause), tool_id
    )


def _signed_by(note: bytes, key: Verifier) -> bool:
    """Whether ``note`` carries a valid signature by ``key``."""
    try:
        open_note(note, [key])
    except DeplogError:
        return False
    return True


def _signer_named(note: bytes, name: str) -> str | None:
    """``name+<key id>`` of the first signature on ``note`` by a key named ``name``."""
    try:
        signatures = parse_note(note)[1]
    except DeplogError:
        return None
    ids = [sig.key_id.hex() for sig in signatures if sig.name == name]
    return f"{name}+{ids[0]}" if ids else None


_SEQUENCES_PER_QUERY = 1000  # bound parameters per query, well under SQLite's limit


class AdvanceWriter:
    """Writes of one advance, inside its current chunk's transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

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

    def add_invalid(self, entries: Iterable[InvalidEntry]) -> None:
        """Keep the entries that fail validation (never stored as notices, never sequences)."""
        self.conn.executemany(
            "INSERT INTO invalid_entries (idx, code, cause, tool_id) VALUES (?, ?, ?, ?)",
            [
                (e.index, str(e.code), None if e.cause is None else str(e.cause), e.tool_id)
                for e in entries
            ],
        )

    def sequences_used(self, pairs: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
        """Those of the (publisher, sequence) ``pairs`` an already added notice has: one
        primary-key search per publisher (a row-value ``IN`` would scan the table)."""
        by_publisher: dict[str, list[int]] = {}
        for publisher, sequence in pairs:
            by_publisher.setdefault(publisher, []).append(sequence)
        used: set[tuple[str, int]] = set()
        for publisher, sequences in by_publisher.items():
            for start in range(0, len(sequences), _SEQUENCES_PER_QUERY):
                part = sequences[start : start + _SEQUENCES_PER_QUERY]
                marks = ",".join("?" * len(part))
                used.update(
                    (publisher, int(sequence))
                    for (sequence,) in self.conn.execute(
                        "SELECT sequence FROM sequences "
                        f"WHERE publisher = ? AND sequence IN ({marks})",
                        [publisher, *part],
                    )
                )
        return used

    def notice_at(self, index: int) -> Notice | None:
        row = self.conn.execute("SELECT notice FROM notices WHERE idx = ?", (index,)).fetchone()
        return None if row is None else Notice.from_json(canonical.loads(bytes(row[0])))
