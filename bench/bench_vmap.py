"""The tool-status map: batch updates (memory and SQLite), proof sizes, verify time, proofs
served over HTTP, and the append path with the map against without it.

Run by hand (not in CI):
  python bench/bench_vmap.py [--sizes 10000 100000] [--sqlite-sizes 10000 100000 1000000]
                             [--append 6000] [--rounds 3] [--served 2000]

For each size N it builds an in-memory map of N random keys, then measures:
  * batch update of 1, 100 and 1000 changed keys (half updates of present keys, half
    new keys): wall time and node hashes (rows written), median of 10 batches;
  * the binary proof size of 2000 random present keys with a one-notice record (the
    path is the part that grows with N), mean / p50 / p99 / max, with the compact
    record and, on the same paths, the spec's first-draft JSON record; and of 2000
    random absent keys;
  * verification (``verify_status``: record decode, fold, path) of a present and an
    absent proof, p50 / p99 over 2000 calls.
The baseline, in the same run, is a full build of the same N keys.

``--sqlite-sizes``: the same batches against ``client/map/``'s SQL tables in a
WAL, synchronous=FULL file (the authority's settings), each batch one committed
transaction: reads on the paths, rows written, the commit's fsync; once as a holder
without a cache folds (a follower, a map-verifying witness: SQLite's default page cache,
and a ``MapCache`` for one batch only, as ``StoredMap.advance_notices`` keeps one), once
with the authority writer's ``MapCache`` and ``WRITER_CACHE_KIB`` page cache.

``--append N``: the authority's ``Log.sequence`` (admission, tree, map, checkpoint
signature, one commit per batch of 256) over N pre-signed notices about N/2
tools, with the map and, in the same run, with the map's fold replaced by a
bare size update (``NoMapLog``, bench only): the ratio is the map's share of the
append path. ``--rounds`` alternating rounds; both the ratio of the best rates and the
median of the rounds' ratios, by wall-clock and by process CPU time, and the bytes written
per notice (``/proc/self/io``: WAL frames and checkpoints, so the pages each commit
dirtied), which a noisy machine does not disturb.

``--served K``: a real aiohttp authority (``build_app``) on 127.0.0.1 over the
``--append`` database answers K sequential ``GET /v1/tools/{id}/proof`` (binary,
half present, half absent ids); client-side latency p50/p99.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import free_port, pct
from deplog.authority.http.server import ServerConfig, build_app
from deplog.authority.log import WRITER_CACHE_KIB, Log
from deplog.authority.storage.sqlite import SqliteDatabase
from deplog.client.map.cache import MapCache
from deplog.client.map.hashing import map_key
from deplog.client.map.nodes import ChildRef, InnerNode, MemoryNodeStore
from deplog.client.map.proof import MapProof, verify_status
from deplog.client.map.record import StatusRecord
from deplog.client.map.sqlstore import STORE_FORMAT, SqliteNodeStore
from deplog.client.map.stored import StoredMap
from deplog.client.map.tree import PrefixTree
from deplog.client.model.notice import Envelope, Notice
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope, register
from tests.map_formats import first_draft_record

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


def one_notice() -> Notice:
    return Notice.from_json(
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


def one_notice_record() -> StatusRecord:
    """The one-notice record the proofs carry (docs/fold-spec.md section 3)."""
    return StatusRecord.of(TOOL, [(12345, one_notice())])


def first_draft_bytes() -> bytes:
    """The same record in the spec's first draft (JSON, the notice as signed, its leaf
    hash), for the sizes before the compact record, measured in the same run."""
    return first_draft_record(TOOL, [(12345, b"\x00" * 32, one_notice())])


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
        times: list[float] = []
        hashes = []
        for _ in range(10):
            batch = {k: os.urandom(32) for k in random.sample(keys, changed - changed // 2)}
            added = [os.urandom(32) for _ in range(changed // 2)]
            batch |= {k: os.urandom(32) for k in added}
            keys += added
            start = time.perf_counter()
            tree.update(batch)
            times.append(time.perf_counter() - start)
            hashes.append(store.written)
        took = statistics.median(times)
        print(
            f"  batch of {changed:>4} keys: {took * 1000:8.3f} ms, "
            f"{statistics.median(hashes):,.0f} node hashes ({took / rebuild:.2%} of a rebuild)"
        )
    root, key = tree.root(), map_key(TOOL)
    paths = [tree.lookup(probe).steps for probe in keys[:2000]]
    for name, value in (("present", record.encode()), ("first draft", first_draft_bytes())):
        sizes = [len(MapProof("present", path, record=value).to_binary()) for path in paths]
        print(
            f"  {name} proof bytes ({len(value)} B record): mean "
            f"{statistics.mean(sizes):.0f}, p50 {pct(sizes, 50)}, p99 {pct(sizes, 99)}, "
            f"max {max(sizes)}"
        )
    absent_sizes = []
    for probe in (os.urandom(32) for _ in range(2000)):
        found = tree.lookup(probe)
        absent_sizes.append(
            len(
                MapProof(
                    "absent", found.steps, alt_key=found.leaf_key, alt_value=found.leaf_value
                ).to_binary()
            )
        )
    print(
        f"  absent proof bytes: mean {statistics.mean(absent_sizes):.0f}, p50 "
        f"{pct(absent_sizes, 50)}, p99 {pct(absent_sizes, 99)}, max {max(absent_sizes)}"
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


def run_sqlite(size: int, directory: Path, writer: bool) -> None:
    """Batch updates against the SQLite node store, each batch one durable transaction;
    ``writer``: with the authority writer's row cache and page cache size."""
    conn = SqliteDatabase(directory / f"map-{size}-{writer}.db").connect()
    if writer:
        conn.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
    StoredMap.create_schema(conn)
    conn.execute("INSERT INTO map_state (id, format, size) VALUES (1, ?, 0)", (STORE_FORMAT,))
    store = SqliteNodeStore(conn, MapCache() if writer else None)
    tree = PrefixTree(store)

    def update(batch: Mapping[bytes, bytes]) -> None:
        if not writer:  # the groups of this batch only
            store.cache = MapCache()
        tree.update(batch)
        if not writer:
            store.cache = None

    keys = [os.urandom(32) for _ in range(size)]
    start = time.perf_counter()
    for chunk in range(0, size, 100_000):  # the start-up rebuild's shape: chunked batches
        conn.execute("BEGIN IMMEDIATE")
        update({k: os.urandom(32) for k in keys[chunk : chunk + 100_000]})
        conn.execute("COMMIT")
    build = time.perf_counter() - start
    kind = "writer caches" if writer else "one batch's cache"
    print(f"SQLite N={size:>9,} ({kind})  build {build:8.1f} s (chunks of 100k keys)")
    for changed in (1, 100, 1000):
        times = []
        for _ in range(5):
            batch = {k: os.urandom(32) for k in random.sample(keys, changed - changed // 2)}
            added = [os.urandom(32) for _ in range(changed // 2)]
            batch |= {k: os.urandom(32) for k in added}
            keys += added
            start = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            update(batch)
            conn.execute("COMMIT")
            times.append(time.perf_counter() - start)
        print(
            f"  batch of {changed:>4} keys, committed: median "
            f"{statistics.median(times) * 1000:8.2f} ms, max {max(times) * 1000:8.2f} ms"
        )
    conn.close()


class NoMapLog(Log):
    """Bench only: the append path with the map's fold replaced by a bare size update."""

    def _fold_map(self, start: int, notices: Sequence[Notice]) -> None:
        self.conn.execute("UPDATE map_state SET size = ? WHERE id = 1", (self.tree.size,))


def _envelopes(publisher: Signer, count: int) -> list[Envelope]:
    return [
        make_envelope(publisher, i + 1, tool_id=f"tool:org.acme/t{i % max(1, count // 2)}")
        for i in range(count)
    ]


def bytes_written() -> int:
    """Bytes this process has passed to ``write`` so far (Linux ``/proc/self/io``): the
    log's WAL frames and checkpoints, the measure of the pages a commit dirtied."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def append_rate(
    cls: type[Log], path: Path, envelopes: list[Envelope], signer: Signer, publisher: Signer
) -> tuple[float, float, float]:
    """Notices per second of wall time, and per second of this process's CPU time (which
    other processes on a loaded machine disturb less; it leaves out fsync waits), and the
    bytes written per notice."""
    log = cls(path, signer, signer.name)
    register(log, publisher)
    written = bytes_written()
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(envelopes), 256):
        log.sequence(envelopes[i : i + 256])
    elapsed, cpu_spent = time.perf_counter() - start, time.process_time() - cpu
    written = bytes_written() - written
    log.close()
    return len(envelopes) / elapsed, len(envelopes) / cpu_spent, written / len(envelopes)


def run_append(count: int, directory: Path, rounds: int) -> tuple[Path, Signer]:
    """Notices/s with and without the map, same run, alternating, ``rounds`` each: the
    best of each and the median of the rounds' ratios, by wall and by CPU time; returns a
    database with the map, and its log key, for the proofs served."""
    signer, publisher = Signer.generate("bench.deplog.example/log"), Signer.generate("acme")
    envelopes = _envelopes(publisher, count)
    wall: dict[str, list[float]] = {"with map": [], "without": []}
    cpu: dict[str, list[float]] = {"with map": [], "without": []}
    written: dict[str, list[float]] = {"with map": [], "without": []}
    kept = directory / "append-0-with.db"
    for round_ in range(rounds):
        for name, cls in (("with map", Log), ("without", NoMapLog)):
            path = directory / f"append-{round_}-{'with' if cls is Log else 'without'}.db"
            rate, cpu_rate, per_notice = append_rate(cls, path, envelopes, signer, publisher)
            wall[name].append(rate)
            cpu[name].append(cpu_rate)
            written[name].append(per_notice)
    for clock, rates in (("wall", wall), ("CPU", cpu)):
        best = {name: max(values) for name, values in rates.items()}
        ratios = [a / b for a, b in zip(rates["with map"], rates["without"], strict=True)]
        print(
            f"append {count} notices, batches of 256, {clock} time: with map "
            f"{best['with map']:,.0f}/s, without {best['without']:,.0f}/s (best of {rounds}), "
            f"ratio of bests {best['with map'] / best['without']:.3f}, median ratio of "
            f"rounds {statistics.median(ratios):.3f} (all: "
            f"{', '.join(f'{r:.2f}' for r in ratios)})"
        )
    with_map, without = (statistics.median(written[name]) for name in ("with map", "without"))
    print(
        f"append {count} notices: bytes written per notice (median of {rounds}) with map "
        f"{with_map:,.0f}, without {without:,.0f} ({with_map / without:.2f}x)"
    )
    return kept, signer


async def _served(db: Path, signer: Signer, count: int) -> None:
    app = build_app(ServerConfig(db, signer.name), signer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    conn = sqlite3.connect(db)
    tools = [str(r[0]) for r in conn.execute("SELECT tool_id FROM map_record").fetchall()]
    conn.close()
    rng = random.Random(1)  # the same ids in every run: sizes differ only if proofs do
    ids = [rng.choice(tools) if i % 2 == 0 else f"tool:org.acme/absent{i}" for i in range(count)]
    samples, sizes = [], []
    try:
        async with aiohttp.ClientSession() as http:
            for tool_id in ids:
                start = time.perf_counter()
                url = f"http://127.0.0.1:{port}/v1/tools/{tool_id}/proof?format=binary"
                async with http.get(url) as response:
                    body = await response.read()
                    assert response.status == 200, body
                samples.append(time.perf_counter() - start)
                sizes.append(len(body))
    finally:
        await runner.cleanup()
    print(
        f"proofs served ({len(tools)} tools, {count} GETs, binary): p50 "
        f"{pct(samples, 50) * 1000:.2f} ms, p99 {pct(samples, 99) * 1000:.2f} ms; "
        f"bytes p50 {pct(sizes, 50)}, max {max(sizes)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--sqlite-sizes", type=int, nargs="*", default=[])
    parser.add_argument("--append", type=int, default=0, help="notices for the append ratio")
    parser.add_argument("--rounds", type=int, default=3, help="alternating append rounds")
    parser.add_argument("--served", type=int, default=0, help="proof GETs (needs --append)")
    args = parser.parse_args()
    for size in args.sizes:
        run(size)
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sqlite_sizes:
            for writer in (False, True):
                run_sqlite(size, Path(tmp), writer)
        if args.append:
            db, signer = run_append(args.append, Path(tmp), args.rounds)
            if args.served:
                asyncio.run(_served(db, signer, args.served))


if __name__ == "__main__":
    main()
