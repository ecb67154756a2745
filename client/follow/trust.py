"""The follower's trust state machine: the local state advances only through verified steps.

Modelled on python-tuf's ``TrustedMetadataSet``; nothing here does network I/O. The
rules, in order:

1. A checkpoint is considered only if the trust policy (C2SP tlog-policy) accepts it:
   the pinned log key's signature and a witness quorum (``PolicyError``, or the note's
   own errors). The quorum's time, not the local clock, says when it was current.
2. Its size is never below the trusted size (``RollbackError``). At the trusted size its
   root is the trusted root, or the log signed two trees of one size: ``ForkError``,
   evidence written, and the state stays for good. Above it, a consistency proof for
   exactly those two sizes must verify (``proof_size_mismatch``); a failing one is only
   a suspicion, since the log never signs proofs (``SuspectedForkError``: unproven
   evidence, no advance, the caller retries), until the new tree's own prefix of the
   trusted size, recomputed from its leaves, is tied to its signed root by that proof
   and is not the trusted root: then it is a proven ``ForkError``
   (``inconsistent_prefix``), under the one log key the state records.
3. The new entries are judged in log order by the admission rules (``client.model.rules``).
   An entry that fails them does not stop the follower: it changes nothing but its mark,
   which makes its tool ``unknown``, is kept as evidence, and is reported in
   ``Advanced.invalid`` (docs/fold-spec.md, "Entries that fail validation").
4. The entries are exactly the checkpoint's size and rebuild its root
   (``TreeMismatchError``); its ``deplog-map/v1`` root is the fold of them
   (``client.follow.mapcheck``), else ``MapMismatchError``, a proven ``ForkError``.
5. Only then does the trusted checkpoint move. A long advance commits in chunks on the
   way, each only after a consistency proof to the target verifies
   (``entries_root_mismatch``), with the map's rows in the same transactions; a refusal
   rolls back the chunk in progress (``client.follow.state`` rules 1 to 3).
6. After a kill, ``resume`` goes on from the last committed chunk toward the same
   target, checked by rule 1 again, to the same end state; a target rule 1 now refuses
   is dropped with its progress.

Rules 1 and 2 are ``CheckpointRules``, which the light verifier (``client.follow.light``)
reads too. A ``watch`` (``EntryWatch``) sees every verified entry with the registry as of it; what
it noted is returned (``Advanced.noticed``) only if the advance commits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.mapcheck import FollowerMap
from deplog.client.follow.state import (
    AdvanceWriter,
    LocalState,
    Pending,
    StateError,
    TrustedCheckpoint,
)
from deplog.client.model.entries import Entry, NoticeEntry
from deplog.client.model.notice import Notice
from deplog.client.model.registry import PublisherRegistry
from deplog.client.model.rules import EntryChecker, InvalidEntry, decode_leaf, fold_item
from deplog.client.model.status import InvalidMark, StatusChange
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.evidence import (
    CONFLICTING_ROOTS,
    FAILING_PROOF,
    INCONSISTENT_PREFIX,
    MAP_MISMATCH,
    evidence_between,
    write_evidence,
)
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.policy import Policy
from deplog.client.tlog.proofs import (
    ConsistencyProof,
    ProofError,
    TreeMismatchError,
    leaf_hash,
    verify_consistency,
)


class TrustError(DeplogError):
    """Base of the refusals only the trust state makes (the others keep their own class)."""


class CheckpointRejectedError(TrustError):
    """A validly signed checkpoint of the empty tree whose root is not the empty tree's."""

    code = ErrorCode.BAD_CHECKPOINT


class RollbackError(TrustError):
    """A validly signed checkpoint smaller than the trusted one."""

    code = ErrorCode.ROLLBACK


class ForkError(TrustError):
    """Two signed checkpoints that cannot both be true; ``evidence`` names the file."""

    code = ErrorCode.FORK

    def __init__(self, message: str, evidence: Path) -> None:
        super().__init__(message=message)
        self.evidence = evidence


class MapMismatchError(ForkError):
    """A signed checkpoint whose map root is not its own entries' fold (rule 4): proven."""

    code = ErrorCode.MAP_ROOT_MISMATCH


