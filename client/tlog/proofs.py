"""Merkle tree hashing and proofs (RFC 9162 section 2.1).

Rules:

1. Leaves hash as SHA-256(0x00 || data), nodes as SHA-256(0x01 || left || right), the
   empty tree as SHA-256() (section 2.1.1); proofs are lists of 32-byte hashes.
2. Generation is the RFC's recursive definition, written for clarity, as leaf ranges
   (``inclusion_ranges``, ``consistency_ranges``) hashed here over leaf hashes and by
   ``client.tlog.tiles`` over tiles: one reading of the RFC. Verification follows the
   iterative algorithms of sections 2.1.3.2 and 2.1.4.2; any failure is ``ProofError``.
3. A proof never establishes a size: sizes and roots come from verified checkpoints,
   and a proof for other sizes is refused (``proof_size_mismatch``).
4. Leaves checked against a verified checkpoint build exactly its tree, or
   ``TreeMismatchError`` says how they do not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deplog.client.errors import ErrorCode, FormatError, VerificationError
from deplog.client.tlog.note import decode_base64, encode_base64

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
"""MTH({}), the root of the empty tree (RFC 9162 section 2.1.1)."""

MAX_TREE_SIZE = (1 << 63) - 1
MAX_PROOF_HASHES = 64
"""No valid proof in a tree of fewer than 2^63 leaves has more hashes than this."""


class ProofError(VerificationError):
    """A proof that does not verify or answers another question, or an unanswerable request."""

    codes = frozenset(
        {
            ErrorCode.BAD_PROOF_REQUEST,
            ErrorCode.BAD_INCLUSION_PROOF,
            ErrorCode.BAD_CONSISTENCY_PROOF,
            ErrorCode.PROOF_SIZE_MISMATCH,
        }
    )


class ProofFormatError(FormatError):
    """A proof in the HTTP JSON shape that is not well formed."""

    code = ErrorCode.MALFORMED_PROOF


class TreeMismatchError(VerificationError):
    """Leaves that do not build a verified checkpoint's tree; ``index``: the first leaf amiss."""

    codes = frozenset(
        {ErrorCode.TOO_MANY_ENTRIES, ErrorCode.MISSING_ENTRIES, ErrorCode.ENTRIES_ROOT_MISMATCH}
    )

    def __init__(self, code: ErrorCode, index: int | None) -> None:
        where = "" if index is None else f" at index {index}"
        super().__init__(code, f"the leaves do not build the checkpoint's tree{where}")
        self.index = index


def leaf_hash(data: bytes) -> bytes:
    """The hash of a leaf: SHA-256(0x00 || data) (RFC 9162 section 2.1.1)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an interior node: SHA-256(0x01 || left || right) (RFC 9162 section 2.1.1)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (n > 1), the RFC's ``k``."""
    return 1 << ((n - 1).bit_length() - 1)


def _mth(hashes: Sequence[bytes], lo: int, hi: int) -> bytes:
    """MTH of the leaves whose hashes are ``hashes[lo:hi]`` (RFC 9162 section 2.1.1)."""
    n = hi - lo
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return hashes[lo]
    k = _split(n)
    return node_hash(_mth(hashes, lo, lo + k), _mth(hashes, lo + k, hi))


def root_from_leaf_hashes(hashes: Sequence[bytes]) -> bytes:
    """The Merkle tree hash of a list of leaf hashes."""
    return _mth(hashes, 0, len(hashes))


class TreeFrontier:
    """The right edge of a Merkle tree: its perfect subtrees' roots, largest first."""

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()) -> None:
        if not _is_size(size) or len(hashes) != size.bit_count() or not _are_hashes(hashes):
            raise ProofFormatError(message="a frontier has one 32-byte hash per set bit of size")
        self.size = size
        levels = [level for level in range(size.bit_length()) if size >> level & 1]
        self._nodes = dict(zip(reversed(levels), hashes, strict=True))

    @property
    def hashes(self) -> tuple[bytes, ...]:
        """The subtree hashes, largest (leftmost) subtree first."""
        return tuple(self._nodes[level] for level in sorted(self._nodes, reverse=True))

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Add a leaf hash; returns the subtrees it completes as (level, index, hash)."""
        completed = []
        node, level, index = leaf, 0, self.size
        while index >> level & 1:
            node = node_hash(self._nodes.pop(level), node)
            level += 1
            completed.append((level, index >> level, node))
        self._nodes[level] = node
        self.size += 1
        return completed

    def root(self) -> bytes:
        """MTH of the whole tree: the subtree hashes folded from the right."""
        root: bytes | None = None
        for level in sorted(self._nodes):
            root = self._nodes[level] if root is None else node_hash(self._nodes[level], root)
        return EMPTY_ROOT if root is None else root

    def copy(self) -> TreeFrontier:
        return TreeFrontier(self.size, self.hashes)


def _check_generation_range(hashes: Sequence[bytes], size: int) -> None:
    if size > len(hashes):
        raise ProofError(ErrorCode.BAD_PROOF_REQUEST, "tree size exceeds the known leaves")


def inclusion_path(hashes: Sequence[bytes], index: int, size: int) -> list[bytes]:
    """PATH(index, D[0:size]) of RFC 9162 section 2.1.3.1, from the leaf's sibling up."""
    _check_generation_range(hashes, size)
    return [_mth(hashes, lo, hi) for lo, hi in inclusion_ranges(index, size)]


