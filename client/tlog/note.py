"""Signed notes (C2SP signed-note v1.0.0) with Ed25519 and ML-DSA-44 keys.

A note is UTF-8 text, a blank line, and signature lines ``— <key name>
base64(key ID || signature)``. ``parse_note`` checks structure only; the text must be
ignored unless ``open_note`` returned it. Rules ("Format", "Signatures"):

1. Valid UTF-8, no control character but newline; the text runs up to and including
   the newline before the last blank line.
2. Key names are non-empty, without Unicode spaces or ``+``.
3. Base64 is the standard alphabet with padding (RFC 4648 section 4), in its one
   canonical form.
4. A signature whose (name, key ID) matches no configured key is kept unverified; one
   that matches is verified, and a failure rejects the note; a note with no verified
   signature is rejected. Identical repeated lines are reported once.
5. Notes over 1 MiB or with more than 100 signature lines are refused before any
   signature is checked, as Go's ``note`` does.

Keys use Go's ``note`` encodings: ``name+hex8+base64(type||key)`` and
``PRIVATE+KEY+name+hex8+base64(type||seed)``. Type 0x01 keys sign the text; type 0x04
(Ed25519) and 0x06 (ML-DSA-44, a 32-byte FIPS 204 seed) are tlog-cosignature cosigner
keys, whose signatures cover a timestamped message instead.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import unicodedata
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import nacl.exceptions
import nacl.signing
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA44PrivateKey, MLDSA44PublicKey

from deplog.client.errors import ErrorCode, FormatError, VerificationError

SIG_TYPE_ED25519 = 0x01
"""Signature type byte of Ed25519 note signatures (signed-note, "Signature types")."""

SIG_TYPE_COSIGNATURE_V1 = 0x04
"""Signature type byte of timestamped Ed25519 witness cosignatures (tlog-cosignature)."""

SIG_TYPE_COSIGNATURE_MLDSA44 = 0x06
"""Signature type byte of timestamped ML-DSA-44 witness cosignatures (tlog-cosignature v1.1)."""

COSIGNER_TYPES = (SIG_TYPE_COSIGNATURE_V1, SIG_TYPE_COSIGNATURE_MLDSA44)
"""The cosigner key types a witness key may have: Ed25519 (0x04) and ML-DSA-44 (0x06)."""

MAX_NOTE_SIZE = 1 << 20
"""Largest note accepted, in bytes; bounds the work an untrusted note can cause."""

MAX_SIGNATURES = 100
"""Most signature lines accepted in one note (the spec requires at least 16)."""

KEY_ID_SIZE = 4
ED25519_KEY_SIZE = 32
ED25519_SIGNATURE_SIZE = 64
COSIGNATURE_V1_SIZE = 8 + ED25519_SIGNATURE_SIZE
"""A ``cosignature/v1`` payload: big-endian u64 timestamp, then the Ed25519 signature."""
MLDSA44_KEY_SIZE = 1312
MLDSA44_SIGNATURE_SIZE = 2420
MLDSA44_SEED_SIZE = 32
COSIGNATURE_MLDSA44_SIZE = 8 + MLDSA44_SIGNATURE_SIZE
"""An ML-DSA-44 ``timestamped_signature``: big-endian u64 timestamp, then the signature."""
SUBTREE_LABEL = b"subtree/v1\n\0"
"""The 12-byte label that starts every ML-DSA-44 ``cosigned_message`` (tlog-cosignature)."""

_KEY_SIZES = {
    SIG_TYPE_ED25519: ED25519_KEY_SIZE,
    SIG_TYPE_COSIGNATURE_V1: ED25519_KEY_SIZE,
    SIG_TYPE_COSIGNATURE_MLDSA44: MLDSA44_KEY_SIZE,
}
_SEED_SIZES = {
    SIG_TYPE_ED25519: ED25519_KEY_SIZE,
    SIG_TYPE_COSIGNATURE_V1: ED25519_KEY_SIZE,
    SIG_TYPE_COSIGNATURE_MLDSA44: MLDSA44_SEED_SIZE,
}

_SIG_PREFIX = "\u2014 "
_PRIVATE_PREFIX = "PRIVATE+KEY+"
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")
_HEX8 = re.compile("[0-9a-f]{8}")
_SUPPORTED_TYPES = (SIG_TYPE_ED25519, *COSIGNER_TYPES)
_DECIMAL = re.compile(rb"0|[1-9][0-9]{0,18}")
_MAX_TIMESTAMP = (1 << 63) - 1
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
    """Decode canonical standard base64 (RFC 4648 section 4), or None: one spelling a value."""
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
    """Key names are non-empty, without Unicode spaces, ``+``, controls or surrogates."""
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
    """The message an Ed25519 ``cosignature/v1`` signs: its header, ``time <timestamp>`` (at
    most 2^63-1) and the whole note text (tlog-cosignature, "Ed25519 signed message")."""
    if isinstance(timestamp, bool) or not 0 <= timestamp < 1 << 63:
        raise NoteFormatError(message="cosignature timestamp out of range")
    return b"cosignature/v1\ntime " + str(timestamp).encode("ascii") + b"\n" + text


def tree_lines(text: bytes) -> tuple[bytes, int, bytes] | None:
    """The origin, size and root of a checkpoint body's first three lines, or None."""
    lines = text.split(b"\n", 3)
    if len(lines) < 4 or not lines[0]:
        return None
    origin, size_text, root_text = lines[:3]
    if not _DECIMAL.fullmatch(size_text) or int(size_text) > _MAX_TIMESTAMP:
        return None
    try:
        root = decode_base64(root_text.decode("ascii"))
    except UnicodeDecodeError:
        return None
    if root is None or len(root) != 32:
        return None
    return origin, int(size_text), root


