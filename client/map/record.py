"""A tool's status record: the map's value, its binary codec, and the map function.

The normative text is ``docs/fold-spec.md`` sections 3 and 4. Rules:

1. **Only what the fold reads.** A record keeps, of every notice naming its tool, the
   log index and the fields the fold reads, in log order, and the mark of every entry
   that fails validation and names it; every other ``Notice`` field is in
   ``DROPPED_NOTICE_FIELDS``, with why.
2. **A record always folds.** It is built and decoded through ``StatusIndex``.
3. **One encoding.** Codes of actions, reasons and events are their positions in
   ``client.model.notice``'s tuples (the mark's after the actions); decoding is strict
   and total, every field checked as the schema checks it, any failure
   ``malformed_map_record`` with no value in the message.
4. **The map is a function of the log prefix.** ``fold_notices`` grows records by
   appending, so a batch's partition never changes a record.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.map.errors import MapFormatError
from deplog.client.map.hashing import value_hash
from deplog.client.model import canonical
from deplog.client.model.notice import (
    ACTIONS,
    EVENT_KINDS,
    REASONS,
    Affected,
    Notice,
    Replacement,
    parse_advisories,
    parse_reasons,
    parse_schema_digest,
    parse_tool_id,
)
from deplog.client.model.semver import Version
from deplog.client.model.status import FoldNotice, InvalidMark, StatusIndex, VersionStatus

RECORD_FORMAT: Final = 1
"""The first byte of every record (``docs/fold-spec.md`` section 3)."""
DROPPED_NOTICE_FIELDS: Final[Mapping[str, str]] = {
    "issued_at": "when the publisher signed it: the fold orders notices by log index",
    "publisher": "admission already tied every withdraw to its target's publisher",
    "sequence": "replay protection, checked at admission and by a log replay",
    "message": "free text for people: no status depends on it",
}
"""The ``Notice`` fields records do not keep, and why (rule 1)."""
_ACTION_CODES: Final[tuple[str, ...]] = (*ACTIONS, "invalid")
"""An item's action byte: a notice's action, or 3, an invalid entry's mark (rule 3)."""
_ACTION_BYTE: Final = {action: i for i, action in enumerate(_ACTION_CODES)}
_REASON_BYTE: Final = {reason: i for i, reason in enumerate(REASONS)}
_EVENT_BYTE: Final = {kind: bytes((i,)) for i, kind in enumerate(EVENT_KINDS)}
_ITEM_HEAD: Final = struct.Struct(">BBQqB")
"""An item's fixed start: action, flags, index, effective_at and the reasons' count."""
_MARK_HEAD: Final = struct.Struct(">BBQ")
"""An invalid entry's mark: its action code, no flags, and its log index."""
_HAS_SUNSET, _HAS_REPLACEMENT, _HAS_DIGEST = 0x01, 0x02, 0x04
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RecordNotice:
    """One notice as a record keeps it: its log index and what the fold reads; the holder
    of the signed entry checks ``RecordNotice.of(index, notice) == item``."""

    tool_id: str
    index: int
    action: str
    effective_at: datetime
    reasons: tuple[str, ...]
    advisories: tuple[str, ...] = ()
    affected: Affected | None = None
    withdraws: int | None = None
    sunset_at: datetime | None = None
    replacement: Replacement | None = None
    schema_digest: str | None = None

    @classmethod
    def of(cls, index: int, notice: Notice) -> RecordNotice:
        """The record item of the signed ``notice`` at log ``index``."""
        return cls(
            notice.tool_id,
            index,
            notice.action,
            notice.effective_at,
            notice.reasons,
            notice.advisories,
            notice.affected,
            notice.withdraws,
            notice.sunset_at,
            notice.replacement,
            notice.schema_digest,
        )

    @property
    def publisher(self) -> None:
        """Records keep no publisher (``FoldNotice``)."""
        return None

    def affects(self, version: Version) -> bool:
        """As ``Notice.affects``."""
        return self.affected is not None and self.affected.contains(version)

    def encode(self) -> bytes:
        """This item's bytes in a record."""
        return _item_bytes(self.index, self)


RecordItem = RecordNotice | InvalidMark
"""An item of a record: a notice as the fold reads it, or the mark of an entry that fails
validation (``docs/fold-spec.md``, "Entries that fail validation")."""


def _record_item(index: int, notice: Notice | InvalidMark) -> RecordItem:
    """The record item of a valid notice, or an invalid entry's mark, at ``index``."""
    return notice if isinstance(notice, InvalidMark) else RecordNotice.of(index, notice)


