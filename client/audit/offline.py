"""The offline auditor: checks that need nothing but files and the log's verifier key.

Every function here is pure (bytes and iterables in, a verified result or an
error out) so the same checks run from the command line, from tests and from
anyone's own tooling. The rules:

- A checkpoint counts only once the log key's signature on it verifies and
  its origin is the key's name (:func:`audit_checkpoint`). Cosignatures are
  left alone: they are the witness policy's business, not the auditor's.
- A receipt proves that a leaf is in the log only if its embedded checkpoint
  is genuine and the inclusion proof leads from the leaf to that checkpoint's
  root; the leaf must also be a canonical deplog entry (:func:`audit_receipt`).
- A consistency proof is checked between the sizes and roots of two verified
  checkpoints, never sizes the proof claims (:func:`audit_consistency`); two
  genuine checkpoints of one size with different roots are a fork by
  themselves, whatever the proof says.
- A replay (:func:`replay`) re-derives everything the authority decided, from
  entry 0: each leaf decodes canonically; each publisher entry carries the
  log key's signature and is a valid registry transition; each notice is
  signed by a key that, at that point of the log, is active, belongs to an
  active publisher and covers the tool's namespace; no publisher uses a
  sequence number twice; a withdraw names an earlier deprecate or revoke
  notice of the same publisher about the same tool (the one validator,
  ``client.model.rules``). Then the leaves must be exactly as many as the
  checkpoint's size and hash to its root (the proofs' ``TreeMismatchError``
  stops the replay). An entry that fails the rules does not stop it: the
  replay goes on as every verifier does (docs/fold-spec.md, "Entries that fail
  validation") and reports each one (``ReplayReport.invalid``), which the
  command line turns into its failure: the log signed an entry it should have
  refused.

Replay memory is bounded by the publisher registry plus one small record per
notice (publisher, tool, action, for withdraw checks; its sequence number,
for the uniqueness check), the invalid entries found, and log2(size) subtree
hashes: leaves are streamed, never kept. Leaves past the checkpoint's size
are refused as soon as the first one appears, so an oversized input cannot
cost more work than the checkpoint announces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from deplog.client.errors import DeplogError, ErrorCode, VerificationError
from deplog.client.model.entries import PublisherEntry, decode_entry
from deplog.client.model.registry import PublisherRegistry
from deplog.client.model.rules import InvalidEntry, LogReplay
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.proofs import (
    ConsistencyProof,
    TreeFrontier,
    TreeMismatchError,
    leaf_hash,
    verify_consistency,
)
from deplog.client.tlog.receipt import Receipt, verify_receipt

__all__ = [
    "AuditError",
    "AuditInputError",
    "ReplayReport",
    "audit_checkpoint",
    "audit_consistency",
    "audit_receipt",
    "replay",
]


class AuditError(VerificationError):
    """Two checkpoints, each genuine, that contradict each other: one size, two roots."""

    code = ErrorCode.CONFLICTING_CHECKPOINTS


class AuditInputError(DeplogError):
    """Input an audit cannot use: a missing file, or one over its bound."""

    codes = frozenset({ErrorCode.MISSING_INPUT, ErrorCode.FILE_TOO_LARGE})


def audit_checkpoint(note: bytes, log_key: Verifier, origin: str | None = None) -> Checkpoint:
    """Verify the log's signature on a checkpoint note and return the checkpoint.

    ``origin`` is the checkpoint's expected origin, by default the key name
    (C2SP tlog-checkpoint: they SHOULD match, need not).
    """
    checkpoint, _ = open_checkpoint(note, log_key, origin)
    return checkpoint


def audit_receipt(
    receipt: bytes, leaf: bytes, log_key: Verifier, origin: str | None = None
) -> Checkpoint:
    """Verify that ``leaf`` is a deplog entry included in the receipt's checkpoint.

    Returns the verified checkpoint the receipt leads to.
    """
    decode_entry(leaf)
    return verify_receipt(Receipt.parse(receipt), leaf, log_key, origin)


def audit_consistency(
    old_note: bytes,
    new_note: bytes,
    proof: ConsistencyProof,
    log_key: Verifier,
    origin: str | None = None,
) -> tuple[Checkpoint, Checkpoint]:
    """Verify that the checkpoint in ``new_note`` extends the one in ``old_note``.

    The sizes come from the two verified checkpoints; the proof's own
    ``old``/``new`` must name exactly those sizes (ProofError
    ``proof_size_mismatch``), so a proof cannot smuggle in a size. Equal sizes
    with different roots are ``conflicting_checkpoints``: a fork signed by the
    log key.
    """
    old = audit_checkpoint(old_note, log_key, origin)
    new = audit_checkpoint(new_note, log_key, origin)
    if old.size == new.size and old.root_hash != new.root_hash:
        raise AuditError(ErrorCode.CONFLICTING_CHECKPOINTS, "two roots are signed for one size")
    proof.check_sizes(old.size, new.size)
    verify_consistency(old.size, new.size, old.root_hash, new.root_hash, proof.hashes)
    return old, new


@dataclass(frozen=True)
class ReplayReport:
    """The outcome of a successful replay: what the verified log contains."""

    checkpoint: Checkpoint
    notices: dict[str, int]
    """Notice entries by action (``deprecate``, ``revoke``, ``withdraw``)."""
    publisher_entries: int
    publishers: tuple[str, ...]
    """Every publisher ever registered, in registration order."""
    registry: PublisherRegistry
    """The authorization state after the last entry."""
    invalid: tuple[InvalidEntry, ...] = ()
    """The entries that fail validation, in log order (none in an honest log)."""

    @property
    def size(self) -> int:
        """Number of leaves, equal to the checkpoint's size."""
        return self.checkpoint.size

    @property
    def root(self) -> bytes:
        """The verified root hash, equal to the checkpoint's."""
        return self.checkpoint.root_hash


