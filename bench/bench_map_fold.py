"""The map's share of a sequencer batch, at the batch shape of ``bench_map_append.py``.

Run by hand (not in CI):
    python bench/bench_map_fold.py [--tools 10000] [--hot 200] [--batch 13] [--batches 300]
                                   [--rounds 3]

No HTTP and no signatures: a ``StoredMap`` with the authority writer's ``MapCache`` in a
SQLite file set up as the log's (WAL, synchronous=FULL, the writer's page cache), first
folded over ``--tools`` tools in one batch, then ``--batches`` batches of ``--batch``
notices about ``--hot`` tools, each batch one committed transaction (what
``bench_map_append.py`` sends: 50 publishers, about 13 notices a batch, 200 tools).
Reported per notice, median of ``--rounds`` fresh files: the fold (records, tree, rows
written) and the commit. The baseline, in the same run on the same file layout: the same
transactions with only ``map_state.size`` moved (what the append path does without the
map); its commit is the one a map-less batch pays, so the map's share is the fold plus
the difference of the commits. Also reported: the WAL bytes a batch appends, with and
without the map (its dirty pages).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deplog.authority.log import WRITER_CACHE_KIB
from deplog.client.mapstore import MapCache, StoredMap
from deplog.client.model.notice import Notice
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
    StoredMap.create_schema(conn)
    return conn


def one_round(
    directory: Path, base: Sequence[Notice], hot: Sequence[Notice], batch: int, fold: bool
) -> tuple[float, float, float]:
    """Fold and commit microseconds per notice, and WAL bytes per batch."""
    path = directory / ("with.db" if fold else "without.db")
    conn = connect(path)
    stored = StoredMap(conn, MapCache())
    conn.execute("BEGIN IMMEDIATE")
    stored.advance_notices(0, len(base), enumerate(base))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # the WAL's growth is the batches' pages
    folding = committing = 0.0
    position = len(base)
    for start in range(0, len(hot), batch):
        notices = hot[start : start + batch]
        conn.execute("BEGIN IMMEDIATE")
        began = time.perf_counter()
        if fold:
            stored.advance_notices(position, position + len(notices), enumerate(notices, position))
        else:
            conn.execute("UPDATE map_state SET size = ? WHERE id = 1", (position + len(notices),))
        folded = time.perf_counter()
        conn.execute("COMMIT")
        committing += time.perf_counter() - folded
        folding += folded - began
        position += len(notices)
    wal = os.path.getsize(f"{path}-wal")
    conn.close()
    batches = -(-len(hot) // batch)
    return 1e6 * folding / len(hot), 1e6 * committing / len(hot), wal / batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--hot", type=int, default=200)
    parser.add_argument("--batch", type=int, default=13)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    publisher = Signer.generate("acme")
    base = [
        make_envelope(publisher, i + 1, tool_id=f"tool:org.acme/t{i}").notice
        for i in range(args.tools)
    ]
    hot = [
        make_envelope(
            publisher, args.tools + i + 1, tool_id=f"tool:org.acme/h{i % args.hot}"
        ).notice
        for i in range(args.batch * args.batches)
    ]
    runs: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    for round_ in range(args.rounds):
        for fold in (True, False) if round_ % 2 == 0 else (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                runs[fold].append(one_round(Path(tmp), base, hot, args.batch, fold))
    fold_us = statistics.median(r[0] for r in runs[True])
    commit_us = statistics.median(r[1] for r in runs[True])
    bare_us = statistics.median(r[1] for r in runs[False])
    wal, bare_wal = runs[True][0][2], runs[False][0][2]
    print(
        f"{args.tools} tools, {args.batches} batches of {args.batch} notices over {args.hot} "
        f"tools, median of {args.rounds} rounds, per notice: fold {fold_us:.1f} us, commit "
        f"{commit_us:.1f} us (without the map: {bare_us:.1f} us); the map's share "
        f"{fold_us + commit_us - bare_us:.1f} us a notice. WAL per batch: "
        f"{wal / 1024:.0f} KiB with the map, {bare_wal / 1024:.0f} KiB without"
    )


if __name__ == "__main__":
    main()
