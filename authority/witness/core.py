"""A C2SP tlog-witness v1.0.0 witness: verify, compare-and-swap, cosign.

The witness keeps, per log origin, the latest checkpoint it cosigned, and cosigns a
submitted checkpoint only if the log's trusted key signed it and it provably extends that
record. Its cosignature states "as of this time, this is the largest consistent tree I have
seen for this origin", which is only true if the record never moves backwards:

* **Compare-and-swap.** The record changes only through
  :meth:`WitnessState.compare_and_swap` (``UPDATE ... WHERE origin = ? AND size = ? AND
  root = ?``, or a primary-key-guarded ``INSERT``) in one transaction; a request whose
  record changed since its checks read it gets ``old_size_mismatch`` with the new size. A
  race never rolls the witness back, and the record is durable before a cosignature leaves.
* **Time forward.** Cosignature timestamps never decrease for an origin (the stored time is
  ``max(previous, now)``), whatever the clock does.
* **Spec order.** Checks run in tlog-witness's order, each with its code: ``too_large``,
  ``malformed_request``, ``unknown_log``, ``untrusted_checkpoint`` (signatures by other
  keys are ignored), ``old_size_too_large``, ``old_size_mismatch`` (with the recorded
  size), ``bad_consistency_proof`` (any proof from size 0 or between equal sizes too),
  ``root_mismatch``; then the swap. A refusal changes nothing, but a validly signed
  checkpoint refused for a failed proof or a fork is kept (bounded) as evidence.
* **Any log.** A log is an origin and a type 0x01 Ed25519 key; the origin line picks the
  key (the key name SHOULD be the origin, unless the operator names another). Nothing
  here knows deplog entries or speaks HTTP (``witness/server.py`` does).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from deplog.client.errors import DeplogError, ErrorCode, TooLargeError
from deplog.client.plumbing.dbapi import Connection
from deplog.client.plumbing.storage_faults import disk_full, opening_database
from deplog.client.tlog.checkpoint import (
    Checkpoint,
    CheckpointFormatError,
    check_origin,
    parse_decimal,
)
from deplog.client.tlog.cosignature import cosign
from deplog.client.tlog.note import (
    COSIGNER_TYPES,
    InvalidNoteSignatureError,
    KeyFormatError,
    NoteFormatError,
    Signer,
    UnverifiedNoteError,
    Verifier,
    decode_base64,
    open_note,
    parse_note,
)
from deplog.client.tlog.proofs import EMPTY_ROOT, HASH_SIZE, ProofError, verify_consistency

_T = TypeVar("_T")
log = logging.getLogger("deplog.witness")

MAX_BODY_SIZE = 1 << 20
"""Largest add-checkpoint body accepted, in bytes (``too_large`` above it)."""

MAX_PROOF_LINES = 63
"""tlog-witness: a client MUST NOT send more than 63 consistency proof lines."""

MAX_EVIDENCE_PER_LOG = 100
"""Refused-but-validly-signed checkpoints kept per origin; the oldest are dropped."""

MAX_LOGS_FILE_SIZE = 1 << 20
MAX_TIMESTAMP = (1 << 63) - 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS logs (
    origin TEXT PRIMARY KEY,
    vkey TEXT NOT NULL,
    added_at INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS checkpoints (
    origin TEXT PRIMARY KEY REFERENCES logs(origin),
    size INTEGER NOT NULL CHECK (size >= 0),
    root BLOB NOT NULL CHECK (length(root) = 32),
    updated_at INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS evidence (
    id INTEGER PRIMARY KEY,
    origin TEXT NOT NULL REFERENCES logs(origin),
    reason TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    body BLOB NOT NULL,
    digest BLOB NOT NULL UNIQUE
) STRICT;
"""


class WitnessError(DeplogError):
    """Base of the refusals only a witness makes."""


class MalformedRequestError(WitnessError):
    """A body that is not ``old N``, proof lines, a blank line and a checkpoint note."""

    code = ErrorCode.MALFORMED_REQUEST


class UnknownLogError(WitnessError):
    """A checkpoint whose origin the witness is not configured for."""

    code = ErrorCode.UNKNOWN_LOG


class UntrustedCheckpointError(WitnessError):
    """A checkpoint with no valid signature by the origin's trusted key."""

    code = ErrorCode.UNTRUSTED_CHECKPOINT


class OldSizeTooLargeError(WitnessError):
    """An old size above the checkpoint's size."""

    code = ErrorCode.OLD_SIZE_TOO_LARGE


