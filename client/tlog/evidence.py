"""Fork evidence: two signed checkpoints of one log, and what they prove.

A follower that catches a log showing two histories, or suspects it, saves both signed
checkpoints (and the consistency proof served between them) in one self-contained JSON
file, checkable offline by anyone with the log's key (``deplog audit evidence``). Only
what the log signed proves anything:

* ``conflicting_roots`` (proven): two validly signed checkpoints of one size with
  different roots.
* ``failing_proof`` (not proven): two validly signed checkpoints of different sizes and
  a failing served proof, which anyone on the network path could have corrupted: a
  suspicion to retry, never proof of a fork.
* ``inconsistent_prefix`` (proven): two validly signed checkpoints of different sizes,
  the root of the larger tree's prefix of the smaller size (``prefix_root``, recomputed
  from that tree's leaves) and a consistency proof from it to the larger root: the
  prefix is not the smaller tree, and no append-only log signs both.
* ``map_mismatch`` (proven): the second checkpoint's ``deplog-map/v1`` root is not the
  fold of the entries under it (the fold is the map auditor's to recompute; this
  module checks the signatures and the line). The first checkpoint is the last the
  reporter trusted.

``verify`` recomputes the finding and refuses a file that claims another.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deplog.client.errors import DeplogError, ErrorCode, FormatError, VerificationError
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.note import Verifier, decode_base64, encode_base64
from deplog.client.tlog.proofs import HASH_SIZE, ConsistencyProof, ProofError, verify_consistency
from deplog.client.tlog.timestamps import now_timestamp

EVIDENCE_FORMAT = "deplog-fork-evidence/v2"
MAX_EVIDENCE_BYTES = 4 * 1024 * 1024
CONFLICTING_ROOTS = "conflicting_roots"
"""Two signed roots for one size: proves a fork."""
FAILING_PROOF = "failing_proof"
"""An unsigned proof that fails between two signed checkpoints: proves nothing."""
MAP_MISMATCH = "map_mismatch"
"""A signed map root that the entries under it do not fold to: proves a misbehaving log."""
INCONSISTENT_PREFIX = "inconsistent_prefix"
"""A signed larger tree whose proven prefix is not the signed smaller tree: proves a fork."""
_PROVEN = {
    CONFLICTING_ROOTS: True,
    FAILING_PROOF: False,
    MAP_MISMATCH: True,
    INCONSISTENT_PREFIX: True,
}
_MAP_LINE_PREFIX = "deplog-map/v1 "


class EvidenceFormatError(FormatError):
    """A file that is not fork evidence."""

    code = ErrorCode.MALFORMED_EVIDENCE


class EvidenceError(VerificationError):
    """Evidence that does not show what it claims."""

    codes = frozenset(
        {
            ErrorCode.OTHER_LOG,
            ErrorCode.NO_CONFLICT,
            ErrorCode.NO_PROOF,
            ErrorCode.FINDING_MISMATCH,
        }
    )


@dataclass(frozen=True)
class ForkEvidence:
    """Two signed checkpoints of one log and, if the log served one, the proof between them."""

    log_key: str
    first: bytes
    second: bytes
    proof: ConsistencyProof | None
    detected_at: str
    reporter: str
    finding: str = CONFLICTING_ROOTS
    prefix_root: bytes | None = None
    """The larger tree's root at the smaller size (``inconsistent_prefix`` only)."""

    def __post_init__(self) -> None:
        if self.finding not in _PROVEN:
            raise EvidenceFormatError(message="unknown finding")
        if (self.prefix_root is None) != (self.finding != INCONSISTENT_PREFIX):
            raise EvidenceFormatError(message="a prefix root goes with inconsistent_prefix only")

    @property
    def proven(self) -> bool:
        """Whether the stated finding, once verified, proves a fork."""
        return _PROVEN[self.finding]

    def to_json(self) -> dict[str, Any]:
        prefix = self.prefix_root
        return ({} if prefix is None else {"prefix_root": encode_base64(prefix)}) | {
            "format": EVIDENCE_FORMAT,
            "log_key": self.log_key,
            "first_checkpoint": self.first.decode(),
            "second_checkpoint": self.second.decode(),
            "consistency_proof": None if self.proof is None else self.proof.to_json(),
            "finding": self.finding,
            "proven": self.proven,
            "detected_at": self.detected_at,
            "reporter": self.reporter,
        }

    @classmethod
    def from_json(cls, obj: object) -> ForkEvidence:
        keys = {
            "format",
            "log_key",
            "first_checkpoint",
            "second_checkpoint",
            "consistency_proof",
            "finding",
            "proven",
            "detected_at",
            "reporter",
        }
        if not isinstance(obj, dict) or set(obj) - {"prefix_root"} != keys:
            raise EvidenceFormatError()
        if obj["format"] != EVIDENCE_FORMAT:
            raise EvidenceFormatError()
        if not all(isinstance(obj[k], str) for k in keys - {"consistency_proof", "proven"}):
            raise EvidenceFormatError()
        if obj["finding"] not in _PROVEN or obj["proven"] is not _PROVEN[obj["finding"]]:
            raise EvidenceFormatError()
        try:
            proof = (
                None
                if obj["consistency_proof"] is None
                else ConsistencyProof.from_json(obj["consistency_proof"])
            )
        except DeplogError:
            raise EvidenceFormatError() from None
        prefix = obj.get("prefix_root")
        if prefix is not None:
            prefix = decode_base64(prefix) if isinstance(prefix, str) else None
            if prefix is None or len(prefix) != HASH_SIZE:
                raise EvidenceFormatError()
        return cls(
            obj["log_key"],
            obj["first_checkpoint"].encode(),
            obj["second_checkpoint"].encode(),
            proof,
            obj["detected_at"],
            obj["reporter"],
            obj["finding"],
            prefix,
        )

    def verify(self, log_key: Verifier, origin: str | None = None) -> str:
        """The finding recomputed under the pinned log key (``finding_mismatch``)."""
        finding = self._check(log_key, origin)
        if finding != self.finding:
            raise EvidenceError(ErrorCode.FINDING_MISMATCH, "the file states another finding")
        return finding

    def _check(self, log_key: Verifier, origin: str | None) -> str:
        if self.log_key != log_key.vkey():
            raise EvidenceError(ErrorCode.OTHER_LOG, "evidence is about another log key")
        first, _ = open_checkpoint(self.first, log_key, origin)
        second, _ = open_checkpoint(self.second, log_key, origin)
        if self.finding == MAP_MISMATCH:
            if not any(line.startswith(_MAP_LINE_PREFIX) for line in second.extensions):
                raise EvidenceError(ErrorCode.NO_CONFLICT, "the checkpoint commits to no map")
            return MAP_MISMATCH
        if self.prefix_root is not None:
            return self._check_prefix(first, second, self.prefix_root)
        if first.size == second.size:
            if first.root_hash == second.root_hash:
                raise EvidenceError(ErrorCode.NO_CONFLICT, "the checkpoints agree")
            return CONFLICTING_ROOTS
        old, new = (first, second) if first.size < second.size else (second, first)
        if self.proof is None:
            raise EvidenceError(
                ErrorCode.NO_PROOF, "checkpoints of different sizes need the served proof"
            )
        self.proof.check_sizes(old.size, new.size)
        try:
            verify_consistency(old.size, new.size, old.root_hash, new.root_hash, self.proof.hashes)
        except ProofError:
            return FAILING_PROOF
        raise EvidenceError(
            ErrorCode.NO_CONFLICT, "the proof verifies: the checkpoints are consistent"
        )

    def _check_prefix(self, old: Checkpoint, new: Checkpoint, prefix: bytes) -> str:
        """``inconsistent_prefix``: the proof ties ``prefix`` to ``new``, and it is not ``old``."""
        if self.proof is None or old.size >= new.size:
            raise EvidenceError(ErrorCode.NO_PROOF, "a prefix needs a larger tree and a proof")
        self.proof.check_sizes(old.size, new.size)
        try:
            verify_consistency(old.size, new.size, prefix, new.root_hash, self.proof.hashes)
        except ProofError:
            raise EvidenceError(
                ErrorCode.NO_CONFLICT, "the proof does not tie the prefix to the second tree"
            ) from None
        if prefix == old.root_hash:
            raise EvidenceError(ErrorCode.NO_CONFLICT, "the prefix is the first tree")
        return INCONSISTENT_PREFIX


