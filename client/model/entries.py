"""Log entries: the records whose canonical bytes are the Merkle tree's leaves.

Two kinds share the log, so that an auditor replaying it from entry 0 sees
authorization change in the same order as the notices it governs:

- ``{"type": "notice", "notice": {...}, "signature": {...}}``: a publisher's
  envelope, flattened;
- ``{"type": "publisher", "statement": {...}, "signature": {...}}``: a
  publisher registration, key change or revocation, signed by the authority's
  log key over ``b"deplog/publisher-statement/v1\\n" + canonical(statement)``.
  The prefix keeps an authority signature on a statement from ever being
  valid as a signature on anything else the same key signs (checkpoints are
  signed notes, whose text never starts with ``deplog/``).

A leaf must be the canonical (RFC 8785) encoding of its entry: one entry has
exactly one leaf, so its hash is a stable identifier.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from deplog.client.errors import ErrorCode, FormatError, VerificationError
from deplog.client.model import canonical
from deplog.client.model.notice import (
    Envelope,
    NoticeError,
    encode_signature,
    parse_namespace,
    parse_publisher_id,
    parse_signature_object,
    parse_timestamp,
    require_list,
    require_object,
    require_str,
    require_unique,
)
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.timestamps import format_timestamp

if TYPE_CHECKING:
    from deplog.client.tlog.note import Signer

__all__ = [
    "MAX_ENTRY_BYTES",
    "PUBLISHER_STATEMENT_PREFIX",
    "STATEMENT_ACTIONS",
    "Entry",
    "EntryFormatError",
    "EntrySignatureError",
    "NoticeEntry",
    "PublisherEntry",
    "PublisherStatement",
    "decode_entry",
    "encode_entry",
    "sign_publisher_statement",
]

PUBLISHER_STATEMENT_PREFIX: Final = b"deplog/publisher-statement/v1\n"
# C2SP tlog-tiles entry bundles prefix each entry with a big-endian u16 length,
# so no leaf may be longer; a 60 KiB envelope plus the "type" member fits.
MAX_ENTRY_BYTES: Final = 65535
MAX_NAMESPACES: Final = 64
MAX_KEYS: Final = 16

# A canonical notice entry is these bytes, the notice, these, the signature object, then
# its "type" member: RFC 8785 orders the members notice < signature < type.
_NOTICE_OPEN: Final = b'{"notice":'
_SIGNATURE_MEMBER: Final = b',"signature":'

StatementAction = Literal["register", "add_key", "revoke_key", "revoke_publisher"]
STATEMENT_ACTIONS: Final[tuple[str, ...]] = (
    "register",
    "add_key",
    "revoke_key",
    "revoke_publisher",
)
_STATEMENT_FIELDS: Final = frozenset({"action", "publisher", "namespaces", "keys", "issued_at"})
# Per action: fields it requires (beyond action/publisher/issued_at) and refuses.
_STATEMENT_RULES: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "register": (("namespaces", "keys"), ()),
    "add_key": (("keys",), ("namespaces",)),
    "revoke_key": (("keys",), ("namespaces",)),
    "revoke_publisher": ((), ("namespaces", "keys")),
}


class EntryFormatError(FormatError):
    """A leaf that is not a well-formed, canonical log entry, or one too large to be a leaf."""

    codes = frozenset(
        {ErrorCode.MALFORMED_ENTRY, ErrorCode.NONCANONICAL_ENTRY, ErrorCode.LEAF_TOO_LARGE}
    )
    code = ErrorCode.MALFORMED_ENTRY


class EntrySignatureError(VerificationError):
    """A publisher statement without a valid signature by the authority's log key."""

    code = ErrorCode.BAD_AUTHORITY_SIGNATURE


@dataclass(frozen=True)
class PublisherStatement:
    """An authority decision about a publisher: register, add/revoke keys, revoke it.

    ``keys`` are verifier key strings (``name+hex8+base64(0x01||key)``) kept
    exactly as written so that the statement re-encodes byte for byte.
    """

    action: StatementAction
    publisher: str
    issued_at: datetime
    namespaces: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, obj: object) -> PublisherStatement:
        """Validate a decoded statement: NoticeError codes as for notices, KeyFormatError
        ``bad_key`` for a key that is not a type 0x01 verifier key."""
        o = require_object(
            obj, required=("action", "publisher", "issued_at"), allowed=_STATEMENT_FIELDS
        )
        action_s = require_str(o["action"])
        if action_s not in STATEMENT_ACTIONS:
            raise NoticeError(ErrorCode.BAD_ACTION)
        action: StatementAction = action_s  # type: ignore[assignment]
        required, forbidden = _STATEMENT_RULES[action]
        for name in forbidden:
            if name in o:
                raise NoticeError(ErrorCode.FIELD_NOT_ALLOWED)
        for name in required:
            if name not in o:
                raise NoticeError(ErrorCode.MISSING_FIELD)
        publisher = parse_publisher_id(o["publisher"])
        namespaces: tuple[str, ...] = ()
        if "namespaces" in o:
            items = require_list(o["namespaces"], max_items=MAX_NAMESPACES)
            namespaces = tuple(parse_namespace(n) for n in items)
            require_unique(namespaces)
        keys: tuple[str, ...] = ()
        if "keys" in o:
            items = require_list(o["keys"], max_items=MAX_KEYS)
            keys = tuple(require_str(k) for k in items)
            for k in keys:
                Verifier.parse(k)
            require_unique(keys)
        return cls(action, publisher, parse_timestamp(o["issued_at"]), namespaces, keys)

    def to_json(self) -> dict[str, Any]:
        """The JSON object form; round-trips through ``from_json``."""
        out: dict[str, Any] = {
            "action": self.action,
            "publisher": self.publisher,
            "issued_at": format_timestamp(self.issued_at),
        }
        if self.namespaces:
            out["namespaces"] = list(self.namespaces)
        if self.keys:
            out["keys"] = list(self.keys)
        return out

    def signed_bytes(self) -> bytes:
        """What the authority signs: a domain prefix, then the canonical statement."""
        return PUBLISHER_STATEMENT_PREFIX + canonical.dumps(self.to_json())

    def verifiers(self) -> tuple[Verifier, ...]:
        """The parsed publisher keys named by the statement."""
        return tuple(Verifier.parse(k) for k in self.keys)


