"""The map's tree rows and the storage seam under the tree (``docs/fold-spec.md`` section 7).

Rules:

1. **Rows, not objects.** An inner node is one row: its id (``node_id``), its split bit
   and both children as their parent holds them (id, split bit, hash); a leaf is its
   key and value, kept where the store chooses (with its parent's row, say).
2. **One seam.** The tree reads and writes only through ``NodeStore``: a proof reads
   one row per level, a batch reads the rows on its paths and ends with exactly one
   ``write``, so a durable store commits a batch and its root in one transaction.
3. **A lost row is an error, never a guess.** A row a store cannot produce, or holds
   in a shape no store writes, raises ``MapStorageError`` (altered storage); the tree
   never walks on past it, so no wrong root or proof comes of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from deplog.client.map.errors import MapStorageError

__all__ = ["ChildRef", "InnerNode", "MemoryNodeStore", "NodeStore"]


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
        """The inner node row with this id (``MapStorageError`` if the store has none)."""
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
        row = self._inners.get(node)
        if row is None:
            raise MapStorageError(message="map node missing")
        return row

    def inner_many(self, nodes: Sequence[bytes]) -> list[InnerNode]:
        """The inner node rows with these ids, in their order."""
        return [self.inner(node) for node in nodes]

    def held(self) -> Mapping[bytes, InnerNode]:
        """Every row is in memory."""
        return self._inners

    def leaf_value(self, key: bytes, parent: bytes | None) -> bytes:
        """The value of the leaf with this key."""
        value = self._leaves.get(key)
        if value is None:
            raise MapStorageError(message="map leaf missing")
        return value

    def write(
        self, root: ChildRef | None, inners: Sequence[InnerNode], leaves: Mapping[bytes, bytes]
    ) -> None:
        """Store a batch."""
        self._inners.update((node.id, node) for node in inners)
        self._leaves.update(leaves)
        self._root = root
