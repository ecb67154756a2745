"""Signed notes (C2SP signed-note v1.0.0) with Ed25519 keys.

A note is UTF-8 text followed by a blank line and one or more signature lines,
``— <key name> base64(key ID || signature)``. Everything here is a pure
function over bytes: :func:`parse_note` checks the structure only,
:func:`open_note` also verifies signatures against configured keys, and the
text of a note must be ignored unless :func:`open_note` returned it.

Rules applied, all from the spec's "Format" and "Signatures" sections:

* valid UTF-8, no ASCII control character other than newline (so no CR);
* the text runs up to and including the newline before the *last* blank line;
* key names are non-empty, without Unicode spaces or ``+``;
* base64 is the standard alphabet with padding (RFC 4648 section 4); we accept
  only its canonical form, so one note has exactly one encoding;
* a signature whose (name, key ID) pair matches no configured key is kept as
  unverified, one that matches is verified and a failure rejects the whole note,
  and a note with no verified signature is rejected;
* like Go's ``note`` package, notes over 1 MiB or with more than 100 signature
  lines are refused before any signature is checked (the spec asks for a limit
  of at least 16 signatures).

Keys come in the verifier key (``name+hex8+base64(type||key)``) and private key
(``PRIVATE+KEY+name+hex8+base64(type||seed)``) encodings of Go's ``note``
package. Type 0x01 keys sign the note text itself; type 0x04 keys are
tlog-cosignature ``cosignature/v1`` keys, whose signatures cover a timestamped
message instead (see :meth:`Verifier.verify_note_signature`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

import nacl.exceptions
import nacl.signing

from deplog.client.errors import ErrorCode, FormatError, VerificationError

__all__ = [
    "COSIGNATURE_V1_SIZE",
    "ED25519_KEY_SIZE",
    "ED25519_SIGNATURE_SIZE",
    "KEY_ID_SIZE",
    "MAX_NOTE_SIZE",
    "MAX_SIGNATURES",
    "SIG_TYPE_COSIGNATURE_V1",
    "SIG_TYPE_ED25519",
    "InvalidNoteSignatureError",
    "KeyFormatError",
    "Note",
    "NoteFormatError",
    "NoteSignature",
    "Signer",
    "UnverifiedNoteError",
    "Verifier",
    "add_signature_lines",
    "cosigned_message",
    "decode_base64",
    "encode_base64",
    "is_valid_key_name",
    "key_id",
    "open_note",
    "parse_note",
    "sign_note",
]

SIG_TYPE_ED25519 = 0x01
"""Signature type byte of Ed25519 note signatures (signed-note, "Signature types")."""

SIG_TYPE_COSIGNATURE_V1 = 0x04
"""Signature type byte of timestamped Ed25519 witness cosignatures (tlog-cosignature)."""

MAX_NOTE_SIZE = 1 << 20
"""Largest note accepted, in bytes; bounds the work an untrusted note can cause."""

MAX_SIGNATURES = 100
"""Most signature lines accepted in one note (the spec requires at least 16)."""

KEY_ID_SIZE = 4
ED25519_KEY_SIZE = 32
ED25519_SIGNATURE_SIZE = 64
COSIGNATURE_V1_SIZE = 8 + ED25519_SIGNATURE_SIZE
"""A ``cosignature/v1`` payload: big-endian u64 timestamp, then the Ed25519 signature."""

_SIG_PREFIX = "\u2014 "
_PRIVATE_PREFIX = "PRIVATE+KEY+"
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")
_HEX8 = re.compile("[0-9a-f]{8}")
_SUPPORTED_TYPES = (SIG_TYPE_ED25519, SIG_TYPE_COSIGNATURE_V1)
# Unicode spaces, plus surrogates, which cannot be encoded as UTF-8 at all.
_BAD_NAME_CATEGORIES = ("Zs", "Zl", "Zp", "Cs")


class NoteFormatError(FormatError):
    """Bytes that are not a well-formed signed note."""

    code = ErrorCode.MALFORMED_NOTE


class KeyFormatError(FormatError):
    """A key, key name or key encoding that is malformed or inconsistent."""

    codes = frozenset({ErrorCode.BAD_KEY, ErrorCode.AMBIGUOUS_KEY})
    code = ErrorCode.BAD_KEY


class InvalidNoteSignatureError(VerificationError):
    """A signature from a configured key that does not verify: the note is rejected."""

    code = ErrorCode.BAD_NOTE_SIGNATURE


class UnverifiedNoteError(VerificationError):
    """A well-formed note that carries no valid signature from any configured key."""

    code = ErrorCode.UNVERIFIED_NOTE


def decode_base64(text: str) -> bytes | None:
    """Decode canonical standard base64 (RFC 4648 section 4), or return None.

    Non-canonical spellings (missing padding, stray characters, non-zero
    trailing bits) are refused so that every value has a single encoding.
    """
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    if base64.b64encode(raw).decode("ascii") != text:
        return None
    return raw


def encode_base64(raw: bytes) -> str:
    """Standard base64 with padding (RFC 4648 section 4)."""
    return base64.b64encode(raw).decode("ascii")


def is_valid_key_name(name: str) -> bool:
    """Key names are non-empty, without Unicode spaces or ``+`` (signed-note, "Format").

    Control characters and surrogates are refused too: a note may not contain them.
    """
    if not name or "+" in name:
        return False
    for ch in name:
        if ch.isspace() or ord(ch) < 0x20 or unicodedata.category(ch) in _BAD_NAME_CATEGORIES:
            return False
    return True


def key_id(name: str, sig_type: int, public_key: bytes) -> bytes:
    """The 4-byte key ID: SHA-256(name || 0x0A || type || public key)[:4] (signed-note)."""
    if not 0 <= sig_type <= 0xFF:
        raise KeyFormatError(message="signature type must be one byte")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise KeyFormatError(message="key name is not valid Unicode") from None
    digest = hashlib.sha256(encoded + b"\n" + bytes([sig_type]) + public_key).digest()
    return digest[:KEY_ID_SIZE]


def cosigned_message(text: bytes, timestamp: int) -> bytes:
    """The message an Ed25519 ``cosignature/v1`` signs (tlog-cosignature, "Ed25519 signed message").

    Header line, ``time <timestamp>`` line, then the whole note text. The
    timestamp is POSIX seconds and must not exceed 2^63-1.
    """
    if isinstance(timestamp, bool) or not 0 <= timestamp < 1 << 63:
        raise NoteFormatError(message="cosignature timestamp out of range")
    return b"cosignature/v1\ntime " + str(timestamp).encode("ascii") + b"\n" + text


def _check_key_fields(name: str, sig_type: int) -> None:
    if not is_valid_key_name(name):
        raise KeyFormatError(message="key name is empty or contains spaces or '+'")
    if sig_type not in _SUPPORTED_TYPES:
        raise KeyFormatError(message="unsupported signature type")


@dataclass(frozen=True)
class Verifier:
    """A public key that can check note signatures: the (name, key ID) pair names it."""

    name: str
    key_id: bytes
    public_key: bytes
    sig_type: int = SIG_TYPE_ED25519

    def __post_init__(self) -> None:
        _check_key_fields(self.name, self.sig_type)
        if len(self.public_key) != ED25519_KEY_SIZE:
            raise KeyFormatError(message="Ed25519 public keys are 32 bytes")
        # For both supported types the ID is a MUST, not the spec's general
        # recommendation: signed-note "Ed25519 signatures", tlog-cosignature "Format".
        if self.key_id != key_id(self.name, self.sig_type, self.public_key):
            raise KeyFormatError(message="key ID does not match name and key")

    @classmethod
    def from_public_key(
        cls, name: str, public_key: bytes, sig_type: int = SIG_TYPE_ED25519
    ) -> Verifier:
        """A verifier for a raw 32-byte Ed25519 public key, computing its key ID."""
        _check_key_fields(name, sig_type)
        return cls(name, key_id(name, sig_type, public_key), public_key, sig_type)

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Whether ``signature`` (64 raw bytes, no key ID) is a valid Ed25519 signature."""
        if len(signature) != ED25519_SIGNATURE_SIZE:
            return False
        try:
            nacl.signing.VerifyKey(self.public_key).verify(message, signature)
        except (nacl.exceptions.BadSignatureError, nacl.exceptions.CryptoError, ValueError):
            return False
        return True

    def verify_note_signature(self, text: bytes, signature: bytes) -> bool:
        """Whether ``signature`` (the bytes after the key ID) is valid on note ``text``.

        Type 0x01 signs the text itself. Type 0x04 carries a big-endian u64
        timestamp (at most 2^63-1) before the signature and signs the
        ``cosignature/v1`` message built from it (tlog-cosignature).
        """
        if self.sig_type == SIG_TYPE_ED25519:
            return self.verify(text, signature)
        if len(signature) != COSIGNATURE_V1_SIZE:
            return False
        timestamp = int.from_bytes(signature[:8], "big")
        if timestamp >= 1 << 63:
            return False
        return self.verify(cosigned_message(text, timestamp), signature[8:])

    def vkey(self) -> str:
        """The verifier key encoding ``name+hex8+base64(type||public key)``."""
        blob = encode_base64(bytes([self.sig_type]) + self.public_key)
        return f"{self.name}+{self.key_id.hex()}+{blob}"

    @classmethod
    def parse(cls, vkey: str) -> Verifier:
        """Parse a type 0x01 (log / note signing) verifier key."""
        return cls._parse(vkey, SIG_TYPE_ED25519)

    @classmethod
    def parse_cosigner(cls, vkey: str) -> Verifier:
        """Parse a type 0x04 ``cosignature/v1`` verifier key (tlog-cosignature, "Format")."""
        return cls._parse(vkey, SIG_TYPE_COSIGNATURE_V1)

    @classmethod
    def _parse(cls, vkey: str, expected_type: int) -> Verifier:
        # Split on '+' at most twice: the base64 key material may contain '+'.
        parts = vkey.split("+", 2)
        if len(parts) != 3:
            raise KeyFormatError(message="verifier key must be name+id+key")
        name, id_hex, blob_b64 = parts
        blob = decode_base64(blob_b64)
        if not is_valid_key_name(name) or not _HEX8.fullmatch(id_hex) or blob is None:
            raise KeyFormatError(message="verifier key is malformed")
        if len(blob) != 1 + ED25519_KEY_SIZE or blob[0] != expected_type:
            raise KeyFormatError(message="verifier key has the wrong type or length")
        return cls(name, bytes.fromhex(id_hex), blob[1:], expected_type)


