"""Static tiles: pollers through nginx, disk per entry, tile write time, appends with tiles.

Run by hand (not in CI), as root or a user nginx can run as:
    python bench/bench_tiles.py [--seconds 5] [--rounds 3] [--entries 100000]
                                [--parts pollers,disk,append]

pollers  A real authority with 300 notices (so a full tile exists), Debian's nginx
         with deploy/nginx.conf in front of it (the configuration of
         tests/integration/test_nginx.py) and, in the same nginx, a plain static
         server holding the same bytes (the limit). wrk (one thread, 32
         connections) polls ``/checkpoint`` and the full tile ``tile/0/000`` on the
         authority directly, through nginx from the tiles directory, and from the
         plain static server; medians of interleaved rounds, ratios to the limit,
         the authority's CPU per request it served, and its CPU seconds while nginx
         served the pollers.
disk     A ``Log`` and its ``TilesDirectory`` in-process, filled with real notice
         leaves (one publisher's signed envelopes) in batches of 512 appended to the
         tree directly; bytes per entry of the database and of the tiles directory
         (file sizes, and blocks allocated; superseded partial tiles removed at once,
         the steady state after the grace period), and the time to write each
         batch's tiles (``extend``) and the checkpoint file.
append   Closed-loop appends (C concurrent publishers, each posting its pre-signed
         envelopes one after another) against a real authority with its tiles
         directory and with ``--no-tiles``, interleaved rounds; notices/s and the
         ratio (goal >= 0.9).
rates    Open-loop appends at each RATE for SECONDS (``--rates``) against a real
         authority: database bytes per entry grown from the 256th entry on, full
         tiles' bytes per entry they cover (the steady state), and the partial
         tiles' bytes at the end and at most (sampled every 0.25 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_append import open_loop
from bench.bench_proofs import cpu_seconds
from bench.bench_read import wrk
from bench.common import free_port, median, pct, wait_http
from deplog.authority.log import Log
from deplog.authority.tiles import TilesDirectory
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope, notice_leaf
from tests.integration.harness import AuthorityProcess
from tests.integration.test_nginx import NGINX, derived_config

JSON = {"Content-Type": "application/json"}
LIMIT_SERVER = """
server {{
    listen 127.0.0.1:{port};
    root {www};
    location / {{ }}
}}
"""


async def post_all(url: str, bodies: list[list[bytes]]) -> float:
    """Post each list of bodies sequentially, the lists concurrently; notices/s."""
    async with aiohttp.ClientSession() as http:

        async def one(own: list[bytes]) -> None:
            for body in own:
                async with http.post(url + "/v1/notices", data=body, headers=JSON) as r:
                    assert r.status == 201, await r.text()

        started = time.perf_counter()
        await asyncio.gather(*(one(own) for own in bodies))
        return sum(map(len, bodies)) / (time.perf_counter() - started)


def authority_with(tmp: Path, name: str, publishers: list[Signer], *extra: str) -> AuthorityProcess:
    authority = AuthorityProcess(tmp / name, extra_args=list(extra))
    with contextlib.redirect_stdout(io.StringIO()):
        authority.init()
        for publisher in publishers:
            authority.add_publisher(publisher, f"org.{publisher.name}")
    return authority


def pollers(tmp: Path, args: argparse.Namespace) -> None:
    assert NGINX is not None, "nginx is not installed (apt-get install -y nginx wrk)"
    publisher = Signer.generate("acme")
    authority = authority_with(tmp, "authority", [publisher])
    authority.start()
    nginx = None
    try:
        bodies = [make_envelope(publisher, s).canonical_bytes() for s in range(1, 300)]
        asyncio.run(post_all(authority.url, [bodies]))
        tiles = authority.data / "tiles"
        www = tmp / "www"
        www.mkdir()
        for name, source in (("checkpoint", "checkpoint"), ("tile", "tile/0/000")):
            (www / name).write_bytes((tiles / source).read_bytes())
        run = tmp / "nginx"
        run.mkdir()
        port, limit_port = free_port(), free_port()
        config = derived_config(authority, run, port).rstrip()
        assert config.endswith("}")
        config = config[:-1] + LIMIT_SERVER.format(port=limit_port, www=www) + "}\n"
        (run / "nginx.conf").write_text(config)
        nginx = subprocess.Popen(
            [NGINX, "-p", f"{run}/", "-c", "nginx.conf", "-g", "daemon off;"],
            stderr=subprocess.DEVNULL,
        )
        wait_http(f"http://127.0.0.1:{port}/checkpoint", timeout=10)
        wait_http(f"http://127.0.0.1:{limit_port}/checkpoint", timeout=10)
        via, limit = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{limit_port}"
        targets = {
            ("checkpoint", "authority"): authority.url + "/checkpoint",
            ("checkpoint", "nginx tiles"): via + "/checkpoint",
            ("checkpoint", "nginx static"): limit + "/checkpoint",
            ("full tile", "authority"): authority.url + "/tile/0/000",
            ("full tile", "nginx tiles"): via + "/tile/0/000",
            ("full tile", "nginx static"): limit + "/tile",
        }
        rates: dict[tuple[str, str], list[float]] = {key: [] for key in targets}
        cpu: dict[tuple[str, str], float] = dict.fromkeys(targets, 0.0)
        assert authority.process is not None
        for _ in range(args.rounds):
            for key, url in targets.items():
                before = cpu_seconds(authority.process.pid)
                rates[key].append(wrk(url, args.seconds, args.connections))
                cpu[key] += cpu_seconds(authority.process.pid) - before
                time.sleep(0.5)
        print(
            f"pollers: wrk -t1 -c{args.connections} -d{args.seconds:g}s, "
            f"median of {args.rounds} interleaved rounds"
        )
        for what in ("checkpoint", "full tile"):
            ceiling = median(rates[what, "nginx static"])
            for where in ("authority", "nginx tiles", "nginx static"):
                value = median(rates[what, where])
                print(
                    f"  {what:10} {where:12} {value:>8.0f} req/s  {value / ceiling:.2f} of static"
                )
            served = sum(rates[what, "authority"]) * args.seconds
            print(f"  {what:10} authority CPU {1e6 * cpu[what, 'authority'] / served:.0f} us/req")
        seconds = 2 * args.rounds * args.seconds
        nginx_cpu = sum(v for k, v in cpu.items() if k[1] == "nginx tiles")
        print(f"  authority CPU while nginx served {seconds:g} s of pollers: {nginx_cpu:.2f} s")
    finally:
        if nginx is not None:
            nginx.terminate()
            nginx.wait(timeout=10)
        authority.stop()


def size_of(root: Path) -> tuple[int, int]:
    """Bytes of the files under ``root``, and bytes of the blocks allocated to them."""
    files = blocks = 0
    for directory, _, names in os.walk(root):
        for name in names:
            st = Path(directory, name).stat()
            files += st.st_size
            blocks += st.st_blocks * 512
    return files, blocks


def disk(tmp: Path, args: argparse.Namespace) -> None:
    signer, publisher = Signer.generate("bench/log"), Signer.generate("acme")
    log = Log(tmp / "log.db", signer, "bench/log")
    tiles = TilesDirectory.open(tmp / "tiles", log)
    batch, extend, checkpoint = 512, [], []
    sequence = 0
    try:
        while log.tree.size < args.entries:
            count = min(batch, args.entries - log.tree.size)
            leaves = [notice_leaf(make_envelope(publisher, sequence + i + 1)) for i in range(count)]
            sequence += count
            log.conn.execute("BEGIN")
            start = log.tree.size
            for leaf in leaves:
                log.tree.append_entry(leaf)
            log.map.advance(start, leaves)  # the tool-status map commits with its entries
            log.conn.execute("COMMIT")
            published = log.publish()
            started = time.perf_counter()
            tiles.extend(published.size)
            extend.append(time.perf_counter() - started)
            started = time.perf_counter()
            tiles.publish_checkpoint(published.size, published.note)
            checkpoint.append(time.perf_counter() - started)
        log.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        n = log.tree.size
        db = sum(p.stat().st_size for p in tmp.glob("log.db*"))
        files, blocks = size_of(tmp / "tiles")
        leaf_bytes = log.conn.execute("SELECT sum(length(data)) FROM leaves").fetchone()[0]
        print(f"disk at {n} entries (mean leaf {leaf_bytes / n:.0f} B):")
        print(f"  database         {db / n:8.0f} B/entry")
        print(f"  tiles directory  {files / n:8.0f} B/entry in files, {blocks / n:.0f} allocated")
        print(f"  both             {(db + files) / n:8.0f} B/entry ({(db + blocks) / n:.0f})")
        print(
            f"  a batch of {batch}'s tiles: median {1000 * median(extend):.1f} ms, "
            f"p99 {1000 * pct(extend, 99):.1f} ms; checkpoint file "
            f"median {1000 * median(checkpoint):.1f} ms"
        )
    finally:
        tiles.close()
        log.close()


def append(tmp: Path, args: argparse.Namespace) -> None:
    print(f"append: {args.requests} notices per run, closed loop, {args.rounds} interleaved rounds")
    for concurrency in (16, 100):
        rates: dict[str, list[float]] = {"tiles": [], "no tiles": []}
        for round_ in range(args.rounds):
            for mode, extra in (("tiles", []), ("no tiles", ["--no-tiles"])):
                signers = [Signer.generate(f"p{i}") for i in range(concurrency)]
                name = f"{mode}-{concurrency}-{round_}".replace(" ", "")
                authority = authority_with(tmp, name, signers, *extra)
                per = args.requests // concurrency
                bodies = [
                    [make_envelope(s, q).canonical_bytes() for q in range(1, per + 1)]
                    for s in signers
                ]
                authority.start()
                try:
                    rates[mode].append(asyncio.run(post_all(authority.url, bodies)))
                finally:
                    authority.stop()
        on, off = median(rates["tiles"]), median(rates["no tiles"])
        runs = "; ".join(f"{m}: " + ", ".join(f"{r:.0f}" for r in v) for m, v in rates.items())
        print(
            f"  C={concurrency:3}: tiles {on:6.0f}/s, no tiles {off:6.0f}/s, "
            f"ratio {on / off:.2f}  ({runs})"
        )


def stored(authority: AuthorityProcess) -> tuple[int, int, int, int]:
    """(entries, database bytes through its WAL, full tiles' bytes, partial tiles' bytes)."""
    uri = f"file:{authority.data / 'log.db'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        n = conn.execute("SELECT count(*) FROM leaves").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        db = pages * conn.execute("PRAGMA page_size").fetchone()[0]
    full = partial = 0
    for directory, _, names in os.walk(authority.data / "tiles" / "tile"):
        for name in names:
            with contextlib.suppress(FileNotFoundError):  # a partial tile removed meanwhile
                size = Path(directory, name).stat().st_size
                if directory.endswith(".p"):
                    partial += size
                else:
                    full += size
    return n, db, full, partial


async def sampled(
    authority: AuthorityProcess, bodies: list[list[bytes]], rate: float
) -> tuple[float, list[float], int, tuple[int, int, int, int]]:
    """``open_loop`` at ``rate``; the partial tiles' peak bytes, the first sample past 256."""
    sending = asyncio.create_task(open_loop(authority.url, bodies, rate))
    peak, first = 0, (0, 0, 0, 0)
    while not sending.done():
        sample = stored(authority)
        peak = max(peak, sample[3])
        if first[0] < 256 <= sample[0]:
            first = sample
        await asyncio.sleep(0.25)
    achieved, latencies = await sending
    return achieved, latencies, peak, first


