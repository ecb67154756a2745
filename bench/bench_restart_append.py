"""Append latency right after a restart, against a warm process in the same run.

Run by hand (not in CI):  python bench/bench_restart_append.py [--restarts 6] [--appends 200]
                                                             [--busy 2]

It starts a real authority on 127.0.0.1 over a fresh data directory, warms it
with appends, then measures ``--appends`` sequential appends (one publisher,
each waiting for its receipt) in the warm process: the baseline. Then it
restarts the authority ``--restarts`` times and measures the same number of
appends from the moment ``/healthz`` first answers. ``--busy N`` keeps N
busy-looping processes running throughout, like the load average of 2-3 the
issue measured under. It prints, per restart, the first append's latency and
the worst, and the ratios to the warm run's median and worst; the goal is no
append above 50 ms after a restart.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, pct
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess

JSON = {"Content-Type": "application/json"}


def _busy() -> None:
    while True:
        pass


async def appends(url: str, publisher: Signer, first: int, count: int) -> list[float]:
    """Latencies (seconds) of ``count`` sequential appends, each signed beforehand."""
    bodies = [make_envelope(publisher, first + n).canonical_bytes() for n in range(count)]
    latencies = []
    async with aiohttp.ClientSession() as http:
        for body in bodies:
            started = time.perf_counter()
            async with http.post(url + "/v1/notices", data=body, headers=JSON) as response:
                await response.read()
                assert response.status == 201, response.status
            latencies.append(time.perf_counter() - started)
    return latencies


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=6)
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--busy", type=int, default=0, help="busy-looping processes as load")
    args = parser.parse_args()
    load = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(args.busy)]
    for process in load:
        process.start()
    publisher = Signer.generate("bench")
    with tempfile.TemporaryDirectory() as tmp:
        authority = AuthorityProcess(Path(tmp) / "authority")
        authority.init()
        authority.add_publisher(publisher, "org.bench")
        authority.start()
        sequence = 1
        asyncio.run(appends(authority.url, publisher, sequence, 200))  # warm-up
        sequence += 200
        warm = asyncio.run(appends(authority.url, publisher, sequence, args.appends))
        sequence += args.appends
        authority.stop()
        warm_median, warm_worst = median(warm), max(warm)
        print(
            f"warm process: median {ms(warm_median)} ms, p99 {ms(pct(warm, 99))} ms, "
            f"worst {ms(warm_worst)} ms over {args.appends} appends (load: {args.busy} busy)"
        )
        print("restart  start s  first ms  worst ms  worst at  first/median  worst/warm worst")
        worst_ratios = []
        for restart in range(1, args.restarts + 1):
            started = time.monotonic()
            authority.start()
            start_seconds = time.monotonic() - started
            after = asyncio.run(appends(authority.url, publisher, sequence, args.appends))
            sequence += args.appends
            authority.stop()
            worst = max(after)
            worst_ratios.append(worst / warm_worst)
            print(
                f"{restart:7d}  {start_seconds:7.2f}  {ms(after[0])}   {ms(worst)}  "
                f"{after.index(worst):8d}  {after[0] / warm_median:12.1f}  "
                f"{worst / warm_worst:16.1f}"
            )
        over = sum(1 for r in worst_ratios if r * warm_worst > 0.050)
        print(f"restarts with an append above 50 ms: {over} of {args.restarts}")
    for process in load:
        process.terminate()


if __name__ == "__main__":
    main()