def _item_bytes(index: int, n: FoldNotice) -> bytes:
    """``u8 action ‖ u8 flags ‖ u64 index ‖ i64 effective_at ‖ reasons ‖ advisories ‖
    (u64 target | versions ‖ ranges) ‖ [i64 sunset_at] ‖ [replacement] ‖ [digest]``, or
    ``u8 3 ‖ u8 0 ‖ u64 index`` for an invalid entry's mark."""
    if n.action == "invalid":
        return _MARK_HEAD.pack(_ACTION_BYTE["invalid"], 0, index)
    flags = (
        (_HAS_SUNSET if n.sunset_at is not None else 0)
        | (_HAS_REPLACEMENT if n.replacement is not None else 0)
        | (_HAS_DIGEST if n.schema_digest is not None else 0)
    )
    out = bytearray(
        _ITEM_HEAD.pack(
            _ACTION_BYTE[n.action], flags, index, _seconds(n.effective_at), len(n.reasons)
        )
    )
    out += bytes([_REASON_BYTE[r] for r in n.reasons])
    out.append(len(n.advisories))
    for advisory in n.advisories:
        out += _str8(advisory)
    if n.withdraws is not None:
        out += struct.pack(">Q", n.withdraws)
    else:
        assert n.affected is not None  # a deprecate or revoke always carries it
        out += struct.pack(">H", len(n.affected.versions))
        for version in n.affected.versions:
            out += _str8(version.text)
        out.append(len(n.affected.ranges))
        for rng in n.affected.ranges:
            out.append(len(rng.events))
            for kind, text in rng.events:
                out += _EVENT_BYTE[kind] + _str8(text)
    if n.sunset_at is not None:
        out += struct.pack(">q", _seconds(n.sunset_at))
    if n.replacement is not None:
        tool = n.replacement.tool_id.encode("ascii")
        out += struct.pack(">H", len(tool)) + tool + _str8(n.replacement.version.text)
    if n.schema_digest is not None:
        out += bytes.fromhex(n.schema_digest.removeprefix("sha256:"))
    return bytes(out)