class SuspectedForkError(TrustError):
    """A consistency proof failing between two signed checkpoints (rule 2): unproven."""

    code = ErrorCode.SUSPECTED_FORK

    def __init__(self, message: str, evidence: Path) -> None:
        super().__init__(message=message)
        self.evidence = evidence


EntryWatch = Callable[[int, Entry, PublisherRegistry], object | None]
"""Sees each verified entry (index, entry, registry after it); returns what it noted, or None."""


@dataclass(frozen=True)
class Advanced:
    """What one verified advance changed, noted and found invalid, in log order."""

    old_size: int
    new_size: int
    changes: tuple[StatusChange, ...] = ()
    noticed: tuple[object, ...] = ()
    invalid: tuple[InvalidEntry, ...] = ()

    @property
    def tools(self) -> frozenset[str]:
        """Every tool a notice of the advance was about."""
        return frozenset(change.tool_id for change in self.changes)


@dataclass(frozen=True)
class Candidate:
    """A checkpoint that passed rule 1 and the rollback and same-size checks of rule 2."""

    note: bytes
    checkpoint: Checkpoint
    witnessed_at: int | None
    map_witnessed_at: int | None = None
    """When a ``map-quorum`` of map-verifying witnesses vouched for its map line, if one did."""

    def current_as_of(self) -> datetime:
        """When the checkpoint is known to have been current: quorum time, else now."""
        if self.witnessed_at is None:
            return datetime.now(UTC)
        return datetime.fromtimestamp(self.witnessed_at, UTC)


class TrustPoint(Protocol):
    """Where a trusted checkpoint is held: a follower's ``LocalState`` or a ``LightState``."""

    @property
    def size(self) -> int: ...

    @property
    def root(self) -> bytes: ...

    @property
    def trusted(self) -> TrustedCheckpoint | None: ...


class CheckpointRules:
    """Rules 1 and 2 over a ``TrustPoint``: the one reading the follower and the light
    verifier share, so a checkpoint is refused for the same reason by both."""

    def __init__(
        self, state: TrustPoint, trust: Verifier | Policy, evidence_dir: Path, reporter: str
    ) -> None:
        self.policy = trust if isinstance(trust, Policy) else Policy.single_log(trust)
        logs = [entry.verifier for entry in self.policy.logs]
        if len(logs) != 1:
            raise ValueError("the trust policy must name exactly one log")
        self.state = state
        self.log_key = logs[0]
        self.evidence_dir = evidence_dir
        self.reporter = reporter

    def check_checkpoint(self, note: bytes, now: float | None = None) -> Candidate:
        """Rules 1 and 2 (same size): a checkpoint the policy accepts, not going backwards."""
        verified = self.policy.verify(note, now=time.time() if now is None else now, max_age=None)
        checkpoint = verified.checkpoint
        if checkpoint.size < self.state.size:
            raise RollbackError(message="checkpoint is smaller than the trusted one")
        if checkpoint.size == self.state.size and checkpoint.root_hash != self.state.root:
            if self.state.trusted is None:  # size 0: only the empty tree's root is valid
                raise CheckpointRejectedError(message="empty tree with a non-empty root")
            raise ForkError(
                message="two signed roots for one size",
                evidence=self._evidence(note, None, CONFLICTING_ROOTS),
            )
        return Candidate(note, checkpoint, verified.witnessed_at, verified.map_witnessed_at)

    def check_consistency(self, candidate: Candidate, proof: ConsistencyProof) -> None:
        """Rule 2 (larger size): the new tree extends the trusted one, or a suspicion."""
        checkpoint = candidate.checkpoint
        proof.check_sizes(self.state.size, checkpoint.size)
        try:
            verify_consistency(
                self.state.size,
                checkpoint.size,
                self.state.root,
                checkpoint.root_hash,
                proof.hashes,
            )
        except ProofError:
            raise SuspectedForkError(
                message="consistency proof fails between signed checkpoints",
                evidence=self._evidence(candidate.note, proof, FAILING_PROOF),
            ) from None

    def prove_fork(self, candidate: Candidate, proof: ConsistencyProof, prefix: bytes) -> None:
        """Rule 2: a ``ForkError`` if ``proof`` ties ``prefix``, the new tree's root at the
        trusted size, to the candidate's root and ``prefix`` is not the trusted root."""
        new = candidate.checkpoint
        if prefix == self.state.root:
            return
        try:
            verify_consistency(self.state.size, new.size, prefix, new.root_hash, proof.hashes)
        except ProofError:
            return
        raise ForkError(
            message="the signed larger tree does not start with the trusted one",
            evidence=self._evidence(candidate.note, proof, INCONSISTENT_PREFIX, prefix),
        )

    def _evidence(
        self,
        note: bytes,
        proof: ConsistencyProof | None,
        finding: str,
        prefix: bytes | None = None,
    ) -> Path:
        """Save the trusted and the new checkpoint (and the served proof) as evidence."""
        trusted = self.state.trusted
        # A fork needs a trusted checkpoint to contradict; a false map root does not.
        assert trusted is not None or finding == MAP_MISMATCH
        first = note if trusted is None else trusted.note
        evidence = evidence_between(
            self.log_key, first, note, proof, self.reporter, finding, prefix
        )
        return write_evidence(self.evidence_dir, evidence)


