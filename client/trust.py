"""The follower's trust state machine: the local state advances only through verified steps.

Modelled on python-tuf's ``TrustedMetadataSet``. The rules, in order:

1. A checkpoint is considered only if it is a signed note carrying a valid
   signature of the pinned log key, whose name is the checkpoint's origin.
2. Its size must not be below the trusted size (``RollbackError``). At the
   trusted size its root must equal the trusted root, and above it an RFC 9162
   consistency proof from the trusted checkpoint must verify; otherwise the log
   has shown two histories (``ForkError``): both signed checkpoints and the proof
   are written to an evidence file and the state stays where it was.
3. The entries from the trusted size up to the new size are then checked one
   by one, in log order, by the authority's own admission rules
   (``client.rules``: canonical encoding, authority-signed registry changes,
   notices signed by a key active for the namespace at that point, increasing
   sequences, valid withdraw targets). Any failure is an
   ``EntryRejectedError`` naming the first bad index.
4. The extended tree's root must equal the new checkpoint's root, and the
   number of entries its size.
5. Only then is everything (checkpoint, tree edge, registry, notices) committed
   in one transaction; any failure before rolls the whole advance back.

Nothing here does network I/O: ``client.follower`` fetches, this module
decides. Every error is a ``TrustError`` with a stable ``code``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from client.checkpoint import Checkpoint, open_checkpoint
from client.entries import NoticeEntry
from client.errors import DeplogError
from client.note import Verifier
from client.notice import Notice
from client.proofs import ConsistencyProof, ProofError, leaf_hash, verify_consistency
from client.registry import PublisherRegistry
from client.rules import EntryChecker, RuleViolation
from client.state import AdvanceWriter, LocalState

EVIDENCE_FORMAT = "deplog-fork-evidence/v1"


class TrustError(DeplogError):
    """Base of every refusal to advance the trusted state."""

    code = "untrusted"


class CheckpointRejectedError(TrustError):
    """A checkpoint that is malformed or not signed by the log key."""

    code = "bad_checkpoint"


class RollbackError(TrustError):
    """A validly signed checkpoint smaller than the trusted one."""

    code = "rollback"


class ForkError(TrustError):
    """Two signed checkpoints that cannot both be true; ``evidence`` names the file."""

    code = "fork"

    def __init__(
        self, code: str | None = None, message: str | None = None, evidence: Path | None = None
    ) -> None:
        super().__init__(code, message)
        self.evidence = evidence


class ProofRejectedError(TrustError):
    """A proof that answers a different question than the one asked."""

    code = "bad_proof"


class EntryRejectedError(TrustError):
    """An entry that fails verification; ``index`` is the first bad one."""

    code = "bad_entry"

    def __init__(self, code: str, index: int, cause: str | None = None) -> None:
        super().__init__(code, f"entry {index}: {cause or code}")
        self.index = index
        self.cause = cause


@dataclass(frozen=True)
class Advanced:
    """What one verified advance changed."""

    old_size: int
    new_size: int
    tools: frozenset[str]


class TrustedState:
    """The verification steps over a ``LocalState``; the only code that advances it."""

    def __init__(
        self, state: LocalState, log_key: Verifier, evidence_dir: Path | None = None
    ) -> None:
        if state.origin != log_key.name:
            raise ValueError("the state and the log key name different logs")
        self.state = state
        self.log_key = log_key
        self.evidence_dir = evidence_dir or state.path.parent

    def check_checkpoint(self, note: bytes) -> Checkpoint:
        """Steps 1 and 2 (same size): a signed checkpoint that does not go backwards."""
        try:
            checkpoint, _ = open_checkpoint(note, self.log_key)
        except DeplogError as err:
            raise CheckpointRejectedError(message=err.code) from None
        if checkpoint.size < self.state.size:
            raise RollbackError(message="checkpoint is smaller than the trusted one")
        if checkpoint.size == self.state.size and checkpoint.root_hash != self.state.root:
            raise self._fork(note, None, "two roots for one size")
        return checkpoint

    def check_consistency(
        self, note: bytes, checkpoint: Checkpoint, proof: ConsistencyProof
    ) -> None:
        """Step 2 (larger size): the new tree extends the trusted one."""
        if proof.old != self.state.size or proof.new != checkpoint.size:
            raise ProofRejectedError(message="proof is for other sizes than requested")
        try:
            verify_consistency(
                self.state.size,
                checkpoint.size,
                self.state.root,
                checkpoint.root_hash,
                proof.hashes,
            )
        except ProofError:
            raise self._fork(note, proof, "consistency proof fails") from None

    def refresh(self, checkpoint: Checkpoint, now: datetime | None = None) -> None:
        """The log is still at the trusted checkpoint, verified again just now."""
        if checkpoint.size != self.state.size or checkpoint.root_hash != self.state.root:
            raise ValueError("refresh takes the trusted checkpoint only")
        self.state.touch(now or datetime.now(UTC))

    def _fork(self, note: bytes, proof: ConsistencyProof | None, why: str) -> ForkError:
        trusted = self.state.trusted
        evidence = {
            "format": EVIDENCE_FORMAT,
            "log_key": self.log_key.vkey(),
            "reason": why,
            "trusted_checkpoint": trusted.note.decode() if trusted else None,
            "conflicting_checkpoint": note.decode(),
            "consistency_proof": proof.to_json() if proof else None,
            "detected_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        self.evidence_dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        path = self.evidence_dir / f"fork-evidence-{stamp}.json"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(evidence, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return ForkError(message=why, evidence=path)

    def advance(self, note: bytes, checkpoint: Checkpoint) -> AdvanceSession:
        """Steps 3 to 5, as a context manager fed with pages of entries in log order."""
        return AdvanceSession(self, note, checkpoint)


class AdvanceSession:
    """One advance in progress: verified entries accumulate in an open transaction."""

    def __init__(self, trusted: TrustedState, note: bytes, checkpoint: Checkpoint) -> None:
        self.trusted = trusted
        self.note = note
        self.checkpoint = checkpoint
        state = trusted.state
        self.old_size = state.size
        self.next_index = state.size
        self.frontier = state.frontier.copy()
        self.registry = PublisherRegistry.from_json(state.registry.to_json())
        self._writer: AdvanceWriter | None = None
        self._finished = False

    def __enter__(self) -> AdvanceSession:
        self._writer = self.trusted.state.begin()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        """Commit only a finished advance; anything else (an error, or leaving
        early) rolls the whole advance back."""
        assert self._writer is not None
        if exc_type is None and self._finished:
            self.trusted.state.commit(self._writer)
        else:
            self.trusted.state.rollback(self._writer)

    @property
    def remaining(self) -> int:
        return self.checkpoint.size - self.next_index

    def add(self, leaves: Sequence[bytes], now: datetime | None = None) -> None:
        """Verify the next entries in log order (``client.rules``) and stage their effects."""
        writer = self._writer
        assert writer is not None, "use the session as a context manager"
        staged: dict[int, Notice] = {}

        def find_notice(index: int) -> Notice | None:
            return staged.get(index) or writer.notice_at(index)

        checker = EntryChecker(self.registry, self.trusted.log_key, find_notice)
        for leaf in leaves:
            index = self.next_index
            if index >= self.checkpoint.size:
                raise EntryRejectedError("too_many_entries", index)
            try:
                entry = checker.check(index, leaf)
            except RuleViolation as violation:
                raise EntryRejectedError(violation.code, index, violation.cause) from None
            if isinstance(entry, NoticeEntry):
                staged[index] = entry.envelope.notice
            self.frontier.append(leaf_hash(leaf))
            self.next_index += 1
        writer.add_notices(staged.items(), now or datetime.now(UTC))

    def finish(self, now: datetime | None = None) -> Advanced:
        """Steps 4 and 5: the tree must be exactly the checkpoint's, then commit."""
        assert self._writer is not None
        if self.next_index != self.checkpoint.size:
            raise EntryRejectedError("missing_entries", self.next_index)
        if self.frontier.root() != self.checkpoint.root_hash:
            raise EntryRejectedError("root_mismatch", self.checkpoint.size - 1)
        self.trusted.state.save_trusted(
            self._writer,
            self.note,
            self.checkpoint,
            self.frontier,
            self.registry,
            now or datetime.now(UTC),
        )
        self._finished = True
        return Advanced(self.old_size, self.checkpoint.size, frozenset(self._writer.tools))