class Signer:
    """An Ed25519 private key with its key name; never prints its key material."""

    __slots__ = ("_key", "key_id", "name", "public_key", "sig_type")

    def __init__(
        self, name: str, signing_key: nacl.signing.SigningKey, sig_type: int = SIG_TYPE_ED25519
    ) -> None:
        _check_key_fields(name, sig_type)
        self._key = signing_key
        self.name = name
        self.sig_type = sig_type
        self.public_key = bytes(signing_key.verify_key)
        self.key_id = key_id(name, sig_type, self.public_key)

    def __repr__(self) -> str:
        return f"Signer(name={self.name!r}, key_id={self.key_id.hex()}, sig_type={self.sig_type})"

    @classmethod
    def generate(cls, name: str, sig_type: int = SIG_TYPE_ED25519) -> Signer:
        """A fresh random key."""
        return cls(name, nacl.signing.SigningKey.generate(), sig_type)

    @classmethod
    def from_seed(cls, name: str, seed: bytes, sig_type: int = SIG_TYPE_ED25519) -> Signer:
        """The key derived from a 32-byte RFC 8032 seed."""
        if len(seed) != ED25519_KEY_SIZE:
            raise KeyFormatError(message="Ed25519 seeds are 32 bytes")
        return cls(name, nacl.signing.SigningKey(seed), sig_type)

    def with_sig_type(self, sig_type: int) -> Signer:
        """The same key used for another signature type (so with another key ID)."""
        return Signer(self.name, self._key, sig_type)

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``message``."""
        return bytes(self._key.sign(message).signature)

    def verifier(self) -> Verifier:
        """The matching public verifier."""
        return Verifier(self.name, self.key_id, self.public_key, self.sig_type)

    def skey(self) -> str:
        """The private key encoding ``PRIVATE+KEY+name+hex8+base64(type||seed)`` (Go ``note``)."""
        blob = encode_base64(bytes([self.sig_type]) + bytes(self._key))
        return f"{_PRIVATE_PREFIX}{self.name}+{self.key_id.hex()}+{blob}"

    @classmethod
    def parse(cls, skey: str, sig_type: int = SIG_TYPE_ED25519) -> Signer:
        """Parse a private key of the given type; errors never include key material."""
        if not skey.startswith(_PRIVATE_PREFIX):
            raise KeyFormatError(message="private key must start with PRIVATE+KEY+")
        parts = skey[len(_PRIVATE_PREFIX) :].split("+", 2)
        if len(parts) != 3:
            raise KeyFormatError(message="private key is malformed")
        name, id_hex, blob_b64 = parts
        blob = decode_base64(blob_b64)
        if not is_valid_key_name(name) or not _HEX8.fullmatch(id_hex) or blob is None:
            raise KeyFormatError(message="private key is malformed")
        if len(blob) != 1 + ED25519_KEY_SIZE or blob[0] != sig_type:
            raise KeyFormatError(message="private key has the wrong type or length")
        signer = cls.from_seed(name, blob[1:], sig_type)
        if signer.key_id != bytes.fromhex(id_hex):
            raise KeyFormatError(message="private key ID does not match its key")
        return signer


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: key name, 4-byte key ID, and the signature bytes after the ID."""

    name: str
    key_id: bytes
    signature: bytes

    def __post_init__(self) -> None:
        if not is_valid_key_name(self.name):
            raise NoteFormatError(message="invalid key name in signature")
        if len(self.key_id) != KEY_ID_SIZE or not self.signature:
            raise NoteFormatError(message="signature must be a key ID and at least one byte")

    def line(self) -> str:
        """The signature line: em dash, space, name, space, base64(key ID || signature), newline."""
        return f"{_SIG_PREFIX}{self.name} {encode_base64(self.key_id + self.signature)}\n"


