"""The map's tree rows and the storage seam under the tree (``docs/fold-spec.md`` section 7).

Rules:

1. **Rows, not objects.** An inner node is one row: its id (``node_id``), split bit and
   both children as (id, split bit, hash); a leaf is its key and value.
2. **One seam.** The tree reads and writes only through ``NodeStore``: a proof reads one
   row per level, a batch the rows on its paths and then exactly one ``write``, so a
   durable store commits a batch and its root in one transaction.
3. **A lost row is an error, never a guess.** A row a store cannot produce, or holds in
   a shape no store writes, is ``MapStorageError``; the tree never walks past it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from deplog.client.map.errors import MapStorageError


class ChildRef(NamedTuple):
    """A child as its parent row holds it: ``id`` (an inner node's id, a leaf's key), its
    split bit (``KEY_BITS`` for a leaf) and hash; a named tuple, cheap to make."""

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
    """Where a ``PrefixTree`` keeps its rows (rule 2)."""

    def root(self) -> ChildRef | None:
        """The root reference, None for the empty map."""
        ...

    def inner(self, node: bytes) -> InnerNode:
        """The inner node row with this id (``MapStorageError`` if the store has none)."""
        ...

    def inner_many(self, nodes: Sequence[bytes]) -> list[InnerNode]:
        """The inner node rows with these ids, in their order (one depth of a batch)."""
        ...

    def held(self) -> Mapping[bytes, InnerNode]:
        """The inner rows in memory, by id: reading one costs no query."""
        ...

    def leaf_value(self, key: bytes, parent: bytes | None) -> bytes:
        """The value of the leaf with this key, a child of ``parent`` (None: the root)."""
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
        return self._root

    def inner(self, node: bytes) -> InnerNode:
        row = self._inners.get(node)
        if row is None:
            raise MapStorageError(message="map node missing")
        return row

    def inner_many(self, nodes: Sequence[bytes]) -> list[InnerNode]:
        return [self.inner(node) for node in nodes]

    def held(self) -> Mapping[bytes, InnerNode]:
        return self._inners

    def leaf_value(self, key: bytes, parent: bytes | None) -> bytes:
        value = self._leaves.get(key)
        if value is None:
            raise MapStorageError(message="map leaf missing")
        return value

    def write(
        self, root: ChildRef | None, inners: Sequence[InnerNode], leaves: Mapping[bytes, bytes]
    ) -> None:
        self._inners.update((node.id, node) for node in inners)
        self._leaves.update(leaves)
        self._root = root
