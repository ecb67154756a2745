"""The verifiable tool-status map (``deplog-map/v1``): keys, records, tree, proofs, line.

The normative text is ``docs/fold-spec.md``; this module is its executable form.
Rules it keeps:

1. The map is a function of the log prefix: key ``SHA-256(tool_id)``, value the
   compact status record of every notice naming the tool, in log order: each
   notice's log index and the fields the fold reads, in one binary encoding.
   The record is built and evaluated through ``StatusIndex``, the one fold.
2. The tree's shape is a function of the key set: an inner node exists for a
   prefix iff keys exist under both of its extensions, so no batch order or
   partition changes the root.
3. Hashes are tagged 0x10-0x13, disjoint from RFC 9162's 0x00/0x01, and every
   input is fixed-length except the record, which is last.
4. A batch update reads and rehashes only the nodes on the changed keys' paths,
   one hash per node, then hands every written row to the store at once, so a
   storage backend commits a batch (and its root) in one transaction.
5. Parsers are strict and total: one encoding per proof and per record, no
   trailing bytes, every bad input a stable code and no value in the message.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import struct
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, NamedTuple, Protocol

from deplog.client.errors import DeplogError, ErrorCode, FormatError, VerificationError
from deplog.client.model import canonical
from deplog.client.model.notice import (
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
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import decode_base64, encode_base64, parse_note

__all__ = [
    "EMPTY_ROOT",
    "KEY_BITS",
    "MAP_LINE_KEYWORD",
    "PROOF_TYPE",
    "RECORD_FORMAT",
    "ChildRef",
    "InnerNode",
    "KeyPath",
    "MapFormatError",
    "MapLineError",
    "MapProof",
    "MapProofDocument",
    "MapProofError",
    "MemoryNodeStore",
    "NodeStore",
    "PathStep",
    "PrefixTree",
    "RecordItem",
    "RecordNotice",
    "StatusRecord",
    "VerifiableMap",
    "bit_of",
    "evaluate",
    "extend_record_bytes",
    "fold_notices",
    "leaf_hash",
    "map_key",
    "map_line",
    "map_root_of",
    "node_hash",
    "node_id",
    "record_item",
    "record_item_bytes",
    "require_map_root",
    "root_from_path",
    "value_hash",
    "verify_map_proof",
    "verify_proof_document",
    "verify_status",
    "verify_tool_status",
]

KEY_BITS: Final = 256
"""Keys are SHA-256 digests; a child reference with ``bits == KEY_BITS`` is a leaf."""
PROOF_TYPE: Final = "deplog.map_proof/v1"
MAP_LINE_KEYWORD: Final = "deplog-map/v1"
BINARY_VERSION: Final = 1
MAX_PATH: Final = KEY_BITS
"""Split bits strictly decrease from leaf to root, so no path has more than 256 steps."""

_TAG_LEAF, _TAG_NODE, _TAG_EMPTY, _TAG_VALUE = b"\x10", b"\x11", b"\x12", b"\x13"
_NODE_TAGS: Final = tuple(_TAG_NODE + bytes((bit,)) for bit in range(KEY_BITS))
"""An inner node's hash input up to its children, by split bit."""
EMPTY_ROOT: Final = hashlib.sha256(_TAG_EMPTY).digest()
"""The root of the map with no keys."""

Result = Literal["present", "absent", "empty"]
_RESULT_CODES: Final[tuple[Result, ...]] = ("present", "absent", "empty")


class MapFormatError(FormatError):
    """A map proof or status record that is not the format's one encoding."""

    codes = frozenset({ErrorCode.MALFORMED_MAP_PROOF, ErrorCode.MALFORMED_MAP_RECORD})
    code = ErrorCode.MALFORMED_MAP_PROOF


class MapLineError(FormatError):
    """A checkpoint whose ``deplog-map/v1`` line is malformed, repeated, or missing."""

    codes = frozenset({ErrorCode.MALFORMED_MAP_LINE, ErrorCode.MISSING_MAP_LINE})
    code = ErrorCode.MALFORMED_MAP_LINE


class MapProofError(VerificationError):
    """A well-formed map proof that does not show its claim under the given root."""

    codes = frozenset({ErrorCode.BAD_MAP_PROOF, ErrorCode.MAP_CHECKPOINT_MISMATCH})
    code = ErrorCode.BAD_MAP_PROOF


# --- hashing ----------------------------------------------------------------------------


def map_key(tool_id: str) -> bytes:
    """SHA-256 of the tool id's ASCII bytes, after the grammar check (NoticeError
    ``bad_tool_id``): only ids a notice could name have keys."""
    parse_tool_id(tool_id)
    return hashlib.sha256(tool_id.encode("ascii")).digest()


def value_hash(record: bytes) -> bytes:
    """The leaf value committing to a record's bytes."""
    return hashlib.sha256(_TAG_VALUE + record).digest()


def leaf_hash(key: bytes, value: bytes) -> bytes:
    """The hash of a leaf: both inputs are 32 bytes."""
    return hashlib.sha256(_TAG_LEAF + key + value).digest()


