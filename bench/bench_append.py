"""Append path: notices/s with receipts and receipt latency, against same-run baselines.

Run by hand (not in CI):  python bench/bench_append.py [--requests N] [--rates 1000 500]

It starts a real authority on 127.0.0.1 over a fresh data directory, registers
publishers, and posts pre-signed envelopes from C concurrent publishers
(C = 1, 10, 50 and 100, each posting sequentially: closed loop). Baselines,
all measured in the same run:
  * a minimal aiohttp server that reads the body and answers 201 with a fixed
    text, driven by the same client: the ceiling for any aiohttp POST handler;
  * pure Ed25519 verification of the same envelopes (pynacl, one thread): the
    floor every admitted notice pays for its publisher signature;
  * raw SQLite inserts of rows of the envelope's size (WAL, synchronous=FULL),
    one commit per batch of the size deplog actually batched at that
    concurrency (notices / checkpoints signed in the phase).
Then an open-loop generator submits at a fixed rate (1000/s by default; if the
authority cannot keep up, the next lower rate in ``--rates``) for a few
seconds, and reports p50/p99 receipt latency measured from each request's
scheduled send time (so queueing behind a slow response counts).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, pct, start_minimal_server
from deplog.client.model.notice import Envelope
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess

CONCURRENCY = (1, 10, 50, 100)
HEADERS = {"Content-Type": "application/json"}


async def load(url: str, bodies: list[list[bytes]]) -> tuple[float, list[float]]:
    """Each inner list is one publisher posting sequentially; returns (seconds, latencies)."""
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def publisher(mine: list[bytes]) -> None:
            for body in mine:
                started = time.perf_counter()
                async with http.post(url + "/v1/notices", data=body, headers=HEADERS) as r:
                    await r.read()
                    if r.status not in (200, 201):
                        raise RuntimeError(f"unexpected status {r.status}")
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(publisher(m) for m in bodies))
        return time.perf_counter() - started, latencies


async def open_loop(url: str, bodies: list[list[bytes]], rate: float) -> tuple[float, list[float]]:
    """Request i is due at i / rate; one publisher never has two requests in flight
    (a publisher posting in order, as it had to before sequence numbers became unique
    rather than increasing), so a slow answer delays its next one and that delay counts.
    Returns (achieved completions/s, latencies from due time)."""
    total = sum(len(b) for b in bodies)
    latencies: list[float] = []
    locks = [asyncio.Lock() for _ in bodies]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        start = time.perf_counter() + 0.1

        async def one(i: int) -> None:
            owner, k = i % len(bodies), i // len(bodies)
            due = start + i / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            async with (
                locks[owner],
                http.post(url + "/v1/notices", data=bodies[owner][k], headers=HEADERS) as r,
            ):
                await r.read()
                if r.status not in (200, 201):
                    raise RuntimeError(f"unexpected status {r.status}")
            latencies.append(time.perf_counter() - due)

        await asyncio.gather(*(one(i) for i in range(total)))
        return total / (time.perf_counter() - start), latencies


def verify_rate(publisher: Signer, envelopes: list[Envelope], n: int = 20_000) -> float:
    """Ed25519 verifications per second of ``publisher``'s envelope signatures (pynacl)."""
    messages = [(e.notice.canonical_bytes(), e.signature) for e in envelopes[:200]]
    verifier = publisher.verifier()
    started = time.perf_counter()
    for k in range(n):
        message, signature = messages[k % len(messages)]
        verifier.verify(message, signature)
    return n / (time.perf_counter() - started)