class SizeConflictError(WitnessError):
    """An old size other than the recorded one; the body tells the client the recorded size."""

    code = ErrorCode.OLD_SIZE_MISMATCH

    def __init__(self, recorded_size: int) -> None:
        super().__init__()
        self.recorded_size = recorded_size


class ConflictingRootError(WitnessError):
    """A checkpoint of the size the witness already cosigned, with another root: a fork."""

    code = ErrorCode.ROOT_MISMATCH


class StorageUnavailableError(WitnessError):
    """The database stayed locked or failed; nothing was cosigned, the client may retry."""

    code = ErrorCode.UNAVAILABLE


class LogConfigError(WitnessError):
    """A log key, origin or logs file the witness cannot use (operator input, not a request)."""

    codes = frozenset(
        {
            ErrorCode.BAD_LOG_KEY,
            ErrorCode.BAD_ORIGIN,
            ErrorCode.BAD_LOGS_FILE,
            ErrorCode.LOGS_FILE_TOO_LARGE,
            ErrorCode.LOG_KEY_CONFLICT,
        }
    )


@dataclass(frozen=True)
class AddCheckpointRequest:
    """A parsed add-checkpoint body; nothing in it is verified yet."""

    old_size: int
    proof: tuple[bytes, ...]
    note: bytes


@dataclass(frozen=True)
class RecordedCheckpoint:
    """The latest checkpoint cosigned for an origin, and when (the last cosignature's time)."""

    size: int
    root: bytes
    updated_at: int


@dataclass(frozen=True)
class LogStatus:
    """One configured log: its key, and the record if it was ever cosigned."""

    origin: str
    vkey: str
    recorded: RecordedCheckpoint | None

    def lag(self, now: int) -> int | None:
        """Seconds since the latest cosignature for this log, or None if never cosigned."""
        return None if self.recorded is None else max(0, now - self.recorded.updated_at)


@dataclass(frozen=True)
class Evidence:
    """A refused checkpoint that was validly signed by the log: possible misbehaviour."""

    origin: str
    reason: str
    received_at: int
    body: bytes


def parse_add_checkpoint(body: bytes) -> AddCheckpointRequest:
    """Split an add-checkpoint body without verifying it: ``old <size>``, at most 63 proof
    lines, an empty line (the first: proof lines are never empty), the checkpoint note."""
    if len(body) > MAX_BODY_SIZE:
        raise TooLargeError(message="add-checkpoint body over 1 MiB")
    head, sep, note = body.partition(b"\n\n")
    if not sep or not note:
        raise MalformedRequestError(message="no blank line before the checkpoint")
    try:
        lines = head.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise MalformedRequestError(message="header is not ASCII") from None
    first, proof_lines = lines[0], lines[1:]
    old_size = parse_decimal(first[4:]) if first.startswith("old ") else None
    if old_size is None:
        raise MalformedRequestError(message="first line must be 'old <size>'")
    if len(proof_lines) > MAX_PROOF_LINES:
        raise MalformedRequestError(message="more than 63 consistency proof lines")
    proof: list[bytes] = []
    for line in proof_lines:
        digest = decode_base64(line)
        if digest is None or len(digest) != HASH_SIZE:
            raise MalformedRequestError(message="proof line is not a base64 32-byte hash")
        proof.append(digest)
    return AddCheckpointRequest(old_size, tuple(proof), note)


def parse_log_verifier(vkey: str) -> Verifier:
    """A log's type 0x01 verifier key; its key name is the origin it signs checkpoints for."""
    try:
        verifier = Verifier.parse(vkey)
        Checkpoint(verifier.name, 0, EMPTY_ROOT)  # its name must be an origin line
    except (KeyFormatError, CheckpointFormatError):
        raise LogConfigError(
            ErrorCode.BAD_LOG_KEY, "not a type 0x01 Ed25519 log verifier key"
        ) from None
    return verifier


def parse_logs_file(text: str) -> list[Verifier]:
    """The ``log <vkey> [<url>]`` lines of a tlog-policy file; any unknown line refused."""
    if len(text) > MAX_LOGS_FILE_SIZE:
        raise LogConfigError(ErrorCode.LOGS_FILE_TOO_LARGE, "logs file is too large")
    verifiers: list[Verifier] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if fields[0] in ("witness", "group", "quorum"):
            continue
        if fields[0] != "log" or len(fields) not in (2, 3):
            raise LogConfigError(
                ErrorCode.BAD_LOGS_FILE, f"line {number}: expected 'log <vkey> [<url>]'"
            )
        verifiers.append(parse_log_verifier(fields[1]))
    return verifiers