def subtree_cosigned_message(
    cosigner_name: str, timestamp: int, origin: bytes, start: int, end: int, root: bytes
) -> bytes:
    """The ``cosigned_message`` an ML-DSA-44 cosignature signs (tlog-cosignature v1.1): the
    label, the cosigner name and origin (u8 length each), u64 timestamp, start and end,
    and the hash; for a checkpoint start is 0 and end its size."""
    name = cosigner_name.encode("utf-8")
    for value in (timestamp, start, end):
        if isinstance(value, bool) or not 0 <= value <= _MAX_TIMESTAMP:
            raise NoteFormatError(message="cosigned message integer out of range")
    if not 1 <= len(name) <= 255 or not 1 <= len(origin) <= 255 or len(root) != 32:
        raise NoteFormatError(message="cosigned message field has the wrong length")
    return b"".join(
        [
            SUBTREE_LABEL,
            bytes([len(name)]),
            name,
            timestamp.to_bytes(8, "big"),
            bytes([len(origin)]),
            origin,
            start.to_bytes(8, "big"),
            end.to_bytes(8, "big"),
            root,
        ]
    )


def _check_key_fields(name: str, sig_type: int) -> None:
    if not is_valid_key_name(name):
        raise KeyFormatError(message="key name is empty or contains spaces or '+'")
    if sig_type not in _SUPPORTED_TYPES:
        raise KeyFormatError(message="unsupported signature type")
    if sig_type == SIG_TYPE_COSIGNATURE_MLDSA44 and len(name.encode("utf-8")) > 255:
        raise KeyFormatError(message="an ML-DSA-44 cosigner name is at most 255 bytes")


def _key_parts(text: str, what: str, unsplit: str) -> tuple[str, bytes, bytes]:
    """Name, key ID and blob of ``name+hex8+base64``; ``unsplit``: the message otherwise."""
    parts = text.split("+", 2)
    if len(parts) != 3:
        raise KeyFormatError(message=unsplit)
    name, id_hex, blob_b64 = parts
    blob = decode_base64(blob_b64)
    if not is_valid_key_name(name) or not _HEX8.fullmatch(id_hex) or blob is None:
        raise KeyFormatError(message=f"{what} is malformed")
    return name, bytes.fromhex(id_hex), blob


