"""Many front-ends on PostgreSQL: append throughput, CPU per notice, sequencer load, failover.

Run by hand (not in CI):

    python bench/bench_pg.py [--publishers 50] [--requests 3000] [--front-ends 1 2 4]
                             [--kills 12] [--seed N]

One load generator (closed loop: ``--publishers`` concurrent publishers, each posting its
pre-signed notices one after the other to a random front-end) drives, in the same run and
with the same notices:
  * the minimal aiohttp POST handler (bench/common.py), one process: the ceiling;
  * the single SQLite authority process (the default);
  * 1, 2 and 4 ``authority serve --db postgresql://...`` front-ends on one fresh database of
    a throwaway cluster (tests/pgcluster.py, fsync on).
For each it reports notices/s, the ratio to the minimal handler, CPU milliseconds per
notice of the server processes, of PostgreSQL (the postmaster and every backend, exited
ones included through the postmaster's children times) and of the load generator (all
from /proc), the cores that kept busy (CPU seconds / wall seconds, of 2 on this machine),
notices per busy core-second (per-core efficiency), notices per signed checkpoint (the
batch), and on PostgreSQL the sequencer lock's occupancy: the share of samples (every
5 ms, from ``pg_locks``) in which a transaction held the ``log_head`` row, how many waited
for it on average, and the milliseconds it was held per batch. Occupancy near 1 means
the one order is the bottleneck; cores near 2 mean the machine is. The sampler runs on a
thread of the load generator, so its queries are in the load's CPU figure.

Then (``--kills`` > 0) a failover run: 3 front-ends under the same publishers, a
front-end SIGKILLed every 1 to 3 s and restarted (half the kills aimed at the sequencer
lock's holder), checked by the oracle, with the failover time (last 201 before a kill to
the first 201 after) p50/p99/max. bench/pg_failover.py runs the long campaign.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import start_minimal_server
from bench.pg_failover import failover_figures
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.log_oracle import first_violation
from tests.integration.pg_campaign import (
    CampaignConfig,
    FrontEnds,
    run_campaign,
    sequencer_holder,
    setup_database,
    setup_sqlite,
)
from tests.pgcluster import PgCluster

HEADERS = {"Content-Type": "application/json"}
TICK = os.sysconf("SC_CLK_TCK")
SAMPLE_EVERY = 0.005
OCCUPANCY_QUERY = """
SELECT count(*) FILTER (WHERE a.wait_event_type IS DISTINCT FROM 'Lock'),
       count(*) FILTER (WHERE a.wait_event_type = 'Lock')
FROM (SELECT DISTINCT l.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
      WHERE c.relname = 'log_head' AND l.granted AND l.mode = 'RowShareLock') AS h
JOIN pg_stat_activity a ON a.pid = h.pid
"""
"""How many transactions hold the sequencer row now (0 or 1), and how many wait for it."""


# --- CPU from /proc ---------------------------------------------------------------------------


def _stat(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def process_cpu(pid: int, children: bool = True) -> float:
    """CPU seconds of ``pid`` (user + system), with its reaped children's by default."""
    try:
        fields = _stat(pid)
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICK


def postgres_cpu(cluster: PgCluster) -> float:
    """CPU seconds of the cluster: the postmaster (with every backend it reaped) plus its
    live children."""
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    total = process_cpu(postmaster)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int(_stat(int(entry))[1]) == postmaster:
                    total += process_cpu(int(entry), children=False)
    return total


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


# --- the sequencer lock's occupancy -------------------------------------------------------------


class Occupancy:
    """Samples ``OCCUPANCY_QUERY`` on its own connection and thread until stopped."""

    def __init__(self, db: str) -> None:
        import psycopg

        self._conn = psycopg.connect(db, autocommit=True)
        self._stop = threading.Event()
        self.samples: list[tuple[int, int]] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            row = self._conn.execute(OCCUPANCY_QUERY).fetchone()
            if row is not None:
                self.samples.append((int(row[0]), int(row[1])))
            time.sleep(SAMPLE_EVERY)

    def stop(self) -> tuple[float, float]:
        """(share of samples with a holder, mean number waiting)."""
        self._stop.set()
        self._thread.join()
        self._conn.close()
        if not self.samples:
            return 0.0, 0.0
        held = sum(1 for h, _ in self.samples if h) / len(self.samples)
        return held, sum(w for _, w in self.samples) / len(self.samples)


