"""Transparency log checkpoints (C2SP tlog-checkpoint v1.0.0).

A checkpoint is a signed note's text: origin, tree size and base64 root lines, then
optional extension lines. Rules:

1. Parsing is strict, so one tree head has one encoding: sizes are ASCII decimal without
   leading zeros below 2^63, the root is canonical base64 of 32 bytes, extension lines
   are non-empty.
2. The text is parsed only after the log's type 0x01 signature verifies, and its origin
   must be the one expected: by default the key name, which SHOULD equal it but need not
   (sum.golang.org's key signs ``go.sum database tree``).
3. Other signatures (witness cosignatures) are left to the caller's witness policy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from deplog.client.errors import ErrorCode, FormatError, VerificationError
from deplog.client.tlog.note import (
    SIG_TYPE_ED25519,
    KeyFormatError,
    Note,
    Signer,
    Verifier,
    decode_base64,
    encode_base64,
    open_note,
    sign_note,
)

__all__ = [
    "HASH_SIZE",
    "MAX_TREE_SIZE",
    "Checkpoint",
    "CheckpointFormatError",
    "WrongOriginError",
    "check_origin",
    "open_checkpoint",
    "parse_decimal",
    "sign_checkpoint",
]

HASH_SIZE = 32
MAX_TREE_SIZE = (1 << 63) - 1
"""Sizes are kept within a signed 64-bit integer, as every tlog implementation does."""

_DECIMAL = re.compile("0|[1-9][0-9]{0,18}")
_CONTROL = re.compile(r"[\x00-\x1f]")


class CheckpointFormatError(FormatError):
    """Note text that is not a well-formed checkpoint body."""

    code = ErrorCode.MALFORMED_CHECKPOINT


class WrongOriginError(VerificationError):
    """A checkpoint whose origin is not the one expected (by default the log key's name)."""

    code = ErrorCode.WRONG_ORIGIN


def parse_decimal(text: str) -> int | None:
    """An ASCII decimal, no leading zeros, below 2^63, or None (tlog-checkpoint, "Note text")."""
    if not _DECIMAL.fullmatch(text):
        return None
    value = int(text)
    return value if value <= MAX_TREE_SIZE else None


def check_origin(origin: str) -> str:
    """``origin`` if it can be a checkpoint's origin line (non-empty, one line)."""
    if not origin or _CONTROL.search(origin):
        raise CheckpointFormatError(message="origin must be non-empty, on one line")
    return origin


@dataclass(frozen=True)
class Checkpoint:
    """A log's tree head: origin, number of leaves, and RFC 9162 root hash."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_origin(self.origin)
        if isinstance(self.size, bool) or not 0 <= self.size <= MAX_TREE_SIZE:
            raise CheckpointFormatError(message="tree size out of range")
        if len(self.root_hash) != HASH_SIZE:
            raise CheckpointFormatError(message="root hash must be 32 bytes")
        for line in self.extensions:
            if not line or _CONTROL.search(line):
                raise CheckpointFormatError(message="extension lines must be non-empty lines")

    def to_json(self) -> dict[str, Any]:
        """Origin, size and base64 root: the checkpoint in a JSON report."""
        return {"origin": self.origin, "size": self.size, "root": encode_base64(self.root_hash)}

    def to_text(self) -> str:
        """The note text: origin, size, base64 root, extension lines, each newline-terminated."""
        lines = [self.origin, str(self.size), encode_base64(self.root_hash), *self.extensions]
        return "".join(line + "\n" for line in lines)

    @classmethod
    def from_text(cls, text: str) -> Checkpoint:
        """Parse a checkpoint body strictly (tlog-checkpoint, "Note text")."""
        if not text.endswith("\n"):
            raise CheckpointFormatError(message="checkpoint must end in a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise CheckpointFormatError(message="checkpoint needs origin, size and root lines")
        origin, size_text, root_text, *extensions = lines
        size = parse_decimal(size_text)
        if size is None:
            raise CheckpointFormatError(message="tree size is not a canonical decimal")
        root = decode_base64(root_text)
        if root is None or len(root) != HASH_SIZE:
            raise CheckpointFormatError(message="root hash is not 32 bytes of base64")
        return cls(origin, size, root, tuple(extensions))


def sign_checkpoint(checkpoint: Checkpoint, signer: Signer) -> bytes:
    """The signed note of ``checkpoint``; the log key's name must be the origin."""
    if signer.sig_type != SIG_TYPE_ED25519:
        raise KeyFormatError(message="checkpoints are signed with a type 0x01 key")
    if signer.name != checkpoint.origin:
        raise WrongOriginError(message="log key name differs from the checkpoint origin")
    return sign_note(checkpoint.to_text(), signer)


def open_checkpoint(
    msg: bytes, log_verifier: Verifier, origin: str | None = None
) -> tuple[Checkpoint, Note]:
    """Verify the log's signature on a checkpoint note, then parse its text (rules 2, 3)."""
    if log_verifier.sig_type != SIG_TYPE_ED25519:
        raise KeyFormatError(message="checkpoints are verified with a type 0x01 key")
    note = open_note(msg, [log_verifier])
    checkpoint = Checkpoint.from_text(note.text)
    if checkpoint.origin != (log_verifier.name if origin is None else origin):
        raise WrongOriginError(message="checkpoint origin differs from the expected origin")
    return checkpoint, note
