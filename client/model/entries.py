"""Log entries: the records whose canonical bytes are the Merkle tree's leaves.

Two kinds share the log, so an auditor replaying it sees authorization change in the
order of the notices it governs:

- ``{"type": "notice", "notice": {...}, "signature": {...}}``: a publisher's envelope;
- ``{"type": "publisher", "statement": {...}, "signature": {...}}``: a publisher's
  registration, key change or revocation, signed by the authority's log key.

Rules:

1. A statement is signed over ``b"deplog/publisher-statement/v1\\n" + canonical(it)``: the
   prefix keeps the signature from being valid on anything else the key signs.
2. A leaf is the canonical (RFC 8785) encoding of its entry, so an entry has one leaf
   and its hash is a stable identifier; no leaf exceeds ``MAX_ENTRY_BYTES``.
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
    require_fields,
    require_list,
    require_object,
    require_str,
    require_unique,
)
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.timestamps import format_timestamp

if TYPE_CHECKING:
    from deplog.client.tlog.note import Signer

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
    """An authority decision about a publisher; ``keys`` kept as written, to re-encode."""

    action: StatementAction
    publisher: str
    issued_at: datetime
    namespaces: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, obj: object) -> PublisherStatement:
        """Validate a decoded statement: the notice schema's codes, ``bad_key`` for a key."""
        o = require_object(
            obj, required=("action", "publisher", "issued_at"), allowed=_STATEMENT_FIELDS
        )
        action_s = require_str(o["action"])
        if action_s not in STATEMENT_ACTIONS:
            raise NoticeError(ErrorCode.BAD_ACTION)
        action: StatementAction = action_s  # type: ignore[assignment]
        require_fields(o, *_STATEMENT_RULES[action])
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
        """Check the authority's signature (``EntrySignatureError``)."""
        if bytes(authority.key_id) != self.key_id:
            raise EntrySignatureError(message="signed by another key")
        if not authority.verify(self.statement.signed_bytes(), self.signature):
            raise EntrySignatureError(message="signature does not verify")


Entry = NoticeEntry | PublisherEntry


def sign_publisher_statement(statement: PublisherStatement, signer: Signer) -> PublisherEntry:
    """Sign ``statement`` with the authority's log key."""
    return PublisherEntry(statement, signer.sign(statement.signed_bytes()), bytes(signer.key_id))


def encode_entry(entry: Entry) -> bytes:
    """The leaf bytes of ``entry``: its RFC 8785 canonical JSON (rule 2)."""
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
    """Parse leaf bytes strictly (rule 2); the notice's own codes keep theirs."""
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
    # Canonical: the leaf encodes its value, which is the model's own form of the entry;
    # then the notice's canonical bytes are the leaf's slice between its first members.
    if not is_canonical or entry.to_json() != value:
        raise EntryFormatError(ErrorCode.NONCANONICAL_ENTRY)
    if isinstance(entry, NoticeEntry):
        data = bytes(leaf)
        entry.envelope.notice.adopt_canonical_bytes(
            data[len(_NOTICE_OPEN) : data.rindex(_SIGNATURE_MEMBER)]
        )
    return entry
