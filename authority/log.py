"""The log: admission of entries, durable appends and signed checkpoints.

``Log`` is a process's only writer, confined to the sequencer's thread. On a database many
processes share (``Database.shared``), any number of ``Log`` objects append to one log in
the order the database decides (``Database.begin_write``).

Rules, cited by name:

* **One validator.** An entry is admitted only if ``client.model.rules`` accepts its exact
  leaf bytes at its place in the log (decoding, signature, authorization, sequence number,
  withdraw target); a refused entry changes nothing, so no follower, auditor or witness
  finds an admitted entry invalid.
* **Idempotent.** An identical resubmission is answered with the logged entry, never
  logged twice.
* **One root per size.** A batch signs its checkpoint in the transaction that appends its
  leaves, in the log's order, where its size is new: it is inserted with them (a size that
  has one fails the batch) and commits with them or not at all. Any other checkpoint is
  signed after the commit, over committed leaves only, inserted unless its size has one,
  and read back: the stored root is the only one served (``stored_root_mismatch``). A
  checkpoint is persisted before anyone sees it.
* **Registry.** The registry snapshot is saved in the transaction of the publisher entry
  that changed it, and checked against the leaves at every start (``replay.py``:
  *Registry from the leaves*).
* **Order.** Every write starts in the log's order and records the new size
  (``Database.set_head``); in-memory state (tree edge, registry, map, latest checkpoint)
  not at the committed size is reloaded under the lock before anything is checked. A
  failed transaction leaves it stale: the next write reconnects if needed and reloads.
  Reads that must agree take one snapshot (``_snapshot``).
* **Map.** The tool-status map is folded in the transaction of the entries it folds, so
  every checkpoint carries exactly one ``deplog-map/v1`` line, the root at its own size; a
  start folds what the map lacks and checks its root (``replay.py``: *Catch up*, *Root
  check*). Where the writer holds the map's rows back (``Database.holds_map_rows``) they
  are written later, within the ``MAP_*`` bounds (docs/architecture.md, "Rows held back,
  and written later"); every ``_reload`` forgets the writer's cache.
* **Invalid entries.** An entry of the log that fails validation is folded as every
  verifier folds it, recorded and logged, and nothing stops (``replay.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from deplog.authority import collectors
from deplog.authority.replay import Replay
from deplog.authority.storage import store
from deplog.authority.storage.backends import open_database
from deplog.authority.storage.database import Database
from deplog.authority.storage.errors import IntegrityError, StorageError
from deplog.authority.storage.tree import StoredHashTree, TreeCorruptError
from deplog.client.errors import CLIError, DeplogError, ErrorCode
from deplog.client.map.cache import MapCache
from deplog.client.map.errors import MapStorageError
from deplog.client.map.line import map_line
from deplog.client.map.stored import StoredMap
from deplog.client.model.entries import (
    MAX_ENTRY_BYTES,
    EntryFormatError,
    NoticeEntry,
    PublisherStatement,
    encode_entry,
    sign_publisher_statement,
)
from deplog.client.model.notice import Envelope, Notice
from deplog.client.model.registry import PublisherRegistry
from deplog.client.model.rules import EntryChecker, InvalidEntry, RuleViolation, decode_leaf
from deplog.client.plumbing.dbapi import Connection, Query
from deplog.client.plumbing.storage_faults import CORRUPT, StorageFault
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from deplog.client.tlog.note import Signer
from deplog.client.tlog.receipt import format_receipt
from deplog.client.tlog.timestamps import now_timestamp

logger = logging.getLogger("deplog.authority")
MAP_LAYER_ENTRIES = 4096
"""Log entries the map folds in memory before a batch writes its rows: also the most a
start folds again after a crash."""
MAP_LAYER_GROUPS = 4096
"""Changed map groups held in memory (measured: 2.5 MiB for 3,316 groups and 4,000 records)."""
MAP_LAYER_RECORD_BYTES = 16 << 20
"""Bytes of changed tool records held in memory."""
MAP_SLICE_GROUPS = 128
"""The fewest groups a slice writes once the held rows pass three quarters of a bound."""
MAP_SLICE_RECORD_BYTES = 256 << 10
"""The fewest record bytes a slice writes."""


@dataclass(frozen=True)
class Admitted:
    """An entry that is in the log at ``index``; ``created`` is false for a resubmission."""

    index: int
    created: bool


@dataclass(frozen=True)
class Sequenced:
    """One submission's index and inclusion proof into ``checkpoint``, or its refusal."""

    index: int | None
    created: bool
    proof: tuple[bytes, ...]
    checkpoint: store.StoredCheckpoint | None
    error: DeplogError | None

    def receipt(self, cosigned_note: bytes) -> bytes:
        """The C2SP tlog-proof receipt, carrying the checkpoint as published."""
        assert self.index is not None and self.error is None
        return format_receipt(self.index, self.proof, cosigned_note)


