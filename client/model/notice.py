"""Deprecation notices and the publisher-signed envelope that carries them.

A ``Notice`` is a content-free governance record: which versions of which tool are
deprecated or revoked, why, from when, and who says so. Rules:

1. Parsing is a closed-world schema check: unknown fields, wrong types and values out of
   range are refused, one stable code per kind (``NoticeError``; a version keeps
   ``SemverError``), never with the offending value in the message.
2. Optional lists are absent or non-empty, so ``to_json`` reproduces the input exactly.
3. ``reasons`` is required for every action; a withdraw carries no ``affected``,
   ``sunset_at``, ``replacement`` or ``schema_digest``: it only names what it retracts.
4. ``message`` is 1..500 code points, with no control, line or paragraph separator or
   bidirectional formatting character.
5. OSV ``"introduced": "0"`` only opens a range; events strictly increase and alternate
   introduced / (fixed | last_affected). Versions match by SemVer precedence (build
   metadata ignored), so a notice about ``1.0.0`` covers ``1.0.0+build7``.
6. ``ACTIONS``, ``REASONS`` and ``EVENT_KINDS`` are defined once, in a fixed order: the
   map record encodes a value as its position, so they are only appended to.
7. An envelope over ``MAX_ENVELOPE_BYTES`` is ``TooLargeError``, bad JSON
   ``JSONFormatError``.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from deplog.client.errors import ErrorCode, FormatError, TooLargeError, VerificationError
from deplog.client.model import canonical
from deplog.client.model.semver import Version
from deplog.client.tlog.note import decode_base64, encode_base64
from deplog.client.tlog.timestamps import format_timestamp

if TYPE_CHECKING:
    from deplog.client.tlog.note import Signer, Verifier

MAX_ENVELOPE_BYTES: Final = 60 * 1024
"""An envelope's bound: its leaf must fit a tlog-tiles bundle's u16 length (entries.py)."""
MAX_SAFE_INTEGER: Final = canonical.MAX_SAFE_INTEGER
_PARSE_CACHE: Final = 4096
"""Strings memoized per parser: a log repeats its tools, versions and times."""
MAX_MESSAGE_CHARS: Final = 500
MAX_VERSIONS: Final = 256
MAX_RANGES: Final = 32
MAX_EVENTS: Final = 64
MAX_ADVISORIES: Final = 32
MAX_NAMESPACE_CHARS: Final = 253
MAX_TOOL_NAME_CHARS: Final = 128

# The closed enumerations (rule 6): the map record encodes each value as its position.
Action = Literal["deprecate", "revoke", "withdraw"]
ACTIONS: Final[tuple[str, ...]] = ("deprecate", "revoke", "withdraw")
"""What a notice does, in record-code order."""
REASONS: Final[tuple[str, ...]] = (
    "superseded",
    "end_of_life",
    "security",
    "critical_bug",
    "schema_change",
    "moved",
    "policy",
    "other",
)
"""Why, the closed set of the contract, in record-code order."""
EVENT_KINDS: Final[tuple[str, ...]] = ("introduced", "fixed", "last_affected")
"""The OSV events of a ``SEMVER`` range, in record-code order."""

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_NAMESPACE_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})+", re.ASCII)
_TOOL_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]*", re.ASCII)
_PUBLISHER_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}", re.ASCII)
_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)
_GHSA_CHARS = "[23456789cfghjmpqrvwx]{4}"
_ADVISORY_RE = re.compile(
    rf"CVE-[0-9]{{4}}-[0-9]{{4,19}}|GHSA-{_GHSA_CHARS}-{_GHSA_CHARS}-{_GHSA_CHARS}", re.ASCII
)
_TIMESTAMP_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z", re.ASCII
)
_KEY_ID_RE = re.compile(r"[0-9a-f]{8}", re.ASCII)
# Bidirectional formatting characters (Trojan Source, CVE-2021-42574).
_BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)

NOTICE_FIELDS: Final[frozenset[str]] = frozenset(
    {
        "tool_id",
        "action",
        "affected",
        "withdraws",
        "schema_digest",
        "reasons",
        "advisories",
        "replacement",
        "effective_at",
        "sunset_at",
        "issued_at",
        "message",
        "publisher",
        "sequence",
    }
)
_ALWAYS_REQUIRED: Final = (
    "tool_id",
    "action",
    "reasons",
    "effective_at",
    "issued_at",
    "publisher",
    "sequence",
)
# Per action: fields it requires, and optional fields it refuses.
_ACTION_FIELDS: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "deprecate": (("affected",), ("withdraws",)),
    "revoke": (("affected",), ("withdraws", "sunset_at")),
    "withdraw": (("withdraws",), ("affected", "sunset_at", "replacement", "schema_digest")),
}


class NoticeError(FormatError):
    """A notice, envelope or publisher statement that breaks the schema; ``code`` says how."""

    codes = frozenset(
        {
            ErrorCode.WRONG_TYPE,
            ErrorCode.EMPTY_LIST,
            ErrorCode.TOO_LONG,
            ErrorCode.UNKNOWN_FIELD,
            ErrorCode.MISSING_FIELD,
            ErrorCode.DUPLICATE_VALUE,
            ErrorCode.FIELD_NOT_ALLOWED,
            ErrorCode.BAD_NAMESPACE,
            ErrorCode.BAD_TOOL_ID,
            ErrorCode.BAD_PUBLISHER,
            ErrorCode.BAD_TIMESTAMP,
            ErrorCode.BAD_SIGNATURE_ENCODING,
            ErrorCode.BAD_MESSAGE,
            ErrorCode.BAD_RANGE,
            ErrorCode.BAD_ACTION,
            ErrorCode.BAD_WITHDRAW_INDEX,
            ErrorCode.BAD_DIGEST,
            ErrorCode.BAD_REASON,
            ErrorCode.BAD_ADVISORY,
            ErrorCode.ADVISORY_REQUIRED,
            ErrorCode.SUNSET_BEFORE_EFFECTIVE,
            ErrorCode.BAD_SEQUENCE,
        }
    )


class NoticeSignatureError(VerificationError):
    """A well-formed envelope whose signature is not by the key it is checked with."""

    codes = frozenset({ErrorCode.BAD_SIGNATURE, ErrorCode.KEY_MISMATCH})
    code = ErrorCode.BAD_SIGNATURE


# --- field parsers, shared with entries.py ---


def require_str(value: object) -> str:
    """The value if it is a JSON string; NoticeError ``wrong_type`` otherwise."""
    if not isinstance(value, str):
        raise NoticeError(ErrorCode.WRONG_TYPE)
    return value


def _require_int(value: object) -> int:
    """The value if it is a JSON integer (not a boolean); ``wrong_type`` otherwise."""
    # JSON true/false are not integers, even though Python says so.
    if isinstance(value, bool) or not isinstance(value, int):
        raise NoticeError(ErrorCode.WRONG_TYPE)
    return value


def require_list(value: object, *, max_items: int) -> list[Any]:
    """A non-empty JSON array of at most ``max_items`` (``empty_list`` / ``too_long``)."""
    if not isinstance(value, list):
        raise NoticeError(ErrorCode.WRONG_TYPE)
    if not value:
        raise NoticeError(ErrorCode.EMPTY_LIST)
    if len(value) > max_items:
        raise NoticeError(ErrorCode.TOO_LONG)
    return value


def require_object(
    value: object, *, required: Sequence[str] = (), allowed: frozenset[str] | None = None
) -> dict[str, Any]:
    """A JSON object with only ``allowed`` members and all ``required`` ones."""
    if not isinstance(value, dict):
        raise NoticeError(ErrorCode.WRONG_TYPE)
    if allowed is not None and not set(value) <= allowed:
        raise NoticeError(ErrorCode.UNKNOWN_FIELD)
    for name in required:
        if name not in value:
            raise NoticeError(ErrorCode.MISSING_FIELD)
    return value


def require_fields(obj: dict[str, Any], required: Sequence[str], refused: Sequence[str]) -> None:
    """Refuse an object with a field in ``refused`` or without one in ``required``."""
    if any(name in obj for name in refused):
        raise NoticeError(ErrorCode.FIELD_NOT_ALLOWED)
    if any(name not in obj for name in required):
        raise NoticeError(ErrorCode.MISSING_FIELD)


def require_unique(items: Sequence[str]) -> None:
    """Refuse repeated list items (``duplicate_value``)."""
    if len(set(items)) != len(items):
        raise NoticeError(ErrorCode.DUPLICATE_VALUE)


def parse_namespace(value: object) -> str:
    """Validate a lower-case reverse-DNS namespace; NoticeError ``bad_namespace``."""
    s = require_str(value)
    if len(s) > MAX_NAMESPACE_CHARS or _NAMESPACE_RE.fullmatch(s) is None:
        raise NoticeError(ErrorCode.BAD_NAMESPACE)
    return s


def parse_tool_id(value: object) -> tuple[str, str]:
    """Split ``tool:<namespace>/<name>`` into (namespace, name); NoticeError ``bad_tool_id``."""
    return _parse_tool_id(require_str(value))


@functools.lru_cache(maxsize=_PARSE_CACHE)
def _parse_tool_id(s: str) -> tuple[str, str]:
    if not s.startswith("tool:") or s.count("/") != 1:
        raise NoticeError(ErrorCode.BAD_TOOL_ID)
    namespace, name = s[len("tool:") :].split("/")
    if len(namespace) > MAX_NAMESPACE_CHARS or _NAMESPACE_RE.fullmatch(namespace) is None:
        raise NoticeError(ErrorCode.BAD_TOOL_ID)
    if len(name) > MAX_TOOL_NAME_CHARS or _TOOL_NAME_RE.fullmatch(name) is None:
        raise NoticeError(ErrorCode.BAD_TOOL_ID)
    return namespace, name


def parse_publisher_id(value: object) -> str:
    """Validate a publisher id ``[a-z0-9][a-z0-9-]{0,62}``; NoticeError ``bad_publisher``."""
    s = require_str(value)
    if _PUBLISHER_RE.fullmatch(s) is None:
        raise NoticeError(ErrorCode.BAD_PUBLISHER)
    return s


def parse_version(value: object) -> Version:
    """Parse a SemVer string field; SemverError ``bad_version``."""
    return _parse_version(require_str(value))


@functools.lru_cache(maxsize=_PARSE_CACHE)
def _parse_version(s: str) -> Version:
    return Version.parse(s)


def parse_timestamp(value: object) -> datetime:
    """Parse ``YYYY-MM-DDTHH:MM:SSZ`` (RFC 3339, UTC, whole seconds) to an aware datetime."""
    return _parse_timestamp(require_str(value))


@functools.lru_cache(maxsize=_PARSE_CACHE)
def _parse_timestamp(s: str) -> datetime:
    m = _TIMESTAMP_RE.fullmatch(s)
    if m is None:
        raise NoticeError(ErrorCode.BAD_TIMESTAMP)
    year, month, day, hour, minute, second = (int(g) for g in m.groups())
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:  # Feb 30, hour 24, leap second 60, year 0000, ...
        raise NoticeError(ErrorCode.BAD_TIMESTAMP) from None


@functools.lru_cache(maxsize=_PARSE_CACHE)
def _format_timestamp(moment: datetime) -> str:
    return format_timestamp(moment)


def parse_reasons(value: object) -> tuple[str, ...]:
    """A non-empty list of distinct reason codes (``bad_reason``, ``duplicate_value``)."""
    reasons = tuple(require_str(r) for r in require_list(value, max_items=len(REASONS)))
    if any(r not in REASONS for r in reasons):
        raise NoticeError(ErrorCode.BAD_REASON)
    require_unique(reasons)
    return reasons


def parse_advisories(value: object) -> tuple[str, ...]:
    """A non-empty list of distinct CVE or GHSA ids (``bad_advisory``, ``duplicate_value``)."""
    advisories = tuple(require_str(a) for a in require_list(value, max_items=MAX_ADVISORIES))
    if any(_ADVISORY_RE.fullmatch(a) is None for a in advisories):
        raise NoticeError(ErrorCode.BAD_ADVISORY)
    require_unique(advisories)
    return advisories


def parse_key_id(value: object) -> bytes:
    """Decode an 8-hex-digit lower-case key id; NoticeError ``bad_signature_encoding``."""
    s = require_str(value)
    if _KEY_ID_RE.fullmatch(s) is None:
        raise NoticeError(ErrorCode.BAD_SIGNATURE_ENCODING)
    return bytes.fromhex(s)


def _parse_signature(value: object) -> bytes:
    """Decode canonical standard base64 of exactly 64 bytes (``bad_signature_encoding``)."""
    raw = decode_base64(require_str(value))
    if raw is None or len(raw) != 64:
        raise NoticeError(ErrorCode.BAD_SIGNATURE_ENCODING)
    return raw


def parse_schema_digest(value: object) -> str:
    """Validate ``sha256:<64 lower-case hex>``; NoticeError ``bad_digest``."""
    s = require_str(value)
    if _DIGEST_RE.fullmatch(s) is None:
        raise NoticeError(ErrorCode.BAD_DIGEST)
    return s


def encode_signature(key_id: bytes, sig: bytes) -> dict[str, str]:
    """The ``{"key_id", "sig"}`` object used by envelopes and log entries."""
    return {"key_id": key_id.hex(), "sig": encode_base64(sig)}


def parse_signature_object(value: object) -> tuple[bytes, bytes]:
    """Parse a ``{"key_id", "sig"}`` object into (key_id, signature)."""
    obj = require_object(value, required=("key_id", "sig"), allowed=frozenset({"key_id", "sig"}))
    return parse_key_id(obj["key_id"]), _parse_signature(obj["sig"])


def _parse_message(value: object) -> str:
    s = require_str(value)
    if len(s) > MAX_MESSAGE_CHARS:
        raise NoticeError(ErrorCode.TOO_LONG)
    if not s:
        raise NoticeError(ErrorCode.BAD_MESSAGE)
    for ch in s:
        if ch in _BIDI_CONTROLS or unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp"):
            raise NoticeError(ErrorCode.BAD_MESSAGE)
    return s


# --- value types ---------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """One affected span of a range: ``start <= v < end`` (or ``<=``); None for an open end."""

    start: Version | None
    end: Version | None
    end_inclusive: bool

    def contains(self, v: Version) -> bool:
        """True when ``v`` falls in this interval by SemVer precedence."""
        if self.start is not None and v < self.start:
            return False
        if self.end is None:
            return True
        return v <= self.end if self.end_inclusive else v < self.end


@dataclass(frozen=True)
class VersionRange:
    """An OSV ``SEMVER`` range: the events as written, and the intervals they mean."""

    events: tuple[tuple[str, str], ...]
    intervals: tuple[Interval, ...]

    @classmethod
    def from_json(cls, obj: object) -> VersionRange:
        """Validate one ``{"type": "SEMVER", "events": [...]}`` object."""
        o = require_object(obj, required=("type", "events"), allowed=frozenset({"type", "events"}))
        if require_str(o["type"]) != "SEMVER":
            raise NoticeError(ErrorCode.BAD_RANGE)
        raw_events = require_list(o["events"], max_items=MAX_EVENTS)
        events: list[tuple[str, str]] = []
        versions: list[Version | None] = []
        for raw in raw_events:
            ev = require_object(raw)
            if len(ev) != 1:
                raise NoticeError(ErrorCode.BAD_RANGE)
            ((kind, text),) = ev.items()
            if kind not in EVENT_KINDS:
                raise NoticeError(ErrorCode.BAD_RANGE)
            text = require_str(text)
            expect_introduced = len(events) % 2 == 0
            if (kind == "introduced") != expect_introduced:
                raise NoticeError(ErrorCode.BAD_RANGE)
            if text == "0" and kind == "introduced":
                if events:  # "0" only makes sense as the very first bound
                    raise NoticeError(ErrorCode.BAD_RANGE)
                versions.append(None)
            else:
                v = parse_version(text)
                prev = versions[-1] if versions else None
                if prev is not None and not prev < v:
                    raise NoticeError(ErrorCode.BAD_RANGE)
                versions.append(v)
            events.append((kind, text))
        intervals: list[Interval] = []
        for i in range(0, len(events), 2):
            if i + 1 < len(events):
                intervals.append(
                    Interval(versions[i], versions[i + 1], events[i + 1][0] == "last_affected")
                )
            else:
                intervals.append(Interval(versions[i], None, False))
        return cls(tuple(events), tuple(intervals))

    def to_json(self) -> dict[str, Any]:
        """The range exactly as it was parsed."""
        return {"type": "SEMVER", "events": [{k: v} for k, v in self.events]}

    def contains(self, v: Version) -> bool:
        """True when any interval of the range contains ``v``."""
        return any(iv.contains(v) for iv in self.intervals)


@dataclass(frozen=True)
class Affected:
    """The versions a deprecate/revoke notice is about: exact versions and/or ranges."""

    versions: tuple[Version, ...] = ()
    ranges: tuple[VersionRange, ...] = ()

    @classmethod
    def from_json(cls, obj: object) -> Affected:
        """Validate the ``affected`` object; at least one of versions/ranges."""
        o = require_object(obj, allowed=frozenset({"versions", "ranges"}))
        if not o:
            raise NoticeError(ErrorCode.MISSING_FIELD)
        versions: tuple[Version, ...] = ()
        ranges: tuple[VersionRange, ...] = ()
        if "versions" in o:
            items = require_list(o["versions"], max_items=MAX_VERSIONS)
            versions = tuple(parse_version(v) for v in items)
            require_unique([v.text for v in versions])
        if "ranges" in o:
            items = require_list(o["ranges"], max_items=MAX_RANGES)
            ranges = tuple(VersionRange.from_json(r) for r in items)
        return cls(versions, ranges)

    def to_json(self) -> dict[str, Any]:
        """The object exactly as parsed (absent lists stay absent)."""
        out: dict[str, Any] = {}
        if self.versions:
            out["versions"] = [v.text for v in self.versions]
        if self.ranges:
            out["ranges"] = [r.to_json() for r in self.ranges]
        return out

    def contains(self, v: Version) -> bool:
        """True when ``v`` is listed (same precedence) or inside any range."""
        key = v.sort_key
        return any(x.sort_key == key for x in self.versions) or any(
            r.contains(v) for r in self.ranges
        )


@dataclass(frozen=True)
class Replacement:
    """The tool version to move to."""

    tool_id: str
    version: Version

    @classmethod
    def from_json(cls, obj: object) -> Replacement:
        """Validate ``{"tool_id", "version"}``."""
        o = require_object(
            obj, required=("tool_id", "version"), allowed=frozenset({"tool_id", "version"})
        )
        parse_tool_id(o["tool_id"])
        return cls(o["tool_id"], parse_version(o["version"]))

    def to_json(self) -> dict[str, str]:
        """The JSON object form."""
        return {"tool_id": self.tool_id, "version": self.version.text}


@dataclass(frozen=True)
class Notice:
    """A validated notice; construct it with ``from_json`` so the rules always hold."""

    # A new field is in the map record's codec or its DROPPED_NOTICE_FIELDS (map/record.py).
    tool_id: str
    action: Action
    reasons: tuple[str, ...]
    effective_at: datetime
    issued_at: datetime
    publisher: str
    sequence: int
    affected: Affected | None = None
    withdraws: int | None = None
    schema_digest: str | None = None
    advisories: tuple[str, ...] = ()
    replacement: Replacement | None = None
    sunset_at: datetime | None = None
    message: str | None = None

    @classmethod
    def from_json(cls, obj: object) -> Notice:
        """Validate a decoded JSON value against the notice schema."""
        o = require_object(obj, required=_ALWAYS_REQUIRED, allowed=NOTICE_FIELDS)
        action_s = require_str(o["action"])
        if action_s not in ACTIONS:
            raise NoticeError(ErrorCode.BAD_ACTION)
        action: Action = action_s  # type: ignore[assignment]

        parse_tool_id(o["tool_id"])
        tool_id: str = o["tool_id"]

        require_fields(o, *_ACTION_FIELDS[action])

        affected = Affected.from_json(o["affected"]) if "affected" in o else None

        withdraws: int | None = None
        if "withdraws" in o:
            withdraws = _require_int(o["withdraws"])
            if not 0 <= withdraws <= MAX_SAFE_INTEGER:
                raise NoticeError(ErrorCode.BAD_WITHDRAW_INDEX)

        schema_digest: str | None = None
        if "schema_digest" in o:
            schema_digest = parse_schema_digest(o["schema_digest"])

        reasons = parse_reasons(o["reasons"])
        advisories = parse_advisories(o["advisories"]) if "advisories" in o else ()
        if action == "revoke" and "security" in reasons and not advisories:
            raise NoticeError(ErrorCode.ADVISORY_REQUIRED)

        replacement = Replacement.from_json(o["replacement"]) if "replacement" in o else None

        effective_at = parse_timestamp(o["effective_at"])
        issued_at = parse_timestamp(o["issued_at"])
        sunset_at: datetime | None = None
        if "sunset_at" in o:
            sunset_at = parse_timestamp(o["sunset_at"])
            if sunset_at < effective_at:
                raise NoticeError(ErrorCode.SUNSET_BEFORE_EFFECTIVE)

        message = _parse_message(o["message"]) if "message" in o else None
        publisher = parse_publisher_id(o["publisher"])
        sequence = _require_int(o["sequence"])
        if not 1 <= sequence <= MAX_SAFE_INTEGER:
            raise NoticeError(ErrorCode.BAD_SEQUENCE)

        return cls(
            tool_id=tool_id,
            action=action,
            reasons=reasons,
            effective_at=effective_at,
            issued_at=issued_at,
            publisher=publisher,
            sequence=sequence,
            affected=affected,
            withdraws=withdraws,
            schema_digest=schema_digest,
            advisories=advisories,
            replacement=replacement,
            sunset_at=sunset_at,
            message=message,
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON object form; ``Notice.from_json(n.to_json()) == n``."""
        out: dict[str, Any] = {
            "tool_id": self.tool_id,
            "action": self.action,
            "reasons": list(self.reasons),
            "effective_at": _format_timestamp(self.effective_at),
            "issued_at": _format_timestamp(self.issued_at),
            "publisher": self.publisher,
            "sequence": self.sequence,
        }
        if self.affected is not None:
            out["affected"] = self.affected.to_json()
        if self.withdraws is not None:
            out["withdraws"] = self.withdraws
        if self.schema_digest is not None:
            out["schema_digest"] = self.schema_digest
        if self.advisories:
            out["advisories"] = list(self.advisories)
        if self.replacement is not None:
            out["replacement"] = self.replacement.to_json()
        if self.sunset_at is not None:
            out["sunset_at"] = _format_timestamp(self.sunset_at)
        if self.message is not None:
            out["message"] = self.message
        return out

    def canonical_bytes(self) -> bytes:
        """The RFC 8785 bytes that the publisher signs, computed once."""
        cached: bytes | None = self.__dict__.get("_canonical")
        if cached is None:
            cached = canonical.dumps(self.to_json())
            object.__setattr__(self, "_canonical", cached)
        return cached

    def adopt_canonical_bytes(self, data: bytes) -> None:
        """Take ``data``, proven equal to them (a canonical leaf's slice), as canonical bytes."""
        object.__setattr__(self, "_canonical", bytes(data))

    @property
    def namespace(self) -> str:
        """The namespace part of ``tool_id``: what a publisher must own."""
        return self.tool_id[len("tool:") :].partition("/")[0]

    def affects(self, version: Version) -> bool:
        """True when this deprecate/revoke notice covers ``version`` (withdraws cover none)."""
        return self.affected is not None and self.affected.contains(version)


