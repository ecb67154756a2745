"""Replay: what the log derives from its own committed leaves, judged as every verifier judges.

The tool-status map and the publisher registry are functions of the log. The writer
(``log.py``) keeps both up to date as it appends; here they are made again from the
leaves, by the one validator (``client.model.rules``), at start and after a commit whose
outcome was lost. Replay never opens a transaction: the writer does, and calls in.

Rules, cited by name:

* **Registry from the leaves.** ``registry_before`` replays the publisher entries below a
  size, never the stored snapshot; at every start the two must be equal, or the start is
  refused (``registry_mismatch``): an edited snapshot could vouch for a revoked key.
* **Catch up.** ``catch_up`` folds the committed entries the map lacks below a size, each
  judged by the one validator first; ``hold``: into memory only (the next batch writes).
* **Invalid entries.** An entry that fails validation is folded as every verifier folds it
  (docs/fold-spec.md, "Entries that fail validation"), logged once, recorded in
  ``invalid_entries`` in the writer's transaction, and nothing stops; ``/healthz`` reports
  their count and the first ``INVALID_REPORTED``.
* **Root check.** Once the map is at the latest checkpoint's size, its root must be that
  checkpoint's ``deplog-map/v1`` line (``stored_root_mismatch``), but a map dropped for
  another record format and folded again leaves the old root until the next append
  (logged), and a checkpoint signed before the map has no line.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from deplog.authority.storage import store
from deplog.authority.storage.errors import IntegrityError
from deplog.authority.storage.tree import StoredHashTree
from deplog.client.errors import ErrorCode
from deplog.client.map.line import map_root_of
from deplog.client.map.sqlstore import STORE_FORMAT
from deplog.client.map.stored import StoredMap
from deplog.client.model.entries import NoticeEntry, PublisherEntry
from deplog.client.model.notice import Notice
from deplog.client.model.registry import PublisherRegistry
from deplog.client.model.rules import EntryChecker, InvalidEntry, decode_leaf, fold_item
from deplog.client.model.status import InvalidMark
from deplog.client.plumbing.dbapi import Connection
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Verifier

logger = logging.getLogger("deplog.authority")
INVALID_REPORTED = 20
"""Entries that fail validation ``/healthz`` names (it counts them all)."""
_CHUNK = 4096
"""Entries folded at a time when the map catches up."""


class Writer(Protocol):
    """The log's writer, read anew at every call (it replaces these when it reloads)."""

    conn: Connection
    tree: StoredHashTree
    map: StoredMap
    verifier: Verifier


