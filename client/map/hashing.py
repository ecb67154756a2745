"""The map's keys and hashes (``docs/fold-spec.md`` sections 2 and 5).

Rules:

1. **Keys.** A tool's key is ``SHA-256(tool_id)``, and only an id a notice could
   name has one (``bad_tool_id`` otherwise).
2. **Domain separation.** Every hash is tagged (0x10 leaf, 0x11 inner node, 0x12
   the empty map, 0x13 a record's value), disjoint from RFC 9162's 0x00/0x01, so no
   map hash is also a log hash.
3. **One encoding per input.** Every input is fixed-length, except the record, which
   is hashed alone; an inner node binds its split bit, so a root has one shape.
"""

from __future__ import annotations

import hashlib
from typing import Final

from deplog.client.model.notice import parse_tool_id

KEY_BITS: Final = 256
"""Keys are SHA-256 digests; a child reference with ``bits == KEY_BITS`` is a leaf."""

_TAG_LEAF, _TAG_NODE, _TAG_EMPTY, _TAG_VALUE = b"\x10", b"\x11", b"\x12", b"\x13"
NODE_TAGS: Final = tuple(_TAG_NODE + bytes((bit,)) for bit in range(KEY_BITS))
"""An inner node's hash input up to its children, by split bit (the batch update's)."""
EMPTY_ROOT: Final = hashlib.sha256(_TAG_EMPTY).digest()
"""The root of the map with no keys."""


def map_key(tool_id: str) -> bytes:
    """SHA-256 of a tool id a notice could name (rule 1)."""
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
