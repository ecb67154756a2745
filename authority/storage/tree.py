"""The Merkle tree of the log, as a pymerkle backend over stored subtree hashes.

pymerkle computes RFC 9162 roots and proofs from *subroots*, hashes of perfect subtrees;
here each is persisted once, by the append that completes it (the Go checksum database's
layout, keyed by ``(level, index)``), and read with one indexed lookup.

Invariants:
  * ``leaves`` holds the entry bytes and RFC 9162 leaf hash of leaves 0..size-1, no gaps;
    rows are never updated or deleted.
  * ``nodes`` holds, for level >= 1, the hash of every *complete* perfect subtree: node
    (level, i) covers leaves [i * 2^level, (i + 1) * 2^level).
  * ``frontier`` (``TreeFrontier``) is the in-memory right edge, all an append or the
    current root needs; it is rebuilt from ``nodes`` with O(log n) reads on open.

Costs: append O(log n) writes, no reads; any root or proof O(log n) indexed reads, a proof's
in one statement (``_read_first``).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from typing import TypeVar

from pymerkle import BaseMerkleTree

from deplog.client.plumbing.dbapi import Connection, insert_rows
from deplog.client.tlog.proofs import TreeFrontier, leaf_hash, node_hash

AUDIT_PROGRESS_STEP = 4096
"""Leaves between two progress reports of :meth:`StoredHashTree.audit`."""
KNOWN_HASHES = 1 << 16
"""Hashes a tree instance keeps of those it wrote or loaded (about 12 MiB at most)."""
SUBROOTS_PER_READ = 256
"""Stored hashes one statement of ``_read_first`` reads (a proof needs about 2 log n)."""
PLACEHOLDER = bytes(32)
"""The hash ``_read_first``'s dry run stands in for every stored one."""
T = TypeVar("T")


class TreeCorruptError(Exception):
    """Stored hashes that cannot be what our own appends wrote: storage was altered."""