# --- the load ----------------------------------------------------------------------------------


async def load(urls: Sequence[str], bodies: list[list[bytes]], seed: int) -> float:
    """Each inner list is one publisher posting in order, each request to a random URL;
    returns the wall seconds. Anything but 200/201 stops the run (no retries here)."""
    rng = random.Random(seed)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def publisher(mine: list[bytes]) -> None:
            for body in mine:
                url = urls[rng.randrange(len(urls))]
                async with http.post(url + "/v1/notices", data=body, headers=HEADERS) as r:
                    await r.read()
                    if r.status not in (200, 201):
                        raise RuntimeError(f"unexpected status {r.status} from {url}")

        started = time.perf_counter()
        await asyncio.gather(*(publisher(m) for m in bodies))
        return time.perf_counter() - started


@dataclass
class Row:
    name: str
    rate: float
    server_ms: float
    postgres_ms: float
    client_ms: float
    cores: float
    batch: float | None = None
    held: float | None = None
    waiting: float | None = None
    held_ms: float | None = None
    """Milliseconds the sequencer row was held per batch (occupancy x wall / batches)."""


def measure(
    name: str,
    urls: Sequence[str],
    pids: Sequence[int],
    bodies: list[list[bytes]],
    warmup: list[list[bytes]],
    batches: Callable[[], int],
    cluster: PgCluster | None = None,
    occupancy_db: str | None = None,
) -> Row:
    """Warm up, then run the measured load; ``batches`` counts the signed checkpoints
    (one per batch) before and after it."""
    asyncio.run(load(urls, warmup, 1))
    batches0 = batches()
    server0 = sum(process_cpu(pid) for pid in pids)
    pg0 = postgres_cpu(cluster) if cluster is not None else 0.0
    client0 = own_cpu()
    sampler = Occupancy(occupancy_db) if occupancy_db is not None else None
    wall = asyncio.run(load(urls, bodies, 2))
    held, waiting = sampler.stop() if sampler is not None else (None, None)
    count = sum(len(b) for b in bodies)
    server = sum(process_cpu(pid) for pid in pids) - server0
    pg = (postgres_cpu(cluster) - pg0) if cluster is not None else 0.0
    client = own_cpu() - client0
    signed = max(1, batches() - batches0)
    row = Row(
        name,
        count / wall,
        1000 * server / count,
        1000 * pg / count,
        1000 * client / count,
        (server + pg + client) / wall,
        batch=count / signed,
        held=held,
        waiting=waiting,
        held_ms=None if held is None else 1000 * held * wall / signed,
    )
    return row


def count_checkpoints(conn: Any) -> int:
    return int(conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0])