def sqlite_rate(path: Path, row_bytes: int, batch: int, rows: int) -> float:
    """Rows/s of raw SQLite inserts, WAL + synchronous=FULL, one commit per ``batch``."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS leaves (idx INTEGER PRIMARY KEY, leaf BLOB)")
    payload = os.urandom(row_bytes)
    started = time.perf_counter()
    done = 0
    while done < rows:
        conn.execute("BEGIN")
        for _ in range(min(batch, rows - done)):
            conn.execute("INSERT INTO leaves (leaf) VALUES (?)", (payload,))
        conn.execute("COMMIT")
        done += batch
    elapsed = time.perf_counter() - started
    conn.close()
    return rows / elapsed


def checkpoints(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests per concurrency")
    parser.add_argument(
        "--rates",
        type=float,
        nargs="+",
        default=[1000, 750, 500, 250],
        help="open-loop rates to try, highest first; the first one sustained is reported",
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="open-loop duration")
    parser.add_argument(
        "--server-arg", action="append", default=[], help="extra 'authority serve' argument"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        authority = AuthorityProcess(Path(tmp), extra_args=args.server_arg)
        authority.init()
        signers = [Signer.generate(f"bench{i}") for i in range(max(CONCURRENCY))]
        with contextlib.redirect_stdout(io.StringIO()):
            for s in signers:
                authority.add_publisher(s, f"org.{s.name}")
        authority.start()
        db = authority.data / "log.db"
        baseline, baseline_url = start_minimal_server()
        try:
            sample = [make_envelope(signers[0], k + 1) for k in range(200)]
            row_bytes = len(sample[0].canonical_bytes())
            verify = verify_rate(signers[0], sample)
            print(f"envelope size {row_bytes} B; Ed25519 verify alone {verify:.0f}/s")
            print(
                f"{'publishers':>10} {'deplog/s':>9} {'aiohttp/s':>9} {'ratio':>6} "
                f"{'/verify':>7} {'batch':>6} {'sqlite/s':>9} {'ratio':>6} "
                f"{'p50 ms':>7} {'p99 ms':>7} {'base p99':>8}"
            )
            next_sequence = 1
            for concurrency in CONCURRENCY:
                per = max(1, args.requests // concurrency)
                if concurrency == 1:
                    per = max(1, args.requests // 5)
                bodies = [
                    [make_envelope(s, next_sequence + k).canonical_bytes() for k in range(per)]
                    for s in signers[:concurrency]
                ]
                next_sequence += per
                total = per * concurrency
                base_secs, base_lat = asyncio.run(load(baseline_url, bodies))
                before = checkpoints(db)
                secs, lat = asyncio.run(load(authority.url, bodies))
                batch = max(1, round(total / max(1, checkpoints(db) - before)))
                raw = sqlite_rate(Path(tmp) / f"raw-{concurrency}.db", row_bytes, batch, total)
                rate, base_rate = total / secs, total / base_secs
                print(
                    f"{concurrency:>10} {rate:>9.0f} {base_rate:>9.0f} "
                    f"{rate / base_rate:>6.2f} {rate / verify:>7.3f} {batch:>6} {raw:>9.0f} "
                    f"{rate / raw:>6.2f} {1000 * median(lat):>7.1f} "
                    f"{1000 * pct(lat, 99):>7.1f} {1000 * pct(base_lat, 99):>8.1f}"
                )
            for rate_target in args.rates:
                count = int(rate_target * args.seconds)
                per = max(1, count // len(signers))
                bodies = [
                    [make_envelope(s, next_sequence + k).canonical_bytes() for k in range(per)]
                    for s in signers
                ]
                next_sequence += per
                base_rate, base_lat = asyncio.run(open_loop(baseline_url, bodies, rate_target))
                achieved, lat = asyncio.run(open_loop(authority.url, bodies, rate_target))
                sustained = achieved >= 0.95 * rate_target
                print(
                    f"open loop at {rate_target:.0f}/s for {args.seconds:.0f} s: achieved "
                    f"{achieved:.0f}/s ({'sustained' if sustained else 'NOT sustained'}); "
                    f"receipt p50 {1000 * median(lat):.1f} ms p99 {1000 * pct(lat, 99):.1f} ms; "
                    f"minimal aiohttp p50 {1000 * median(base_lat):.1f} ms "
                    f"p99 {1000 * pct(base_lat, 99):.1f} ms"
                )
                if sustained:
                    break
        finally:
            baseline.terminate()
            authority.stop()


if __name__ == "__main__":
    main()