@dataclass(frozen=True)
class Envelope:
    """A notice plus the publisher's Ed25519 signature over its canonical bytes."""

    notice: Notice
    key_id: bytes
    signature: bytes

    @classmethod
    def parse(cls, body: bytes) -> Envelope:
        """Parse untrusted request bytes; size, JSON strictness, then schema."""
        if len(body) > MAX_ENVELOPE_BYTES:
            raise TooLargeError(message="envelope is over 60 KiB")
        return cls.from_json(canonical.loads(body))

    @classmethod
    def from_json(cls, obj: object) -> Envelope:
        """Validate a decoded ``{"notice", "signature"}`` value."""
        o = require_object(
            obj, required=("notice", "signature"), allowed=frozenset({"notice", "signature"})
        )
        notice = Notice.from_json(o["notice"])
        key_id, sig = parse_signature_object(o["signature"])
        return cls(notice, key_id, sig)

    @classmethod
    def sign(cls, notice: Notice, signer: Signer) -> Envelope:
        """Sign ``notice`` with the publisher's key."""
        return cls(notice, bytes(signer.key_id), signer.sign(notice.canonical_bytes()))

    def to_json(self) -> dict[str, Any]:
        """The JSON object form (what ``POST /v1/notices`` takes)."""
        return {
            "notice": self.notice.to_json(),
            "signature": encode_signature(self.key_id, self.signature),
        }

    def canonical_bytes(self) -> bytes:
        """The RFC 8785 bytes of the whole envelope."""
        return canonical.dumps(self.to_json())

    def verify(self, verifier: Verifier) -> None:
        """Check the signature with ``verifier``, once per key (``NoticeSignatureError``)."""
        if bytes(verifier.key_id) != self.key_id:
            raise NoticeSignatureError(ErrorCode.KEY_MISMATCH)
        key = bytes(verifier.public_key)
        if self.__dict__.get("_verified_by") == key:
            return
        if not verifier.verify(self.notice.canonical_bytes(), self.signature):
            raise NoticeSignatureError()
        object.__setattr__(self, "_verified_by", key)
