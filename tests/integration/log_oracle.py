"""The failover oracle: from what clients saw and the final log, name the first broken promise.

Written apart from the authority: it recomputes the tree from the final leaves
itself (RFC 9162 ranges, hashed once each) and checks every claim with the
client's verifiers, so a bug shared by the server's proof code and its storage
cannot hide here. ``first_violation`` returns ``None`` or one line naming the
rule and the first thing that breaks it; the rules, in the order checked:

1. final: the final checkpoint note verifies under the log key, and the final
   leaves are exactly its size and hash to its root.
2. once: no notice (publisher, sequence) is in the final log twice.
3. acknowledged: every 201/200 carried a receipt that verifies for the notice's
   own leaf (``verify_receipt``); the final log holds that leaf at the receipt's
   index, and an inclusion proof from the final leaves verifies against the
   final checkpoint (``verify_inclusion``).
4. one root per size: every checkpoint any client saw (receipts, ``/checkpoint``
   polls, pushes) verifies under the log key, and no size was seen with two roots
   (the final checkpoint included).
5. consistent: every seen checkpoint is at most the final size and a consistency
   proof from the final leaves verifies from it to the final root
   (``verify_consistency``).
6. resume: after every kill, the first 201 came at most ``resume_bound`` seconds
   after the last 201 before it (``resume_gaps`` gives the figures).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from deplog.client.errors import DeplogError
from deplog.client.model.entries import NoticeEntry, decode_entry, encode_entry
from deplog.client.model.notice import Envelope
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.proofs import (
    EMPTY_ROOT,
    consistency_ranges,
    inclusion_ranges,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from deplog.client.tlog.receipt import Receipt, verify_receipt

__all__ = [
    "Ack",
    "Kill",
    "Observations",
    "ReferenceTree",
    "Seen",
    "first_violation",
    "resume_gaps",
]


@dataclass(frozen=True)
class Ack:
    """A 201 (or idempotent 200) a publisher got: the envelope it sent and the receipt."""

    envelope: bytes
    receipt: bytes
    status: int
    at: float
    process: int


@dataclass(frozen=True)
class Seen:
    """A signed checkpoint note some client received, and from where."""

    note: bytes
    source: str
    at: float
    process: int


@dataclass(frozen=True)
class Kill:
    """A SIGKILL sent to front-end ``process``; ``sequencer`` says whether it held the
    sequencer lock on the last look before the signal, one query earlier (``None``: not
    looked up)."""

    at: float
    process: int
    sequencer: bool | None = None


@dataclass
class Observations:
    """Everything the campaign's clients saw, in the order they saw it."""

    acks: list[Ack] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)


class ReferenceTree:
    """The RFC 9162 tree over a list of leaves, each node hashed at most once."""

    def __init__(self, leaves: Sequence[bytes]) -> None:
        self.hashes = [leaf_hash(leaf) for leaf in leaves]
        self._nodes: dict[tuple[int, int], bytes] = {}

    def mth(self, lo: int, hi: int) -> bytes:
        if hi - lo == 0:
            return EMPTY_ROOT
        if hi - lo == 1:
            return self.hashes[lo]
        node = self._nodes.get((lo, hi))
        if node is None:
            k = 1 << ((hi - lo - 1).bit_length() - 1)
            left, right = self.mth(lo, lo + k), self.mth(lo + k, hi)
            node = hashlib.sha256(b"\x01" + left + right).digest()
            self._nodes[(lo, hi)] = node
        return node

    def root(self, size: int) -> bytes:
        return self.mth(0, size)

    def inclusion(self, index: int, size: int) -> list[bytes]:
        return [self.mth(lo, hi) for lo, hi in inclusion_ranges(index, size)]

    def consistency(self, old: int, new: int) -> list[bytes]:
        return [self.mth(lo, hi) for lo, hi in consistency_ranges(old, new)]


def _notice_key(envelope: Envelope) -> tuple[str, int]:
    return envelope.notice.publisher, envelope.notice.sequence


