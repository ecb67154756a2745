"""Proofs at scale over HTTP, cold start and append stalls, against same-run baselines.

Run by hand (not in CI):  python bench/bench_proofs.py [--sizes 100000 1000000]

For each size it builds a log database with the fast path of bench_tree.build
(StoredHashTree appends in 10k-leaf transactions), lets ``authority init`` sign
its checkpoint, registers one publisher, and then measures ``authority serve``:
  * cold start: from process start until GET /healthz answers 200 (median of 3
    starts); baseline: a ``python -c 'import aiohttp'`` process, start to exit;
  * proofs over HTTP: 1000 GET /v1/proofs/inclusion and 1000 GET
    /v1/proofs/consistency for random sizes, p50/p99, right after the restart
    and again warm; baseline: GET /healthz on the same server in the same run
    (the cost of the HTTP round trip with no proof work);
  * the start-up storage audit: ``authority serve`` rehashes every leaf on a
    background thread after it starts answering; the script waits until the
    process is idle again (CPU time from /proc), reports how long after the
    start that was, and times the proofs once more;
  * append stalls: 200 notices posted one at a time right after the restart;
    worst receipt latency against the median.
Server-side (in-process) proof figures are bench_tree.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_tree import build
from bench.common import free_port, median, pct, wait_http
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess

REQUESTS = 1000


def cold_start(authority: AuthorityProcess) -> tuple[float, subprocess.Popen[bytes]]:
    """Seconds from process start until /healthz answers; the process keeps running."""
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*authority.command(), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    answered = wait_http(f"http://127.0.0.1:{port}/healthz", poll=0.001)
    authority.process, authority.url = proc, f"http://127.0.0.1:{port}"
    return answered - started, proc


def _stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (field 3 on)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _descendants(pid: int) -> list[int]:
    """Live processes under ``pid``, found by their parent ids in /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents.setdefault(int(_stat(int(entry.name))[1]), []).append(int(entry.name))
            except (OSError, IndexError):
                continue  # it ended while we looked
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found.extend(children)
        todo.extend(children)
    return found


def cpu_seconds(pid: int) -> float:
    """CPU used by the process and its children: the live ones (the start-up audit runs in
    one) and the ended ones it has waited for (cutime, cstime)."""
    total = 0
    for each in [pid, *_descendants(pid)]:
        try:
            fields = _stat(each)
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def wait_idle(pid: int, started: float, window: float = 1.0) -> float:
    """Wait until the process and its children used < 10% of a core over ``window``;
    returns the seconds since ``started`` (perf_counter) at which they went idle."""
    while True:
        before, at = cpu_seconds(pid), time.perf_counter()
        time.sleep(window)
        if cpu_seconds(pid) - before < 0.1 * window:
            return at - started
        if time.perf_counter() - started > 600:
            raise RuntimeError("the server never went idle")


def import_aiohttp() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import aiohttp"], check=True)
    return time.perf_counter() - started


async def timed_gets(url: str, paths: list[str]) -> list[float]:
    out = []
    async with aiohttp.ClientSession() as http:
        for path in paths:
            started = time.perf_counter()
            async with http.get(url + path) as r:
                await r.read()
                assert r.status == 200, (path, r.status)
            out.append(time.perf_counter() - started)
    return out


async def appends(url: str, publisher: Signer, count: int) -> list[float]:
    out = []
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        for sequence in range(1, count + 1):
            body = make_envelope(publisher, sequence).canonical_bytes()
            started = time.perf_counter()
            async with http.post(url + "/v1/notices", data=body, headers=headers) as r:
                await r.read()
                assert r.status == 201, await r.text()
            out.append(time.perf_counter() - started)
    return out


def fmt(values: list[float]) -> str:
    return f"p50 {1000 * median(values):6.2f} ms  p99 {1000 * pct(values, 99):6.2f} ms"


def proofs_round(url: str, size: int, rng: random.Random, label: str) -> None:
    inclusion = [
        f"/v1/proofs/inclusion?index={rng.randrange(size)}&size={size}" for _ in range(REQUESTS)
    ]
    consistency = [
        f"/v1/proofs/consistency?old={rng.randrange(1, size)}&new={size}" for _ in range(REQUESTS)
    ]
    inc = asyncio.run(timed_gets(url, inclusion))
    con = asyncio.run(timed_gets(url, consistency))
    health = asyncio.run(timed_gets(url, ["/healthz"] * REQUESTS))
    print(f"  {label}: inclusion   {fmt(inc)}")
    print(f"  {label}: consistency {fmt(con)}")
    print(f"  {label}: /healthz    {fmt(health)}  (baseline: same server, no proof)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--starts", type=int, default=3, help="cold starts per size")
    args = parser.parse_args()
    rng = random.Random(1)
    baseline = median([import_aiohttp() for _ in range(args.starts)])
    print(f"baseline: python -c 'import aiohttp' process, start to exit {1000 * baseline:.0f} ms")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            authority = AuthorityProcess(Path(tmp) / f"log-{size}")
            authority.data.mkdir(parents=True)
            started = time.perf_counter()
            worst = build(authority.data / "log.db", size)
            publisher = Signer.generate("acme")
            with contextlib.redirect_stdout(io.StringIO()):
                authority.init()
                authority.add_publisher(publisher, "org.acme")
            size += 1
            print(
                f"size {size}: built and signed in {time.perf_counter() - started:.1f} s, "
                f"worst single append while building {1000 * worst:.2f} ms"
            )
            starts = []
            for n in range(args.starts):
                began = time.perf_counter()
                seconds, proc = cold_start(authority)
                starts.append(seconds)
                if n < args.starts - 1:
                    authority.stop()
            print(
                f"  cold start to /healthz: median {1000 * median(starts):.0f} ms "
                f"(runs {', '.join(f'{1000 * s:.0f}' for s in starts)}); "
                f"ratio to import aiohttp {median(starts) / baseline:.2f}"
            )
            try:
                proofs_round(authority.url, size, rng, "right after restart")
                proofs_round(authority.url, size, rng, "warm               ")
                idle = wait_idle(proc.pid, began)
                print(f"  server idle (start-up audit done) {idle:.1f} s after its start")
                proofs_round(authority.url, size, rng, "after the audit    ")
                authority.stop()
                cold_start(authority)
                lat = asyncio.run(appends(authority.url, publisher, 200))
                print(
                    f"  200 appends right after restart: median {1000 * median(lat):.1f} ms, "
                    f"worst {1000 * max(lat):.1f} ms"
                )
            finally:
                authority.stop()


if __name__ == "__main__":
    main()
