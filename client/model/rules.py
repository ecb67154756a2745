"""The authority's admission rules, replayed in log order by every verifier.

The authority admits an entry only if it passes these rules at its point of
the log; a follower advancing its trusted state and an auditor replaying a
whole log re-check every logged entry with this one implementation, so the
three can never disagree about what the log may contain:

1. The leaf decodes as a canonical entry (``bad_leaf``).
2. A publisher entry carries the log key's signature and is a valid registry
   transition (``bad_publisher_entry``).
3. A notice is signed by a key of its publisher that is active at this point,
   the publisher is active and owns the tool's namespace (``unauthorized_notice``).
4. Its sequence number is one its publisher has not used before
   (``replayed_notice``, cause ``sequence_reused``). Sequences are unique per
   publisher, not ordered: a publisher may post concurrently and retry a
   refused notice after later ones landed, while a logged envelope can never
   be logged again (replay) and a used number never carries other content.
   Supersession is decided by log order alone (``client.model.status`` folds
   in log order). A log admitted under the older rule (strictly increasing
   sequences) satisfies this one.
5. A withdraw names an earlier deprecate or revoke notice of the same
   publisher about the same tool (``invalid_withdraw``).

Failures raise ``RuleViolation`` with the rule's code, the entry's index and
the underlying error's code as ``cause`` (the code the authority would have
refused the entry with, such as ``unknown_key`` or ``sequence_reused``).
The follower and the auditor both let it through unchanged: it is the same
finding whoever makes it.
"""

from __future__ import annotations

from collections.abc import Callable

from deplog.client.errors import DeplogError, ErrorCode, VerificationError
from deplog.client.model.entries import Entry, NoticeEntry, PublisherEntry, decode_entry
from deplog.client.model.registry import NoticeRef, PublisherRegistry
from deplog.client.tlog.note import Verifier

__all__ = [
    "EntryChecker",
    "RuleViolation",
    "SequenceLookup",
    "TargetLookup",
    "decode_leaf",
]

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

    def __init__(self, code: ErrorCode, index: int, cause: ErrorCode | None = None) -> None:
        super().__init__(code, f"entry {index}: {code}" + (f" ({cause})" if cause else ""))
        self.index = index
        self.cause = cause


def decode_leaf(leaf: bytes) -> Entry | DeplogError:
    """The entry of ``leaf``, or why it is none (rule 1), for a caller that decodes a page
    of leaves before checking them in order."""
    try:
        return decode_entry(leaf)
    except DeplogError as err:
        return err


class EntryChecker:
    """Applies the rules to entries in log order, advancing ``registry`` as it goes.

    The lookups see the caller's record of every earlier entry: the caller
    records each checked notice before checking the next entry.
    """

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
            raise RuleViolation(ErrorCode.BAD_LEAF, index, decoded.code)
        entry = decoded
        if isinstance(entry, PublisherEntry):
            try:
                self.registry.apply(index, entry, self.log_key)
            except DeplogError as err:
                raise RuleViolation(ErrorCode.BAD_PUBLISHER_ENTRY, index, err.code) from None
            return entry
        self._check_notice(index, entry)
        return entry

    def _check_notice(self, index: int, entry: NoticeEntry) -> None:
        notice = entry.envelope.notice
        try:
            self.registry.authorize(entry.envelope)
        except DeplogError as err:
            raise RuleViolation(ErrorCode.UNAUTHORIZED_NOTICE, index, err.code) from None
        if self.sequence_used(notice.publisher, notice.sequence):
            raise RuleViolation(ErrorCode.REPLAYED_NOTICE, index, ErrorCode.SEQUENCE_REUSED)
        if notice.action == "withdraw":
            target = None
            if notice.withdraws is not None and notice.withdraws < index:
                target = self.find_notice(notice.withdraws)
            try:
                PublisherRegistry.check_withdraw(notice, target)
            except DeplogError as err:
                raise RuleViolation(ErrorCode.INVALID_WITHDRAW, index, err.code) from None