def inclusion_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """The leaf ranges ``(lo, hi)`` whose MTH(D[lo:hi]) make up PATH(index, D[0:size]), nodes
    of the RFC's recursion: the shape of a proof, hashed over leaves or over tiles."""
    if not 0 <= index < size:
        raise ProofError(ErrorCode.BAD_PROOF_REQUEST, "leaf index outside the tree")

    def path(m: int, lo: int, hi: int) -> list[tuple[int, int]]:
        n = hi - lo
        if n == 1:
            return []
        k = _split(n)
        if m < k:
            return [*path(m, lo, lo + k), (lo + k, hi)]
        return [*path(m - k, lo + k, hi), (lo, lo + k)]

    return path(index, 0, size)


def consistency_path(hashes: Sequence[bytes], old_size: int, new_size: int) -> list[bytes]:
    """PROOF(old_size, D[0:new_size]) of RFC 9162 section 2.1.4.1 (empty from 0 or equal)."""
    _check_generation_range(hashes, new_size)
    return [_mth(hashes, lo, hi) for lo, hi in consistency_ranges(old_size, new_size)]


def consistency_ranges(old_size: int, new_size: int) -> list[tuple[int, int]]:
    """The leaf ranges ``(lo, hi)`` whose MTH(D[lo:hi]) make up PROOF(old_size, D[0:new_size])."""
    if not 0 <= old_size <= new_size:
        raise ProofError(ErrorCode.BAD_PROOF_REQUEST, "old size exceeds new size")
    if old_size in (0, new_size):
        return []

    def subproof(m: int, lo: int, hi: int, complete: bool) -> list[tuple[int, int]]:
        n = hi - lo
        if m == n:
            return [] if complete else [(lo, hi)]
        k = _split(n)
        if m <= k:
            return [*subproof(m, lo, lo + k, complete), (lo + k, hi)]
        return [*subproof(m - k, lo + k, hi, False), (lo, lo + k)]

    return subproof(old_size, 0, new_size, True)


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TREE_SIZE


def _are_hashes(values: Sequence[bytes]) -> bool:
    return all(isinstance(h, bytes) and len(h) == HASH_SIZE for h in values)


