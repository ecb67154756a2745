"""Hostile clients: appends and /healthz beside 1,100 slow connections and a looping
``/v1/entries`` reader; a publisher's receipt beside 0, 1,000 and 10,000 push subscribers.

Run by hand (not in CI):  python bench/bench_hostile.py [--parts hostile push]

``hostile``: a real authority under ``prlimit --nofile=1024:1024`` (the issue's machine),
``--large`` notices of about 32 KB logged first. Then two phases of ``--seconds`` each:
quiet, and hostile. In both, 10 closed-loop publishers post from 127.0.0.1 and a thread
probes ``/healthz`` every 50 ms on a fresh connection. The hostile phase adds, from a child
process, 1,100 connections from 127.0.0.2 that send a request's headers a byte a second
(reconnecting whenever closed), and from another a client at 127.0.0.3 that loops over
``GET /v1/entries`` of every large notice, reading each answer whole. Reported: appends/s
and ``/healthz`` p50/p99 per phase with the load average, the ratio of appends (goal: at
least 0.5; with ``--rounds N``, the phases N times over and the median ratio, as a machine
shared with other work drifts), connections refused, the authority's RSS.

``push``: a real authority with its defaults; subscribers from a child process, 100 per
client address (127.0.1.x), reading their streams. At 0, 1,000 and 10,000 subscribers, 40
sequential POSTs by one publisher: POST -> 201 p50/p99, the authority's RSS per subscriber,
and how many subscribers had every checkpoint. ``--authority-args`` passes flags (for an
older authority: ``--max-subscribers 20000``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import multiprocessing
import shlex
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import pct
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess

JSON = {"Content-Type": "application/json"}
LARGE = {"affected": {"versions": [f"1.0.{n}-{'x' * 115}" for n in range(256)]}}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def hostport(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


# Hostile clients, each in a process of its own (started before any event loop).


def slowloris(url: str, count: int, source: str, stop: Any) -> None:
    """``count`` connections trickling a request's headers, a byte a second, reconnecting."""

    async def one() -> None:
        host, port = hostport(url)
        request = b"GET /checkpoint HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"y" * 10_000
        while not stop.is_set():
            try:
                _, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
                for byte in request:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(1)
            except OSError:
                await asyncio.sleep(0.2)

    async def main() -> None:
        tasks = [asyncio.create_task(one()) for _ in range(count)]
        while not stop.is_set():
            await asyncio.sleep(0.2)
        for task in tasks:
            task.cancel()

    asyncio.run(main())


def entries_reader(url: str, end: int, source: str, stop: Any, pages: Any) -> None:
    """GET /v1/entries of ``[0, end)`` in a loop, from ``source``, each answer read whole."""

    async def main() -> None:
        connector = aiohttp.TCPConnector(local_addr=(source, 0))
        async with aiohttp.ClientSession(connector=connector) as http:
            start = 0
            while not stop.is_set():
                async with http.get(f"{url}/v1/entries?start={start}&end={end}") as response:
                    page = await response.json()
                start = (start + len(page["entries"])) % end
                pages.value += 1

    asyncio.run(main())


def subscribers(url: str, count: int, ready: Any, stop: Any, expect: Any, results: Any) -> None:
    """``count`` push streams, 100 per address from 127.0.1.1, each counting its events."""
    counts = [0] * count

    async def one(n: int, opened: list[int]) -> None:
        host, port = hostport(url)
        source = f"127.0.1.{n // 100 + 1}"
        reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        writer.write(b"GET /v1/checkpoints/stream HTTP/1.1\r\nHost: x\r\n\r\n")
        opened[0] += 1
        while line := await reader.readline():
            if line == b"event: checkpoint\n":
                counts[n] += 1

    async def main() -> None:
        opened = [0]
        tasks = []
        for n in range(count):
            tasks.append(asyncio.create_task(one(n, opened)))
            if n % 100 == 99:
                await asyncio.sleep(0.1)  # within the listen backlog
        while opened[0] < count:
            await asyncio.sleep(0.05)
        while min(counts, default=1) < 1:
            await asyncio.sleep(0.05)  # each has had the current checkpoint
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.1)
        deadline = time.monotonic() + 30
        while min(counts, default=expect.value) < expect.value and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # the streams read what was sent
        results.put(counts)
        for task in tasks:
            task.cancel()

    asyncio.run(main())


