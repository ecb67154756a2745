"""Client: a follower's full and incremental sync through tlog-tiles against the JSON API.

Run by hand (not in CI):  python bench/bench_tiles_follow.py [--entries 100000]

Builds an authority database of N notices (as bench_follower.py), serves it
with the authority on 127.0.0.1 and publishes its tiles directory (written
from the same leaves by the tests' writer) with Python's static file server
in a process of its own (nginx would serve faster; the client's work is the
same). Then, in one run: a full sync from nothing via tiles and via the JSON
API, and incremental syncs of 10 new entries each way, counting the HTTP
requests each follower made and timing each sync.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_follower import UNTHROTTLED, build, publish
from deplog.client.follow.follower import Follower
from deplog.client.follow.http import HttpLogSource
from deplog.client.follow.source import LogSource, fetch_page
from deplog.client.follow.tiles import TilesLogSource
from deplog.client.tlog.note import Signer
from tests.builders import write_tiles
from tests.integration.harness import AuthorityProcess


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def publish_tiles(authority: AuthorityProcess, directory: Path) -> None:
    """Write the authority's current log as a tiles directory (not timed)."""
    async with HttpLogSource(authority.url, timeout=60) as api:
        note = await api.checkpoint()
        size = int(note.split(b"\n")[1])
        leaves: list[bytes] = []
        while len(leaves) < size:
            leaves += await fetch_page(api, len(leaves), size)
    write_tiles(directory, note, leaves)


class Counted:
    """An aiohttp session whose requests are counted (redirect hops included)."""

    def __init__(self) -> None:
        self.requests = 0
        trace = aiohttp.TraceConfig()
        trace.on_request_start.append(self._count)
        self.session = aiohttp.ClientSession(
            trace_configs=[trace], timeout=aiohttp.ClientTimeout(total=60)
        )

    async def _count(self, *_: object) -> None:
        self.requests += 1


async def timed(follower: Follower, counted: Counted) -> tuple[float, int, int]:
    before = counted.requests
    started = time.perf_counter()
    result = await follower.sync()
    return (
        time.perf_counter() - started,
        result.new_size - result.old_size,
        counted.requests - before,
    )


async def measure(
    authority: AuthorityProcess,
    tiles_url: str,
    tiles_dir: Path,
    publisher: Signer,
    last: int,
    tmp: Path,
    order: tuple[str, ...] = ("tiles", "json"),
) -> None:
    counters = {"tiles": Counted(), "json": Counted()}
    sources: dict[str, LogSource] = {
        "tiles": TilesLogSource(tiles_url, session=counters["tiles"].session, timeout=60),
        "json": HttpLogSource(authority.url, session=counters["json"].session, timeout=60),
    }
    followers = {
        name: Follower(source, authority.log_verifier, tmp / f"{name}.db")
        for name, source in sources.items()
    }
    try:
        for name in order:
            seconds, synced, requests = await timed(followers[name], counters[name])
            print(
                f"full sync via {name}: {synced} entries in {seconds:.2f} s "
                f"({synced / seconds:.0f} entries/s), {requests} requests"
            )
        increments: dict[str, list[tuple[float, int]]] = {"tiles": [], "json": []}
        for round_ in range(5):
            await publish(authority.url, publisher, last + 1 + 10 * round_, 10)
            await publish_tiles(authority, tiles_dir)
            for name in order:
                seconds, synced, requests = await timed(followers[name], counters[name])
                assert synced == 10
                increments[name].append((seconds, requests))
        for name, runs in increments.items():
            times = [1000 * s for s, _ in runs]
            print(
                f"incremental sync of 10 entries via {name}: median {statistics.median(times):.1f}"
                f" ms (min {min(times):.1f}, max {max(times):.1f}), "
                f"requests {statistics.median([r for _, r in runs]):.0f} (median of 5)"
            )
        for name in ("tiles", "json"):
            assert followers[name].state.root == followers["json"].state.root
    finally:
        for follower in followers.values():
            await follower.close()
        for counted in counters.values():
            await counted.session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument(
        "--json-first", action="store_true", help="sync via the JSON API first (order effects)"
    )
    args = parser.parse_args()
    order = ("json", "tiles") if args.json_first else ("tiles", "json")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        authority = AuthorityProcess(tmp / "authority", extra_args=UNTHROTTLED)
        authority.init()
        started = time.perf_counter()
        publisher, last = build(authority, args.entries)
        print(f"built a log of {last + 1} entries in {time.perf_counter() - started:.1f} s")
        authority.start()
        port = free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                str(port),
                "--directory",
                str(tmp / "tiles"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            asyncio.run(publish_tiles(authority, tmp / "tiles"))
            time.sleep(0.5)
            asyncio.run(
                measure(
                    authority,
                    f"http://127.0.0.1:{port}",
                    tmp / "tiles",
                    publisher,
                    last,
                    tmp,
                    order,
                )
            )
        finally:
            server.terminate()
            server.wait()
            authority.stop()


if __name__ == "__main__":
    main()