def _seconds(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(seconds=1)


def _str8(text: str) -> bytes:
    raw = text.encode("ascii")
    return bytes((len(raw),)) + raw


class _Reader:
    """Bounds-checked big-endian reads of a record or a proof; running out is ``code``."""

    def __init__(self, data: bytes, code: ErrorCode) -> None:
        self.data, self.at, self.code = data, 0, code

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise MapFormatError(self.code)
        self.at += n
        return self.data[self.at - n : self.at]

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int.from_bytes(self.take(2), "big")

    def u32(self) -> int:
        return int.from_bytes(self.take(4), "big")

    def u64(self) -> int:
        return int.from_bytes(self.take(8), "big")

    def i64(self) -> int:
        return int.from_bytes(self.take(8), "big", signed=True)

    def str8(self) -> str:
        """``u8 len`` and that many ASCII bytes (UnicodeDecodeError, a ValueError, if not)."""
        return self.take(self.u8()).decode("ascii")

    def done(self) -> bool:
        return self.at == len(self.data)

    def end(self) -> None:
        if not self.done():
            raise MapFormatError(self.code)


def _read_item(reader: _Reader, tool_id: str) -> RecordItem:
    """One item, checked as the notice schema checks its fields (the caller maps errors)."""
    code, flags = reader.u8(), reader.u8()
    if code >= len(_ACTION_CODES) or flags & ~(_HAS_SUNSET | _HAS_REPLACEMENT | _HAS_DIGEST):
        raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
    action = _ACTION_CODES[code]
    if action == "invalid":
        index = reader.u64()
        if flags or index > canonical.MAX_SAFE_INTEGER:
            raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
        return InvalidMark(tool_id, index)
    index, effective_at = reader.u64(), _moment(reader.i64())
    raw_reasons = [reader.u8() for _ in range(reader.u8())]
    if any(r >= len(REASONS) for r in raw_reasons):
        raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
    reasons = parse_reasons([REASONS[r] for r in raw_reasons])
    count = reader.u8()
    advisories = parse_advisories([reader.str8() for _ in range(count)]) if count else ()
    affected: Affected | None = None
    withdraws: int | None = None
    if action == "withdraw":
        withdraws = reader.u64()
        if flags or withdraws > canonical.MAX_SAFE_INTEGER:
            raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
    else:
        obj: dict[str, Any] = {}
        if versions := [reader.str8() for _ in range(reader.u16())]:
            obj["versions"] = versions
        ranges = []
        for _ in range(reader.u8()):
            events = []
            for _ in range(reader.u8()):
                kind = reader.u8()
                if kind >= len(EVENT_KINDS):
                    raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
                events.append({EVENT_KINDS[kind]: reader.str8()})
            ranges.append({"type": "SEMVER", "events": events})
        if ranges:
            obj["ranges"] = ranges
        affected = Affected.from_json(obj)
    sunset_at = _moment(reader.i64()) if flags & _HAS_SUNSET else None
    if sunset_at is not None and (action == "revoke" or sunset_at < effective_at):
        raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
    replacement = None
    if flags & _HAS_REPLACEMENT:
        tool = reader.take(reader.u16()).decode("ascii")
        replacement = Replacement.from_json({"tool_id": tool, "version": reader.str8()})
    digest = parse_schema_digest("sha256:" + reader.take(32).hex()) if flags & _HAS_DIGEST else None
    if action == "revoke" and "security" in reasons and not advisories:
        raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
    if index > canonical.MAX_SAFE_INTEGER:
        raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
    return RecordNotice(
        tool_id,
        index,
        action,
        effective_at,
        reasons,
        advisories,
        affected,
        withdraws,
        sunset_at,
        replacement,
        digest,
    )


def _moment(seconds: int) -> datetime:
    return _EPOCH + timedelta(seconds=seconds)


@dataclass(frozen=True)
class StatusRecord:
    """Every notice naming one tool, in log order: the map's value for it (rule 2), not an
    evaluated status; the key ``SHA-256(tool_id)``, not the bytes, binds the tool."""

    tool_id: str
    notices: tuple[RecordItem, ...]

    @classmethod
    def build(cls, tool_id: str, notices: Iterable[RecordItem]) -> StatusRecord:
        """A record of ``notices``: StatusError if they do not fold, ``malformed_map_record``
        if one names another tool or there are none."""
        parse_tool_id(tool_id)
        record = cls(tool_id, tuple(notices))
        if not record.notices or any(n.tool_id != tool_id for n in record.notices):
            raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
        record.status_index()
        return record

    @classmethod
    def of(cls, tool_id: str, notices: Iterable[tuple[int, Notice | InvalidMark]]) -> StatusRecord:
        """The record of ``(log index, notice or mark)`` about ``tool_id``."""
        return cls.build(tool_id, (_record_item(i, n) for i, n in notices))

    def extended(self, item: RecordItem) -> StatusRecord:
        """This record with one more notice (a later log index)."""
        return StatusRecord.build(self.tool_id, (*self.notices, item))

    def status_index(self) -> StatusIndex:
        """The fold of this record's notices (raises StatusError if they do not fold)."""
        index = StatusIndex()
        for item in self.notices:
            index.apply(item.index, item)
        return index

    def encode(self) -> bytes:
        """The record's bytes (what the value hash covers): ``u8 1`` and the items."""
        cached: bytes | None = self.__dict__.get("_encoded")
        if cached is None:
            cached = bytes((RECORD_FORMAT,)) + b"".join(
                _item_bytes(item.index, item) for item in self.notices
            )
            object.__setattr__(self, "_encoded", cached)
        return cached

    def value(self) -> bytes:
        """The leaf value of this record."""
        return value_hash(self.encode())

    @classmethod
    def decode(cls, data: bytes, tool_id: str) -> StatusRecord:
        """Parse the record of ``tool_id`` strictly (rule 3)."""
        data = bytes(data)
        reader = _Reader(data, ErrorCode.MALFORMED_MAP_RECORD)
        try:
            if reader.u8() != RECORD_FORMAT:
                raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
            items = []
            while not reader.done():
                items.append(_read_item(reader, tool_id))
            record = cls.build(tool_id, items)
        except (DeplogError, ValueError, OverflowError):
            raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD) from None
        if record.encode() != data:
            raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
        return record


def record_item_bytes(index: int, notice: Notice | InvalidMark) -> bytes:
    """The bytes of ``_record_item(index, notice)``, encoded straight from the notice."""
    return _item_bytes(index, notice)


def extend_record_bytes(record: bytes | None, items: Sequence[bytes]) -> bytes:
    """The bytes of ``record`` (None: none yet) with ``items`` appended, never decoding it:
    for admitted entries, equal to ``StatusRecord.build(...).encode()``."""
    if not items:
        raise ValueError("a record grows by at least one notice")
    if record is None:
        record = bytes((RECORD_FORMAT,))
    elif record[:1] != bytes((RECORD_FORMAT,)):
        raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
    return record + b"".join(items)


def evaluate(
    tool_id: str, record: StatusRecord | None, version: str, now: datetime
) -> VersionStatus:
    """The status of ``tool_id`` at ``version`` at ``now`` under a verified record (or None)."""
    if record is not None and record.tool_id != tool_id:
        raise ValueError("the record is about another tool")
    index = StatusIndex() if record is None else record.status_index()
    return index.lookup(tool_id, version, now)


def fold_notices(
    items: Iterable[tuple[int, Notice | InvalidMark]],
    find: Callable[[str], StatusRecord | None],
) -> dict[str, StatusRecord]:
    """The map function (rule 4): the new record of every tool ``items`` touch."""
    changed: dict[str, StatusRecord] = {}
    for index, notice in items:
        item = _record_item(index, notice)
        tool_id = notice.tool_id
        before = changed[tool_id] if tool_id in changed else find(tool_id)
        changed[tool_id] = (
            StatusRecord.build(tool_id, (item,)) if before is None else before.extended(item)
        )
    return changed