@dataclass(frozen=True)
class Note:
    """An opened note: its text, the signatures verified, and those from unknown keys."""

    text: str
    signatures: tuple[NoteSignature, ...]
    unverified: tuple[NoteSignature, ...]


def _check_text(text: str) -> bytes:
    """Encode note text, enforcing the spec's rules for what a text may be."""
    if not text or not text.endswith("\n"):
        raise NoteFormatError(message="note text must be non-empty and end in a newline")
    if _CONTROL.search(text):
        raise NoteFormatError(message="note text contains a control character")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise NoteFormatError(message="note text is not valid Unicode") from None


def _encode(text: str, signatures: Iterable[NoteSignature]) -> bytes:
    lines = [sig.line() for sig in signatures]
    if not lines or len(lines) > MAX_SIGNATURES:
        raise NoteFormatError(message="a note has between 1 and 100 signatures")
    msg = (text + "\n" + "".join(lines)).encode("utf-8")
    if len(msg) > MAX_NOTE_SIZE:
        raise NoteFormatError(message="note is too large")
    return msg


def sign_note(text: str, *signers: Signer) -> bytes:
    """Sign ``text`` with each Ed25519 (type 0x01) signer and encode the note.

    Repeated signers (same name and key ID) sign once.
    """
    raw = _check_text(text)
    sigs: list[NoteSignature] = []
    seen: set[tuple[str, bytes]] = set()
    for signer in signers:
        if signer.sig_type != SIG_TYPE_ED25519:
            raise KeyFormatError(message="only type 0x01 keys sign note text directly")
        if (signer.name, signer.key_id) in seen:
            continue
        seen.add((signer.name, signer.key_id))
        sigs.append(NoteSignature(signer.name, signer.key_id, signer.sign(raw)))
    return _encode(text, sigs)