def first_violation(
    observations: Observations,
    final_note: bytes,
    leaves: Sequence[bytes],
    log_verifier: Verifier,
    resume_bound: float | None = None,
) -> str | None:
    """The first rule (module docstring) the observations and the final log break, or None."""
    try:
        final, _ = open_checkpoint(final_note, log_verifier)
    except DeplogError as error:
        return f"rule 1 (final): the final checkpoint does not verify: {error.code}"
    if final.size != len(leaves):
        return f"rule 1 (final): {len(leaves)} leaves for a checkpoint of size {final.size}"
    tree = ReferenceTree(leaves)
    if tree.root(final.size) != final.root_hash:
        return f"rule 1 (final): the final leaves do not hash to the root of size {final.size}"

    where: dict[tuple[str, int], int] = {}
    for index, leaf in enumerate(leaves):
        entry = decode_entry(leaf)
        if isinstance(entry, NoticeEntry):
            key = _notice_key(entry.envelope)
            if key in where:
                return f"rule 2 (once): notice {key} is at indices {where[key]} and {index}"
            where[key] = index

    for ack in observations.acks:
        envelope = Envelope.parse(ack.envelope)
        key = _notice_key(envelope)
        leaf = encode_entry(NoticeEntry(envelope))
        try:
            receipt = Receipt.parse(ack.receipt)
            verify_receipt(receipt, leaf, log_verifier)
        except DeplogError as error:
            return f"rule 3 (acknowledged): the receipt for {key} does not verify: {error.code}"
        if key not in where:
            return (
                f"rule 3 (acknowledged): {key} got a {ack.status} (index {receipt.index}) "
                f"and is not in the final log of size {final.size}"
            )
        if where[key] != receipt.index or leaves[receipt.index] != leaf:
            return (
                f"rule 3 (acknowledged): {key} has receipt index {receipt.index}, "
                f"final index {where[key]}"
            )
        try:
            proof = tree.inclusion(receipt.index, final.size)
            verify_inclusion(leaf_hash(leaf), receipt.index, final.size, proof, final.root_hash)
        except DeplogError as error:
            return f"rule 3 (acknowledged): {key} is not proven in the final tree: {error.code}"

    roots: dict[int, tuple[bytes, str]] = {final.size: (final.root_hash, "the final checkpoint")}
    checkpoints: list[Checkpoint] = []
    opened: set[bytes] = set()
    for seen in observations.seen:
        if seen.note in opened:
            continue
        opened.add(seen.note)
        try:
            checkpoint, _ = open_checkpoint(seen.note, log_verifier)
        except DeplogError as error:
            return f"rule 4 (one root per size): a {seen.source} checkpoint: {error.code}"
        known = roots.setdefault(checkpoint.size, (checkpoint.root_hash, seen.source))
        if known[0] != checkpoint.root_hash:
            return (
                f"rule 4 (one root per size): size {checkpoint.size} has two roots "
                f"({known[1]}; {seen.source} from process {seen.process})"
            )
        checkpoints.append(checkpoint)

    consistent: set[int] = set()
    for checkpoint in checkpoints:
        if checkpoint.size in consistent:
            continue
        if checkpoint.size > final.size:
            return f"rule 5 (consistent): size {checkpoint.size} was seen, past the final one"
        try:
            proof = tree.consistency(checkpoint.size, final.size)
            verify_consistency(
                checkpoint.size, final.size, checkpoint.root_hash, final.root_hash, proof
            )
        except DeplogError as error:
            return (
                f"rule 5 (consistent): size {checkpoint.size} is not consistent with the "
                f"final checkpoint: {error.code}"
            )
        consistent.add(checkpoint.size)

    if resume_bound is not None:
        for kill, gap in zip(observations.kills, resume_gaps(observations), strict=True):
            if gap is None or gap > resume_bound:
                shown = "no 201 after it" if gap is None else f"{gap:.2f} s"
                return (
                    f"rule 6 (resume): after the kill of process {kill.process} at "
                    f"{kill.at:.2f}: {shown} (bound {resume_bound} s)"
                )
    return None


def resume_gaps(observations: Observations) -> list[float | None]:
    """For each kill: seconds from the last 201 before it to the first 201 after it (None
    when no 201 followed). Idempotent 200s do not count: only a new append shows that the
    log took writes again."""
    created = sorted(ack.at for ack in observations.acks if ack.status == 201)
    gaps: list[float | None] = []
    for kill in observations.kills:
        before = [t for t in created if t <= kill.at]
        after = [t for t in created if t > kill.at]
        if not after:
            gaps.append(None)
            continue
        start = before[-1] if before else kill.at
        gaps.append(after[0] - start)
    return gaps
