"""Storage at scale: restart, root and proof costs, against pymerkle's stock SqliteTree.

Run by hand (not in CI):  python bench/bench_tree.py [--sizes 100000 1000000]

For each size it builds a log database of that many leaves, then measures in
fresh processes' worth of state (new connections, empty caches):
  * open: ``Log(...)`` on the database, including its check of the stored tree
    against the latest signed checkpoint (the authority's cold start);
  * proofs: 1000 random inclusion proofs and 1000 random consistency proofs
    right after opening, p50 and p99;
  * appends: the worst single append while the size crosses powers of two.
The baseline, measured in the same run at the first size, is pymerkle's stock
``SqliteTree`` over the same leaves: root after reopening and inclusion proofs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pymerkle import SqliteTree

from deplog.authority.log import Log
from deplog.authority.storage.sqlite import SqliteDatabase
from deplog.authority.storage.tree import StoredHashTree
from deplog.client.tlog.note import Signer

ORIGIN = "bench.deplog.example/log"
BATCH = 10_000


def leaf(i: int) -> bytes:
    return b'{"type":"bench","i":%d}' % i


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f} ms"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def build(path: Path, size: int) -> float:
    """Append ``size`` leaves in batches; returns the worst single append in seconds."""
    db = SqliteDatabase(path)
    conn = db.connect()
    db.prepare(conn)
    tree = StoredHashTree(conn)
    worst = 0.0
    while tree.size < size:
        conn.execute("BEGIN")
        for _ in range(min(BATCH, size - tree.size)):
            started = time.perf_counter()
            tree.append_entry(leaf(tree.size))
            worst = max(worst, time.perf_counter() - started)
        conn.execute("COMMIT")
    conn.close()
    return worst


def measure(path: Path, signer: Signer, size: int, rng: random.Random) -> None:
    Log(path, signer, ORIGIN).close()  # sign the checkpoint of the built tree
    started = time.perf_counter()
    log = Log(path, signer, ORIGIN)
    opened = time.perf_counter() - started
    inclusion, consistency = [], []
    for _ in range(1000):
        index = rng.randrange(size)
        started = time.perf_counter()
        log.tree.inclusion_proof(index, size)
        inclusion.append(time.perf_counter() - started)
    for _ in range(1000):
        old = rng.randrange(1, size)
        started = time.perf_counter()
        log.tree.consistency_proof(old, size)
        consistency.append(time.perf_counter() - started)
    log.close()
    print(f"  cold start (open + check)  {ms(opened)}")
    print(
        f"  inclusion proof   p50 {ms(statistics.median(inclusion))}  p99 {ms(pct(inclusion, 99))}"
    )
    print(
        f"  consistency proof p50 {ms(statistics.median(consistency))}  "
        f"p99 {ms(pct(consistency, 99))}"
    )


def baseline(tmp: Path, size: int, rng: random.Random) -> None:
    path = tmp / f"stock-{size}.db"
    tree = SqliteTree(str(path))
    tree.append_entries(leaf(i) for i in range(size))
    tree.close()
    tree = SqliteTree(str(path))
    started = time.perf_counter()
    tree.get_root()
    root = time.perf_counter() - started
    proofs = []
    for _ in range(200):
        index = rng.randrange(1, size + 1)
        started = time.perf_counter()
        tree.prove_inclusion(index, size)
        proofs.append(time.perf_counter() - started)
    tree.close()
    print(f"  stock SqliteTree root after reopen {ms(root)}")
    print(
        f"  stock SqliteTree inclusion p50 {ms(statistics.median(proofs))}  "
        f"p99 {ms(pct(proofs, 99))}  (first 200 proofs after reopen)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    rng = random.Random(1)
    signer = Signer.generate(ORIGIN)
    with tempfile.TemporaryDirectory() as tmp:
        for n, size in enumerate(args.sizes):
            path = Path(tmp) / f"log-{size}.db"
            started = time.perf_counter()
            worst = build(path, size)
            built = time.perf_counter() - started
            print(f"size {size}: built in {built:.1f} s, worst single append {ms(worst)}")
            measure(path, signer, size, rng)
            if n == 0 and not args.no_baseline:
                baseline(Path(tmp), size, rng)


if __name__ == "__main__":
    main()