class Replay:
    """The derived state of one writer's log, made and checked from its leaves."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer
        self._invalid_due: list[InvalidEntry] = []
        self.invalid_entries: tuple[int, tuple[InvalidEntry, ...]] = (0, ())
        """(count, first few) of the invalid entries: replaced whole, so any thread may read."""

    def registry_before(self, size: int) -> PublisherRegistry:
        """The registry the publisher entries below ``size`` make (*Registry from the leaves*)."""
        writer = self._writer
        registry = PublisherRegistry()
        checker = EntryChecker(registry, writer.verifier, lambda _: None, lambda _p, _s: False)
        for index in store.registry_entry_indexes(writer.conn, size):
            leaf = writer.tree.leaf_data(index, index + 1)[0]
            decoded = decode_leaf(leaf)
            if isinstance(decoded, PublisherEntry):
                checker.judge(index, leaf, decoded)  # an invalid one changes nothing
        return registry

    def check_registry(self, stored: PublisherRegistry) -> None:
        """Refuse a ``stored`` registry the log's entries do not make."""
        if self.registry_before(self._writer.tree.size).to_json() != stored.to_json():
            raise IntegrityError(
                ErrorCode.REGISTRY_MISMATCH,
                "the stored publisher registry is not the one the log's registry entries make",
            )

    def valid_notice_at(
        self, index: int, batch: Mapping[tuple[str, int], tuple[int, bytes]] | None = None
    ) -> Notice | None:
        """The valid notice at ``index`` (a withdraw's possible target: its (publisher,
        sequence) row names this index), or None; ``batch``: the rows of the batch being
        admitted, not written yet (a withdraw may name a notice of its own batch)."""
        writer = self._writer
        if not 0 <= index < writer.tree.size:
            return None
        decoded = decode_leaf(writer.tree.leaf_data(index, index + 1)[0])
        if not isinstance(decoded, NoticeEntry):
            return None
        notice = decoded.envelope.notice
        key = (notice.publisher, notice.sequence)
        row = batch.get(key) if batch is not None else None
        if row is None:
            row = store.notices_by_sequence(writer.conn, [key]).get(key)
        return notice if row is not None and row[0] == index else None

    def catch_up(self, size: int, *, hold: bool = False, repair: bool = False) -> None:
        """Fold the committed entries the map lacks below ``size`` (*Catch up*)."""
        writer = self._writer
        position = writer.map.size() or 0
        if position >= size:
            return
        at = position  # the entry being judged: a sequence is used if a notice before it has it
        logged: dict[tuple[str, int], tuple[int, bytes]] = {}

        def used_before(publisher: str, sequence: int) -> bool:
            return logged.get((publisher, sequence), (at,))[0] < at

        checker = EntryChecker(
            self.registry_before(position), writer.verifier, self.valid_notice_at, used_before
        )
        while position < size:
            end = min(position + _CHUNK, size)
            leaves = writer.tree.leaf_data(position, end)
            decoded = [decode_leaf(leaf) for leaf in leaves]
            notices = [d.envelope.notice for d in decoded if isinstance(d, NoticeEntry)]
            logged = store.notices_by_sequence(
                writer.conn, [(n.publisher, n.sequence) for n in notices]
            )
            items: list[tuple[int, Notice | InvalidMark]] = []
            for at, (leaf, entry) in enumerate(zip(leaves, decoded, strict=True), position):
                judged = checker.judge(at, leaf, entry)
                if isinstance(judged, InvalidEntry):
                    self._found_invalid(judged)
                if (item := fold_item(judged)) is not None:
                    items.append((at, item))
            writer.map.advance_notices(position, end, items, hold=hold, repair=repair)
            position = end
        if not hold:
            self.write_invalid()

    def _found_invalid(self, entry: InvalidEntry) -> None:
        """An entry of this log that fails validation: logged once, kept for its table."""
        logger.warning(
            "log entry %d fails validation (%s%s); it is folded as every verifier folds it%s",
            entry.index,
            entry.code,
            f", {entry.cause}" if entry.cause else "",
            f": {entry.tool_id} is unknown" if entry.tool_id else "",
        )
        self._invalid_due.append(entry)

    def write_invalid(self) -> None:
        """Record the invalid entries found, in the writer's open write transaction."""
        if self._invalid_due:
            rows = [
                (e.index, str(e.code), e.cause and str(e.cause), e.tool_id)
                for e in self._invalid_due
            ]
            store.insert_invalid_entries(self._writer.conn, rows)
            self._invalid_due = []
            self.read_invalid()

    def read_invalid(self) -> None:
        """Read ``invalid_entries`` as recorded below the log's size."""
        writer = self._writer
        count, rows = store.invalid_entries(writer.conn, writer.tree.size, INVALID_REPORTED)
        found = tuple(
            InvalidEntry(i, ErrorCode(code), None if cause is None else ErrorCode(cause), tool)
            for i, code, cause, tool in rows
        )
        self.invalid_entries = (count, found)

    def check_map_root(
        self, published: store.StoredCheckpoint | None, root: bytes | None, rebuilt: bool
    ) -> None:
        """*Root check* of the map's ``root`` (``rebuilt``: folded from nothing at this start)."""
        writer = self._writer
        if published is None or published.size != writer.tree.size:
            return
        latest, _ = open_checkpoint(published.note, writer.verifier)
        committed = map_root_of(latest.extensions)
        if committed is None or committed == root:
            return
        if rebuilt:
            logger.warning(
                "the tool-status map was rebuilt in record format %d; the checkpoint "
                "of size %d keeps the old format's root until the next append",
                STORE_FORMAT,
                writer.tree.size,
            )
            return
        raise IntegrityError(
            ErrorCode.STORED_ROOT_MISMATCH, "the map root differs from the signed one"
        )
