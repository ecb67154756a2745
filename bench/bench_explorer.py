"""The explorer at 10^5 notices: page render times, and appends with the explorer idle vs loaded.

Run by hand (not in CI):  python bench/bench_explorer.py [--notices 100000] [--seconds 8]

It builds a log of ``--notices`` real, signed notices in process (``Log.sequence``
in batches of 1000, one checkpoint per batch; 10 notices per tool, so
``notices / 10`` tools), then serves it with ``authority serve`` (embedded
witness on, rate limits off so the load is the machine's, not the limiter's) and
measures over HTTP, one request at a time:
  * render time: every explorer page type, each request a URL not seen before
    (another tool, entry, query; the home page with a fresh query string), so
    every answer is a fresh read and render, never the page cache; p50/p99.
    Baselines in the same run: ``GET /healthz`` and ``GET /v1/tools/<id>`` (the
    JSON read the tool page is built on);
  * appends: 10 publishers posting notices closed-loop for ``--seconds``, first
    with the explorer idle, then while 8 clients fetch uncached explorer pages
    as fast as they are answered (from another process, so the posters' process
    is not slowed by the page load), then idle again; notices/s and receipt p99.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import multiprocessing
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import pct
from deplog.authority import cli as authority_cli
from deplog.authority.log import Log
from deplog.client.model import canonical
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import ORIGIN, AuthorityProcess

REQUESTS = 300
BATCH = 1000
NOTICES_PER_TOOL = 10
POSTERS = 10
BROWSERS = 8


def build(authority: AuthorityProcess, publisher: Signer, notices: int) -> float:
    """Sign and sequence ``notices`` notices into the authority's log; returns seconds."""
    instance = authority_cli.init(authority.data, authority.keys, ORIGIN, io.StringIO())
    started = time.perf_counter()
    log = Log(instance.db_path, instance.signer, instance.origin)
    try:
        sequence = 1
        while sequence <= notices:
            batch = []
            for _ in range(min(BATCH, notices - sequence + 1)):
                tool = f"tool:org.{publisher.name}/tool{(sequence - 1) // NOTICES_PER_TOOL:06d}"
                batch.append(make_envelope(publisher, sequence, tool=tool))
                sequence += 1
            results = log.sequence(batch)
            assert all(r.error is None for r in results)
    finally:
        log.close()
    return time.perf_counter() - started


async def timed(session: aiohttp.ClientSession, url: str, paths: list[str]) -> list[float]:
    out = []
    for path in paths:
        started = time.perf_counter()
        async with session.get(url + path) as response:
            await response.read()
            assert response.status == 200, (path, response.status)
        out.append(time.perf_counter() - started)
    return out


def fmt(values: list[float]) -> str:
    return f"p50 {pct(values, 50) * 1000:.2f} ms, p99 {pct(values, 99) * 1000:.2f} ms"


def page_paths(kind: str, notices: int, rng: random.Random, n: int) -> list[str]:
    tools = notices // NOTICES_PER_TOOL
    picks = [rng.randrange(tools) for _ in range(n)]
    if kind == "home":
        return [f"/?r={i}" for i in range(n)]
    if kind == "search":
        return [f"/search?q=tool{i:06d}"[:-1] for i in picks]  # a partial id: 10 matches
    if kind == "tool":
        return [f"/tools/tool:org.bench/tool{i:06d}" for i in picks]
    if kind == "api-tool":
        return [f"/v1/tools/tool:org.bench/tool{i:06d}" for i in picks]
    if kind == "notice":
        return [f"/notices/{rng.randrange(1, notices)}" for _ in range(n)]
    if kind == "publishers":
        return [f"/publishers?r={i}" for i in range(n)]
    if kind == "witnesses":
        return [f"/witnesses?r={i}" for i in range(n)]
    return ["/healthz"] * n


