"""The map's share of a sequencer batch, at the batch shape of ``bench_map_append.py``.

Run by hand (not in CI):
    python bench/bench_map_fold.py [--tools 10000] [--hot 200] [--batch 13] [--batches 300]
                                   [--rounds 3]

No HTTP and no signatures: a ``StoredMap`` with a writer's ``MapCache`` in a SQLite file
set up as the log's (WAL, synchronous=FULL, the writer's page cache), first folded over
``--tools`` tools in one batch, then ``--batches`` batches of ``--batch`` notices about
``--hot`` tools, each batch one committed transaction (what ``bench_map_append.py``
sends: 50 publishers, about 13 notices a batch, 200 tools; ``--hot 0`` spreads the
notices over ``--tools`` tools at random instead). Two writers: ``held``, the
authority's on SQLite (its rows held in memory and written past ``authority.log``'s
``MAP_LAYER_*`` bounds, and once more at the end: ``client.map.stored`` rule *rows held back*), and
``written``, which writes every batch's rows in its transaction (as on PostgreSQL).
Reported per notice, median of ``--rounds`` fresh files: the fold (records, tree, rows
written or held, the rows written at the end spread over the batches) and the commit.
Every transaction also appends a 400-byte row per notice to a table of its own, as the
log's leaves do, so each commit has the pages a real batch has. The baseline, in the
same run on the same file layout: the same transactions with only ``map_state.size``
moved (what the append path does without the map); its commit is the one a map-less
batch pays, so the map's share is the fold plus the difference of the commits. Also
reported: the WAL bytes a batch appends (its dirty pages).
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deplog.authority.log import (
    MAP_LAYER_ENTRIES,
    MAP_LAYER_GROUPS,
    MAP_LAYER_RECORD_BYTES,
    WRITER_CACHE_KIB,
)
from deplog.client.map.cache import MapCache
from deplog.client.map.stored import StoredMap
from deplog.client.model.notice import Notice
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope

MODES = ("held", "written", "without")


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
    StoredMap.create_schema(conn)
    conn.execute("CREATE TABLE IF NOT EXISTS leaves (idx INTEGER PRIMARY KEY, data BLOB)")
    return conn


def writer_cache(mode: str) -> MapCache:
    if mode != "held":
        return MapCache()
    return MapCache(
        layer_entries=MAP_LAYER_ENTRIES,
        layer_groups=MAP_LAYER_GROUPS,
        layer_record_bytes=MAP_LAYER_RECORD_BYTES,
    )


def one_round(
    directory: Path, base: Sequence[Notice], hot: Sequence[Notice], batch: int, mode: str
) -> tuple[float, float, float]:
    """Fold and commit microseconds per notice, and WAL bytes per batch."""
    path = directory / f"{mode}.db"
    conn = connect(path)
    stored = StoredMap(conn, writer_cache(mode))
    conn.execute("BEGIN IMMEDIATE")
    stored.advance_notices(0, len(base), enumerate(base))
    stored.flush()
    conn.execute("COMMIT")
    stored.committed()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # the WAL's growth is the batches' pages
    folding = committing = 0.0
    position = len(base)
    for start in range(0, len(hot), batch):
        notices = hot[start : start + batch]
        end = position + len(notices)
        final = start + batch >= len(hot)
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO leaves (idx, data) VALUES (?, ?)",
            [(i, os.urandom(400)) for i in range(position, end)],
        )
        began = time.perf_counter()
        if mode == "without":
            conn.execute("UPDATE map_state SET size = ? WHERE id = 1", (end,))
        else:
            stored.advance_notices(position, end, enumerate(notices, position))
            if final:  # what is still held goes into the last batch's commit
                stored.flush()
        folded = time.perf_counter()
        conn.execute("COMMIT")
        stored.committed()
        committing += time.perf_counter() - folded
        folding += folded - began
        position = end
    wal = os.path.getsize(f"{path}-wal")
    conn.close()
    batches = -(-len(hot) // batch)
    return 1e6 * folding / len(hot), 1e6 * committing / len(hot), wal / batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--hot", type=int, default=200, help="0: every tool at random")
    parser.add_argument("--batch", type=int, default=13)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    publisher = Signer.generate("acme")
    base = [
        make_envelope(publisher, i + 1, tool_id=f"tool:org.acme/t{i}").notice
        for i in range(args.tools)
    ]
    rng = random.Random(1)
    hot = [
        make_envelope(
            publisher,
            args.tools + i + 1,
            tool_id=f"tool:org.acme/h{i % args.hot}"
            if args.hot
            else f"tool:org.acme/t{rng.randrange(args.tools)}",
        ).notice
        for i in range(args.batch * args.batches)
    ]
    runs: dict[str, list[tuple[float, float, float]]] = {mode: [] for mode in MODES}
    for round_ in range(args.rounds):
        for mode in MODES if round_ % 2 == 0 else reversed(MODES):
            with tempfile.TemporaryDirectory() as tmp:
                runs[mode].append(one_round(Path(tmp), base, hot, args.batch, mode))
    bare_us = statistics.median(r[1] for r in runs["without"])
    shape = f"over {args.hot} tools" if args.hot else "over all of them at random"
    print(
        f"{args.tools} tools, {args.batches} batches of {args.batch} notices {shape}, median "
        f"of {args.rounds} rounds, per notice (commit without the map: {bare_us:.1f} us, WAL "
        f"{runs['without'][0][2] / 1024:.0f} KiB a batch):"
    )
    for mode in ("held", "written"):
        fold_us = statistics.median(r[0] for r in runs[mode])
        commit_us = statistics.median(r[1] for r in runs[mode])
        print(
            f"  {mode:>7}: fold {fold_us:.1f} us, commit {commit_us:.1f} us; the map's share "
            f"{fold_us + commit_us - bare_us:.1f} us a notice; WAL "
            f"{runs[mode][0][2] / 1024:.0f} KiB a batch"
        )


if __name__ == "__main__":
    main()