@dataclass(frozen=True)
class Verifier:
    """A public key that checks note signatures, named by its (name, key ID) pair."""

    name: str
    key_id: bytes
    public_key: bytes
    sig_type: int = SIG_TYPE_ED25519

    def __post_init__(self) -> None:
        _check_key_fields(self.name, self.sig_type)
        if len(self.public_key) != _KEY_SIZES[self.sig_type]:
            raise KeyFormatError(message="public key has the wrong length for its type")
        # For every supported type the ID is a MUST (signed-note, tlog-cosignature).
        if self.key_id != key_id(self.name, self.sig_type, self.public_key):
            raise KeyFormatError(message="key ID does not match name and key")

    @property
    def is_mldsa(self) -> bool:
        """Whether this is an ML-DSA-44 (type 0x06) cosigner key."""
        return self.sig_type == SIG_TYPE_COSIGNATURE_MLDSA44

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Whether a raw ``signature`` is valid on ``message`` (ML-DSA-44: pure, no context)."""
        if self.is_mldsa:
            if len(signature) != MLDSA44_SIGNATURE_SIZE:
                return False
            try:
                MLDSA44PublicKey.from_public_bytes(self.public_key).verify(signature, message)
            except (InvalidSignature, ValueError):
                return False
            return True
        if len(signature) != ED25519_SIGNATURE_SIZE:
            return False
        try:
            nacl.signing.VerifyKey(self.public_key).verify(message, signature)
        except (nacl.exceptions.BadSignatureError, nacl.exceptions.CryptoError, ValueError):
            return False
        return True

    def verify_note_signature(self, text: bytes, signature: bytes) -> bool:
        """Whether a signature line's bytes after the key ID are valid on note ``text``:
        over the text itself (0x01), or a timestamp and a signature of the message it
        makes (0x04: ``cosigned_message``; 0x06: ``subtree_cosigned_message``)."""
        if self.sig_type == SIG_TYPE_ED25519:
            return self.verify(text, signature)
        size = COSIGNATURE_MLDSA44_SIZE if self.is_mldsa else COSIGNATURE_V1_SIZE
        if len(signature) != size:
            return False
        timestamp = int.from_bytes(signature[:8], "big")
        if timestamp > _MAX_TIMESTAMP:
            return False
        if not self.is_mldsa:
            return self.verify(cosigned_message(text, timestamp), signature[8:])
        tree = tree_lines(text)
        if tree is None or not 1 <= len(tree[0]) <= 255:
            return False
        origin, end, root = tree
        message = subtree_cosigned_message(self.name, timestamp, origin, 0, end, root)
        return self.verify(message, signature[8:])

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
        """Parse a cosigner verifier key: type 0x04 (Ed25519) or 0x06 (ML-DSA-44)."""
        return cls._parse(vkey, *COSIGNER_TYPES)

    @classmethod
    def _parse(cls, vkey: str, *expected_types: int) -> Verifier:
        name, kid, blob = _key_parts(vkey, "verifier key", "verifier key must be name+id+key")
        if not blob or blob[0] not in expected_types or len(blob) != 1 + _KEY_SIZES[blob[0]]:
            raise KeyFormatError(message="verifier key has the wrong type or length")
        return cls(name, kid, blob[1:], blob[0])


class Signer:
    """An Ed25519 or ML-DSA-44 private key (with its seed) and key name; never printed."""

    __slots__ = ("_key", "_seed", "key_id", "name", "public_key", "sig_type")

    def __init__(
        self,
        name: str,
        signing_key: nacl.signing.SigningKey | MLDSA44PrivateKey,
        sig_type: int = SIG_TYPE_ED25519,
        *,
        seed: bytes | None = None,
    ) -> None:
        _check_key_fields(name, sig_type)
        mldsa = sig_type == SIG_TYPE_COSIGNATURE_MLDSA44
        if mldsa != isinstance(signing_key, MLDSA44PrivateKey):
            raise KeyFormatError(message="type 0x06 keys, and only they, are ML-DSA-44 keys")
        self._key = signing_key
        if isinstance(signing_key, MLDSA44PrivateKey):
            if seed is None or len(seed) != MLDSA44_SEED_SIZE:
                raise KeyFormatError(message="an ML-DSA-44 key is kept with its 32-byte seed")
            self._seed = seed
            self.public_key = signing_key.public_key().public_bytes_raw()
        else:
            self._seed = bytes(signing_key)
            self.public_key = bytes(signing_key.verify_key)
        self.name = name
        self.sig_type = sig_type
        self.key_id = key_id(name, sig_type, self.public_key)

    def __repr__(self) -> str:
        return f"Signer(name={self.name!r}, key_id={self.key_id.hex()}, sig_type={self.sig_type})"

    @classmethod
    def generate(cls, name: str, sig_type: int = SIG_TYPE_ED25519) -> Signer:
        """A fresh random key."""
        if sig_type == SIG_TYPE_COSIGNATURE_MLDSA44:
            return cls.from_seed(name, os.urandom(MLDSA44_SEED_SIZE), sig_type)
        return cls(name, nacl.signing.SigningKey.generate(), sig_type)

    @classmethod
    def from_seed(cls, name: str, seed: bytes, sig_type: int = SIG_TYPE_ED25519) -> Signer:
        """The key of a 32-byte seed: RFC 8032 for Ed25519, FIPS 204 ``xi`` for ML-DSA-44."""
        _check_key_fields(name, sig_type)
        if len(seed) != _SEED_SIZES[sig_type]:
            raise KeyFormatError(message="seeds are 32 bytes")
        if sig_type == SIG_TYPE_COSIGNATURE_MLDSA44:
            return cls(name, MLDSA44PrivateKey.from_seed_bytes(seed), sig_type, seed=bytes(seed))
        return cls(name, nacl.signing.SigningKey(seed), sig_type)

    def with_sig_type(self, sig_type: int) -> Signer:
        """The same Ed25519 key used for another signature type (so with another key ID)."""
        if (
            self.sig_type == SIG_TYPE_COSIGNATURE_MLDSA44
            or sig_type == SIG_TYPE_COSIGNATURE_MLDSA44
        ):
            raise KeyFormatError(message="an ML-DSA-44 key has one signature type, 0x06")
        return Signer(self.name, self._key, sig_type)

    def sign(self, message: bytes) -> bytes:
        """The signature of ``message`` (ML-DSA-44's is hedged: two of one message differ)."""
        if isinstance(self._key, MLDSA44PrivateKey):
            return self._key.sign(message)
        return bytes(self._key.sign(message).signature)

    def verifier(self) -> Verifier:
        """The matching public verifier."""
        return Verifier(self.name, self.key_id, self.public_key, self.sig_type)

    def skey(self) -> str:
        """The private key encoding ``PRIVATE+KEY+name+hex8+base64(type||seed)`` (Go ``note``)."""
        blob = encode_base64(bytes([self.sig_type]) + self._seed)
        return f"{_PRIVATE_PREFIX}{self.name}+{self.key_id.hex()}+{blob}"

    @classmethod
    def parse(cls, skey: str, sig_type: int | Collection[int] = SIG_TYPE_ED25519) -> Signer:
        """Parse a private key of one of the given types; errors never show key material."""
        types = (sig_type,) if isinstance(sig_type, int) else tuple(sig_type)
        if not skey.startswith(_PRIVATE_PREFIX):
            raise KeyFormatError(message="private key must start with PRIVATE+KEY+")
        text = skey[len(_PRIVATE_PREFIX) :]
        name, kid, blob = _key_parts(text, "private key", "private key is malformed")
        if not blob or blob[0] not in types or len(blob) != 1 + _SEED_SIZES[blob[0]]:
            raise KeyFormatError(message="private key has the wrong type or length")
        signer = cls.from_seed(name, blob[1:], blob[0])
        if signer.key_id != kid:
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
    """Sign ``text`` with each type 0x01 signer (a repeated one once) and encode the note."""
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
    """Split a note into its text and signature lines; nothing is verified (``open_note``)."""
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
    """Parse a note and verify its signatures against the configured keys (rule 4)."""
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
    """Append signature lines to a note, replacing a same key's (as Go's ``note.Sign``)."""
    text, existing = parse_note(msg)
    replaced = {(sig.name, sig.key_id) for sig in signatures}
    kept = [sig for sig in existing if (sig.name, sig.key_id) not in replaced]
    if len(replaced) != len(signatures):
        raise NoteFormatError(message="two new signatures from the same key")
    return _encode(text, kept + list(signatures))