class TrustedState(CheckpointRules):
    """The verification steps over a ``LocalState``; the only code that advances it."""

    state: LocalState

    def __init__(
        self, state: LocalState, trust: Verifier | Policy, evidence_dir: Path | None = None
    ) -> None:
        super().__init__(state, trust, evidence_dir or state.path.parent, "follower")
        if self.log_key.name != state.origin:
            raise ValueError("the trust policy must name exactly the state's log")
        state.bind_log_key(self.log_key)  # another key's state is refused here, not as a fork
        self.watch: EntryWatch | None = None

    def refresh(self, candidate: Candidate) -> None:
        """The log is still at the trusted checkpoint: record how current it now is."""
        checkpoint = candidate.checkpoint
        if checkpoint.size != self.state.size or checkpoint.root_hash != self.state.root:
            raise ValueError("refresh takes the trusted checkpoint only")
        self.state.touch(candidate.note, candidate.current_as_of())

    def advance(self, candidate: Candidate) -> AdvanceSession:
        """Rules 3 to 5, as a context manager fed with pages of entries in log order."""
        return AdvanceSession(self, candidate)

    def resume(self) -> AdvanceSession | None:
        """The advance a kill interrupted (rule 6), or None."""
        pending = self.state.pending()
        if pending is None:
            return None
        try:
            candidate = self.check_checkpoint(pending.note)
        except (ForkError, RollbackError, CheckpointRejectedError):
            raise  # what the stored target proves stands
        except DeplogError:  # a policy or key it no longer meets: start that advance over
            self.state.discard_pending()
            return None
        if candidate.checkpoint.size < pending.frontier.size:
            raise StateError(ErrorCode.BAD_STATE, "pending progress is past its target")
        return AdvanceSession(self, candidate, pending)

    def advanced(self, old_size: int, new_size: int, noticed: tuple[object, ...]) -> Advanced:
        """What the trusted state's move from ``old_size`` to ``new_size`` changed."""
        at = datetime.now(UTC)
        changes = tuple(
            StatusChange(tool_id, old_size, new_size, at, self.state)
            for tool_id in self.state.tools_between(old_size, new_size)
        )
        invalid = tuple(self.state.invalid_between(old_size, new_size))
        return Advanced(old_size, new_size, changes, noticed, invalid)


