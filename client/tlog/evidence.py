"""Fork evidence: two checkpoints signed by one log key that cannot both be true.

A follower or a witness that catches a log showing two histories saves both
signed checkpoints, and the consistency proof the log served between them if
any, in one self-contained JSON file. Anyone holding the log's verifier key
can check it offline (``deplog audit evidence``):

* ``conflicting_roots``: both checkpoints carry valid log signatures, have the
  same size and different roots. This alone proves the log forked.
* ``inconsistent_proof``: both are validly signed, of different sizes, and the
  proof the log served between them does not verify. This proves the log
  served a bad proof; it proves a fork once the log, asked again, cannot
  produce a consistency proof that verifies.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deplog.client.errors import DeplogError, ErrorCode, FormatError, VerificationError
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.proofs import ConsistencyProof, ProofError, verify_consistency
from deplog.client.tlog.timestamps import now_timestamp

__all__ = [
    "EVIDENCE_FORMAT",
    "MAX_EVIDENCE_BYTES",
    "EvidenceError",
    "EvidenceFormatError",
    "ForkEvidence",
    "evidence_between",
    "read_evidence",
    "write_evidence",
]

EVIDENCE_FORMAT = "deplog-fork-evidence/v1"
MAX_EVIDENCE_BYTES = 4 * 1024 * 1024


class EvidenceFormatError(FormatError):
    """A file that is not fork evidence."""

    code = ErrorCode.MALFORMED_EVIDENCE


class EvidenceError(VerificationError):
    """Evidence that does not show what it claims."""

    codes = frozenset({ErrorCode.OTHER_LOG, ErrorCode.NO_CONFLICT, ErrorCode.NO_PROOF})


@dataclass(frozen=True)
class ForkEvidence:
    """Two signed checkpoints of one log and, if the log served one, the proof between them."""

    log_key: str
    first: bytes
    second: bytes
    proof: ConsistencyProof | None
    detected_at: str
    reporter: str

    def to_json(self) -> dict[str, Any]:
        return {
            "format": EVIDENCE_FORMAT,
            "log_key": self.log_key,
            "first_checkpoint": self.first.decode(),
            "second_checkpoint": self.second.decode(),
            "consistency_proof": None if self.proof is None else self.proof.to_json(),
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
            "detected_at",
            "reporter",
        }
        if not isinstance(obj, dict) or set(obj) != keys or obj["format"] != EVIDENCE_FORMAT:
            raise EvidenceFormatError()
        text_fields = (
            "log_key",
            "first_checkpoint",
            "second_checkpoint",
            "detected_at",
            "reporter",
        )
        if not all(isinstance(obj[k], str) for k in text_fields):
            raise EvidenceFormatError()
        try:
            proof = (
                None
                if obj["consistency_proof"] is None
                else ConsistencyProof.from_json(obj["consistency_proof"])
            )
        except DeplogError:
            raise EvidenceFormatError() from None
        return cls(
            obj["log_key"],
            obj["first_checkpoint"].encode(),
            obj["second_checkpoint"].encode(),
            proof,
            obj["detected_at"],
            obj["reporter"],
        )

    def verify(self, log_key: Verifier) -> str:
        """Check the evidence against the pinned log key; returns what it proves."""
        if self.log_key != log_key.vkey():
            raise EvidenceError(ErrorCode.OTHER_LOG, "evidence is about another log key")
        first, _ = open_checkpoint(self.first, log_key)
        second, _ = open_checkpoint(self.second, log_key)
        if first.size == second.size:
            if first.root_hash == second.root_hash:
                raise EvidenceError(ErrorCode.NO_CONFLICT, "the checkpoints agree")
            return "conflicting_roots"
        old, new = (first, second) if first.size < second.size else (second, first)
        if self.proof is None:
            raise EvidenceError(
                ErrorCode.NO_PROOF, "checkpoints of different sizes need the served proof"
            )
        self.proof.check_sizes(old.size, new.size)
        try:
            verify_consistency(old.size, new.size, old.root_hash, new.root_hash, self.proof.hashes)
        except ProofError:
            return "inconsistent_proof"
        raise EvidenceError(
            ErrorCode.NO_CONFLICT, "the proof verifies: the checkpoints are consistent"
        )


def write_evidence(directory: Path, evidence: ForkEvidence) -> Path:
    """Save evidence durably under a unique name; returns the file's path."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    path = directory / f"fork-evidence-{stamp}.json"
    tmp = path.with_suffix(".tmp")
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
    log_key: Verifier, first: bytes, second: bytes, proof: ConsistencyProof | None, reporter: str
) -> ForkEvidence:
    """Evidence about ``log_key``'s log, stamped now."""
    return ForkEvidence(log_key.vkey(), first, second, proof, now_timestamp(), reporter)