@dataclass(frozen=True)
class _Prepared:
    """An envelope checked before the write lock (``malformed``: refused whatever the registry)."""

    leaf: bytes
    digest: bytes
    refused: DeplogError | None
    malformed: bool
    entry: NoticeEntry | None = None


def _notice_digest(leaf: bytes) -> bytes:
    return hashlib.sha256(leaf).digest()


class Log:
    """The authority's log: the only code that writes to the database."""

    def __init__(
        self,
        db: Database | Path | str,
        signer: Signer,
        origin: str,
        *,
        max_bytes: int | None = None,
    ) -> None:
        """Open and check the log in ``db``; ``max_bytes`` is ``Database.limit_size``'s quota."""
        if signer.name != origin:
            raise ValueError("the log key's name must be the log origin")
        self.db = open_database(db)
        self.path = self.db.describe()
        self.signer = signer
        self.verifier = signer.verifier()
        self.origin = origin
        self._stale = False
        self._map_at: tuple[int, bytes] | None = None
        self._registry_size = -1
        self.replay = Replay(self)
        self._map_cache = (
            MapCache(
                layer_entries=MAP_LAYER_ENTRIES,
                layer_groups=MAP_LAYER_GROUPS,
                layer_record_bytes=MAP_LAYER_RECORD_BYTES,
                slice_groups=MAP_SLICE_GROUPS,
                slice_record_bytes=MAP_SLICE_RECORD_BYTES,
            )
            if self.db.holds_map_rows
            else MapCache()
        )
        with self.db.opening(self._close_quietly):
            self._open(max_bytes)

    def _open(self, max_bytes: int | None) -> None:
        self.conn = self.db.connect_writer()
        try:
            self.db.prepare(self.conn)
            if max_bytes is not None:
                self.db.limit_size(self.conn, max_bytes)
            with self._snapshot():
                self._reload()
                self.published = self._check_stored_checkpoint()
                self.replay.check_registry(self.registry)
            self._bring_up_map()
            self.replay.read_invalid()
            if self.published is None or self.published.size < self.tree.size:
                self.published = self._sign_checkpoint()
        except CLIError:  # a schema that is not this software's (``authority migrate``)
            self._close_quietly()
            raise
        except TreeCorruptError:
            self._close_quietly()
            raise StorageFault(CORRUPT, self.path, "stored subtree hashes are missing") from None
        except IntegrityError as err:
            self._close_quietly()
            raise StorageFault(CORRUPT, self.path, f"{err.code}: {err}") from None
        except StorageError as err:
            # A write at open failed: opening_database classifies the database's own error.
            if isinstance(err.__context__, self.db.errors):
                raise err.__context__ from None
            raise

    @property
    def invalid_entries(self) -> tuple[int, tuple[InvalidEntry, ...]]:
        """How many entries fail validation, and the first few; any thread may read it."""
        return self.replay.invalid_entries

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """The map's rows held in memory, not yet written."""
        collectors.gauge(
            registry,
            "deplog_map_unwritten_entries",
            "Log entries folded into the tool-status map whose rows are held in memory, "
            "not yet written (SQLite).",
            lambda: float(self.map.unwritten),
        )

    def close(self) -> None:
        """Write the map's held rows (if that fails, the next start folds them), then close."""
        if self.map.unwritten:
            try:
                self.flush_map()
            except StorageError:
                logger.warning(
                    "the tool-status map's last %d entries were not written; the next "
                    "start folds them again",
                    self.map.unwritten,
                )
        self.conn.close()

    def warm_map(self) -> int:
        """Fill the map cache with the shallowest groups (a server's start); the groups read."""
        try:
            with self._snapshot():
                return self.map.warm()
        except MapStorageError:  # a group that does not decode: altered storage, as at open
            self._close_quietly()
            raise StorageFault(
                CORRUPT, self.path, "storage_corrupt: a stored map group does not decode"
            ) from None
        except self.db.errors:
            self._rollback()  # a cold cache is still a correct one; appends will report
            return 0

    def flush_map(self) -> None:
        """Write all the map's held rows in a transaction (StorageError: they stay held)."""
        if self.map.unwritten:
            with self._write(MapStorageError):
                self.map.flush()

    def write_map_slice(self) -> bool:
        """Write the next slice of the held rows (an idle sequencer); True while rows remain."""
        if self.map.unwritten:
            with self._write(MapStorageError):
                self.map.write_slice()
        return self.map.unwritten > 0

    def _close_quietly(self) -> None:
        """Close the connection if a failed open got as far as making one."""
        conn: Connection | None = getattr(self, "conn", None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Reads that must agree: one snapshot where other processes write meanwhile."""
        if not self.db.shared or self.conn.in_transaction:
            yield
            return
        self.db.begin_read(self.conn)
        try:
            yield
        finally:
            if not self.db.broken(self.conn) and self.conn.in_transaction:
                self.conn.execute("COMMIT")

    def _reload(self) -> None:
        """Rebuild the in-memory state from committed data (the registry if it moved)."""
        self.tree = StoredHashTree(self.conn)
        kept: StoredMap | None = getattr(self, "map", None)
        if kept is None or kept.conn is not self.conn:
            self.map = StoredMap(self.conn, self._map_cache)
        self.map.forget()
        snapshot = store.registry_snapshot(self.conn)
        size = -1 if snapshot is None else snapshot[0]
        if size != self._registry_size or not hasattr(self, "registry"):
            self.registry: PublisherRegistry = (
                PublisherRegistry()
                if snapshot is None
                else PublisherRegistry.from_json(json.loads(snapshot[1]))
            )
            self._registry_size = size
        folded = self.map.size()
        behind = folded is not None and folded < self.tree.size
        if behind and self._map_cache.holds and hasattr(self, "published"):
            # After a batch whose commit reported a failure but took effect: fold its
            # entries again in memory, dropping items a layer or slice write already kept.
            self.replay.catch_up(self.tree.size, hold=True, repair=True)
            folded = self.map.size()
        self._map_at = None if folded is None else (folded, self.map.root())
        if hasattr(self, "published"):
            self.published = store.latest_checkpoint(self.conn)
        self._stale = False

    def _check_stored_checkpoint(self) -> store.StoredCheckpoint | None:
        """Refuse to run if storage no longer matches the latest signed checkpoint."""
        latest = store.latest_checkpoint(self.conn)
        if latest is not None:
            self._check_checkpoint(latest)
        start = 0 if latest is None else max(0, latest.size - 1)
        bad = self.tree.verify_leaves(start, self.tree.size)
        if bad is not None:
            raise IntegrityError(ErrorCode.STORAGE_CORRUPT, f"leaf {bad} does not match its hash")
        return latest

    def _check_checkpoint(self, latest: store.StoredCheckpoint) -> None:
        try:
            checkpoint, _ = open_checkpoint(latest.note, self.verifier)
        except DeplogError:
            raise IntegrityError(
                ErrorCode.CHECKPOINT_INVALID,
                "latest stored checkpoint is not signed by this log key",
            ) from None
        if checkpoint.size != latest.size or checkpoint.root_hash != latest.root:
            raise IntegrityError(
                ErrorCode.CHECKPOINT_INVALID, "stored checkpoint row disagrees with note"
            )
        if self.tree.size < latest.size:
            raise IntegrityError(
                ErrorCode.TREE_TRUNCATED,
                f"tree has {self.tree.size} leaves, checkpoint {latest.size}",
            )
        try:
            root = self.tree.root_at(latest.size)
        except TreeCorruptError:
            raise IntegrityError(
                ErrorCode.STORAGE_CORRUPT, "stored subtree hashes are missing"
            ) from None
        if root != latest.root:
            raise IntegrityError(
                ErrorCode.STORED_ROOT_MISMATCH, f"tree root at size {latest.size} differs"
            )

    def _begin(self, ordered: bool = True, reads: Sequence[Query] = ()) -> list[list[Any]]:
        """Start a write transaction, ``ordered`` in the log's order (with ``reads``: their
        rows); reload stale state."""
        try:
            if not ordered:
                assert not reads
                if self._stale:
                    self._refresh()
                self.db.begin_unordered(self.conn)
                return []
            if self._stale and self.db.broken(self.conn):
                self._close_quietly()
                self.conn = self.db.connect_writer()
            head, rows = self.db.begin_write(self.conn, reads)
            if self._stale or (head is not None and head != self.tree.size):
                self._reload()
            return rows
        except self.db.errors as err:
            self._rollback()
            raise StorageError.of(err) from None

    def _refresh(self) -> None:
        """Reconnect if the connection was lost, and reload the state (after a failure)."""
        if self.db.broken(self.conn):
            self._close_quietly()
            self.conn = self.db.connect_writer()
        with self._snapshot():
            self._reload()

    def _commit(self) -> None:
        try:
            self.conn.execute("COMMIT")
        except self.db.errors as err:
            self._rollback()
            raise StorageError.of(err) from None
        self.map.committed()

    @contextlib.contextmanager
    def _write(
        self, *faults: type[Exception], ordered: bool = True, reads: Sequence[Query] = ()
    ) -> Iterator[list[list[Any]]]:
        """A write transaction, committed on success; a database error (or one of
        ``faults``) rolls it back as StorageError, anything else rolls it back and goes on.
        It yields the rows of ``reads``, run as it begins (``Database.begin_write``)."""
        rows = self._begin(ordered, reads)
        try:
            yield rows
        except (*self.db.errors, *faults) as err:
            self._rollback()
            raise StorageError.of(err) from None
        except BaseException:  # no transaction is left open for the next batch
            self._rollback()
            raise
        self._commit()

    def _rollback(self) -> None:
        """Undo the open transaction and reload the state it had advanced (stale if lost)."""
        self._stale = True
        with contextlib.suppress(*self.db.errors):
            if not self.db.broken(self.conn) and self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            if not self.db.broken(self.conn):
                with self._snapshot():
                    self._reload()

    def _end_write(self) -> None:
        """Record the new size and the map root at it, for the checkpoint signed after."""
        self.db.set_head(self.conn, self.tree.size)
        self.replay.write_invalid()
        self._map_at = (self.tree.size, self.map.root())

    def admit_notices(self, envelopes: Sequence[Envelope]) -> list[Admitted | DeplogError]:
        """Append every admissible envelope in one transaction: each is checked against the
        state including the batch's earlier ones, and a refused one is skipped; a storage
        failure (StorageError) appends none. The expensive checks run before the lock, and
        again under it only if another writer changed the registry meanwhile."""
        prepared = [self._prepare(envelope) for envelope in envelopes]
        seen = self._registry_size
        results: list[Admitted | DeplogError] = []
        created: list[tuple[int, bytes, Notice]] = []
        wanted = [e.notice for e, p in zip(envelopes, prepared, strict=True) if not p.malformed]
        lookups = store.notice_lookups([(n.publisher, n.sequence) for n in wanted])
        with self._write(TreeCorruptError, MapStorageError, reads=lookups) as found:
            recheck = self._registry_size != seen
            start = self.tree.size
            logged = store.notices_found(found)
            with self.tree.deferred():
                for envelope, ready in zip(envelopes, prepared, strict=True):
                    try:
                        admitted = self._admit_notice(envelope, ready, recheck, logged)
                    except DeplogError as err:
                        results.append(err)
                        continue
                    results.append(admitted)
                    if admitted.created:
                        assert ready.entry is not None
                        created.append((admitted.index, ready.digest, ready.entry.envelope.notice))
            rows = [(n.publisher, n.sequence, i, digest, n.tool_id) for i, digest, n in created]
            store.insert_notices(self.conn, rows)
            self._fold_map(start, [notice for _, _, notice in created])
            self._end_write()
            signed = self._sign_new_size() if created else None
        if signed is not None:
            self.published = signed
        return results

    def _sign_new_size(self) -> store.StoredCheckpoint:
        """Sign the size this write appended, in its transaction (*One root per size*)."""
        assert self._map_at is not None and self._map_at[0] == self.tree.size
        size, root = self.tree.size, self.tree.current_root()
        extensions = (map_line(self._map_at[1]),)
        note = sign_checkpoint(Checkpoint(self.origin, size, root, extensions), self.signer)
        store.insert_checkpoint(self.conn, size, root, note, now_timestamp())
        return store.StoredCheckpoint(size, root, note)

    def _prepare(self, envelope: Envelope) -> _Prepared:
        """Outside the lock: the leaf, its digest, its decoding and authorization."""
        leaf = encode_entry(NoticeEntry(envelope))
        if len(leaf) > MAX_ENTRY_BYTES:
            too_large = "the entry would not fit a tlog-tiles bundle"
            return _Prepared(leaf, b"", EntryFormatError(ErrorCode.LEAF_TOO_LARGE, too_large), True)
        decoded = decode_leaf(leaf)  # rule 1 of the one validator, on the bytes appended
        if isinstance(decoded, DeplogError):
            return _Prepared(leaf, b"", decoded, True)
        assert isinstance(decoded, NoticeEntry)
        refused: DeplogError | None = None
        try:
            self.registry.authorize(decoded.envelope)
        except DeplogError as err:
            refused = err
        return _Prepared(leaf, _notice_digest(leaf), refused, False, decoded)

    def _admit_notice(
        self,
        envelope: Envelope,
        ready: _Prepared,
        recheck: bool,
        logged: dict[tuple[str, int], tuple[int, bytes]],
    ) -> Admitted:
        """Append the leaf once the one validator accepts it; ``logged`` gains it."""
        notice = envelope.notice
        if ready.malformed:
            assert ready.refused is not None
            raise ready.refused
        existing = logged.get((notice.publisher, notice.sequence))
        if existing is not None and existing[1] == ready.digest:
            return Admitted(existing[0], created=False)
        if ready.refused is not None and not recheck:
            raise ready.refused  # the registry it was refused against is still the log's
        assert ready.entry is not None
        index = self.tree.size
        checker = EntryChecker(
            self.registry,
            self.verifier,
            lambda target: self.replay.valid_notice_at(target, logged),
            lambda publisher, sequence: (publisher, sequence) in logged,
        )
        try:
            checker.check_decoded(index, ready.entry)
        except RuleViolation as violation:
            assert violation.error is not None
            raise violation.error from None
        self.tree.append_entry(ready.leaf)
        logged[(notice.publisher, notice.sequence)] = (index, ready.digest)
        return Admitted(index, created=True)

    def _fold_map(self, start: int, notices: Sequence[Notice]) -> None:
        """Fold the entries just appended (``notices``: all, or none) in this transaction."""
        end = self.tree.size
        if start == end:
            return
        if notices and len(notices) != end - start:
            raise ValueError("a batch's notices are all of its entries")
        self.replay.catch_up(start, repair=True)  # none to fold but after a failed commit
        self.map.advance_notices(start, end, enumerate(notices, start))

    def _bring_up_map(self) -> None:
        """Fold whatever the map lacks in one transaction, then check its root (*Map*)."""
        folded = None if self._map_at is None else self._map_at[0]  # read with the tree
        if folded is None or folded < self.tree.size:
            with self._write():
                folded = self.map.size()
                position = folded or 0
                missing = self.tree.size - position
                if missing and folded is None:
                    logger.info("building the tool-status map over %d log entries", missing)
                elif missing:
                    logger.info(
                        "folding the tool-status map's last %d log entries (not written "
                        "before the last stop)",
                        missing,
                    )
                if folded is None:
                    self.map.advance_notices(0, 0, [])  # the map's row, at size 0
                self.replay.catch_up(self.tree.size, repair=folded is not None)
                self.map.flush()
                self._end_write()
        elif folded > self.tree.size:
            raise IntegrityError(ErrorCode.STORAGE_CORRUPT, "the map is ahead of the log")
        root = None if self._map_at is None else self._map_at[1]
        self.replay.check_map_root(self.published, root, rebuilt=folded is None)

    def append_publisher(self, statement: PublisherStatement) -> int:
        """Sign a publisher statement with the log key and append it; returns its index."""
        entry = sign_publisher_statement(statement, self.signer)
        with self._write(MapStorageError, TreeCorruptError):
            registry = PublisherRegistry.from_json(self.registry.to_json())
            index = self.tree.size
            registry.apply(index, entry, self.verifier)
            self.tree.append_entry(encode_entry(entry))
            self._fold_map(index, [])
            store.save_registry_snapshot(
                self.conn, self.tree.size, json.dumps(registry.to_json(), sort_keys=True)
            )
            self._end_write()
            signed = self._sign_new_size()
        self.published = signed
        self.registry = registry
        self._registry_size = self.tree.size
        return index

    def publish(self) -> store.StoredCheckpoint:
        """Sign and persist a checkpoint of every committed leaf, unless one exists."""
        if self._stale:
            try:
                self._refresh()
            except self.db.errors:
                raise StorageError() from None
        if self.published is not None and self.published.size == self.tree.size:
            return self.published
        self.published = self._sign_checkpoint()
        return self.published

    def _sign_checkpoint(self) -> store.StoredCheckpoint:
        """Sign the tree this writer committed last (*One root per size*)."""
        size, root = self.tree.size, self.tree.current_root()
        try:
            existing = store.checkpoint_at(self.conn, size)
            if existing is None and (self._map_at is None or self._map_at[0] != size):
                # Leaves appended by other means than this class's writes: read the map.
                with self._snapshot():
                    folded = self.map.size()
                    self._map_at = None if folded is None else (folded, self.map.root())
        except self.db.errors:
            self._rollback()
            raise StorageError() from None
        if existing is None:
            if self._map_at is None or self._map_at[0] != size:
                raise IntegrityError(ErrorCode.STORAGE_CORRUPT, "the map is not at the log's size")
            extensions = (map_line(self._map_at[1]),)
            note = sign_checkpoint(Checkpoint(self.origin, size, root, extensions), self.signer)
            with self._write(ordered=False):
                existing = store.insert_checkpoint_once(
                    self.conn, size, root, note, now_timestamp()
                )
        if existing.root != root:
            raise IntegrityError(
                ErrorCode.STORED_ROOT_MISMATCH, f"a different root is signed for {size}"
            )
        return existing

    def save_published(self, checkpoint: store.StoredCheckpoint, note: bytes) -> None:
        """Remember a checkpoint published under a witness quorum (never a smaller one)."""
        with self._write(ordered=False):
            store.save_published_note(self.conn, checkpoint.size, note)

    def last_published(self) -> tuple[store.StoredCheckpoint, bytes] | None:
        """The checkpoint last published under a witness quorum, and its cosigned note."""
        saved = store.published_note(self.conn)
        if saved is None:
            return None
        checkpoint = store.checkpoint_at(self.conn, saved[0])
        return None if checkpoint is None else (checkpoint, saved[1])

    def sequence(self, envelopes: Sequence[Envelope]) -> list[Sequenced]:
        """Admit a batch, publish a checkpoint covering it and prove every entry in it."""
        admitted = self.admit_notices(envelopes)
        checkpoint = self.publish()
        out: list[Sequenced] = []
        try:
            with self.tree.memoized():
                for result in admitted:
                    if isinstance(result, DeplogError):
                        out.append(Sequenced(None, False, (), None, result))
                    else:
                        proof = tuple(self.tree.inclusion_proof(result.index, checkpoint.size))
                        out.append(Sequenced(result.index, result.created, proof, checkpoint, None))
        except (*self.db.errors, TreeCorruptError):  # type: ignore[misc]
            self._rollback()
            raise StorageError() from None
        return out
