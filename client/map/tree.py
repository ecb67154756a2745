"""The map's tree: a path-compressed binary prefix tree over 32-byte keys and values.

The normative text is ``docs/fold-spec.md`` sections 5 to 7. Rules:

1. **The shape is a function of the key set.** An inner node exists for a prefix iff
   keys exist under both its extensions: no batch order or partition changes the root.
2. **A batch costs its paths.** A batch reads and rehashes only the nodes on the changed
   keys' paths, once each, then hands them and the new root to one ``write``.
3. **A batch's walks end.** Split bits strictly increase down a path, checked of every
   row walked: one that breaks it (altered storage, a cycle) is ``MapStorageError``.
4. **Lookups prove themselves.** ``root_from_path``, beside the lookup, refuses any path
   that is not a lookup of its key (``bad_map_proof``).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from deplog.client.map.errors import MapProofError, MapStorageError
from deplog.client.map.hashing import (
    EMPTY_ROOT,
    KEY_BITS,
    NODE_TAGS,
    bit_of,
    leaf_hash,
    node_hash,
    node_id,
)
from deplog.client.map.nodes import ChildRef, InnerNode, MemoryNodeStore, NodeStore


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


def _prefix_int(ref: ChildRef) -> int:
    """The key bits above a child (all of them for a leaf) as a 256-bit integer."""
    if ref.bits == KEY_BITS:
        return int.from_bytes(ref.id, "big")
    # An inner id is ``u8 bit`` and ``len - 1`` prefix bytes: shift them into place.
    return int.from_bytes(ref.id[1:], "big") << (8 * (33 - len(ref.id)))


class _Batch:
    """One batch update, the hot loop of every append: written for few Python operations
    per node (docs/architecture.md, "The batch update")."""

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
        digest = hashlib.sha256(NODE_TAGS[bit] + left.hash + right.hash).digest()
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
            raise MapStorageError(message="map node malformed")
        # An inner id's prefix has every bit from ``bits`` on zeroed (``node_id``).
        mid = bisect.bisect_left(ints, prefix | (1 << (shift - 1)), lo, hi)
        left = self.merge(row.left, lo, mid) if lo < mid else row.left
        right = self.merge(row.right, mid, hi) if mid < hi else row.right
        return self.inner(ref.id, bits, left, right)  # rewritten in place: the same id

    def merge_one(self, ref: ChildRef, at: int) -> ChildRef:
        """``merge(ref, at, at + 1)``: walk the key's bits down to the leaf they reach and
        rehash back up. That leaf is the key's own, or the key nearest it, so a new node
        goes where they part, above the first row on the walk that splits below."""
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
                raise MapStorageError(message="map node malformed")
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
        sha256, tags = hashlib.sha256, NODE_TAGS
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
                    raise MapStorageError(message="map node malformed")
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
        """Set every ``key -> value`` of ``changes`` in one batch (rule 2); the new root."""
        if any(len(k) != 32 or len(v) != 32 for k, v in changes.items()):
            raise ValueError("keys and values are 32 bytes")
        if not changes:
            return self.root()
        batch = _Batch(self.store, changes)
        old = self.store.root()
        if old is not None and old.id not in batch.held:
            batch.read_paths(old)
        new = batch.run(old)
        self.store.write(new, batch.written, dict(changes))
        return new.hash

    def lookup(self, key: bytes) -> KeyPath:
        """The path ``key``'s split bits walk to the one leaf they reach, leaf to root."""
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