def verify_inclusion(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that ``leaf_hash`` is leaf ``index`` of the tree of ``size`` leaves with ``root``
    (RFC 9162 section 2.1.3.2, after the wire checks)."""
    if (
        not _is_size(index)
        or not _is_size(size)
        or index >= size
        or len(proof) > MAX_PROOF_HASHES
        or not _are_hashes([leaf_hash, root, *proof])
    ):
        raise ProofError(ErrorCode.BAD_INCLUSION_PROOF, "inclusion proof does not apply")
    fn, sn = index, size - 1
    r = leaf_hash
    for p in proof:
        if sn == 0:
            raise ProofError(ErrorCode.BAD_INCLUSION_PROOF, "inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0 or r != root:
        raise ProofError(ErrorCode.BAD_INCLUSION_PROOF, "inclusion proof does not verify")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree of ``new_size`` leaves and ``new_root`` extends the older one (RFC
    9162 section 2.1.4.2; from size 0, and between equal sizes, the proof is empty)."""
    if (
        not _is_size(old_size)
        or not _is_size(new_size)
        or old_size > new_size
        or len(proof) > MAX_PROOF_HASHES
        or not _are_hashes([old_root, new_root, *proof])
    ):
        raise ProofError(ErrorCode.BAD_CONSISTENCY_PROOF, "consistency proof does not apply")
    if old_size == 0:
        if proof or old_root != EMPTY_ROOT:
            raise ProofError(ErrorCode.BAD_CONSISTENCY_PROOF, "proof from the empty tree is empty")
        return
    if old_size == new_size:
        if proof or old_root != new_root:
            raise ProofError(ErrorCode.BAD_CONSISTENCY_PROOF, "equal sizes need equal roots")
        return
    if not proof:
        raise ProofError(ErrorCode.BAD_CONSISTENCY_PROOF, "consistency proof is empty")
    path = list(proof)
    # Step 2: when the old tree is a complete subtree, its root is the first node.
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError(ErrorCode.BAD_CONSISTENCY_PROOF, "consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0 or fr != old_root or sr != new_root:
        raise ProofError(ErrorCode.BAD_CONSISTENCY_PROOF, "consistency proof does not verify")


def _size_field(obj: dict[str, Any], key: str) -> int:
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int) or not _is_size(value):
        raise ProofFormatError(message="proof sizes are integers in [0, 2^63)")
    return value


def _hash_value(value: object) -> bytes:
    raw = decode_base64(value) if isinstance(value, str) else None
    if raw is None or len(raw) != HASH_SIZE:
        raise ProofFormatError(message="hashes are 32 bytes in standard base64")
    return raw


def _hash_list(value: object) -> tuple[bytes, ...]:
    if not isinstance(value, list) or len(value) > MAX_PROOF_HASHES:
        raise ProofFormatError(message="proof must be a list of at most 64 hashes")
    return tuple(_hash_value(item) for item in value)


def _object_with(obj: object, keys: set[str]) -> dict[str, Any]:
    if not isinstance(obj, dict) or set(obj) != keys:
        raise ProofFormatError(message="proof object has missing or unknown fields")
    return obj


@dataclass(frozen=True)
class InclusionProof:
    """An inclusion proof for one leaf hash at ``index`` in the tree of ``size`` leaves."""

    index: int
    size: int
    leaf_hash: bytes
    hashes: tuple[bytes, ...]

    def __post_init__(self) -> None:
        if not (_is_size(self.index) and _is_size(self.size) and self.index < self.size):
            raise ProofFormatError(message="index must be below size")
        if len(self.hashes) > MAX_PROOF_HASHES or not _are_hashes([self.leaf_hash, *self.hashes]):
            raise ProofFormatError(message="hashes are 32 bytes, at most 64 of them")

    def verify(self, root: bytes) -> None:
        """Check the proof against the root of a verified checkpoint of ``size`` leaves."""
        verify_inclusion(self.leaf_hash, self.index, self.size, self.hashes, root)

    def to_json(self) -> dict[str, Any]:
        """The HTTP shape ``{"index", "size", "leaf_hash", "proof"}``, hashes in base64."""
        return {
            "index": self.index,
            "size": self.size,
            "leaf_hash": encode_base64(self.leaf_hash),
            "proof": [encode_base64(h) for h in self.hashes],
        }

    @classmethod
    def from_json(cls, obj: object) -> InclusionProof:
        """Parse the HTTP shape strictly: exact keys, integer sizes, canonical base64."""
        fields = _object_with(obj, {"index", "size", "leaf_hash", "proof"})
        return cls(
            _size_field(fields, "index"),
            _size_field(fields, "size"),
            _hash_value(fields["leaf_hash"]),
            _hash_list(fields["proof"]),
        )


@dataclass(frozen=True)
class ConsistencyProof:
    """A consistency proof from the tree of ``old`` leaves to the tree of ``new`` leaves."""

    old: int
    new: int
    hashes: tuple[bytes, ...]

    def __post_init__(self) -> None:
        if not (_is_size(self.old) and _is_size(self.new) and self.old <= self.new):
            raise ProofFormatError(message="old size must not exceed new size")
        if len(self.hashes) > MAX_PROOF_HASHES or not _are_hashes(self.hashes):
            raise ProofFormatError(message="hashes are 32 bytes, at most 64 of them")

    def check_sizes(self, old: int, new: int) -> None:
        """Refuse a proof for other sizes than the checkpoints' (``proof_size_mismatch``)."""
        if (self.old, self.new) != (old, new):
            raise ProofError(ErrorCode.PROOF_SIZE_MISMATCH, "the proof is for other sizes")

    def verify(self, old_root: bytes, new_root: bytes) -> None:
        """Check the proof between the roots of two verified checkpoints."""
        verify_consistency(self.old, self.new, old_root, new_root, self.hashes)

    def to_json(self) -> dict[str, Any]:
        """The HTTP shape ``{"old", "new", "proof"}``, hashes in base64."""
        return {
            "old": self.old,
            "new": self.new,
            "proof": [encode_base64(h) for h in self.hashes],
        }

    @classmethod
    def from_json(cls, obj: object) -> ConsistencyProof:
        """Parse the HTTP shape strictly: exact keys, integer sizes, canonical base64."""
        fields = _object_with(obj, {"old", "new", "proof"})
        return cls(
            _size_field(fields, "old"),
            _size_field(fields, "new"),
            _hash_list(fields["proof"]),
        )