async def appends(url: str, posters: list[Signer], seconds: float, first: int) -> list[float]:
    """Closed loop: each poster sends its next notice when the last receipt came."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def run(session: aiohttp.ClientSession, signer: Signer) -> None:
        sequence = first
        while time.perf_counter() < deadline:
            body = canonical.dumps(make_envelope(signer, sequence).to_json())
            started = time.perf_counter()
            async with session.post(
                url + "/v1/notices", data=body, headers={"Content-Type": "application/json"}
            ) as response:
                await response.read()
                assert response.status == 201, response.status
            latencies.append(time.perf_counter() - started)
            sequence += 1

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(run(session, s) for s in posters))
    return latencies


async def browse(url: str, notices: int, stop: asyncio.Event, seed: int) -> int:
    """Fetch uncached explorer pages until ``stop``; returns pages served."""
    rng = random.Random(seed)
    served = 0
    kinds = ["home", "search", "tool", "notice", "publishers", "witnesses"]
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            kind = kinds[served % len(kinds)]
            [path] = page_paths(kind, notices, rng, 1)
            if kind in ("home", "publishers", "witnesses"):
                path += f"-{seed}-{served}"
            async with session.get(url + path) as response:
                await response.read()
                assert response.status == 200, (path, response.status)
            served += 1
    return served


async def _browsers(url: str, notices: int, seconds: float) -> int:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(browse(url, notices, stop, i)) for i in range(BROWSERS)]
    await asyncio.sleep(seconds)
    stop.set()
    return sum(await asyncio.gather(*tasks))


def _browse_process(url: str, notices: int, seconds: float, out: Any) -> None:
    """The page load in its own process: the posters' process is not slowed by it."""
    out.put(asyncio.run(_browsers(url, notices, seconds)))


async def append_phase(
    url: str, posters: list[Signer], seconds: float, first: int, notices: int, loaded: bool
) -> tuple[float, list[float], float]:
    pages: Any = multiprocessing.Queue()
    browsing = multiprocessing.Process(
        target=_browse_process, args=(url, notices, seconds + 0.5, pages)
    )
    if loaded:
        browsing.start()
        await asyncio.sleep(0.5)  # the page load is running before the appends start
    started = time.perf_counter()
    latencies = await appends(url, posters, seconds, first)
    elapsed = time.perf_counter() - started
    served = 0
    if loaded:
        served = pages.get()
        browsing.join()
    return len(latencies) / elapsed, latencies, served / (seconds + 0.5)


async def measure(url: str, notices: int, posters: list[Signer], seconds: float) -> None:
    rng = random.Random(7)
    async with aiohttp.ClientSession() as session:
        await timed(session, url, ["/", "/healthz"])  # first connection, imports
        for kind in ["healthz", "api-tool", "home", "search", "tool", "notice", "publishers",
                     "witnesses"]:  # fmt: skip
            values = await timed(session, url, page_paths(kind, notices, rng, REQUESTS))
            print(f"  {kind:>10}: {fmt(values)}  ({REQUESTS} uncached requests)")
    first = 1
    for label, loaded in (("idle", False), ("loaded", True), ("idle again", False)):
        rate, latencies, pages = await append_phase(url, posters, seconds, first, notices, loaded)
        first += 100_000
        extra = f"; explorer served {pages:.0f} pages/s" if loaded else ""
        print(f"  appends, explorer {label}: {rate:.0f} notices/s, receipt {fmt(latencies)}{extra}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notices", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        authority = AuthorityProcess(
            Path(tmp) / "authority",
            extra_args=["--rate-per-address", "0", "--rate-per-publisher", "0"],
        )
        authority.init()
        bench = Signer.generate("bench")
        authority.add_publisher(bench, "org.bench")
        posters = [Signer.generate(f"poster{i}") for i in range(POSTERS)]
        for poster in posters:
            authority.add_publisher(poster, f"org.{poster.name}")
        print(f"built {args.notices} notices in {build(authority, bench, args.notices):.1f} s")
        authority.start()
        try:
            print(f"explorer at {args.notices} notices:")
            asyncio.run(measure(authority.url, args.notices, posters, args.seconds))
        finally:
            authority.stop()


if __name__ == "__main__":
    main()
