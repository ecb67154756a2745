"""The offline auditor: checks that need nothing but files and the log's verifier key.

Every function is pure (bytes and iterables in, a verified result or an error out), so
the command line, the tests and anyone's tooling run the same checks. Rules:

1. A checkpoint counts only once the log key's signature verifies and its origin is the
   one expected; cosignatures are the witness policy's business, not the auditor's.
2. A receipt proves a leaf in the log only if its checkpoint is genuine, its proof leads
   there, and the leaf is a canonical deplog entry.
3. A consistency proof is checked between the sizes and roots of two verified
   checkpoints (``proof_size_mismatch`` for others); two genuine checkpoints of one size
   with different roots are ``conflicting_checkpoints`` whatever the proof says.
4. A replay re-derives everything the authority decided, from entry 0, by the one
   validator (``client.model.rules``); an entry that fails it is reported
   (``ReplayReport.invalid``) and the replay goes on, as every verifier does; then the
   leaves must be exactly the checkpoint's tree (``TreeMismatchError``).
5. Leaves are streamed, never kept: memory is the registry, a small record per notice
   and the tree's edge, and leaves past the checkpoint's size are refused at the first.
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


class AuditError(VerificationError):
    """Two checkpoints, each genuine, that contradict each other: one size, two roots."""

    code = ErrorCode.CONFLICTING_CHECKPOINTS


class AuditInputError(DeplogError):
    """Input an audit cannot use: a missing file, or one over its bound."""

    codes = frozenset({ErrorCode.MISSING_INPUT, ErrorCode.FILE_TOO_LARGE})


def audit_checkpoint(note: bytes, log_key: Verifier, origin: str | None = None) -> Checkpoint:
    """The checkpoint of a note the log key signed, of ``origin`` (by default the key name)."""
    checkpoint, _ = open_checkpoint(note, log_key, origin)
    return checkpoint


def audit_receipt(
    receipt: bytes, leaf: bytes, log_key: Verifier, origin: str | None = None
) -> Checkpoint:
    """The verified checkpoint a receipt proves the deplog entry ``leaf`` included in."""
    decode_entry(leaf)
    return verify_receipt(Receipt.parse(receipt), leaf, log_key, origin)


def audit_consistency(
    old_note: bytes,
    new_note: bytes,
    proof: ConsistencyProof,
    log_key: Verifier,
    origin: str | None = None,
) -> tuple[Checkpoint, Checkpoint]:
    """Verify that the checkpoint in ``new_note`` extends the one in ``old_note`` (rule 3)."""
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
    """Notice entries by action."""
    publisher_entries: int
    publishers: tuple[str, ...]
    """Every publisher ever registered, in registration order."""
    registry: PublisherRegistry
    invalid: tuple[InvalidEntry, ...] = ()
    """The entries that fail validation, in log order (none in an honest log)."""

    @property
    def size(self) -> int:
        return self.checkpoint.size

    @property
    def root(self) -> bytes:
        return self.checkpoint.root_hash


def replay(
    leaves: Iterable[bytes], checkpoint_note: bytes, log_key: Verifier, origin: str | None = None
) -> ReplayReport:
    """Replay a whole log from entry 0 against its signed checkpoint (rule 4)."""
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