class StateStore(Protocol):
    """Another database than a SQLite file for the state (``WitnessState.over``)."""

    @property
    def name(self) -> str: ...
    @property
    def begin(self) -> str: ...
    @property
    def errors(self) -> tuple[type[Exception], ...]: ...
    @property
    def schema(self) -> Sequence[str]: ...
    @property
    def connect(self) -> Callable[[], Connection]: ...


class WitnessState:
    """The witness's database (a SQLite file, or ``over`` another): trusted logs, the record
    per origin, evidence. Each thread has its own connection, so only the swap orders
    concurrent requests; a database error is :class:`StorageUnavailableError`, named by
    ``failing`` (``/healthz``) until a swap succeeds again, and logged once."""

    def __init__(self, path: Path, *, busy_timeout: float = 5.0) -> None:
        self._busy_timeout = busy_timeout
        self._setup(path, self._connect_sqlite, "BEGIN IMMEDIATE", (sqlite3.Error,))
        with opening_database(path, self.close):
            conn = self._conn()
            conn.execute("PRAGMA journal_mode=WAL")
            assert isinstance(conn, sqlite3.Connection)
            conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} COMMIT;")

    @classmethod
    def over(cls, store: StateStore) -> WitnessState:
        """The state in ``store``, its tables created if missing."""
        state = cls.__new__(cls)
        state._setup(Path(store.name), store.connect, store.begin, store.errors)
        try:
            with state._transaction() as conn:
                for statement in store.schema:
                    conn.execute(statement)
        except BaseException:
            state.close()
            raise
        return state

    def _setup(
        self,
        path: Path,
        connect: Callable[[], Connection],
        begin: str,
        errors: tuple[type[Exception], ...],
    ) -> None:
        self.path, self._connect, self._begin, self.errors = path, connect, begin, errors
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[Connection] = []
        self.failing: str | None = None

    def _connect_sqlite(self) -> Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _conn(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is not None and getattr(conn, "broken", False):
            self._drop(conn)  # PostgreSQL: a lost connection is made again
            conn = None
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _drop(self, conn: Connection) -> None:
        self._local.conn = None
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)
        with contextlib.suppress(Exception):
            conn.close()

    def _first(self, run: Callable[[Connection], _T]) -> _T:
        """``run`` on this thread's connection, again on a new one if it was lost."""
        conn = self._conn()
        try:
            return run(conn)
        except self.errors:
            if not getattr(conn, "broken", False):
                raise
            self._drop(conn)
            return run(self._conn())

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A write transaction (on SQLite the write lock is taken up front)."""

        def begin(conn: Connection) -> Connection:
            conn.execute(self._begin)
            return conn

        conn = self._first(begin)
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:  # a failed COMMIT too: SQLite may keep the transaction open
            if conn.in_transaction:
                with contextlib.suppress(*self.errors):
                    conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _storage(self) -> Iterator[None]:
        """Database errors as :class:`StorageUnavailableError`, noted in ``failing``
        (``storage_full`` when the evidence shows a full disk, else the error's class)."""
        try:
            yield
        except self.errors as err:
            reason = ErrorCode.STORAGE_FULL if disk_full(err) else type(err).__name__
            if self.failing != reason:
                log.error("witness database error: %s: %s", type(err).__name__, err)
                self.failing = reason
            raise StorageUnavailableError() from None

    def _recovered(self) -> None:
        if self.failing is not None:
            log.info("witness database works again")
            self.failing = None

    def close(self) -> None:
        """Close every thread's connection; the state must not be used afterwards."""
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    def add_log(self, vkey: str, now: int, origin: str | None = None) -> tuple[Verifier, bool]:
        """Trust ``vkey`` for ``origin``; whether it is new (another key is refused)."""
        verifier = parse_log_verifier(vkey)
        canonical = verifier.vkey()
        origin = verifier.name if origin is None else origin
        try:
            check_origin(origin)
        except CheckpointFormatError:
            raise LogConfigError(ErrorCode.BAD_ORIGIN, "an origin is one non-empty line") from None
        # Insert unless present, then read: processes sharing the state may race here.
        with self._transaction() as conn:
            inserted = conn.execute(
                "INSERT INTO logs (origin, vkey, added_at) VALUES (?, ?, ?) "
                "ON CONFLICT (origin) DO NOTHING RETURNING origin",
                (origin, canonical, now),
            ).fetchall()
            if inserted:
                return verifier, True
            row = conn.execute("SELECT vkey FROM logs WHERE origin = ?", (origin,)).fetchone()
            if row[0] != canonical:
                raise LogConfigError(ErrorCode.LOG_KEY_CONFLICT, "origin already has another key")
        return verifier, False

    def log_verifier(self, origin: str) -> Verifier | None:
        """The trusted key for ``origin``, or None."""
        trusted = self.trusted(origin)
        return None if trusted is None else trusted[0]

    def trusted(self, origin: str) -> tuple[Verifier, RecordedCheckpoint | None] | None:
        """The trusted key for ``origin`` and its record, or None for an unknown log: a
        request's first read (``_first``), one statement."""
        query = (
            "SELECT l.vkey, c.size, c.root, c.updated_at FROM logs l "
            "LEFT JOIN checkpoints c ON c.origin = l.origin WHERE l.origin = ?"
        )
        with self._storage():
            row = self._first(lambda conn: conn.execute(query, (origin,)).fetchone())
        if row is None:
            return None
        vkey, size, root, at = row
        return Verifier.parse(vkey), None if size is None else RecordedCheckpoint(
            size, bytes(root), at
        )

    def recorded(self, origin: str) -> RecordedCheckpoint | None:
        """The latest checkpoint cosigned for ``origin``, or None if there is none."""
        with self._storage():
            return self._first(lambda conn: self._recorded(conn, origin))

    @staticmethod
    def _recorded(conn: Connection, origin: str) -> RecordedCheckpoint | None:
        row = conn.execute(
            "SELECT size, root, updated_at FROM checkpoints WHERE origin = ?", (origin,)
        ).fetchone()
        return None if row is None else RecordedCheckpoint(row[0], bytes(row[1]), row[2])

    def logs(self) -> list[LogStatus]:
        """Every configured log with its record, by origin."""
        query = (
            "SELECT l.origin, l.vkey, c.size, c.root, c.updated_at FROM logs l "
            "LEFT JOIN checkpoints c ON c.origin = l.origin ORDER BY l.origin"
        )
        return [
            LogStatus(
                origin, vkey, None if size is None else RecordedCheckpoint(size, bytes(root), at)
            )
            for origin, vkey, size, root, at in self._conn().execute(query).fetchall()
        ]

    def compare_and_swap(
        self, origin: str, expected: RecordedCheckpoint | None, size: int, root: bytes, now: int
    ) -> int:
        """Swap the record ``expected`` for (size, root); the cosignature time."""
        # SQL both databases speak: no INSERT OR IGNORE, no two-argument max(). One
        # statement is its own transaction: the swap is one round trip to a distant database.
        params: tuple[object, ...]
        if expected is None:
            swap, params = (
                "INSERT INTO checkpoints (origin, size, root, updated_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (origin) DO NOTHING RETURNING updated_at",
                (origin, size, root, now),
            )
        else:
            swap, params = (
                "UPDATE checkpoints SET size = ?, root = ?, "
                "updated_at = CASE WHEN updated_at > ? THEN updated_at ELSE ? END "
                "WHERE origin = ? AND size = ? AND root = ? RETURNING updated_at",
                (size, root, now, now, origin, expected.size, expected.root),
            )
        with self._storage():
            rows = self._first(lambda conn: conn.execute(swap, params).fetchall())
            if len(rows) != 1:
                current = self.recorded(origin)
                raise SizeConflictError(0 if current is None else current.size)
        self._recovered()
        timestamp: int = rows[0][0]
        return timestamp

    def record_evidence(self, origin: str, reason: str, body: bytes, now: int) -> None:
        """Keep a refused, validly signed request (deduplicated, bounded, best effort)."""
        digest = hashlib.sha256(body).digest()
        try:
            with self._transaction() as conn:
                conn.execute(
                    "INSERT INTO evidence (origin, reason, received_at, body, digest) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (origin, reason, now, body, digest),
                )
                conn.execute(
                    "DELETE FROM evidence WHERE origin = ? AND id NOT IN "
                    "(SELECT id FROM evidence WHERE origin = ? ORDER BY id DESC LIMIT ?)",
                    (origin, origin, MAX_EVIDENCE_PER_LOG),
                )
        except self.errors as err:
            log.warning("witness database error while keeping evidence: %s", type(err).__name__)

    def evidence(self, origin: str) -> list[Evidence]:
        """The kept evidence for ``origin``, oldest first."""
        query = (
            "SELECT origin, reason, received_at, body FROM evidence WHERE origin = ? ORDER BY id"
        )
        rows = self._conn().execute(query, (origin,)).fetchall()
        return [Evidence(o, reason, at, bytes(body)) for o, reason, at, body in rows]


class Witness:
    """Checks add-checkpoint requests against the state and cosigns them."""

    def __init__(self, state: WitnessState, signer: Signer) -> None:
        if signer.sig_type not in COSIGNER_TYPES:
            raise ValueError("a witness cosigns with a type 0x04 or 0x06 (cosigner) key")
        self.state = state
        self.signer = signer
        self.test_hook_before_commit: Callable[[Checkpoint], None] | None = None
        """For tests only: stalls or faults a request just before its swap (None here)."""
        self.statement: Callable[[Checkpoint], None] | None = None
        """An operator's extra statement (``mapverify``): a WitnessError refuses, unrecorded."""

    def verifier(self) -> Verifier:
        """The witness's cosigner verifier key (type 0x04 or 0x06)."""
        return self.signer.verifier()

    def add_checkpoint(self, body: bytes, now: int) -> bytes:
        """The cosignature line for one add-checkpoint body at POSIX time ``now``."""
        if isinstance(now, bool) or not 0 <= now <= MAX_TIMESTAMP:
            raise ValueError("now must be a POSIX timestamp below 2^63")
        request = parse_add_checkpoint(body)
        try:
            text, _ = parse_note(request.note)
        except NoteFormatError:
            raise MalformedRequestError(message="checkpoint is not a signed note") from None
        # The origin line picks the key; the text is trusted once its signature verified.
        origin = text.split("\n", 1)[0]
        trusted = self.state.trusted(origin)
        if trusted is None:
            raise UnknownLogError()
        verifier, recorded = trusted
        try:
            note = open_note(request.note, [verifier])
        except (InvalidNoteSignatureError, UnverifiedNoteError):
            raise UntrustedCheckpointError() from None
        try:
            checkpoint = Checkpoint.from_text(note.text)
        except CheckpointFormatError:
            raise MalformedRequestError(message="note text is not a checkpoint") from None
        if request.old_size > checkpoint.size:
            raise OldSizeTooLargeError()
        recorded_size = 0 if recorded is None else recorded.size
        if request.old_size != recorded_size:
            raise SizeConflictError(recorded_size)
        # A log never cosigned is at the empty tree, whose root is SHA-256("").
        recorded_root = EMPTY_ROOT if recorded is None else recorded.root
        try:
            self._check_consistency(request, checkpoint, recorded_root)
        except (ProofError, ConflictingRootError) as err:
            self.state.record_evidence(origin, err.code, body, now)
            raise
        if self.statement is not None:
            self.statement(checkpoint)
        if self.test_hook_before_commit is not None:
            self.test_hook_before_commit(checkpoint)
        timestamp = self.state.compare_and_swap(
            origin, recorded, checkpoint.size, checkpoint.root_hash, now
        )
        return cosign(note.text, self.signer, timestamp).line().encode("utf-8")

    def cosigned_again(self, note: bytes) -> bytes | None:
        """The line last given on ``note``'s checkpoint, signed again from the record (Ed25519
        is deterministic: the same bytes) and writing nothing; None for another checkpoint."""
        text, _ = parse_note(note)
        checkpoint = Checkpoint.from_text(text)
        recorded = self.state.recorded(checkpoint.origin)
        if recorded is None or (recorded.size, recorded.root) != (
            checkpoint.size,
            checkpoint.root_hash,
        ):
            return None
        return cosign(text, self.signer, recorded.updated_at).line().encode("utf-8")

    @staticmethod
    def _check_consistency(
        request: AddCheckpointRequest, checkpoint: Checkpoint, recorded_root: bytes
    ) -> None:
        """``bad_consistency_proof``, then ``root_mismatch`` (*Spec order*)."""
        old, size, proof = request.old_size, checkpoint.size, request.proof
        if old in (0, size):
            # From the empty tree, and between equal sizes, the proof is empty
            # (tlog-witness for size 0, RFC 9162 section 2.1.4 for equal sizes).
            if proof:
                raise ProofError(ErrorCode.BAD_CONSISTENCY_PROOF, "this proof must be empty")
        else:
            verify_consistency(old, size, recorded_root, checkpoint.root_hash, proof)
        if old == size and checkpoint.root_hash != recorded_root:
            raise ConflictingRootError()
