"""C2SP tlog-cosignature v1.1: timestamped Ed25519 and ML-DSA-44 cosignatures.

A cosignature is a note signature line on a checkpoint by a cosigner key: a big-endian
u64 timestamp, then the signature. It states that, as of that time, this is the
largest consistent tree the cosigner has seen for the origin, which bounds a
checkpoint's staleness for a client that trusts it. Rules:

1. The key's type tells the algorithm: 0x04, Ed25519 over ``cosignature/v1``, the time
   and the whole note text; 0x06, ML-DSA-44 over the binary ``cosigned_message`` of the
   first three lines (no extension line).
2. The spec makes no statement about extension lines, so an Ed25519 cosignature over
   the first three lines only (litewitness's) states what a full-body one does about
   the tree; it is accepted only from a key marked ``tree_lines``. Every verified
   ``Cosignature`` says what it covers (``statement``): ``full_body``, or ``tree_lines``
   (such a one, or ML-DSA-44). A statement about the map line needs ``full_body``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final, Literal

from deplog.client.errors import ErrorCode, VerificationError
from deplog.client.tlog.note import (
    COSIGNER_TYPES,
    SIG_TYPE_COSIGNATURE_MLDSA44,
    SIG_TYPE_COSIGNATURE_V1,
    NoteSignature,
    Signer,
    Verifier,
    cosigned_message,
    parse_note,
    subtree_cosigned_message,
)
from deplog.client.tlog.note import tree_lines as checkpoint_tree

__all__ = [
    "ALGORITHMS",
    "FULL_BODY",
    "TREE_LINES",
    "Cosignature",
    "CosignatureError",
    "Statement",
    "cosign",
    "cosignatures",
    "cosigner",
    "tree_lines_text",
    "verify_cosignature",
]

TIMESTAMP_SIZE = 8

Statement = Literal["full_body", "tree_lines"]
FULL_BODY: Final[Statement] = "full_body"
"""The signature covers the whole note text, extension lines included."""
TREE_LINES: Final[Statement] = "tree_lines"
"""The signature covers the origin, size and root lines only."""

ALGORITHMS: Final = {SIG_TYPE_COSIGNATURE_V1: "ed25519", SIG_TYPE_COSIGNATURE_MLDSA44: "ml-dsa-44"}
"""The name each cosigner key type is shown with (``witness init --type``, JSON output)."""


class CosignatureError(VerificationError):
    """A cosignature that is not valid for the checkpoint and cosigner key."""

    codes = frozenset({ErrorCode.BAD_COSIGNATURE, ErrorCode.WRONG_COSIGNER})
    code = ErrorCode.BAD_COSIGNATURE


@dataclass(frozen=True)
class Cosignature:
    """A verified cosignature: who, the time it vouches for, key type and ``statement``."""

    name: str
    key_id: bytes
    timestamp: int
    sig_type: int = SIG_TYPE_COSIGNATURE_V1
    statement: Statement = FULL_BODY

    @property
    def algorithm(self) -> str:
        """``ed25519`` or ``ml-dsa-44``."""
        return ALGORITHMS[self.sig_type]


def cosigner(signer: Signer) -> Signer:
    """The cosigning form of a key: type 0x04 for Ed25519, an ML-DSA-44 key as it is."""
    if signer.sig_type == SIG_TYPE_COSIGNATURE_MLDSA44:
        return signer
    return signer.with_sig_type(SIG_TYPE_COSIGNATURE_V1)


def tree_lines_text(text: bytes) -> bytes | None:
    """The first three lines of a checkpoint body, or None if ``text`` is none."""
    if checkpoint_tree(text) is None:
        return None
    return b"".join(line + b"\n" for line in text.split(b"\n", 3)[:3])


def cosign(text: str, signer: Signer, timestamp: int) -> NoteSignature:
    """A cosignature line over the checkpoint note ``text`` at ``timestamp`` (rule 1)."""
    if signer.sig_type not in COSIGNER_TYPES:
        raise ValueError("cosign with a type 0x04 or 0x06 key (see cosigner())")
    raw = text.encode("utf-8")
    if signer.sig_type == SIG_TYPE_COSIGNATURE_V1:
        message = cosigned_message(raw, timestamp)
    else:
        tree = checkpoint_tree(raw)
        if tree is None:
            raise ValueError("an ML-DSA-44 cosignature is made over a checkpoint body")
        origin, size, root = tree
        message = subtree_cosigned_message(signer.name, timestamp, origin, 0, size, root)
    body = timestamp.to_bytes(TIMESTAMP_SIZE, "big") + signer.sign(message)
    return NoteSignature(signer.name, bytes(signer.key_id), body)


def verify_cosignature(
    text: str, signature: NoteSignature, verifier: Verifier, *, tree_lines: bool = False
) -> Cosignature:
    """Check one signature line against a cosigner key (``tree_lines``: rule 2)."""
    if verifier.sig_type not in COSIGNER_TYPES:
        raise ValueError("verify cosignatures with a type 0x04 or 0x06 key")
    if signature.name != verifier.name or signature.key_id != verifier.key_id:
        raise CosignatureError(ErrorCode.WRONG_COSIGNER, "signature is by another key")
    raw = text.encode("utf-8")
    statement: Statement = TREE_LINES if verifier.is_mldsa else FULL_BODY
    if not verifier.verify_note_signature(raw, signature.signature):
        prefix = tree_lines_text(raw) if tree_lines and not verifier.is_mldsa else None
        if prefix is None or prefix == raw:
            raise CosignatureError()
        if not verifier.verify_note_signature(prefix, signature.signature):
            raise CosignatureError()
        statement = TREE_LINES
    timestamp = int.from_bytes(signature.signature[:TIMESTAMP_SIZE], "big")
    return Cosignature(verifier.name, verifier.key_id, timestamp, verifier.sig_type, statement)


def cosignatures(
    note: bytes, verifiers: list[Verifier], *, tree_lines: Collection[Verifier] = ()
) -> list[Cosignature]:
    """The newest valid cosignature of each of ``verifiers`` on a note (``tree_lines``: rule 2)."""
    text, lines = parse_note(note)
    known = {(v.name, v.key_id): v for v in verifiers}
    lenient = {(v.name, v.key_id) for v in tree_lines}
    found: dict[tuple[str, bytes], Cosignature] = {}
    for line in lines:
        key = (line.name, line.key_id)
        verifier = known.get(key)
        if verifier is None:
            continue
        cosig = verify_cosignature(text, line, verifier, tree_lines=key in lenient)
        best = found.get(key)
        if best is None or cosig.timestamp > best.timestamp:
            found[key] = cosig
    return list(found.values())
