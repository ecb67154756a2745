"""The stored form of the map's inner nodes: groups of up to fifteen nodes, one row each.

The layout is deplog's, not the spec's (no hash depends on it). Rules:

1. **A group is the nodes of four split bits** ``4g .. 4g+3`` under one ``4g``-bit
   prefix, keyed by the id the node at bit ``4g`` would have.
2. **A leaf's value lives with its parent's row** (the root leaf's in ``map_state``).
3. **One reading of the bytes.** Decoding accepts only what ``encode_group`` writes; else
   ``MapStorageError``, never a row.
4. **Bytes are stable.** A group's bytes are its rows in the order they joined it, a row
   not rewritten as it was read: a batch changes only the bytes of the rows it changed.
"""

from __future__ import annotations

from typing import Final

from deplog.client.map.errors import MapStorageError
from deplog.client.map.hashing import KEY_BITS, leaf_hash
from deplog.client.map.nodes import ChildRef, InnerNode

GROUP_BITS: Final = 4
"""Split bits per group (rule 1): at most 2^4 - 1 inner nodes."""

Row = tuple[InnerNode, bytes | None, bytes | None, bytes | None]
"""An inner node as its group keeps it: the node, its leaf children's values, and its
bytes as read (None once a batch rewrote it)."""
Group = dict[bytes, Row]
"""A decoded group: node id -> row."""


def group_id(node: bytes) -> bytes:
    """The id of the group of inner node ``node`` (rule 1)."""
    bit = node[0]
    top = bit - bit % GROUP_BITS
    if top == bit:
        return node
    prefix = node[1 : 1 + (top + 7) // 8]
    if top % 8:  # GROUP_BITS divides 8: the last byte keeps its high half
        return bytes((top,)) + prefix[:-1] + bytes((prefix[-1] & 0xF0,))
    return bytes((top,)) + prefix


_CHILD_BITS: Final = tuple(bytes(((bits - 1) & 0xFF,)) for bits in range(KEY_BITS + 1))
"""A child's first byte by its split bit: ``bits - 1``, so a leaf's 256 is 0xFF."""


def _encode_row(row: Row) -> bytes:
    """A row's bytes: the node's id, then each child as ``u8 bits-1``, its id after the first
    byte (a leaf's whole key) and its hash (a leaf's value: rule 2)."""
    (nid, _, left, right), lv, rv, _ = row
    return b"".join(
        (
            nid,
            _CHILD_BITS[left.bits],
            left.id[1:] if lv is None else left.id,
            left.hash if lv is None else lv,
            _CHILD_BITS[right.bits],
            right.id[1:] if rv is None else right.id,
            right.hash if rv is None else rv,
        )
    )


def encode_group(group: Group) -> bytes:
    """The group's stored bytes (rule 4)."""
    return b"".join([_encode_row(row) if row[3] is None else row[3] for row in group.values()])


def _decode_child(blob: bytes, at: int) -> tuple[ChildRef, bytes | None, int]:
    bits = blob[at] + 1
    if bits == KEY_BITS:
        key, value, end = blob[at + 1 : at + 33], blob[at + 33 : at + 65], at + 65
        if len(value) != 32:
            raise MapStorageError(message="map group malformed")
        return ChildRef(key, bits, leaf_hash(key, value)), value, end
    cut = at + 1 + (bits + 7) // 8
    digest, end = blob[cut : cut + 32], cut + 32
    if len(digest) != 32:
        raise MapStorageError(message="map group malformed")
    return ChildRef(bytes((bits,)) + blob[at + 1 : cut], bits, digest), None, end


def _decode_entry(blob: bytes, at: int) -> tuple[Row, int]:
    bit = blob[at]
    end = at + 1 + (bit + 7) // 8
    node = blob[at:end]
    left, lv, end = _decode_child(blob, end)
    right, rv, end = _decode_child(blob, end)
    return (InnerNode(node, bit, left, right), lv, rv, blob[at:end]), end


def decode_group(blob: bytes) -> Group:
    """The encoded group's rows (rule 3)."""
    group: Group = {}
    at = 0
    try:
        while at < len(blob):
            row, at = _decode_entry(blob, at)
            if row[0].id in group or len(group) == 2**GROUP_BITS - 1:
                raise IndexError  # a node twice, or more than a group holds
            group[row[0].id] = row
    except IndexError:
        raise MapStorageError(message="map group malformed") from None
    return group


def _find_in_group(blob: bytes, node: bytes) -> Row:
    """The row of ``node`` in an encoded group, decoding only it (a lookup's read)."""
    at = 0
    try:
        while at < len(blob):
            size = 1 + (blob[at] + 7) // 8
            if blob[at : at + size] == node:
                return _decode_entry(blob, at)[0]
            at += size
            for _ in range(2):  # skip both children
                bits = blob[at] + 1
                at += 65 if bits == KEY_BITS else 33 + (bits + 7) // 8
    except IndexError:
        pass
    raise MapStorageError(message="map node missing")
