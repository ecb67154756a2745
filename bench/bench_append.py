"""Append path: notices/s with receipts and receipt latency, against a same-run baseline.

Run by hand (not in CI):  python bench/bench_append.py [--requests N]

It starts a real authority on 127.0.0.1 over a fresh data directory, registers
publishers, and posts pre-signed envelopes from C concurrent publishers (C = 1
and 50). The baseline, measured in the same run with the same client, is a
minimal aiohttp server that reads the body and answers 201 with a fixed text:
the ceiling for any aiohttp POST handler on this machine. Figures are printed
as absolute values and as ratios against that baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from client.note import Signer
from tests.integration.harness import AuthorityProcess, make_envelope

BASELINE_SERVER = """
import sys
from aiohttp import web
async def handle(request):
    await request.read()
    return web.Response(status=201, text="ok")
app = web.Application()
app.router.add_post("/v1/notices", handle)
async def main():
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    print("serving on http://127.0.0.1:%d" % runner.addresses[0][1], flush=True)
    import asyncio
    await asyncio.Event().wait()
import asyncio
asyncio.run(main())
"""


async def load(url: str, bodies: list[list[bytes]]) -> tuple[float, list[float]]:
    """Each inner list is one publisher posting sequentially; returns (seconds, latencies)."""
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def publisher(mine: list[bytes]) -> None:
            for body in mine:
                started = time.perf_counter()
                async with http.post(
                    url + "/v1/notices", data=body, headers={"Content-Type": "application/json"}
                ) as r:
                    await r.read()
                    if r.status not in (200, 201):
                        raise RuntimeError(f"unexpected status {r.status}")
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(publisher(m) for m in bodies))
        return time.perf_counter() - started, latencies


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def start_baseline() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", BASELINE_SERVER], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, line.rsplit("serving on ", 1)[1].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests per concurrency")
    parser.add_argument(
        "--server-arg", action="append", default=[], help="extra 'authority serve' argument"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        authority = AuthorityProcess(Path(tmp), extra_args=args.server_arg)
        authority.init()
        signers = [Signer.generate(f"bench{i}") for i in range(50)]
        for s in signers:
            authority.add_publisher(s, f"org.{s.name}")
        authority.start()
        baseline, baseline_url = start_baseline()
        try:
            print(
                f"{'publishers':>10} {'deplog/s':>10} {'baseline/s':>11} {'ratio':>6} "
                f"{'p50 ms':>8} {'p99 ms':>8} {'base p99':>9}"
            )
            next_sequence = 1
            for concurrency in (1, 50):
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
                secs, lat = asyncio.run(load(authority.url, bodies))
                rate, base_rate = total / secs, total / base_secs
                print(
                    f"{concurrency:>10} {rate:>10.0f} {base_rate:>11.0f} "
                    f"{rate / base_rate:>6.2f} {1000 * statistics.median(lat):>8.1f} "
                    f"{1000 * percentile(lat, 99):>8.1f} "
                    f"{1000 * percentile(base_lat, 99):>9.1f}"
                )
        finally:
            baseline.terminate()
            authority.stop()


if __name__ == "__main__":
    main()
