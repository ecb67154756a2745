"""The follower's trust state machine: the local state advances only through verified steps.

Modelled on python-tuf's ``TrustedMetadataSet``. The rules, in order:

1. A checkpoint is considered only if it satisfies the trust policy (C2SP
   tlog-policy): a valid signature of the pinned log key, whose name is the
   checkpoint's origin, and valid cosignatures from a quorum of the policy's
   witnesses; the policy's own errors say why not (``PolicyError``, or the
   note's and checkpoint's format and signature errors). The quorum's
   cosignature time, not the local clock, is the time the checkpoint is known
   to be current (with ``quorum none``, the local time of the fetch is all
   there is).
2. Its size must not be below the trusted size (``RollbackError``). At the
   trusted size its root must equal the trusted root; a different one means
   the log signed two trees of one size, which proves a fork (``ForkError``):
   both signed checkpoints are written to an evidence file (``proven``), and
   the state stays where it was for good. Above the trusted size, an RFC 9162
   consistency proof from the trusted checkpoint, for exactly those two sizes
   (``ProofError`` ``proof_size_mismatch``), must verify. A proof that fails
   is only a suspicion (``SuspectedForkError``): the log signs its
   checkpoints, never its proofs, so anyone on the network path can corrupt
   one. Both checkpoints and the proof are written to an evidence file marked
   unproven, the state stays where it was (its freshness keeps running out,
   so a guard over it goes stale), and the caller retries; only conflicting
   signed statements halt a follower.
3. The entries from the trusted size up to the new size are then judged one
   by one, in log order, by the authority's own admission rules, the one
   validator (``client.model.rules``: canonical encoding, authority-signed
   registry changes, notices signed by a key active for the namespace at that
   point, sequence numbers unique per publisher, valid withdraw targets). An
   entry that fails them does not stop the follower and is not ignored
   (docs/fold-spec.md, "Entries that fail validation"): it changes nothing but
   its mark, which makes the tool it names ``unknown``, and it is kept as an
   ``invalid_entries`` row (evidence, once step 4 proved it is in the signed
   tree) and reported in ``Advanced.invalid``.
4. The entries must be exactly as many as the new checkpoint's size and the
   extended tree's root must equal its root (``TreeMismatchError``). Then its
   ``deplog-map/v1`` root must be the root of the map folded from those
   entries (``client.follow.mapcheck``); a signed root that is not is proven
   misbehaviour (``MapMismatchError``, a ``ForkError``: evidence, stop).
5. Only then does the trusted checkpoint move (with the tree edge and
   registry) to the new one. A long advance is committed in chunks on the
   way: a chunk of entries that passed step 3 is made durable, as progress
   toward the new checkpoint, only after a consistency proof from the tree
   they rebuild to the new checkpoint's tree verifies (else
   ``TreeMismatchError`` ``entries_root_mismatch``); the trusted checkpoint
   stays where it was and nothing reads those entries until step 4 passed
   for all of them (``client.follow.state`` invariants 1 to 3). The map's
   rows advance in the same transactions, so a committed chunk holds the map
   folded through its last entry. A refusal rolls back the chunk in progress,
   its entries and map rows alike; the proven chunks before it stay.
6. After a kill, ``resume`` continues the interrupted advance from its last
   committed chunk, its stored target checked again by step 1, and its map
   from the same entry; the same target, the same checks, the same end state
   (map root included) as an advance never killed. A stored target that step
   1 now refuses (the policy or key changed) is dropped with all its progress,
   which nothing ever read.

A ``watch`` (``EntryWatch``) sees every entry of step 3 once it verified,
with the registry as of that entry, and may note something about it; what it
noted is returned in ``Advanced.noticed`` only if the advance commits, so a
watcher never reports an entry of a history that was refused. (Entries of
chunks committed before a kill were seen by the process that was killed.)

Nothing here does network I/O: ``client.follower`` fetches, this module
decides. Every refusal is a ``DeplogError`` with a stable ``code``; the ones
only the trust state makes are ``TrustError`` subclasses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.mapcheck import FollowerMap
from deplog.client.follow.state import AdvanceWriter, LocalState, Pending, StateError
from deplog.client.model.entries import Entry, NoticeEntry
from deplog.client.model.notice import Notice
from deplog.client.model.registry import PublisherRegistry
from deplog.client.model.rules import EntryChecker, InvalidEntry, decode_leaf, fold_item
from deplog.client.model.status import InvalidMark, StatusChange
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.evidence import (
    CONFLICTING_ROOTS,
    FAILING_PROOF,
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

__all__ = [
    "AdvanceSession",
    "Advanced",
    "Candidate",
    "CheckpointRejectedError",
    "EntryWatch",
    "ForkError",
    "MapMismatchError",
    "RollbackError",
    "SuspectedForkError",
    "TrustError",
    "TrustedState",
]


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
    """A signed checkpoint whose map root is not the root of its own entries' fold (rule 4):
    proven, like two signed roots; ``evidence`` names the file."""

    code = ErrorCode.MAP_ROOT_MISMATCH


class SuspectedForkError(TrustError):
    """A consistency proof that fails between two signed checkpoints (rule 2): proves
    nothing, since the log never signed it; ``evidence`` names the unproven file."""

    code = ErrorCode.SUSPECTED_FORK

    def __init__(self, message: str, evidence: Path) -> None:
        super().__init__(message=message)
        self.evidence = evidence


EntryWatch = Callable[[int, Entry, PublisherRegistry], object | None]
"""Sees each verified entry (index, entry, registry after it); returns what it noted, or None."""


@dataclass(frozen=True)
class Advanced:
    """What one verified advance changed: sizes, tools, each tool's status change, and what
    the watch noted, in log order."""

    old_size: int
    new_size: int
    changes: tuple[StatusChange, ...] = ()
    noticed: tuple[object, ...] = ()
    invalid: tuple[InvalidEntry, ...] = ()
    """The advance's entries that fail validation (rule 3), in log order."""

    @property
    def tools(self) -> frozenset[str]:
        """Every tool a notice of the advance was about."""
        return frozenset(change.tool_id for change in self.changes)


