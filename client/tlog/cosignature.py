"""C2SP tlog-cosignature v1.0.1: Ed25519 ``cosignature/v1`` timestamped cosignatures.

A cosignature is a note signature line on a checkpoint, by a cosigner key of
signature type 0x04 (so the same Ed25519 key has another key ID than as a log
key). Its bytes after the key ID are a big-endian u64 POSIX timestamp and an
Ed25519 signature over ``cosignature/v1\\ntime <timestamp>\\n`` followed by the
checkpoint's note text. It states that, as of that time, this is the largest
consistent tree the cosigner has seen for the origin; that statement is what
bounds a checkpoint's staleness for a client that trusts the cosigner.
"""

from __future__ import annotations

from dataclasses import dataclass

from deplog.client.errors import ErrorCode, VerificationError
from deplog.client.tlog.note import (
    SIG_TYPE_COSIGNATURE_V1,
    NoteSignature,
    Signer,
    Verifier,
    cosigned_message,
    parse_note,
)

__all__ = [
    "TIMESTAMP_SIZE",
    "Cosignature",
    "CosignatureError",
    "cosign",
    "cosignatures",
    "cosigner",
    "verify_cosignature",
]

TIMESTAMP_SIZE = 8


class CosignatureError(VerificationError):
    """A cosignature that is not valid for the checkpoint and cosigner key."""

    codes = frozenset({ErrorCode.BAD_COSIGNATURE, ErrorCode.WRONG_COSIGNER})
    code = ErrorCode.BAD_COSIGNATURE


@dataclass(frozen=True)
class Cosignature:
    """A verified cosignature: who signed, and the time it vouches for."""

    name: str
    key_id: bytes
    timestamp: int


def cosigner(signer: Signer) -> Signer:
    """The cosigning (type 0x04) form of a key; its key ID differs from the log form's."""
    return signer.with_sig_type(SIG_TYPE_COSIGNATURE_V1)


def cosign(text: str, signer: Signer, timestamp: int) -> NoteSignature:
    """A ``cosignature/v1`` line over the checkpoint note ``text`` at ``timestamp``."""
    if signer.sig_type != SIG_TYPE_COSIGNATURE_V1:
        raise ValueError("cosign with a type 0x04 key (see cosigner())")
    message = cosigned_message(text.encode("utf-8"), timestamp)
    body = timestamp.to_bytes(TIMESTAMP_SIZE, "big") + signer.sign(message)
    return NoteSignature(signer.name, bytes(signer.key_id), body)


def verify_cosignature(text: str, signature: NoteSignature, verifier: Verifier) -> Cosignature:
    """Check one signature line against a cosigner key; returns its timestamp."""
    if verifier.sig_type != SIG_TYPE_COSIGNATURE_V1:
        raise ValueError("verify cosignatures with a type 0x04 key")
    if signature.name != verifier.name or signature.key_id != verifier.key_id:
        raise CosignatureError(ErrorCode.WRONG_COSIGNER, "signature is by another key")
    if not verifier.verify_note_signature(text.encode("utf-8"), signature.signature):
        raise CosignatureError()
    timestamp = int.from_bytes(signature.signature[:TIMESTAMP_SIZE], "big")
    return Cosignature(verifier.name, verifier.key_id, timestamp)


def cosignatures(note: bytes, verifiers: list[Verifier]) -> list[Cosignature]:
    """Every valid cosignature on a signed note by one of ``verifiers``, newest first per key.

    Lines by unknown keys are ignored (signed-note); a line by a known key that
    does not verify is an error, as for any note signature.
    """
    text, lines = parse_note(note)
    known = {(v.name, v.key_id): v for v in verifiers}
    found: dict[tuple[str, bytes], Cosignature] = {}
    for line in lines:
        verifier = known.get((line.name, line.key_id))
        if verifier is None:
            continue
        cosig = verify_cosignature(text, line, verifier)
        best = found.get((line.name, line.key_id))
        if best is None or cosig.timestamp > best.timestamp:
            found[(line.name, line.key_id)] = cosig
    return list(found.values())
