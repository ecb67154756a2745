"""The verifiable map: tool id -> status record over a prefix tree, folded and proven.

Rules (``docs/fold-spec.md`` section 1):

1. **A function of the log prefix.** Validated items fold in log order, a batch at a
   time, through the one map function (``fold_notices``), whatever the batches were.
2. **Records beside their leaves.** A record is set in the batch of its leaf, and stored
   with the rows, so a proof's record always hashes to its leaf's value.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping

from deplog.client.map.hashing import map_key
from deplog.client.map.nodes import NodeStore
from deplog.client.map.proof import MapProof
from deplog.client.map.record import StatusRecord, fold_notices
from deplog.client.map.tree import PrefixTree
from deplog.client.model.notice import Notice
from deplog.client.model.status import InvalidMark


class VerifiableMap:
    """Tool id -> status record over a ``PrefixTree``: fold entries in, prove lookups."""

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
