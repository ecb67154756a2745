"""A reference model of the deplog-map/v1 tree, written from docs/fold-spec.md alone.

No storage, no batches, no integers: the root and lookups of a key set come from a
recursive partition of the sorted keys by their first differing bit, each time from
scratch. It shares no code with client/map/, so the differential tests
compare two readings of the spec.
"""

from __future__ import annotations

from functools import lru_cache
from hashlib import sha256

__all__ = ["reference_lookup", "reference_root"]

Step = tuple[int, bytes]


@lru_cache(maxsize=1 << 17)
def _bits(key: bytes) -> str:
    return "".join(format(byte, "08b") for byte in key)


def _bit(key: bytes, i: int) -> int:
    return int(_bits(key)[i])


def _split(keys: list[bytes]) -> int:
    """The first bit where the smallest and largest of sorted keys differ."""
    a, b = _bits(keys[0]), _bits(keys[-1])
    return next(i for i in range(256) if a[i] != b[i])


def _hash(keys: list[bytes], items: dict[bytes, bytes]) -> bytes:
    if len(keys) == 1:
        return sha256(b"\x10" + keys[0] + items[keys[0]]).digest()
    bit = _split(keys)
    left = [k for k in keys if _bit(k, bit) == 0]
    right = [k for k in keys if _bit(k, bit) == 1]
    return sha256(b"\x11" + bytes([bit]) + _hash(left, items) + _hash(right, items)).digest()


def reference_root(items: dict[bytes, bytes]) -> bytes:
    """The root of the map ``key -> value``."""
    if not items:
        return sha256(b"\x12").digest()
    return _hash(sorted(items), items)


def reference_lookup(items: dict[bytes, bytes], key: bytes) -> tuple[bytes | None, list[Step]]:
    """The leaf key a lookup of ``key`` reaches (None: empty map) and (bit, sibling) pairs
    from leaf to root."""
    keys = sorted(items)
    steps: list[Step] = []
    while len(keys) > 1:
        bit = _split(keys)
        same = [k for k in keys if _bit(k, bit) == _bit(key, bit)]
        other = [k for k in keys if _bit(k, bit) != _bit(key, bit)]
        steps.append((bit, _hash(other, items)))
        keys = same
    return (keys[0] if keys else None), steps[::-1]
