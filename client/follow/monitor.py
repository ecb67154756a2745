"""The publisher's own monitor: what the log says in my name that I did not say.

A leaked key or a misbehaving authority shows in the log, which a follower verifies
entry by entry. The monitor watches those verified entries (``TrustedState.watch``) for
one namespace and reports each as a ``MonitorEvent``, whose ``to_json`` is one line of
``deplog monitor`` (docs/publishers.md):

1. ``notice``: a notice about the namespace signed by a key id not in ``key_ids``
   (``unknown_key``) or, with a journal, not in it (``not_in_journal``).
2. ``registry``: every authority statement touching the namespace or its owner as of
   that entry.
3. ``invalid``: an entry that fails validation and names a tool of the namespace, or no
   tool at all.

Events come from committed advances only. The journal is the ``*.envelope.json`` files
``deplog publish --out`` writes, matched by the SHA-256 of their canonical bytes, and read
again before an envelope is called missing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.model.entries import Entry, NoticeEntry, PublisherEntry
from deplog.client.model.notice import MAX_ENVELOPE_BYTES, Envelope, parse_tool_id
from deplog.client.model.registry import PublisherRegistry
from deplog.client.model.rules import InvalidEntry

JOURNAL_SUFFIX: Final = ".envelope.json"


class JournalError(DeplogError):
    """A journal directory that cannot be read, or a file in it that is no envelope."""

    code = ErrorCode.BAD_JOURNAL

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message=message)
        self.path = path


def parse_key_id(text: str) -> bytes:
    """A key id as 8 hex digits (signed-note key hash), as ``MonitorEvent`` prints it."""
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = b""
    if len(raw) != 4 or len(text) != 8:
        raise ValueError("a key id is 8 hex digits")
    return raw


def _digest(canonical_bytes: bytes) -> str:
    return hashlib.sha256(canonical_bytes).hexdigest()


class Journal:
    """The envelopes a publisher published, by the SHA-256 of their canonical bytes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.digests: set[str] = set()
        self._read: set[str] = set()
        self.reload()

    def reload(self) -> None:
        """Read the envelope files not read yet (files are only ever added)."""
        if not self.directory.is_dir():
            raise JournalError("the journal is not a directory", self.directory)
        try:
            paths = sorted(self.directory.glob("*" + JOURNAL_SUFFIX))
        except OSError:
            raise JournalError("the journal cannot be read", self.directory) from None
        for path in paths:
            if path.name in self._read:
                continue
            try:
                with open(path, "rb") as f:
                    body = f.read(MAX_ENVELOPE_BYTES + 1)
                envelope = Envelope.parse(body)
            except OSError:
                raise JournalError("a journal file cannot be read", path) from None
            except DeplogError:
                raise JournalError("a journal file is not a signed envelope", path) from None
            self.digests.add(_digest(envelope.canonical_bytes()))
            self._read.add(path.name)

    def holds(self, envelope: Envelope) -> bool:
        """Whether ``envelope`` is journaled, reading new files before saying no."""
        digest = _digest(envelope.canonical_bytes())
        if digest not in self.digests:
            self.reload()
        return digest in self.digests


@dataclass(frozen=True)
class MonitorEvent:
    """One thing the log says about the namespace that its publisher should know."""

    event: str
    index: int
    fields: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event, "index": self.index, **self.fields}


class Monitor:
    """Classifies verified entries for one namespace (rules 1 and 2); an ``EntryWatch``."""

    def __init__(
        self, namespace: str, key_ids: Iterable[bytes], journal: Journal | None = None
    ) -> None:
        self.namespace = namespace
        self.key_ids = frozenset(key_ids)
        self.journal = journal

    def __call__(
        self, index: int, entry: Entry, registry: PublisherRegistry
    ) -> MonitorEvent | None:
        if isinstance(entry, NoticeEntry):
            return self._notice(index, entry.envelope)
        if isinstance(entry, PublisherEntry):
            return self._statement(index, entry, registry)
        return None

    def invalid(self, entry: InvalidEntry) -> MonitorEvent | None:
        """Rule 3: an entry that fails validation, if it may concern the namespace."""
        if entry.tool_id is not None and parse_tool_id(entry.tool_id)[0] != self.namespace:
            return None
        fields = entry.to_json()
        del fields["index"]
        return MonitorEvent("invalid", entry.index, fields)

    def _notice(self, index: int, envelope: Envelope) -> MonitorEvent | None:
        notice = envelope.notice
        if notice.namespace != self.namespace:
            return None
        reasons = []
        if envelope.key_id not in self.key_ids:
            reasons.append("unknown_key")
        if self.journal is not None and not self.journal.holds(envelope):
            reasons.append("not_in_journal")
        if not reasons:
            return None
        return MonitorEvent(
            "notice",
            index,
            {
                "tool_id": notice.tool_id,
                "action": notice.action,
                "publisher": notice.publisher,
                "sequence": notice.sequence,
                "key_id": envelope.key_id.hex(),
                "envelope_sha256": _digest(envelope.canonical_bytes()),
                "reasons": reasons,
            },
        )

    def _statement(
        self, index: int, entry: PublisherEntry, registry: PublisherRegistry
    ) -> MonitorEvent | None:
        statement = entry.statement
        owner = registry.namespace_owner(self.namespace)
        if self.namespace not in statement.namespaces and statement.publisher != owner:
            return None
        return MonitorEvent(
            "registry",
            index,
            {
                "action": statement.action,
                "publisher": statement.publisher,
                "namespaces": list(statement.namespaces),
                "key_ids": [bytes(v.key_id).hex() for v in statement.verifiers()],
            },
        )