@dataclass(frozen=True)
class NoticeEntry:
    """A publisher's signed notice as a log entry."""

    envelope: Envelope

    def to_json(self) -> dict[str, Any]:
        """``{"type": "notice", "notice": ..., "signature": ...}``."""
        return {"type": "notice", **self.envelope.to_json()}


@dataclass(frozen=True)
class PublisherEntry:
    """An authority-signed publisher statement as a log entry."""

    statement: PublisherStatement
    signature: bytes
    key_id: bytes

    def to_json(self) -> dict[str, Any]:
        """``{"type": "publisher", "statement": ..., "signature": ...}``."""
        return {
            "type": "publisher",
            "statement": self.statement.to_json(),
            "signature": encode_signature(self.key_id, self.signature),
        }

    def verify(self, authority: Verifier) -> None:
        """Check the authority's signature; EntrySignatureError if another key made it
        or it does not verify."""
        if bytes(authority.key_id) != self.key_id:
            raise EntrySignatureError(message="signed by another key")
        if not authority.verify(self.statement.signed_bytes(), self.signature):
            raise EntrySignatureError(message="signature does not verify")


Entry = NoticeEntry | PublisherEntry


def sign_publisher_statement(statement: PublisherStatement, signer: Signer) -> PublisherEntry:
    """Sign ``statement`` with the authority's log key."""
    return PublisherEntry(statement, signer.sign(statement.signed_bytes()), bytes(signer.key_id))


def encode_entry(entry: Entry) -> bytes:
    """The leaf bytes of ``entry``: its RFC 8785 canonical JSON.

    A notice entry reuses the notice's canonical bytes (already computed to
    check its signature): the members "notice" < "signature" < "type" are in
    RFC 8785 order, so the concatenation is the canonical encoding itself.
    """
    if isinstance(entry, NoticeEntry):
        envelope = entry.envelope
        signature = canonical.dumps(encode_signature(envelope.key_id, envelope.signature))
        return (
            _NOTICE_OPEN
            + envelope.notice.canonical_bytes()
            + _SIGNATURE_MEMBER
            + signature
            + b',"type":"notice"}'
        )
    return canonical.dumps(entry.to_json())


def decode_entry(leaf: bytes) -> Entry:
    """Parse leaf bytes strictly; the leaf must be canonical.

    Structural problems are EntryFormatError (``malformed_entry``, or
    ``leaf_too_large`` / ``noncanonical_entry``); problems inside the notice or
    statement keep their specific NoticeError codes; bad JSON keeps its
    JSONFormatError code.
    """
    if len(leaf) > MAX_ENTRY_BYTES:
        raise EntryFormatError(ErrorCode.LEAF_TOO_LARGE)
    value, is_canonical = canonical.loads_checked(leaf)
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise EntryFormatError()
    kind = value["type"]
    entry: Entry
    if kind == "notice":
        if set(value) != {"type", "notice", "signature"}:
            raise EntryFormatError()
        envelope = Envelope.from_json({"notice": value["notice"], "signature": value["signature"]})
        entry = NoticeEntry(envelope)
    elif kind == "publisher":
        if set(value) != {"type", "statement", "signature"}:
            raise EntryFormatError()
        statement = PublisherStatement.from_json(value["statement"])
        key_id, sig = parse_signature_object(value["signature"])
        entry = PublisherEntry(statement, sig, key_id)
    else:
        raise EntryFormatError()
    # Canonical means both: the leaf is the RFC 8785 encoding of its JSON value, and
    # that value is the model's own form of the entry (compared as values, so the
    # entry is never encoded again). Then the notice's canonical bytes, which its
    # signature covers, are the leaf's slice between its first two members.
    if not is_canonical or entry.to_json() != value:
        raise EntryFormatError(ErrorCode.NONCANONICAL_ENTRY)
    if isinstance(entry, NoticeEntry):
        data = bytes(leaf)
        entry.envelope.notice.adopt_canonical_bytes(
            data[len(_NOTICE_OPEN) : data.rindex(_SIGNATURE_MEMBER)]
        )
    return entry