def print_rows(rows: list[Row]) -> None:
    """The header with the first row, else only the last row (the ratio is to the first)."""
    base = rows[0].rate
    if len(rows) > 1:
        rows = rows[-1:]
    else:
        print(
            f"{'target':<26} {'notices/s':>9} {'ratio':>6} {'srv ms':>7} {'pg ms':>6} "
            f"{'load ms':>7} {'cores':>5} {'/core-s':>7} {'batch':>6} {'held':>5} {'wait':>5} "
            f"{'ms/batch':>8}"
        )
    for row in rows:
        per_core = row.rate / row.cores if row.cores else 0.0
        extra = (
            f"{row.batch:>6.1f}" if row.batch is not None else f"{'-':>6}",
            f"{row.held:>5.2f}" if row.held is not None else f"{'-':>5}",
            f"{row.waiting:>5.2f}" if row.waiting is not None else f"{'-':>5}",
            f"{row.held_ms:>8.0f}" if row.held_ms is not None else f"{'-':>8}",
        )
        print(
            f"{row.name:<26} {row.rate:>9.0f} {row.rate / base:>6.2f} {row.server_ms:>7.2f} "
            f"{row.postgres_ms:>6.2f} {row.client_ms:>7.2f} {row.cores:>5.2f} "
            f"{per_core:>7.0f} {' '.join(extra)}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishers", type=int, default=50)
    parser.add_argument("--requests", type=int, default=3000, help="measured, per target")
    parser.add_argument("--front-ends", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--kills", type=int, default=12, help="failover run; 0 skips it")
    parser.add_argument("--no-postgres", action="store_true", help="the baselines only")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    import psycopg

    signers = [Signer.generate(f"pg{n}") for n in range(args.publishers)]
    per = max(1, args.requests // args.publishers)
    bodies = [[make_envelope(s, k + 1).canonical_bytes() for k in range(per)] for s in signers]
    warmup = [[make_envelope(s, 10**6 + k).canonical_bytes() for k in range(3)] for s in signers]
    rows: list[Row] = []
    print(f"seed {args.seed}; {args.publishers} publishers, {per * len(signers)} per target")

    minimal, minimal_url = start_minimal_server()
    try:
        row = measure(
            "minimal aiohttp, 1 proc", [minimal_url], [minimal.pid], bodies, warmup, lambda: 0
        )
        row.batch = None
        rows.append(row)
    finally:
        minimal.terminate()
        minimal.wait()
    print_rows(rows)

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        sqlite_fronts = FrontEnds(tmp / "sqlite", "", 1)
        with contextlib.redirect_stdout(io.StringIO()):
            setup_sqlite(sqlite_fronts, signers)
        sqlite_fronts.start()
        db_file = sqlite_fronts.processes[0].data / "log.db"
        try:

            def sqlite_batches() -> int:
                with contextlib.closing(sqlite3.connect(db_file)) as conn:
                    return count_checkpoints(conn)

            row = measure(
                "SQLite, 1 proc",
                sqlite_fronts.urls,
                [p.pid for p in sqlite_fronts.processes if p.pid is not None],
                bodies,
                warmup,
                sqlite_batches,
            )
            rows.append(row)
        finally:
            sqlite_fronts.stop()
        print_rows(rows)
        if args.no_postgres:
            return

        cluster = PgCluster()
        try:
            for count in args.front_ends:
                db = cluster.create_database()
                root = tmp / f"pg{count}"
                front_ends = FrontEnds(root, db, count)
                with contextlib.redirect_stdout(io.StringIO()):
                    setup_database(front_ends, signers)
                front_ends.start()
                try:
                    with psycopg.connect(db, autocommit=True) as conn:
                        row = measure(
                            f"PostgreSQL, {count} front-end{'s' if count > 1 else ''}",
                            front_ends.urls,
                            [p.pid for p in front_ends.processes if p.pid is not None],
                            bodies,
                            warmup,
                            lambda: count_checkpoints(conn),
                            cluster,
                            db,
                        )
                    rows.append(row)
                finally:
                    front_ends.stop()
                print_rows(rows)
            if args.kills:
                failover(tmp / "failover", cluster, signers, args.kills, args.seed)
        finally:
            cluster.destroy()


def failover(root: Path, cluster: PgCluster, signers: list[Signer], kills: int, seed: int) -> None:
    import psycopg

    db = cluster.create_database()
    front_ends = FrontEnds(root, db, 3)
    with contextlib.redirect_stdout(io.StringIO()):
        setup_database(front_ends, signers)
    front_ends.start()
    config = CampaignConfig(kills=kills, publishers=len(signers), seed=seed)
    with psycopg.connect(db, autocommit=True) as conn:

        def holder() -> int | None:
            return sequencer_holder(conn, [p.pid for p in front_ends.processes])

        try:
            load_seen, note, leaves = asyncio.run(run_campaign(front_ends, signers, config, holder))
        finally:
            front_ends.stop()
    observations = load_seen.observations
    verdict = first_violation(observations, note, leaves, front_ends.log_verifier)
    on_holder = sum(1 for k in observations.kills if k.sequencer)
    print(
        f"\nfailover: 3 front-ends, {len(signers)} publishers, {len(observations.kills)} kills "
        f"({on_holder} of the sequencer's holder); {len(observations.acks)} acknowledged"
    )
    print(failover_figures(observations))
    print(
        "oracle:", verdict or "no violation (rules 1-5)", "; unexpected:", len(load_seen.unexpected)
    )
    for line in load_seen.unexpected[:10]:
        print("UNEXPECTED:", line)


if __name__ == "__main__":
    main()