def write_evidence(directory: Path, evidence: ForkEvidence) -> Path:
    """Save evidence durably, named for its finding and checkpoints' texts only; its path."""
    directory.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    for note in (evidence.first, evidence.second):
        text = note.split(b"\n\n", 1)[0]
        digest.update(len(text).to_bytes(8, "big") + text)
    kind = "fork-evidence" if evidence.proven else "suspected-fork"
    path = directory / f"{kind}-{digest.hexdigest()[:24]}.json"
    if path.exists():
        return path
    tmp = path.with_name(f"{path.stem}.{datetime.now(UTC):%Y%m%dT%H%M%S%f}.tmp")
    with open(tmp, "w") as f:
        json.dump(evidence.to_json(), f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_evidence(path: Path) -> ForkEvidence:
    with open(path, "rb") as f:
        data = f.read(MAX_EVIDENCE_BYTES + 1)
    if len(data) > MAX_EVIDENCE_BYTES:
        raise EvidenceFormatError()
    try:
        return ForkEvidence.from_json(json.loads(data))
    except ValueError:
        raise EvidenceFormatError() from None


def evidence_between(
    log_key: Verifier,
    first: bytes,
    second: bytes,
    proof: ConsistencyProof | None,
    reporter: str,
    finding: str = CONFLICTING_ROOTS,
    prefix_root: bytes | None = None,
) -> ForkEvidence:
    """Evidence about ``log_key``'s log stating ``finding``, stamped now."""
    stamp = now_timestamp()
    return ForkEvidence(log_key.vkey(), first, second, proof, stamp, reporter, finding, prefix_root)