def replay(
    leaves: Iterable[bytes], checkpoint_note: bytes, log_key: Verifier, origin: str | None = None
) -> ReplayReport:
    """Replay a whole log from entry 0 against its signed checkpoint.

    The checkpoint is verified first (of origin ``origin``, by default the key
    name; its errors keep their own codes), then every leaf in order by the
    rules in this module's docstring: an entry that fails them is reported in
    ``invalid`` (``bad_leaf``, ``bad_publisher_entry``, ``unauthorized_notice``,
    ``replayed_notice``, ``invalid_withdraw``, with the underlying code in
    ``cause``), and the replay goes on; then TreeMismatchError
    (``too_many_entries``, ``missing_entries``, ``entries_root_mismatch``). Errors
    raised by ``leaves`` itself (a malformed bundle) propagate unchanged.
    """
    checkpoint = audit_checkpoint(checkpoint_note, log_key, origin)
    history = LogReplay(log_key)
    frontier = TreeFrontier()
    notices: Counter[str] = Counter()
    invalid: list[InvalidEntry] = []
    publisher_entries = 0
    for index, leaf in enumerate(leaves):
        if index >= checkpoint.size:
            raise TreeMismatchError(ErrorCode.TOO_MANY_ENTRIES, index)
        frontier.append(leaf_hash(leaf))
        judged = history.judge(index, leaf)
        if isinstance(judged, InvalidEntry):
            invalid.append(judged)
        elif isinstance(judged, PublisherEntry):
            publisher_entries += 1
        else:
            notices[judged.envelope.notice.action] += 1
    if frontier.size != checkpoint.size:
        raise TreeMismatchError(ErrorCode.MISSING_ENTRIES, frontier.size)
    if frontier.root() != checkpoint.root_hash:
        raise TreeMismatchError(ErrorCode.ENTRIES_ROOT_MISMATCH, None)
    registry = history.registry
    return ReplayReport(
        checkpoint=checkpoint,
        notices=dict(sorted(notices.items())),
        publisher_entries=publisher_entries,
        publishers=tuple(p.publisher for p in registry.publishers()),
        registry=registry,
        invalid=tuple(invalid),
    )
