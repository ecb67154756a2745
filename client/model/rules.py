"""The one validator: the authority's admission rules, replayed in log order by every verifier.

The authority admits an entry only if ``EntryChecker`` accepts its exact leaf at its
point of the log, and every verifier (follower, auditor, map-verifying witness, the
authority folding its map again) runs the same checker, so admission and verification
cannot disagree. Rules:

1. The leaf decodes as a canonical entry (``bad_leaf``, the decoder's code as cause).
2. A publisher entry carries the log key's signature and is a valid registry
   transition (``bad_publisher_entry``).
3. A notice is signed by an active key of its active publisher, which owns the tool's
   namespace (``unauthorized_notice``).
4. Its sequence number is one its publisher has not used in a valid notice
   (``replayed_notice``, cause ``sequence_reused``): unique, not ordered, so a refused
   notice may be retried after later ones, and supersession is log order alone.
5. A withdraw names an earlier valid deprecate or revoke of the same publisher about
   the same tool (``invalid_withdraw``).
6. ``check`` raises ``RuleViolation``; ``judge``, the verifiers' side, returns an
   ``InvalidEntry``, which never stops verification: it changes no registry, uses no
   sequence number, and makes the tool it names (``readable_tool_id``) ``unknown``
   (docs/fold-spec.md, "Entries that fail validation").
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from deplog.client.errors import DeplogError, ErrorCode, VerificationError
from deplog.client.model import canonical
from deplog.client.model.entries import Entry, NoticeEntry, PublisherEntry, decode_entry
from deplog.client.model.notice import Notice, parse_tool_id
from deplog.client.model.registry import ConflictError, NoticeRef, PublisherRegistry
from deplog.client.model.status import InvalidMark
from deplog.client.tlog.note import Verifier

TargetLookup = Callable[[int], NoticeRef | None]
"""Finds the notice at an earlier log index (None: no notice there)."""

SequenceLookup = Callable[[str, int], bool]
"""Whether a notice at an earlier log index has this publisher and sequence number."""


class RuleViolation(VerificationError):
    """A logged entry that the authority should never have admitted."""

    codes = frozenset(
        {
            ErrorCode.BAD_LEAF,
            ErrorCode.BAD_PUBLISHER_ENTRY,
            ErrorCode.UNAUTHORIZED_NOTICE,
            ErrorCode.REPLAYED_NOTICE,
            ErrorCode.INVALID_WITHDRAW,
        }
    )

    def __init__(
        self,
        code: ErrorCode,
        index: int,
        cause: ErrorCode | None = None,
        *,
        error: DeplogError | None = None,
        tool_id: str | None = None,
    ) -> None:
        super().__init__(code, f"entry {index}: {code}" + (f" ({cause})" if cause else ""))
        self.index = index
        self.cause = cause
        self.error = error  # what the authority answers a submission with
        self.tool_id = tool_id


@dataclass(frozen=True)
class InvalidEntry:
    """An entry of a signed tree that fails validation: index, rule, cause, and its tool."""

    index: int
    code: ErrorCode
    cause: ErrorCode | None
    tool_id: str | None

    @classmethod
    def of(cls, violation: RuleViolation) -> InvalidEntry:
        return cls(violation.index, violation.code, violation.cause, violation.tool_id)

    @property
    def mark(self) -> InvalidMark | None:
        """What the fold and the map take of it: the mark on its tool, if it names one."""
        return None if self.tool_id is None else InvalidMark(self.tool_id, self.index)

    def to_json(self) -> dict[str, Any]:
        """``{"index", "code", "cause", "tool_id"}``: evidence a verifier reports."""
        return {
            "index": self.index,
            "code": str(self.code),
            "cause": None if self.cause is None else str(self.cause),
            "tool_id": self.tool_id,
        }


Judged = Entry | InvalidEntry
"""What the validator makes of one entry of a signed tree."""


def fold_item(judged: Judged) -> Notice | InvalidMark | None:
    """What the fold and the map take of a judged entry: a notice, a mark, or None."""
    if isinstance(judged, NoticeEntry):
        return judged.envelope.notice
    if isinstance(judged, InvalidEntry):
        return judged.mark
    return None


def readable_tool_id(leaf: bytes) -> str | None:
    """The tool id an entry that fails validation names (rule 6): a strict JSON notice's
    ``tool_id`` of the tool id grammar, canonical or not; else None."""
    try:
        value = canonical.loads(bytes(leaf))
    except DeplogError:
        return None
    if not isinstance(value, dict) or value.get("type") != "notice":
        return None
    notice = value.get("notice")
    tool_id = notice.get("tool_id") if isinstance(notice, dict) else None
    if not isinstance(tool_id, str):
        return None
    try:
        parse_tool_id(tool_id)
    except DeplogError:
        return None
    return tool_id


def decode_leaf(leaf: bytes) -> Entry | DeplogError:
    """The entry of ``leaf``, or why it is none (rule 1), to decode a page before checking."""
    try:
        return decode_entry(leaf)
    except DeplogError as err:
        return err


class EntryChecker:
    """Applies the rules to entries in log order, advancing ``registry``."""

    def __init__(
        self,
        registry: PublisherRegistry,
        log_key: Verifier,
        find_notice: TargetLookup,
        sequence_used: SequenceLookup,
    ) -> None:
        self.registry = registry
        self.log_key = log_key
        self.find_notice = find_notice
        self.sequence_used = sequence_used

    def check(self, index: int, leaf: bytes) -> Entry:
        """Check the entry at ``index``; on success its effects are in ``registry``."""
        return self.check_decoded(index, decode_leaf(leaf))

    def check_decoded(self, index: int, decoded: Entry | DeplogError) -> Entry:
        """``check`` for a leaf already decoded by ``decode_leaf`` (rule 1 on its error)."""
        if isinstance(decoded, DeplogError):
            raise RuleViolation(ErrorCode.BAD_LEAF, index, decoded.code, error=decoded)
        entry = decoded
        if isinstance(entry, PublisherEntry):
            try:
                self.registry.apply(index, entry, self.log_key)
            except DeplogError as err:
                raise RuleViolation(
                    ErrorCode.BAD_PUBLISHER_ENTRY, index, err.code, error=err
                ) from None
            return entry
        self._check_notice(index, entry)
        return entry

    def judge(self, index: int, leaf: bytes, decoded: Entry | DeplogError | None = None) -> Judged:
        """The verifiers' ``check`` (rule 6): the entry, or the ``InvalidEntry`` it is."""
        try:
            return self.check_decoded(index, decode_leaf(leaf) if decoded is None else decoded)
        except RuleViolation as violation:
            if violation.code == ErrorCode.BAD_LEAF:
                violation.tool_id = readable_tool_id(leaf)
            return InvalidEntry.of(violation)

    def _check_notice(self, index: int, entry: NoticeEntry) -> None:
        notice = entry.envelope.notice

        def violation(code: ErrorCode, err: DeplogError) -> RuleViolation:
            return RuleViolation(code, index, err.code, error=err, tool_id=notice.tool_id)

        try:
            self.registry.authorize(entry.envelope)
        except DeplogError as err:
            raise violation(ErrorCode.UNAUTHORIZED_NOTICE, err) from None
        if self.sequence_used(notice.publisher, notice.sequence):
            raise violation(ErrorCode.REPLAYED_NOTICE, ConflictError(ErrorCode.SEQUENCE_REUSED))
        if notice.action == "withdraw":
            target = None
            if notice.withdraws is not None and notice.withdraws < index:
                target = self.find_notice(notice.withdraws)
            try:
                PublisherRegistry.check_withdraw(notice, target)
            except DeplogError as err:
                raise violation(ErrorCode.INVALID_WITHDRAW, err) from None