def parse_note(msg: bytes) -> tuple[str, tuple[NoteSignature, ...]]:
    """Split a note into its text and signature lines, checking structure only.

    Nothing is verified: the text must not be trusted on the strength of this
    function alone (use :func:`open_note`).
    """
    if len(msg) > MAX_NOTE_SIZE:
        raise NoteFormatError(message="note is too large")
    try:
        decoded = msg.decode("utf-8")
    except UnicodeDecodeError:
        raise NoteFormatError(message="note is not valid UTF-8") from None
    if _CONTROL.search(decoded):
        raise NoteFormatError(message="note contains a control character")
    # The text ends with the newline before the last blank line (signed-note, "Format").
    split = decoded.rfind("\n\n")
    if split < 0:
        raise NoteFormatError(message="note has no blank line before its signatures")
    text, block = decoded[: split + 1], decoded[split + 2 :]
    if not block.endswith("\n"):
        raise NoteFormatError(message="note must end with a signature line")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteFormatError(message="note has too many signatures")
    sigs: list[NoteSignature] = []
    for line in lines:
        if not line.startswith(_SIG_PREFIX):
            raise NoteFormatError(message="signature line must start with an em dash and space")
        name, sep, blob_b64 = line[len(_SIG_PREFIX) :].partition(" ")
        blob = decode_base64(blob_b64)
        if not sep or blob is None or len(blob) <= KEY_ID_SIZE or not is_valid_key_name(name):
            raise NoteFormatError(message="malformed signature line")
        sigs.append(NoteSignature(name, blob[:KEY_ID_SIZE], blob[KEY_ID_SIZE:]))
    return text, tuple(sigs)