def rates(tmp: Path, args: argparse.Namespace) -> None:
    print("rates: open loop, a checkpoint per batch; bytes an entry from 256 entries on")
    for spec in args.rates.split(","):
        rate, seconds = (float(x) for x in spec.split(":"))
        publishers = [Signer.generate(f"p{i}") for i in range(20)]
        authority = authority_with(tmp, f"rate{rate:g}", publishers)
        per = int(rate * seconds) // len(publishers)
        bodies = [
            [make_envelope(p, q).canonical_bytes() for q in range(1, per + 1)] for p in publishers
        ]
        authority.start()
        try:
            achieved, latencies, peak, first = asyncio.run(sampled(authority, bodies, rate))
            n, db, full, partial = stored(authority)
            uri = f"file:{authority.data / 'log.db'}?mode=ro"
            with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
                notes = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
        finally:
            authority.stop()
        print(
            f"  {rate:5g}/s for {seconds:g} s: {achieved:.0f}/s achieved, {n} entries, "
            f"{n / notes:.1f} a checkpoint, 201 p50 {1000 * median(latencies):.1f} ms; "
            f"database {(db - first[1]) / (n - first[0]):.0f} B/entry, full tiles "
            f"{full / (n - n % 256):.0f} B/entry covered; partial tiles "
            f"{partial / 1024:.0f} KiB at the end, {peak / 1024:.0f} KiB at most"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one wrk run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--entries", type=int, default=100_000, help="log size for 'disk'")
    parser.add_argument("--requests", type=int, default=1600, help="notices per 'append' run")
    parser.add_argument("--rates", default="10:60,100:30,1000:15", help="RATE:SECONDS,...")
    parser.add_argument("--parts", default="pollers,disk,append,rates")
    args = parser.parse_args()
    parts = {"pollers": pollers, "disk": disk, "append": append, "rates": rates}
    for name in args.parts.split(","):
        with tempfile.TemporaryDirectory() as tmp_dir:
            tmp = Path(tmp_dir)
            tmp.chmod(0o755)
            parts[name](tmp, args)


if __name__ == "__main__":
    main()
