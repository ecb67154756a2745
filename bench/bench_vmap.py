"""The pure tool-status map (client/model/vmap.py): batch updates, proof sizes, verify time.

Run by hand (not in CI):  python bench/bench_vmap.py [--sizes 10000 100000 1000000]

For each size N it builds an in-memory map of N random keys, then measures:
  * batch update of 1, 100 and 1000 changed keys (half updates of present keys, half
    new keys): wall time and node hashes (rows written), median of 5 batches;
  * the binary proof size of 2000 random present keys with a one-notice record (the
    path is the part that grows with N), mean / p50 / p99 / max;
  * verification (``verify_status``: record decode, fold, path) of a present and an
    absent proof, p50 / p99 over 2000 calls.
The baseline, in the same run, is a full rebuild of the same N keys.
No storage and no sequencer: those figures belong to the integration.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import pct
from deplog.client.model.notice import Notice
from deplog.client.model.vmap import (
    ChildRef,
    InnerNode,
    MapProof,
    MemoryNodeStore,
    PrefixTree,
    RecordNotice,
    StatusRecord,
    map_key,
    verify_status,
)

TOOL = "tool:org.bench/search"
NOW = datetime(2026, 3, 1, tzinfo=UTC)


class CountingStore(MemoryNodeStore):
    """Counts the inner rows (one node hash each) the last batch wrote."""

    written = 0

    def write(
        self, root: ChildRef | None, inners: Sequence[InnerNode], leaves: Mapping[bytes, bytes]
    ) -> None:
        self.written = len(inners)
        super().write(root, inners, leaves)


def one_notice_record() -> StatusRecord:
    notice = Notice.from_json(
        {
            "tool_id": TOOL,
            "action": "deprecate",
            "affected": {"versions": ["1.0.0", "1.1.0"]},
            "reasons": ["superseded"],
            "effective_at": "2026-02-01T00:00:00Z",
            "sunset_at": "2026-06-01T00:00:00Z",
            "issued_at": "2026-01-15T09:30:00Z",
            "publisher": "bench",
            "sequence": 1,
        }
    )
    return StatusRecord.build(TOOL, [RecordNotice(12345, b"\x00" * 32, notice)])


def run(size: int) -> None:
    keys = [os.urandom(32) for _ in range(size)]
    record = one_notice_record()
    store = CountingStore()
    tree = PrefixTree(store)
    start = time.perf_counter()
    tree.update({k: os.urandom(32) for k in keys} | {map_key(TOOL): record.value()})
    rebuild = time.perf_counter() - start
    print(f"N={size:>9,}  full build {rebuild * 1000:9.1f} ms, {store.written:,} node hashes")
    for changed in (1, 100, 1000):
        times, hashes = [], []
        for _ in range(5):
            batch = {k: os.urandom(32) for k in random.sample(keys, changed - changed // 2)}
            added = [os.urandom(32) for _ in range(changed // 2)]
            batch |= {k: os.urandom(32) for k in added}
            keys += added
            start = time.perf_counter()
            tree.update(batch)
            times.append(time.perf_counter() - start)
            hashes.append(store.written)
        print(
            f"  batch of {changed:>4} keys: {statistics.median(times) * 1000:8.3f} ms, "
            f"{statistics.median(hashes):,.0f} node hashes "
            f"({statistics.median(times) / rebuild:.2%} of a rebuild)"
        )
    root, sizes = tree.root(), []
    key = map_key(TOOL)
    for probe in keys[:2000]:
        path = tree.lookup(probe).steps
        sizes.append(len(MapProof("present", path, record=record.encode()).to_binary()))
    print(
        f"  present proof bytes ({len(record.encode())} B record): mean "
        f"{statistics.mean(sizes):.0f}, p50 {pct(sizes, 50)}, p99 {pct(sizes, 99)}, "
        f"max {max(sizes)}"
    )
    present = MapProof("present", tree.lookup(key).steps, record=record.encode())
    absent_tool = "tool:org.bench/absent"
    found = tree.lookup(map_key(absent_tool))
    absent = MapProof("absent", found.steps, alt_key=found.leaf_key, alt_value=found.leaf_value)
    for name, tool, proof in (("present", TOOL, present), ("absent", absent_tool, absent)):
        samples = []
        for _ in range(2000):
            start = time.perf_counter()
            verify_status(root, tool, "1.0.0", NOW, proof)
            samples.append(time.perf_counter() - start)
        print(
            f"  verify_status {name:>7}: p50 {pct(samples, 50) * 1e6:7.1f} us, "
            f"p99 {pct(samples, 99) * 1e6:7.1f} us"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    for size in parser.parse_args().sizes:
        run(size)


if __name__ == "__main__":
    main()