def open_note(msg: bytes, verifiers: Iterable[Verifier]) -> Note:
    """Parse a note and verify its signatures against the configured keys.

    Per signed-note "Signatures": lines whose (name, key ID) matches no key are
    kept in ``unverified``; every line that matches a key is verified (repeats
    included) and any failure rejects the note; at least one must verify.
    Identical repeated lines are reported once.
    """
    known: dict[tuple[str, bytes], Verifier] = {}
    for v in verifiers:
        if known.setdefault((v.name, v.key_id), v) != v:
            raise KeyFormatError(
                ErrorCode.AMBIGUOUS_KEY, "two configured keys share a name and key ID"
            )
    text, sigs = parse_note(msg)
    raw = text.encode("utf-8")
    verified: list[NoteSignature] = []
    unverified: list[NoteSignature] = []
    for sig in sigs:
        verifier = known.get((sig.name, sig.key_id))
        if verifier is None:
            if sig not in unverified:
                unverified.append(sig)
            continue
        if not verifier.verify_note_signature(raw, sig.signature):
            raise InvalidNoteSignatureError(message="a signature from a known key is invalid")
        if sig not in verified:
            verified.append(sig)
    if not verified:
        raise UnverifiedNoteError(message="no signature from a known key")
    return Note(text, tuple(verified), tuple(unverified))


def add_signature_lines(msg: bytes, *signatures: NoteSignature) -> bytes:
    """Append signature lines to a well-formed note (for example cosignatures).

    As in Go's ``note.Sign``, an existing line from the same key (name and key
    ID) is replaced by the new one, so re-cosigning refreshes a timestamp
    instead of piling up lines. Nothing is verified here.
    """
    text, existing = parse_note(msg)
    replaced = {(sig.name, sig.key_id) for sig in signatures}
    kept = [sig for sig in existing if (sig.name, sig.key_id) not in replaced]
    if len(replaced) != len(signatures):
        raise NoteFormatError(message="two new signatures from the same key")
    return _encode(text, kept + list(signatures))