class StoredHashTree(BaseMerkleTree):  # type: ignore[misc]
    """A pymerkle tree whose subroots are read from ``nodes``, one per connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        # pymerkle's LRU subroot cache is bypassed: every subroot is a read, or a hash
        # this instance wrote or loaded (``known``).
        super().__init__("sha256", capacity=0)
        row = conn.execute("SELECT max(idx) FROM leaves").fetchone()
        self.size: int = 0 if row[0] is None else row[0] + 1
        self.memo: dict[tuple[int, int], bytes] | None = None
        self.known: dict[tuple[int, int], bytes] = {}
        self._wanted: list[tuple[int, int]] | None = None
        self._deferring = False
        self._leaf_rows_due: list[tuple[int, bytes, bytes]] = []
        self._node_rows_due: list[tuple[int, int, bytes]] = []
        self.frontier = self._load_frontier(self.size)

    def _encode_entry(self, data: bytes) -> bytes:
        return data

    def _store_leaf(self, data: bytes, digest: bytes) -> int:
        index = self.frontier.size
        completed = self.frontier.append(digest)
        self._leaf_rows_due.append((index, data, digest))
        self._node_rows_due.extend(completed)
        if not self._deferring:
            self.flush()
        self.size = self.frontier.size
        self._know(0, index, digest)
        for level, idx, node in completed:
            self._know(level, idx, node)
        return self.size  # pymerkle counts leaves from one

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Queue the rows of the appends inside, written on leaving (or before a read)."""
        self._deferring = True
        try:
            yield
            self.flush()
        finally:
            self._deferring = False
            self._leaf_rows_due, self._node_rows_due = [], []

    def flush(self) -> None:
        """Write the queued leaf and node rows (in the caller's transaction)."""
        leaves, nodes = self._leaf_rows_due, self._node_rows_due
        self._leaf_rows_due, self._node_rows_due = [], []
        insert_rows(self.conn, "INSERT INTO leaves (idx, data, hash)", leaves)
        insert_rows(self.conn, "INSERT INTO nodes (level, idx, hash)", nodes)

    def _get_leaf(self, index: int) -> bytes:
        return self._subroot(0, index - 1)

    def _get_leaves(self, offset: int, width: int) -> list[bytes]:
        self.flush()
        rows = self.conn.execute(
            "SELECT hash FROM leaves WHERE idx >= ? AND idx < ? ORDER BY idx",
            (offset, offset + width),
        ).fetchall()
        if len(rows) != width:
            raise TreeCorruptError("leaf rows missing")
        return [bytes(r[0]) for r in rows]

    def _get_size(self) -> int:
        return self.size

    def _get_subroot(self, offset: int, width: int) -> bytes:
        level = width.bit_length() - 1
        return self._subroot(level, offset >> level)

    _get_subroot_uncached = _get_subroot

    def _know(self, level: int, index: int, digest: bytes) -> None:
        """Keep a hash this instance wrote or loaded, so a batch's receipts need no read
        (a rollback replaces the instance); past ``KNOWN_HASHES`` the oldest half goes."""
        if len(self.known) >= KNOWN_HASHES:
            for key in list(itertools.islice(self.known, KNOWN_HASHES // 2)):
                del self.known[key]
        self.known[(level, index)] = digest

    def _subroot(self, level: int, index: int) -> bytes:
        known = self.known.get((level, index))
        if known is not None:
            return known
        if self._wanted is not None:  # the dry run of ``_read_first``
            self._wanted.append((level, index))
            return PLACEHOLDER
        if self.memo is not None:
            cached = self.memo.get((level, index))
            if cached is None:
                cached = self.memo[(level, index)] = self._read_subroot(level, index)
            return cached
        return self._read_subroot(level, index)

    @contextlib.contextmanager
    def memoized(self) -> Iterator[None]:
        """Share stored-hash reads (which never change) across many proofs of one size."""
        self.memo = {}
        try:
            yield
        finally:
            self.memo = None

    def _read_first(self, prove: Callable[[], T]) -> T:
        """``prove()``, after one statement read every stored hash it needs: which subtrees
        a proof needs depends on its sizes alone, so a dry run over placeholder hashes names
        them (one round trip, not one per hash, on a distant database)."""
        self._wanted = []
        try:
            prove()
        finally:
            wanted, self._wanted = self._wanted, None
        kept = self.memo
        self.memo = {} if kept is None else kept
        try:
            self.memo.update(self._read_subroots([k for k in wanted if k not in self.memo]))
            return prove()
        finally:
            self.memo = kept

    def _read_subroots(self, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        self.flush()
        found: dict[tuple[int, int], bytes] = {}
        keys = list(dict.fromkeys(keys))
        for start in range(0, len(keys), SUBROOTS_PER_READ):
            chunk = keys[start : start + SUBROOTS_PER_READ]
            leaves = [index for level, index in chunk if level == 0]
            nodes = [k for k in chunk if k[0] > 0]
            parts, params = [], []
            if leaves:
                marks = ", ".join("?" * len(leaves))
                parts.append(f"SELECT 0, idx, hash FROM leaves WHERE idx IN ({marks})")
                params += leaves
            if nodes:
                where = " OR ".join(["(level = ? AND idx = ?)"] * len(nodes))
                parts.append(f"SELECT level, idx, hash FROM nodes WHERE {where}")
                params += [v for key in nodes for v in key]
            for level, index, digest in self.conn.execute(" UNION ALL ".join(parts), params):
                found[(int(level), int(index))] = bytes(digest)
        return found

    def _read_subroot(self, level: int, index: int) -> bytes:
        self.flush()
        if level == 0:
            row = self.conn.execute("SELECT hash FROM leaves WHERE idx = ?", (index,)).fetchone()
        else:
            row = self.conn.execute(
                "SELECT hash FROM nodes WHERE level = ? AND idx = ?", (level, index)
            ).fetchone()
        if row is None:
            raise TreeCorruptError("stored hash missing")
        return bytes(row[0])

    def _load_frontier(self, size: int) -> TreeFrontier:
        hashes, end = [], 0
        for level in reversed(range(size.bit_length())):
            if size >> level & 1:
                digest = self._subroot(level, end >> level)
                self._know(level, end >> level, digest)
                hashes.append(digest)
                end += 1 << level
        return TreeFrontier(size, hashes)

    def pin(self, size: int) -> None:
        """Limit a reader to ``size`` leaves, the size of a published checkpoint."""
        self.size = size

    def current_root(self) -> bytes:
        """Root of the whole tree from the in-memory frontier: no reads."""
        return self.frontier.root()

    def root_at(self, size: int) -> bytes:
        return bytes(self.get_root(size))

    def leaf_data(self, start: int, end: int) -> list[bytes]:
        self.flush()
        rows = self.conn.execute(
            "SELECT data FROM leaves WHERE idx >= ? AND idx < ? ORDER BY idx", (start, end)
        ).fetchall()
        return [bytes(r[0]) for r in rows]

    def verify_leaves(self, start: int, end: int) -> int | None:
        """First index in [start, end) whose stored hash is not the hash of its data."""
        self.flush()
        expected = start
        for idx, data, digest in self._leaf_rows(start, end):
            if idx != expected or leaf_hash(data) != digest:
                return expected
            expected += 1
        return None if expected == end else expected

    def audit(self, progress: Callable[[int, int], None] | None = None) -> str | None:
        """Rehash every leaf and stored subtree hash, O(n): the first disagreement, or None."""
        frontier = TreeFrontier()
        expected = 0
        report = progress or (lambda done, total: None)
        report(0, self.size)
        for idx, data, digest in self._leaf_rows(0, self.size):
            if idx != expected:
                return f"leaf {expected} is missing"
            if leaf_hash(bytes(data)) != bytes(digest):
                return f"leaf {idx} does not match its stored hash"
            for level, index, node in frontier.append(bytes(digest)):
                try:
                    stored = self._read_subroot(level, index)
                except TreeCorruptError:
                    stored = b""
                if stored != node:
                    first = index << level
                    return f"subtree hash over leaves {first}.. (level {level}) is wrong"
            expected += 1
            if expected % AUDIT_PROGRESS_STEP == 0:
                report(expected, self.size)
        if expected != self.size:
            return f"leaf {expected} is missing"
        report(expected, self.size)
        return None

    def _leaf_rows(self, start: int, stop: int) -> Iterator[tuple[int, bytes, bytes]]:
        """The leaf rows in ``[start, stop)``, read ``AUDIT_PROGRESS_STEP`` rows at a time."""
        while start < stop:
            end = min(start + AUDIT_PROGRESS_STEP, stop)
            rows = self.conn.execute(
                "SELECT idx, data, hash FROM leaves WHERE idx >= ? AND idx < ? ORDER BY idx",
                (start, end),
            ).fetchall()
            for idx, data, digest in rows:
                yield int(idx), bytes(data), bytes(digest)
            if len(rows) < end - start:
                return
            start = end

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """RFC 9162 2.1.3.1 PATH for 0-based ``index`` in the tree of ``size`` leaves."""
        path = self._read_first(lambda: self.prove_inclusion(index + 1, size)).path
        return [bytes(h) for h in path[1:]]  # pymerkle's starts with the leaf hash itself

    def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        """RFC 9162 2.1.4.1 PROOF between the trees of ``old_size`` and ``new_size`` leaves."""
        if old_size == 0 or old_size == new_size:
            return []
        proof = self._read_first(lambda: self.prove_consistency(old_size, new_size))
        return _consistency_path_from_pymerkle(proof.subset, proof.path)


def _consistency_path_from_pymerkle(subset: Sequence[int], path: Sequence[bytes]) -> list[bytes]:
    """Turn a pymerkle consistency proof (its public ``subset`` and ``path``) into RFC 9162's.

    Both walk down from the root splitting at the largest power of two k below
    the width, and both list hashes bottom-up; ``subset`` marks the hashes of
    subtrees inside the old tree. They differ in two places:

    * RFC 9162 stops when the old tree is exactly a left subtree (m == k) and
      emits the right sibling as one hash; pymerkle instead descends into the
      right subtree with an empty old part and emits its decomposition: the
      leading run of hashes outside the old tree. Folding that run gives the sibling.
    * RFC 9162 omits the old subtree hash while the walk never went right
      (b == true), since the verifier already knows the old root; pymerkle
      always lists it. The walk went right exactly where pymerkle lists a
      hash of the old tree *above* that subtree's own hash.

    ``tests/test_tree.py`` holds the result to the RFC's own recursion for every
    pair of sizes up to 64, so a change in pymerkle's proof shape fails there.
    """
    hashes = [bytes(h) for h in path]
    if len(hashes) != len(subset) or 1 not in subset:
        # Our reading of pymerkle is wrong, not the storage: fail loudly (a 500).
        raise RuntimeError(
            f"pymerkle {metadata.version('pymerkle')} returned a consistency proof of "
            "an unexpected shape"
        )
    base = list(subset).index(1)  # the old tree's lowest subtree in the path
    went_right = any(subset[base + 1 :])
    proof = [hashes[base]] if went_right else []
    if base:
        sibling = hashes[0]
        for h in hashes[1:base]:
            sibling = node_hash(sibling, h)
        proof.append(sibling)
    return proof + hashes[base + 1 :]