@dataclass(frozen=True)
class Candidate:
    """A checkpoint that passed step 1 and the rollback/same-size checks of step 2."""

    note: bytes
    checkpoint: Checkpoint
    witnessed_at: int | None

    def current_as_of(self) -> datetime:
        """When the checkpoint is known to have been current: quorum time, else now."""
        if self.witnessed_at is None:
            return datetime.now(UTC)
        return datetime.fromtimestamp(self.witnessed_at, UTC)


class TrustedState:
    """The verification steps over a ``LocalState``; the only code that advances it."""

    def __init__(
        self, state: LocalState, trust: Verifier | Policy, evidence_dir: Path | None = None
    ) -> None:
        self.policy = trust if isinstance(trust, Policy) else Policy.single_log(trust)
        logs = [entry.verifier for entry in self.policy.logs]
        if len(logs) != 1 or logs[0].name != state.origin:
            raise ValueError("the trust policy must name exactly the state's log")
        state.bind_log_key(logs[0])  # another key's state is refused here, not as a fork
        self.state = state
        self.log_key = logs[0]
        self.evidence_dir = evidence_dir or state.path.parent
        self.watch: EntryWatch | None = None

    def check_checkpoint(self, note: bytes, now: float | None = None) -> Candidate:
        """Steps 1 and 2 (same size): a checkpoint the policy accepts, not going backwards."""
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
        return Candidate(note, checkpoint, verified.witnessed_at)

    def check_consistency(self, candidate: Candidate, proof: ConsistencyProof) -> None:
        """Step 2 (larger size): the new tree extends the trusted one, or a suspicion."""
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

    def refresh(self, candidate: Candidate) -> None:
        """The log is still at the trusted checkpoint: record how current it now is."""
        checkpoint = candidate.checkpoint
        if checkpoint.size != self.state.size or checkpoint.root_hash != self.state.root:
            raise ValueError("refresh takes the trusted checkpoint only")
        self.state.touch(candidate.note, candidate.current_as_of())

    def _evidence(self, note: bytes, proof: ConsistencyProof | None, finding: str) -> Path:
        """Save the trusted and the new checkpoint (and the served proof) as evidence."""
        trusted = self.state.trusted
        # A fork needs a trusted checkpoint to contradict; a false map root does not.
        assert trusted is not None or finding == MAP_MISMATCH
        first = note if trusted is None else trusted.note
        evidence = evidence_between(self.log_key, first, note, proof, "follower", finding)
        return write_evidence(self.evidence_dir, evidence)

    def advance(self, candidate: Candidate) -> AdvanceSession:
        """Steps 3 to 5, as a context manager fed with pages of entries in log order."""
        return AdvanceSession(self, candidate)

    def resume(self) -> AdvanceSession | None:
        """The advance a kill interrupted, to go on from its last committed chunk (step 6),
        or None. Its target is checked by step 1 again before anything else; one the
        trust policy no longer accepts is dropped with its progress (None)."""
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
        """What the trusted state's move from ``old_size`` to ``new_size`` changed; each
        tool's statuses are folded from the state only when asked (``StatusChange``), and
        the entries that fail validation are read from it (a resumed advance's included)."""
        at = datetime.now(UTC)
        changes = tuple(
            StatusChange(tool_id, old_size, new_size, at, self.state)
            for tool_id in self.state.tools_between(old_size, new_size)
        )
        invalid = tuple(self.state.invalid_between(old_size, new_size))
        return Advanced(old_size, new_size, changes, noticed, invalid)


class AdvanceSession:
    """One advance in progress: verified entries staged in the state's open transaction,
    committed chunk by chunk once each chunk is proven part of the target's tree."""

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
        """Whatever ends the advance (finished, refused, or left early), what was not
        committed is rolled back; committed chunks stay as progress to resume."""
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
        # The page is decoded first, so that one query finds which of its notices'
        # sequence numbers earlier entries used; rules are then checked in log order.
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
        """The one place a verified entry takes effect beyond the stored notices: the
        trust state's watch sees it (with the registry as of it)."""
        watch = self.trusted.watch
        if watch is not None and (noted := watch(index, entry, self.registry)) is not None:
            self._noticed.append(noted)

    def commit_chunk(self, proof: ConsistencyProof) -> None:
        """Persist the entries verified so far as progress toward the target (state
        invariant 2), once ``proof`` shows the tree they rebuild is a prefix of the
        target's tree; otherwise ``TreeMismatchError`` and the chunk is dropped."""
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
        """Steps 4 and 5: the tree must be exactly the checkpoint's, then commit."""
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
