"""Receipts: offline-verifiable inclusion proofs (C2SP tlog-proof, ``c2sp.org/tlog-proof@v1``).

A receipt is the header line, an optional ``extra <base64>`` line, ``index <decimal>``,
the inclusion proof's base64 hashes from the leaf's sibling up, a blank line, then the
signed checkpoint note verbatim. Rules, strict so that one receipt has one encoding:

1. Extra data is non-empty when present, and never trusted (unauthenticated).
2. Base64 is canonical; the index has no leading zeros and is below 2^63.
3. The checkpoint is a well-formed checkpoint note when parsed, and verified against the
   log key (or a whole witness policy) before the proof is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deplog.client.errors import ErrorCode, FormatError
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint, parse_decimal
from deplog.client.tlog.note import (
    MAX_NOTE_SIZE,
    Verifier,
    decode_base64,
    encode_base64,
    parse_note,
)
from deplog.client.tlog.policy import Policy, VerifiedCheckpoint
from deplog.client.tlog.proofs import (
    HASH_SIZE,
    MAX_PROOF_HASHES,
    MAX_TREE_SIZE,
    leaf_hash,
    verify_inclusion,
)

HEADER = b"c2sp.org/tlog-proof@v1"
"""The first line of every receipt (tlog-proof, "Format")."""

MAX_RECEIPT_SIZE = 2 * MAX_NOTE_SIZE


class ReceiptFormatError(FormatError):
    """Bytes that are not a well-formed ``c2sp.org/tlog-proof@v1`` receipt."""

    code = ErrorCode.MALFORMED_RECEIPT


@dataclass(frozen=True)
class Receipt:
    """A leaf index, its inclusion proof, and the signed checkpoint the proof leads to."""

    index: int
    proof: tuple[bytes, ...]
    checkpoint: bytes
    extra: bytes | None = None

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not 0 <= self.index <= MAX_TREE_SIZE:
            raise ReceiptFormatError(message="index out of range")
        if len(self.proof) > MAX_PROOF_HASHES or any(len(h) != HASH_SIZE for h in self.proof):
            raise ReceiptFormatError(message="proof hashes are 32 bytes, at most 64 of them")
        if self.extra is not None and not self.extra:
            raise ReceiptFormatError(message="extra data is omitted, not empty")
        try:
            text, _ = parse_note(self.checkpoint)
            Checkpoint.from_text(text)
        except FormatError:
            raise ReceiptFormatError(message="checkpoint is not a signed checkpoint") from None

    def to_bytes(self) -> bytes:
        """The ``.tlog-proof`` encoding."""
        return format_receipt(self.index, self.proof, self.checkpoint, self.extra)

    @classmethod
    def parse(cls, data: bytes) -> Receipt:
        """Parse a receipt strictly (tlog-proof, "Format"); nothing is verified yet."""
        if len(data) > MAX_RECEIPT_SIZE:
            raise ReceiptFormatError(message="receipt is too large")
        pos = 0

        def next_line() -> str:
            nonlocal pos
            end = data.find(b"\n", pos)
            if end < 0:
                raise ReceiptFormatError(message="receipt ends early")
            try:
                line = data[pos:end].decode("ascii")
            except UnicodeDecodeError:
                raise ReceiptFormatError(message="receipt header is not ASCII") from None
            pos = end + 1
            return line

        if next_line() != HEADER.decode("ascii"):
            raise ReceiptFormatError(message="not a c2sp.org/tlog-proof@v1 receipt")
        line = next_line()
        extra = None
        if line.startswith("extra "):
            extra = decode_base64(line[len("extra ") :])
            if not extra:
                raise ReceiptFormatError(message="extra line is not non-empty base64")
            line = next_line()
        if not line.startswith("index "):
            raise ReceiptFormatError(message="index line missing")
        index = parse_decimal(line[len("index ") :])
        if index is None:
            raise ReceiptFormatError(message="index is not a canonical decimal")
        proof: list[bytes] = []
        while line := next_line():
            digest = decode_base64(line)
            if digest is None or len(digest) != HASH_SIZE or len(proof) == MAX_PROOF_HASHES:
                raise ReceiptFormatError(message="proof lines are at most 64 base64 hashes")
            proof.append(digest)
        return cls(index, tuple(proof), data[pos:], extra)


def format_receipt(
    index: int, proof: Sequence[bytes], checkpoint: bytes, extra: bytes | None = None
) -> bytes:
    """Encode a receipt without parsing ``checkpoint`` again (a log's own, well formed)."""
    lines = [HEADER.decode("ascii")]
    if extra is not None:
        lines.append("extra " + encode_base64(extra))
    lines.append(f"index {index}")
    lines.extend(encode_base64(h) for h in proof)
    lines.append("")
    head = "".join(line + "\n" for line in lines).encode("ascii")
    return head + checkpoint


def verify_receipt(
    receipt: Receipt, leaf: bytes, log_verifier: Verifier, origin: str | None = None
) -> Checkpoint:
    """Verify that ``leaf`` is entry ``receipt.index`` of the log that signed the checkpoint
    (of ``origin``, by default the key name); its cosignatures are the policy's."""
    checkpoint, _ = open_checkpoint(receipt.checkpoint, log_verifier, origin)
    verify_inclusion(
        leaf_hash(leaf), receipt.index, checkpoint.size, receipt.proof, checkpoint.root_hash
    )
    return checkpoint


def verify_receipt_with_policy(
    receipt: Receipt, leaf: bytes, policy: Policy, *, now: float, max_age: float | None = None
) -> VerifiedCheckpoint:
    """Verify the receipt's checkpoint against a witness ``policy``, then its proof of ``leaf``."""
    verified = policy.verify(receipt.checkpoint, now=now, max_age=max_age)
    checkpoint = verified.checkpoint
    verify_inclusion(
        leaf_hash(leaf), receipt.index, checkpoint.size, receipt.proof, checkpoint.root_hash
    )
    return verified