# The measured clients.


class Probe(threading.Thread):
    """``/healthz`` on a fresh connection every 50 ms, its latencies kept."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.latencies, self.failures, self.running = url, [], 0, True

    def run(self) -> None:
        while self.running:
            started = time.perf_counter()
            try:
                with socket.create_connection(hostport(self.url), timeout=2) as sock:
                    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
                self.latencies.append(time.perf_counter() - started)
            except (OSError, AssertionError):
                self.failures += 1
            time.sleep(0.05)


async def appends(url: str, publishers: list[Signer], next_seq: list[int], seconds: float) -> int:
    """Closed-loop posts by each publisher for ``seconds``: the receipts received."""
    done = 0
    deadline = time.monotonic() + seconds

    async def loop(k: int, http: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            next_seq[k] += 1
            body = make_envelope(publishers[k], next_seq[k]).canonical_bytes()
            async with http.post(url + "/v1/notices", data=body, headers=JSON) as response:
                await response.read()
                done += response.status == 201

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(loop(k, http) for k in range(len(publishers))))
    return done


def metric(url: str, name: str) -> float:
    with socket.create_connection(hostport(url), timeout=5) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        text = b""
        while chunk := sock.recv(65536):
            text += chunk
    for line in text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def phase(
    authority: AuthorityProcess,
    publishers: list[Signer],
    next_seq: list[int],
    seconds: float,
    hostile: Callable[[], list[multiprocessing.Process]] | None,
    stop: Any,
) -> dict[str, float]:
    children = hostile() if hostile else []
    time.sleep(3 if children else 0)  # the slow connections are open
    probe = Probe(authority.url)
    probe.start()
    started = time.monotonic()
    receipts = asyncio.run(appends(authority.url, publishers, next_seq, seconds))
    elapsed = time.monotonic() - started
    probe.running = False
    probe.join()
    assert authority.process is not None
    rss = rss_mib(authority.process.pid)
    stop.set()
    for child in children:
        child.join(10)
        if child.is_alive():
            child.kill()
    return {
        "appends/s": receipts / elapsed,
        "healthz p50 ms": pct(probe.latencies, 50) * 1000,
        "healthz p99 ms": pct(probe.latencies, 99) * 1000,
        "healthz failed": probe.failures,
        "rss MiB": rss,
    }


def hostile_part(args: argparse.Namespace, tmp: Path) -> None:
    publishers = [Signer.generate(f"p{k}") for k in range(10)]
    authority = AuthorityProcess(tmp / "hostile", extra_args=shlex.split(args.authority_args))
    authority.wrapper = ["prlimit", "--nofile=1024:1024", "--"]
    authority.init()
    for k, publisher in enumerate(publishers):
        authority.add_publisher(publisher, f"org.p{k}")
    authority.start()
    next_seq = [0] * len(publishers)
    try:

        async def log_large() -> None:
            async with aiohttp.ClientSession() as http:
                for _ in range(args.large):
                    next_seq[0] += 1
                    body = make_envelope(publishers[0], next_seq[0], **LARGE).canonical_bytes()
                    async with http.post(authority.url + "/v1/notices", data=body, headers=JSON):
                        pass

        asyncio.run(log_large())
        end = args.large + len(publishers)  # the registrations, then the large notices
        pages = multiprocessing.Value("i", 0)

        def start_hostile(stop: Any) -> list[multiprocessing.Process]:
            children = [
                multiprocessing.Process(
                    target=slowloris, args=(authority.url, 1100, "127.0.0.2", stop)
                ),
                multiprocessing.Process(
                    target=entries_reader, args=(authority.url, end, "127.0.0.3", stop, pages)
                ),
            ]
            for child in children:
                child.start()
            return children

        rounds = []
        for _ in range(args.rounds):
            quiet = phase(
                authority, publishers, next_seq, args.seconds, None, multiprocessing.Event()
            )
            stop = multiprocessing.Event()
            hostile = functools.partial(start_hostile, stop)
            loud = phase(authority, publishers, next_seq, args.seconds, hostile, stop)
            rounds.append((quiet, loud, Path("/proc/loadavg").read_text().split()[0]))
        refused = metric(authority.url, "deplog_connections_refused_total")
    finally:
        authority.stop()
    print(f"hostile: {args.seconds:g} s a phase, {args.large} large notices, open files 1024")
    for quiet, loud, load in rounds:
        print(f"  round, load {load}:")
        for name in quiet:
            print(f"    {name:16} quiet {quiet[name]:9.1f}   hostile {loud[name]:9.1f}")
    ratios = sorted(loud["appends/s"] / quiet["appends/s"] for quiet, loud, _ in rounds)
    print(f"  appends hostile/quiet {statistics.median(ratios):.2f} (median of ", end="")
    print(f"{', '.join(f'{r:.2f}' for r in ratios)}); entries pages read {pages.value}; ", end="")
    print(f"connections refused {refused:g}")
    printed = authority.output.read_text()
    print(
        f"  tracebacks in the log: {printed.count('Traceback')}, lines: {len(printed.splitlines())}"
    )


def push_part(args: argparse.Namespace, tmp: Path) -> None:
    publisher = Signer.generate("acme")
    authority = AuthorityProcess(tmp / "push", extra_args=shlex.split(args.authority_args))
    authority.init()
    authority.add_publisher(publisher, "org.acme")
    authority.start()
    sequence = 0
    try:
        assert authority.process is not None
        base_rss = rss_mib(authority.process.pid)
        for count in args.subscribers:
            stop, ready = multiprocessing.Event(), multiprocessing.Event()
            expect, results = multiprocessing.Value("i", 41), multiprocessing.Queue()
            child = multiprocessing.Process(
                target=subscribers,
                args=(authority.url, count, ready, stop, expect, results),
                daemon=True,  # ends with the bench, also when a step fails
            )
            child.start()
            if not ready.wait(300):
                raise RuntimeError("the subscribers did not connect")
            rss = rss_mib(authority.process.pid)
            latencies = []

            async def post_all(latencies: list[float]) -> None:
                nonlocal sequence
                async with aiohttp.ClientSession() as http:
                    for _ in range(40):
                        sequence += 1
                        body = make_envelope(publisher, sequence).canonical_bytes()
                        started = time.perf_counter()
                        async with http.post(
                            authority.url + "/v1/notices", data=body, headers=JSON
                        ) as response:
                            assert response.status == 201, await response.text()
                        latencies.append(time.perf_counter() - started)
                        await asyncio.sleep(0.05)

            asyncio.run(post_all(latencies))
            stop.set()
            counts = results.get(timeout=90) if count else []
            child.join(30)
            every = sum(1 for c in counts if c >= 41)  # the first checkpoint, then 40
            per = (rss - base_rss) * 1024 / count if count else 0.0
            print(
                f"push: {count:6} subscribers  POST->201 p50 {pct(latencies, 50) * 1000:6.1f} ms"
                f"  p99 {pct(latencies, 99) * 1000:6.1f} ms  RSS {per:5.1f} KiB/subscriber"
                f"  had every checkpoint: {every}/{count}"
            )
            time.sleep(1)
    finally:
        authority.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", default=["hostile", "push"])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--large", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1, help="quiet then hostile, N times")
    parser.add_argument("--subscribers", type=int, nargs="+", default=[0, 1000, 10000])
    parser.add_argument("--authority-args", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="deplog-bench-hostile-") as tmp:
        if "hostile" in args.parts:
            hostile_part(args, Path(tmp))
        if "push" in args.parts:
            push_part(args, Path(tmp))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