def node_hash(bit: int, left: bytes, right: bytes) -> bytes:
    """The hash of an inner node splitting on ``bit`` (bound in, so one root has one shape)."""
    return hashlib.sha256(_TAG_NODE + bytes((bit,)) + left + right).digest()


def bit_of(key: bytes, i: int) -> int:
    """Bit ``i`` of ``key``, most significant bit of byte 0 first."""
    return (key[i >> 3] >> (7 - (i & 7))) & 1


def node_id(bit: int, key: bytes) -> bytes:
    """A storage id for the inner node splitting on ``bit`` above ``key``: ``u8 bit`` and
    the first ``ceil(bit/8)`` key bytes, bits at or after ``bit`` zeroed."""
    prefix = bytearray(key[: (bit + 7) // 8])
    if bit % 8:
        prefix[-1] &= 0xFF << (8 - bit % 8) & 0xFF
    return bytes((bit,)) + bytes(prefix)


def _prefix_int(ref: ChildRef) -> int:
    """The key bits above a child (all of them for a leaf) as a 256-bit integer."""
    if ref.bits == KEY_BITS:
        return int.from_bytes(ref.id, "big")
    # An inner id is ``u8 bit`` and ``len - 1`` prefix bytes: shift them into place.
    return int.from_bytes(ref.id[1:], "big") << (8 * (33 - len(ref.id)))


# --- the status record ------------------------------------------------------------------

RECORD_FORMAT: Final = 1
"""The first byte of every record (``docs/fold-spec.md`` section 3)."""
_ACTION_CODES: Final[tuple[str, ...]] = ("deprecate", "revoke", "withdraw", "invalid")
_REASON_CODES: Final[tuple[str, ...]] = (
    "superseded",
    "end_of_life",
    "security",
    "critical_bug",
    "schema_change",
    "moved",
    "policy",
    "other",
)
_EVENT_CODES: Final[tuple[str, ...]] = ("introduced", "fixed", "last_affected")
_ACTION_BYTE: Final = {action: i for i, action in enumerate(_ACTION_CODES)}
_REASON_BYTE: Final = {reason: i for i, reason in enumerate(_REASON_CODES)}
_EVENT_BYTE: Final = {kind: bytes((i,)) for i, kind in enumerate(_EVENT_CODES)}
_ITEM_HEAD: Final = struct.Struct(">BBQqB")
_MARK_HEAD: Final = struct.Struct(">BBQ")
"""An item's fixed start: action, flags, index, effective_at and the reasons' count."""
_HAS_SUNSET, _HAS_REPLACEMENT, _HAS_DIGEST = 0x01, 0x02, 0x04
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RecordNotice:
    """One notice as a record keeps it: its log index and what the fold reads (a
    ``FoldNotice``), nothing else. Anyone holding the signed entry at ``index`` checks
    it with ``RecordNotice.of(index, notice) == item``."""

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


def record_item(index: int, notice: Notice | InvalidMark) -> RecordItem:
    """The record item of what the validator made of the entry at ``index``: a valid
    notice, or the mark of an invalid entry that names a tool."""
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


def _read_item(reader: _Reader, tool_id: str) -> RecordItem:
    """One item, checked as the notice schema checks the fields it keeps (NoticeError,
    SemverError, ValueError, OverflowError on a bad one: the caller maps them)."""
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
    if any(r >= len(_REASON_CODES) for r in raw_reasons):
        raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
    reasons = parse_reasons([_REASON_CODES[r] for r in raw_reasons])
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
                if kind >= len(_EVENT_CODES):
                    raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
                events.append({_EVENT_CODES[kind]: reader.str8()})
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
    """Every notice naming one tool, in log order: the map's value for that tool.

    Holds rules, not an evaluated status (effective and sunset times depend on
    the clock). Build it with ``build``/``extended``/``decode``, which run the
    items through ``StatusIndex``, so a record always folds. The tool id is not
    in the bytes: the leaf binds the record to the key ``SHA-256(tool_id)``.
    """

    tool_id: str
    notices: tuple[RecordItem, ...]

    @classmethod
    def build(cls, tool_id: str, notices: Iterable[RecordItem]) -> StatusRecord:
        """A record of ``notices``; StatusError if they do not fold (order, withdraw target),
        MapFormatError ``malformed_map_record`` if one names another tool or none is given."""
        parse_tool_id(tool_id)
        record = cls(tool_id, tuple(notices))
        if not record.notices or any(n.tool_id != tool_id for n in record.notices):
            raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
        record.status_index()
        return record

    @classmethod
    def of(cls, tool_id: str, notices: Iterable[tuple[int, Notice | InvalidMark]]) -> StatusRecord:
        """The record of signed notices ``(log index, notice)`` (and marks) about
        ``tool_id``."""
        return cls.build(tool_id, (record_item(i, n) for i, n in notices))

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
        """Parse the record of ``tool_id`` strictly: the format byte, items whose fields
        pass the notice schema's checks and fold, and the one encoding of them.
        Anything else is ``malformed_map_record``."""
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
    """The record item of the signed ``notice`` (or an invalid entry's mark) at log
    ``index``, encoded straight from it (``record_item(index, notice)``'s bytes)."""
    return _item_bytes(index, notice)


def extend_record_bytes(record: bytes | None, items: Sequence[bytes]) -> bytes:
    """The bytes of ``record`` (None: no record yet) with ``items`` appended: a record is
    its format byte and its items, so appending never decodes it. For admitted entries
    (no fold check here); the result equals ``StatusRecord.build(...).encode()``
    (tests/test_vmap.py checks)."""
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
    """The status of ``tool_id`` at ``version`` at ``now`` under a verified record (None:
    the tool is absent from the map, so every version is active)."""
    if record is not None and record.tool_id != tool_id:
        raise ValueError("the record is about another tool")
    index = StatusIndex() if record is None else record.status_index()
    return index.lookup(tool_id, version, now)


def fold_notices(
    items: Iterable[tuple[int, Notice | InvalidMark]],
    find: Callable[[str], StatusRecord | None],
) -> dict[str, StatusRecord]:
    """The map function over what the one validator (``client.model.rules``) made of log
    entries, in log order: ``(index, notice)`` for each valid notice and ``(index, mark)``
    for each invalid entry that names a tool; publisher entries and invalid entries that
    name none bring no item.

    ``find`` gives a tool's record before these items (None if absent). Returns the new
    record of every tool the items touch.
    """
    changed: dict[str, StatusRecord] = {}
    for index, notice in items:
        item = record_item(index, notice)
        tool_id = notice.tool_id
        before = changed[tool_id] if tool_id in changed else find(tool_id)
        changed[tool_id] = (
            StatusRecord.build(tool_id, (item,)) if before is None else before.extended(item)
        )
    return changed


# --- the tree and its storage seam ------------------------------------------------------


class ChildRef(NamedTuple):
    """A child as its parent row holds it: ``id`` (an inner node's id, a leaf's key),
    ``bits`` (its split bit, ``KEY_BITS`` for a leaf) and its hash. (Named tuples, as
    ``InnerNode``: a batch makes two per node, at half a frozen dataclass's cost.)"""

    id: bytes
    bits: int
    hash: bytes


class InnerNode(NamedTuple):
    """One inner node row: its id, split bit, and both children."""

    id: bytes
    bit: int
    left: ChildRef
    right: ChildRef


class NodeStore(Protocol):
    """Where a ``PrefixTree`` keeps its rows (in memory, or an SQLite backend).

    A proof reads one ``inner`` row per level; a batch reads the rows on the
    changed paths and ends with exactly one ``write``, which a durable backend
    commits in one transaction together with the new root.
    """

    def root(self) -> ChildRef | None:
        """The root reference, None for the empty map."""
        ...

    def inner(self, node: bytes) -> InnerNode:
        """The inner node row with this id."""
        ...

    def inner_many(self, nodes: Sequence[bytes]) -> list[InnerNode]:
        """The inner node rows with these ids, in their order (a batch reads the rows of
        one depth at once: one query, not one per row)."""
        ...

    def held(self) -> Mapping[bytes, InnerNode]:
        """The inner rows in memory, by id: reading one costs no query (a batch whose
        root row is among them does not read ahead: its paths mostly are too)."""
        ...

    def leaf_value(self, key: bytes, parent: bytes | None) -> bytes:
        """The value of the leaf with this key, a child of the inner node ``parent`` (None
        when the leaf is the root): a store may keep leaf values with their parents' rows."""
        ...

    def write(
        self, root: ChildRef | None, inners: Sequence[InnerNode], leaves: Mapping[bytes, bytes]
    ) -> None:
        """Store a batch: new or replaced inner rows, leaf values, and the new root."""
        ...


class MemoryNodeStore:
    """A ``NodeStore`` in dicts."""

    def __init__(self) -> None:
        self._root: ChildRef | None = None
        self._inners: dict[bytes, InnerNode] = {}
        self._leaves: dict[bytes, bytes] = {}

    def root(self) -> ChildRef | None:
        """The root reference, None for the empty map."""
        return self._root

    def inner(self, node: bytes) -> InnerNode:
        """The inner node row with this id."""
        return self._inners[node]

    def inner_many(self, nodes: Sequence[bytes]) -> list[InnerNode]:
        """The inner node rows with these ids, in their order."""
        return [self.inner(node) for node in nodes]

    def held(self) -> Mapping[bytes, InnerNode]:
        """Every row is in memory."""
        return self._inners

    def leaf_value(self, key: bytes, parent: bytes | None) -> bytes:
        """The value of the leaf with this key."""
        return self._leaves[key]

    def write(
        self, root: ChildRef | None, inners: Sequence[InnerNode], leaves: Mapping[bytes, bytes]
    ) -> None:
        """Store a batch."""
        self._inners.update((node.id, node) for node in inners)
        self._leaves.update(leaves)
        self._root = root


@dataclass(frozen=True)
class PathStep:
    """One level of a proof: the split bit and the sibling's hash."""

    bit: int
    sibling: bytes


@dataclass(frozen=True)
class KeyPath:
    """What a lookup reaches: the leaf (None in the empty map) and its siblings, leaf to root."""

    leaf_key: bytes | None
    leaf_value: bytes | None
    steps: tuple[PathStep, ...]


_new_ref: Final = functools.partial(tuple.__new__, ChildRef)
"""``ChildRef`` from a tuple without the named tuple's Python-level ``__new__``."""
_new_inner: Final = functools.partial(tuple.__new__, InnerNode)


class _Batch:
    """One batch update: the sorted keys as integers, their values, the rows written.

    The hot loop of every append: written for few Python operations per node (one
    prefix integer per visited child, one divergence test for both ends of a range,
    and a loop without recursion once a range is down to one key, as most are below
    the top levels).
    """

    def __init__(self, store: NodeStore, changes: Mapping[bytes, bytes]) -> None:
        self.store = store
        self.keys = sorted(changes)
        self.changes = changes
        self.written: list[InnerNode] = []
        self.held = store.held()
        self.rows: dict[bytes, InnerNode] = {}
        """The stored rows ``merge`` descends through, read ahead by ``read_paths``."""

    @functools.cached_property
    def ints(self) -> list[int]:
        """The keys as integers, for the prefix arithmetic."""
        return [int.from_bytes(k, "big") for k in self.keys]

    def run(self, old: ChildRef | None) -> ChildRef:
        """The new root over ``old`` (None: the empty map), the rows in ``written``."""
        count = len(self.keys)
        return self.build(0, count) if old is None else self.merge(old, 0, count)

    def row(self, node: bytes) -> InnerNode:
        """The stored row ``node``: in memory, read ahead, or read now."""
        return self.held.get(node) or self.rows.get(node) or self.store.inner(node)

    def inner(self, node: bytes, bit: int, left: ChildRef, right: ChildRef) -> ChildRef:
        self.written.append(_new_inner((node, bit, left, right)))
        digest = hashlib.sha256(_NODE_TAGS[bit] + left.hash + right.hash).digest()
        return _new_ref((node, bit, digest))

    def build(self, lo: int, hi: int) -> ChildRef:
        """A fresh subtree of keys ``[lo, hi)`` (non-empty): recursive partition."""
        if hi - lo == 1:
            key = self.keys[lo]
            return _new_ref((key, KEY_BITS, leaf_hash(key, self.changes[key])))
        first, last = self.ints[lo], self.ints[hi - 1]
        bit = KEY_BITS - (first ^ last).bit_length()
        mid = bisect.bisect_left(self.ints, _split_point(first, bit), lo, hi)
        left, right = self.build(lo, mid), self.build(mid, hi)
        return self.inner(node_id(bit, self.keys[lo]), bit, left, right)

    def merge(self, ref: ChildRef, lo: int, hi: int) -> ChildRef:
        """The subtree ``ref`` with keys ``[lo, hi)`` (non-empty) set in it."""
        if hi - lo == 1:
            return self.merge_one(ref, lo)
        prefix, bits = _prefix_int(ref), ref.bits
        shift = KEY_BITS - bits
        ints = self.ints
        # The first bit below ``bits`` where either end of the range leaves the prefix
        # (the range is sorted, so no key between them leaves it higher).
        differ = ((prefix ^ ints[lo]) | (prefix ^ ints[hi - 1])) >> shift
        if differ:  # some keys leave this subtree above it: a new node at ``bit``
            bit = bits - differ.bit_length()
            mid = bisect.bisect_left(ints, _split_point(prefix, bit), lo, hi)
            key = prefix.to_bytes(32, "big")
            if (prefix >> (KEY_BITS - 1 - bit)) & 1:
                left = self.build(lo, mid)
                right = self.merge(ref, mid, hi) if mid < hi else ref
            else:
                left = self.merge(ref, lo, mid) if lo < mid else ref
                right = self.build(mid, hi)
            return self.inner(node_id(bit, key), bit, left, right)
        if not shift:  # the same key: a new value
            return self.build(lo, hi)
        row = self.row(ref.id)
        if row.left.bits <= bits or row.right.bits <= bits:  # altered rows: a cycle, maybe
            raise KeyError("map node malformed")
        # An inner id's prefix has every bit from ``bits`` on zeroed (``node_id``).
        mid = bisect.bisect_left(ints, prefix | (1 << (shift - 1)), lo, hi)
        left = self.merge(row.left, lo, mid) if lo < mid else row.left
        right = self.merge(row.right, mid, hi) if mid < hi else row.right
        return self.inner(ref.id, bits, left, right)  # rewritten in place: the same id

    def merge_one(self, ref: ChildRef, at: int) -> ChildRef:
        """``merge(ref, at, at + 1)``: walk the key's bits down to the leaf they reach, then
        rehash back up, each row on the way rewritten in place.

        The leaf reached is the key's own (a new value), or another key's: every key under
        ``ref`` that shares the most leading bits with the new key lies on this walk, so
        the new node goes where they part (bit ``split``), above the first row on the walk
        that splits below it. One walk by bit tests, no prefix comparison per row."""
        key, own = self.ints[at], self.keys[at]
        held, read = self.held, self.row
        path: list[InnerNode] = []  # the rows walked through, the side taken at each,
        sides: list[int] = []  # and the child followed there
        refs: list[ChildRef] = [ref]
        # Tuple indexes, not names, on the hot loops: ``ref[1]`` is its bits, a row's
        # ``[2]``/``[3]`` its left and right child (``ChildRef``, ``InnerNode``).
        while ref[1] != KEY_BITS:
            bits = ref[1]
            row = held.get(ref[0]) or read(ref[0])
            right = (key >> (KEY_BITS - 1 - bits)) & 1
            path.append(row)
            sides.append(right)
            ref = row[3] if right else row[2]
            if ref[1] <= bits:  # bits increase down a path: a walk ends within 256 rows
                raise KeyError("map node malformed")
            refs.append(ref)
        child = self.build(at, at + 1)
        if ref[0] != own:  # another key's leaf: part from it at the first bit they differ
            split = KEY_BITS - (key ^ int.from_bytes(ref[0], "big")).bit_length()
            cut = 0  # the first row on the walk splitting below ``split`` (bits increase)
            while cut < len(path) and path[cut][1] < split:
                cut += 1
            below = refs[cut]
            pair = (below, child) if (key >> (KEY_BITS - 1 - split)) & 1 else (child, below)
            child = self.inner(node_id(split, own), split, *pair)
            del path[cut:], sides[cut:]
        append, new_inner, new_ref = self.written.append, _new_inner, _new_ref
        sha256, tags = hashlib.sha256, _NODE_TAGS
        for i in range(len(path) - 1, -1, -1):
            nid, bit, left, right_ref = path[i]
            if sides[i]:
                right_ref = child
            else:
                left = child
            append(new_inner((nid, bit, left, right_ref)))
            child = new_ref((nid, bit, sha256(tags[bit] + left[2] + right_ref[2]).digest()))
        return child

    def read_paths(self, root: ChildRef) -> None:
        """Read the stored rows ``merge(root, 0, len(keys))`` descends through, one depth
        at a time: one ``inner_many`` per depth instead of one ``inner`` per row."""
        ints = self.ints
        depth = [(root, 0, len(ints))]
        while depth:
            reads = [
                (ref, *span) for ref, lo, hi in depth if (span := self._read_span(ref, lo, hi))
            ]
            if not reads:
                return
            rows = self.store.inner_many([ref.id for ref, _, _ in reads])
            depth = []
            for (ref, lo, hi), row in zip(reads, rows, strict=True):
                if row.left.bits <= ref.bits or row.right.bits <= ref.bits:
                    raise KeyError("map node malformed")
                self.rows[ref.id] = row
                if hi - lo == 1:  # one key walks its bits (``merge_one``)
                    right = (ints[lo] >> (KEY_BITS - 1 - ref.bits)) & 1
                    depth.append((row.right if right else row.left, lo, hi))
                    continue
                shift = KEY_BITS - ref.bits
                mid = bisect.bisect_left(ints, _prefix_int(ref) | (1 << (shift - 1)), lo, hi)
                if lo < mid:
                    depth.append((row.left, lo, mid))
                if mid < hi:
                    depth.append((row.right, mid, hi))

    def _read_span(self, ref: ChildRef, lo: int, hi: int) -> tuple[int, int] | None:
        """The keys ``[lo, hi)`` with which ``merge`` reads ``ref``'s row, or None when it
        does not (``ref`` is a leaf, or the keys all fall beside it). One key walks its
        bits down to a leaf (``merge_one``), inside the prefix or not."""
        ints = self.ints
        prefix, bits = _prefix_int(ref), ref.bits
        shift = KEY_BITS - bits
        if not shift:
            return None
        if hi - lo == 1:
            return lo, hi
        while differ := ((prefix ^ ints[lo]) | (prefix ^ ints[hi - 1])) >> shift:
            bit = bits - differ.bit_length()
            mid = bisect.bisect_left(ints, _split_point(prefix, bit), lo, hi)
            if (prefix >> (KEY_BITS - 1 - bit)) & 1:  # ``ref`` is the right child
                lo = mid
            else:
                hi = mid
            if lo >= hi:
                return None
        return lo, hi


def _split_point(key: int, bit: int) -> int:
    """The smallest key sharing ``key``'s bits above ``bit`` with ``bit`` set."""
    shift = KEY_BITS - bit
    return ((key >> shift) << shift) | (1 << (shift - 1))


class PrefixTree:
    """A path-compressed binary prefix tree over 32-byte keys and 32-byte values."""

    def __init__(self, store: NodeStore | None = None) -> None:
        self.store: NodeStore = store if store is not None else MemoryNodeStore()

    def root(self) -> bytes:
        """The root hash (``EMPTY_ROOT`` for no keys)."""
        ref = self.store.root()
        return EMPTY_ROOT if ref is None else ref.hash

    def update(self, changes: Mapping[bytes, bytes]) -> bytes:
        """Set every ``key -> value`` of ``changes`` in one batch; returns the new root.

        Reads and rehashes only the nodes on the changed keys' paths (one hash per
        node), then writes them with the new root in one ``store.write``.
        """
        if any(len(k) != 32 or len(v) != 32 for k, v in changes.items()):
            raise ValueError("keys and values are 32 bytes")
        if not changes:
            return self.root()
        return self._batch(changes).hash

    def _batch(self, changes: Mapping[bytes, bytes]) -> ChildRef:
        """``update``'s batch (checked, not empty): the new root, written."""
        batch = _Batch(self.store, changes)
        old = self.store.root()
        if old is not None and old.id not in batch.held:
            batch.read_paths(old)
        new = batch.run(old)
        self.store.write(new, batch.written, dict(changes))
        return new

    def lookup(self, key: bytes) -> KeyPath:
        """Walk the split bits of ``key`` to the one leaf it reaches (``key``'s own leaf iff
        present), collecting siblings; leaf to root."""
        ref = self.store.root()
        if ref is None:
            return KeyPath(None, None, ())
        steps: list[PathStep] = []
        parent = None
        while ref.bits != KEY_BITS:
            parent = ref.id
            row = self.store.inner(parent)
            if bit_of(key, row.bit):
                steps.append(PathStep(row.bit, row.left.hash))
                ref = row.right
            else:
                steps.append(PathStep(row.bit, row.right.hash))
                ref = row.left
        steps.reverse()
        return KeyPath(ref.id, self.store.leaf_value(ref.id, parent), tuple(steps))


def root_from_path(key: bytes, path: KeyPath) -> bytes:
    """The root a lookup path leads to, checking what makes it a lookup of ``key``: bits
    strictly decrease toward the root and, when the leaf is another key, ``key`` agrees
    with it at every bit. MapProofError ``bad_map_proof`` otherwise."""
    if path.leaf_key is None or path.leaf_value is None:
        if path.steps:
            raise MapProofError()
        return EMPTY_ROOT
    alternate = path.leaf_key != key
    current = leaf_hash(path.leaf_key, path.leaf_value)
    previous = KEY_BITS
    for step in path.steps:
        if not 0 <= step.bit < previous:
            raise MapProofError()
        previous = step.bit
        side = bit_of(key, step.bit)
        if alternate and bit_of(path.leaf_key, step.bit) != side:
            raise MapProofError()
        current = (
            node_hash(step.bit, step.sibling, current)
            if side
            else node_hash(step.bit, current, step.sibling)
        )
    return current


# --- proofs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class MapProof:
    """A lookup result for one key: ``present`` with the record, ``absent`` with the
    alternate leaf the lookup reaches, or ``empty``; ``path`` leaf to root."""

    result: Result
    path: tuple[PathStep, ...] = ()
    record: bytes | None = None
    alt_key: bytes | None = None
    alt_value: bytes | None = None

    def to_binary(self) -> bytes:
        """``u8 1 ‖ u8 result ‖ (u32 len ‖ record | alt_key ‖ alt_value) ‖ u16 n ‖ n x
        (u8 bit ‖ sibling)``, integers big-endian."""
        out = bytearray((BINARY_VERSION, _RESULT_CODES.index(self.result)))
        if self.result == "present":
            assert self.record is not None
            out += struct.pack(">I", len(self.record)) + self.record
        elif self.result == "absent":
            assert self.alt_key is not None and self.alt_value is not None
            out += self.alt_key + self.alt_value
        out += struct.pack(">H", len(self.path))
        for step in self.path:
            out += bytes((step.bit,)) + step.sibling
        return bytes(out)

    @classmethod
    def from_binary(cls, data: bytes) -> MapProof:
        """Parse the binary form; anything but exactly one proof is ``malformed_map_proof``."""
        reader = _Reader(bytes(data))
        if reader.u8() != BINARY_VERSION:
            raise MapFormatError()
        code = reader.u8()
        if code >= len(_RESULT_CODES):
            raise MapFormatError()
        result = _RESULT_CODES[code]
        record = alt_key = alt_value = None
        if result == "present":
            record = reader.take(reader.u32())
        elif result == "absent":
            alt_key, alt_value = reader.take(32), reader.take(32)
        count = reader.u16()
        if count > MAX_PATH or (result == "empty" and count):
            raise MapFormatError()
        path = tuple(PathStep(reader.u8(), reader.take(32)) for _ in range(count))
        reader.end()
        return cls(result, path, record, alt_key, alt_value)

    def to_json(self) -> dict[str, Any]:
        """The proof members of the JSON form (``result``, ``record``/``alt_leaf``, ``path``)."""
        out: dict[str, Any] = {"result": self.result}
        if self.record is not None:
            out["record"] = encode_base64(self.record)
        if self.alt_key is not None and self.alt_value is not None:
            out["alt_leaf"] = {
                "key": encode_base64(self.alt_key),
                "value": encode_base64(self.alt_value),
            }
        out["path"] = [{"bit": s.bit, "sibling": encode_base64(s.sibling)} for s in self.path]
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> MapProof:
        """Parse the proof members of a JSON proof (other members are the caller's)."""
        result = obj.get("result")
        if result not in _RESULT_CODES:
            raise MapFormatError()
        extra = {"present": {"record"}, "absent": {"alt_leaf"}, "empty": set()}[result]
        if set(obj) - _DOCUMENT_MEMBERS != {"result", "path", *extra}:
            raise MapFormatError()
        record = alt_key = alt_value = None
        if result == "present":
            record = _b64(obj["record"])
        elif result == "absent":
            alt = obj["alt_leaf"]
            if not isinstance(alt, dict) or set(alt) != {"key", "value"}:
                raise MapFormatError()
            alt_key, alt_value = _b64(alt["key"], 32), _b64(alt["value"], 32)
        raw_path = obj["path"]
        if not isinstance(raw_path, list) or len(raw_path) > MAX_PATH:
            raise MapFormatError()
        if result == "empty" and raw_path:
            raise MapFormatError()
        path = []
        for raw in raw_path:
            if not isinstance(raw, dict) or set(raw) != {"bit", "sibling"}:
                raise MapFormatError()
            bit = raw["bit"]
            if isinstance(bit, bool) or not isinstance(bit, int) or not 0 <= bit < KEY_BITS:
                raise MapFormatError()
            path.append(PathStep(bit, _b64(raw["sibling"], 32)))
        return cls(result, tuple(path), record, alt_key, alt_value)


_DOCUMENT_MEMBERS: Final = frozenset({"type", "checkpoint", "tool_id"})


class _Reader:
    """Bounds-checked big-endian reads; running out is ``code`` (a proof's by default)."""

    def __init__(self, data: bytes, code: ErrorCode = ErrorCode.MALFORMED_MAP_PROOF) -> None:
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


def _b64(value: object, size: int | None = None) -> bytes:
    raw = decode_base64(value) if isinstance(value, str) else None
    if raw is None or (size is not None and len(raw) != size):
        raise MapFormatError()
    return raw


def verify_map_proof(root: bytes, tool_id: str, proof: MapProof) -> StatusRecord | None:
    """Check ``proof`` for ``tool_id`` under the map ``root``; the tool's record, or None
    when the proof shows it absent (or the map empty).

    MapFormatError ``malformed_map_record`` for a record that is not the one encoding;
    MapProofError ``bad_map_proof`` for anything that does not lead to ``root`` (a
    record of another tool sits under another key), or an absent proof whose leaf is
    the key itself.
    """
    key = map_key(tool_id)
    record: StatusRecord | None = None
    if proof.result == "present":
        if proof.record is None:
            raise MapFormatError()
        record = StatusRecord.decode(proof.record, tool_id)
        path = KeyPath(key, value_hash(proof.record), proof.path)
    elif proof.result == "absent":
        if proof.alt_key is None or proof.alt_value is None:
            raise MapFormatError()
        if proof.alt_key == key:
            raise MapProofError()
        path = KeyPath(proof.alt_key, proof.alt_value, proof.path)
    else:
        path = KeyPath(None, None, proof.path)
    if root_from_path(key, path) != root:
        raise MapProofError()
    return record


def verify_status(
    root: bytes, tool_id: str, version: str, now: datetime, proof: MapProof
) -> VersionStatus:
    """The status of ``tool_id`` at ``version`` at ``now``, as the map ``root`` proves it."""
    return evaluate(tool_id, verify_map_proof(root, tool_id, proof), version, now)


@dataclass(frozen=True)
class MapProofDocument:
    """The JSON proof: the signed checkpoint it was made at, the tool id and the proof."""

    checkpoint: bytes
    tool_id: str
    proof: MapProof

    def to_json(self) -> dict[str, Any]:
        """``{"type", "checkpoint", "tool_id", "result", ..., "path"}``."""
        return {
            "type": PROOF_TYPE,
            "checkpoint": self.checkpoint.decode("utf-8"),
            "tool_id": self.tool_id,
            **self.proof.to_json(),
        }

    def encode(self) -> bytes:
        """The RFC 8785 bytes of the JSON form."""
        return canonical.dumps(self.to_json())

    @classmethod
    def parse(cls, data: bytes) -> MapProofDocument:
        """Parse the JSON form strictly (``malformed_map_proof``); the checkpoint is only
        checked to be a signed note here: the caller verifies it."""
        try:
            obj = canonical.loads(data)
        except DeplogError:
            raise MapFormatError() from None
        document = cls.from_json(obj)
        try:
            parse_note(document.checkpoint)
        except DeplogError:
            raise MapFormatError() from None
        return document

    @classmethod
    def from_json(cls, obj: object) -> MapProofDocument:
        """The document from a JSON value already decoded (an MCP ``_meta`` member), checked
        as ``parse`` checks it (``malformed_map_proof``) but for the checkpoint, which is
        left as a string to the caller's verification of it."""
        if not isinstance(obj, dict) or obj.get("type") != PROOF_TYPE:
            raise MapFormatError()
        checkpoint, tool_id = obj.get("checkpoint"), obj.get("tool_id")
        if not isinstance(checkpoint, str) or not isinstance(tool_id, str):
            raise MapFormatError()
        try:
            parse_tool_id(tool_id)
            note = checkpoint.encode("utf-8")
        except (DeplogError, UnicodeEncodeError):  # a lone surrogate JSON let through
            raise MapFormatError() from None
        return cls(note, tool_id, MapProof.from_json(obj))


def verify_proof_document(
    document: MapProofDocument, checkpoint: Checkpoint, version: str, now: datetime
) -> VersionStatus:
    """Verify a JSON proof against the checkpoint the caller verified (its log signature and
    cosignatures, under its own policy): that checkpoint is authoritative, and the one the
    document carries must have the same body (``map_checkpoint_mismatch`` otherwise)."""
    text, _ = parse_note(document.checkpoint)
    if text != checkpoint.to_text():
        raise MapProofError(ErrorCode.MAP_CHECKPOINT_MISMATCH)
    root = require_map_root(checkpoint)
    return verify_status(root, document.tool_id, version, now, document.proof)


def verify_tool_status(
    proof: bytes, checkpoint: Checkpoint, tool_id: str, version: str, now: datetime
) -> VersionStatus:
    """The status of ``tool_id`` at ``version`` at ``now`` that ``proof`` shows under
    ``checkpoint``, which the caller verified (log signature, cosignatures, freshness).

    ``proof`` is either form as served: the JSON document (its first byte ``{``) must be
    about ``tool_id`` (``bad_map_proof``) and carry this checkpoint's body; the binary
    form (its first byte the version, 1) is checked against this checkpoint's root.
    """
    if proof[:1] == b"{":
        document = MapProofDocument.parse(proof)
        if document.tool_id != tool_id:
            raise MapProofError()
        return verify_proof_document(document, checkpoint, version, now)
    root = require_map_root(checkpoint)
    return verify_status(root, tool_id, version, now, MapProof.from_binary(proof))


# --- the checkpoint extension line -------------------------------------------------------


def map_line(root: bytes) -> str:
    """The extension line committing to ``root`` (without its newline)."""
    if len(root) != 32:
        raise ValueError("a map root is 32 bytes")
    return f"{MAP_LINE_KEYWORD} {encode_base64(root)}"


def map_root_of(extensions: Sequence[str]) -> bytes | None:
    """The map root of a checkpoint's extension lines, None if no line is ours.

    A line is ours when its first space-separated word is ``deplog-map/v1``; it
    must then be exactly that word, one space and 44 characters of canonical
    base64 of 32 bytes, and appear once (``malformed_map_line``). Other lines
    are ignored.
    """
    found: bytes | None = None
    for line in extensions:
        word, space, rest = line.partition(" ")
        if word != MAP_LINE_KEYWORD:
            continue
        root = decode_base64(rest) if space else None
        if found is not None or root is None or len(root) != 32:
            raise MapLineError(ErrorCode.MALFORMED_MAP_LINE)
        found = root
    return found


def require_map_root(checkpoint: Checkpoint) -> bytes:
    """The checkpoint's map root; ``missing_map_line`` if it commits to none."""
    root = map_root_of(checkpoint.extensions)
    if root is None:
        raise MapLineError(ErrorCode.MISSING_MAP_LINE)
    return root


# --- the map ----------------------------------------------------------------------------


class VerifiableMap:
    """Tool id -> status record over a ``PrefixTree``: fold entries in, prove lookups.

    Records live in a dict unless a storage backend hands its own mapping, which
    it keeps beside the tree's rows (and commits with them).
    """

    def __init__(
        self,
        store: NodeStore | None = None,
        records: MutableMapping[str, StatusRecord] | None = None,
    ) -> None:
        self.tree = PrefixTree(store)
        self.records: MutableMapping[str, StatusRecord] = {} if records is None else records

    def root(self) -> bytes:
        """The map root."""
        return self.tree.root()

    def fold(self, items: Iterable[tuple[int, Notice | InvalidMark]]) -> bytes:
        """Fold validated items (``fold_notices``) in log order, as one batch; the new root."""
        return self.apply(fold_notices(items, self.records.get).values())

    def apply(self, records: Iterable[StatusRecord]) -> bytes:
        """Set these records (one per tool) in one batch; the new root."""
        batch = {record.tool_id: record for record in records}
        root = self.tree.update({map_key(t): r.value() for t, r in batch.items()})
        self.records.update(batch)
        return root

    def record_bytes(self, tool_id: str) -> bytes:
        """The bytes of a present tool's record (a backend may hold them as is)."""
        return self.records[tool_id].encode()

    def prove(self, tool_id: str) -> MapProof:
        """The proof of ``tool_id``'s record, or of its absence."""
        key = map_key(tool_id)
        path = self.tree.lookup(key)
        if path.leaf_key is None:
            return MapProof("empty")
        if path.leaf_key == key:
            return MapProof("present", path.steps, record=self.record_bytes(tool_id))
        return MapProof("absent", path.steps, alt_key=path.leaf_key, alt_value=path.leaf_value)