class AdvanceSession:
    """One advance in progress, staged in the state's transaction, committed by chunks."""

    def __init__(
        self, trusted: TrustedState, candidate: Candidate, pending: Pending | None = None
    ) -> None:
        self.trusted = trusted
        self.candidate = candidate
        self.checkpoint = candidate.checkpoint
        state = trusted.state
        self.old_size = state.size
        if pending is None:
            self.frontier = state.frontier.copy()
            self.registry = PublisherRegistry.from_json(state.registry.to_json())
        else:
            self.frontier, self.registry = pending.frontier.copy(), pending.registry
        self.next_index = self.frontier.size
        self.chunk_start = self.next_index
        self._writer: AdvanceWriter | None = None
        self._noticed: list[object] = []

    def __enter__(self) -> AdvanceSession:
        self._writer = self.trusted.state.begin()
        # Resumed or not, the map goes on from the entry the advance goes on from.
        self._map = FollowerMap(self._writer.conn, self.next_index)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        """Roll back what was not committed; committed chunks stay (rule 5)."""
        assert self._writer is not None
        self.trusted.state.end(self._writer)

    @property
    def chunk_entries(self) -> int:
        """Entries verified since the last committed chunk."""
        return self.next_index - self.chunk_start

    def add(self, leaves: Sequence[bytes], now: datetime | None = None) -> None:
        """Judge the next entries in log order (``client.model.rules``) and stage them."""
        writer = self._writer
        assert writer is not None, "use the session as a context manager"
        staged: dict[int, Notice] = {}
        invalid: list[InvalidEntry] = []
        stamp = (now or datetime.now(UTC)).timestamp()
        # Decoded first, so that one query finds the sequence numbers used before.
        decoded = [decode_leaf(leaf) for leaf in leaves]
        used = writer.sequences_used(
            (item.envelope.notice.publisher, item.envelope.notice.sequence)
            for item in decoded
            if isinstance(item, NoticeEntry)
        )

        def find_notice(index: int) -> Notice | None:
            return staged.get(index) or writer.notice_at(index)

        def sequence_used(publisher: str, sequence: int) -> bool:
            return (publisher, sequence) in used

        checker = EntryChecker(self.registry, self.trusted.log_key, find_notice, sequence_used)
        start = self.next_index
        folded: list[tuple[int, Notice | InvalidMark]] = []  # for the map
        for leaf, item in zip(leaves, decoded, strict=True):
            index = self.next_index
            if index >= self.checkpoint.size:
                raise TreeMismatchError(ErrorCode.TOO_MANY_ENTRIES, index)
            judged = checker.judge(index, leaf, item)
            if isinstance(judged, InvalidEntry):
                invalid.append(judged)
            else:
                if isinstance(judged, NoticeEntry):
                    notice = judged.envelope.notice
                    staged[index] = notice
                    used.add((notice.publisher, notice.sequence))
                self._apply(index, judged)
            if (fold := fold_item(judged)) is not None:
                folded.append((index, fold))
            self.frontier.append(leaf_hash(leaf))
            self.next_index += 1
        writer.add_notices(staged.items(), datetime.fromtimestamp(stamp, UTC))
        writer.add_invalid(invalid)
        self._map.add(start, self.next_index, folded)

    def _apply(self, index: int, entry: Entry) -> None:
        """Show a verified entry to the trust state's watch."""
        watch = self.trusted.watch
        if watch is not None and (noted := watch(index, entry, self.registry)) is not None:
            self._noticed.append(noted)

    def commit_chunk(self, proof: ConsistencyProof) -> None:
        """Persist the entries verified so far once ``proof`` shows them a prefix (rule 5)."""
        assert self._writer is not None
        proof.check_sizes(self.next_index, self.checkpoint.size)
        try:
            verify_consistency(
                self.next_index,
                self.checkpoint.size,
                self.frontier.root(),
                self.checkpoint.root_hash,
                proof.hashes,
            )
        except ProofError:
            raise TreeMismatchError(ErrorCode.ENTRIES_ROOT_MISMATCH, None) from None
        self.trusted.state.commit_chunk(
            self._writer, self.candidate.note, self.frontier, self.registry
        )
        self.chunk_start = self.next_index

    def finish(self, now: datetime | None = None) -> Advanced:
        """Rules 4 and 5: the tree must be exactly the checkpoint's, then commit."""
        assert self._writer is not None
        if self.next_index != self.checkpoint.size:
            raise TreeMismatchError(ErrorCode.MISSING_ENTRIES, self.next_index)
        if self.frontier.root() != self.checkpoint.root_hash:
            raise TreeMismatchError(ErrorCode.ENTRIES_ROOT_MISMATCH, None)
        if not self._map.matches(self.checkpoint):
            raise MapMismatchError(
                message="the checkpoint's map root is not the fold of its entries",
                evidence=self.trusted._evidence(self.candidate.note, None, MAP_MISMATCH),
            )
        self.trusted.state.commit(
            self._writer,
            self.candidate.note,
            self.checkpoint,
            self.frontier,
            self.registry,
            now or self.candidate.current_as_of(),
        )
        return self.trusted.advanced(self.old_size, self.checkpoint.size, tuple(self._noticed))