class _NoticeRecord(NamedTuple):
    """What a later withdraw needs to know about a valid notice, and nothing more."""

    publisher: str
    tool_id: str
    action: str


class LogReplay:
    """The validator's history in memory, for one pass over a log from entry 0."""

    def __init__(self, log_key: Verifier) -> None:
        self.registry = PublisherRegistry()
        self._records: dict[int, _NoticeRecord] = {}
        self._sequences: dict[str, set[int]] = {}
        self.checker = EntryChecker(self.registry, log_key, self._records.get, self._sequence_used)

    def _sequence_used(self, publisher: str, sequence: int) -> bool:
        return sequence in self._sequences.get(publisher, ())

    def judge(self, index: int, leaf: bytes) -> Judged:
        """Judge the next entry (indexes in order) and record a valid notice's effects."""
        judged = self.checker.judge(index, leaf)
        if isinstance(judged, NoticeEntry):
            self.record(index, judged.envelope.notice)
        return judged

    def record(self, index: int, notice: Notice) -> None:
        """Record the valid notice at ``index`` (``judge`` does it)."""
        publisher = sys.intern(notice.publisher)
        self._records[index] = _NoticeRecord(publisher, sys.intern(notice.tool_id), notice.action)
        self._sequences.setdefault(publisher, set()).add(notice.sequence)
