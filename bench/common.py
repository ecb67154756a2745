"""Helpers shared by the benchmarks: percentiles, free ports, a minimal aiohttp server.

Not a benchmark itself. ``python bench/common.py`` prints the machine
description that BENCHMARKS.md quotes (cores, CPU model, memory, Python, kernel).
"""

from __future__ import annotations

import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A minimal aiohttp server: POST /v1/notices reads the body and answers 201 "ok";
# GET <path> answers the bytes of the file named in argv[1] (if any) with the
# same headers as the authority's /checkpoint. It prints "serving on <url>".
MINIMAL_SERVER = """
import asyncio, sys
from aiohttp import web
body = open(sys.argv[1], "rb").read() if len(sys.argv) > 1 else b""
async def post(request):
    await request.read()
    return web.Response(status=201, text="ok")
async def get(request):
    return web.Response(body=body, content_type="text/plain", charset="utf-8",
                        headers={"Cache-Control": "no-cache"})
app = web.Application()
app.router.add_post("/v1/notices", post)
app.router.add_get("/checkpoint", get)
async def main():
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    print("serving on http://127.0.0.1:%d" % runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def pct(values: Sequence[float], p: float) -> float:
    """The p-th percentile (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_minimal_server(body_file: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    """Start the minimal aiohttp server; returns the process and its base URL."""
    args = [sys.executable, "-c", MINIMAL_SERVER]
    if body_file is not None:
        args.append(str(body_file))
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, line.rsplit("serving on ", 1)[1].strip()


def wait_http(url: str, timeout: float = 60.0, poll: float = 0.002) -> float:
    """Poll ``url`` until it answers 200; returns the perf_counter time it first did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return time.perf_counter()
        except OSError:
            pass
        time.sleep(poll)
    raise RuntimeError(f"{url} did not answer in {timeout} s")


def machine() -> dict[str, str]:
    """What BENCHMARKS.md says about the machine a run was made on."""
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    return {
        "cores (nproc)": str(os.cpu_count()),
        "CPU model": model,
        "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "Python": platform.python_version(),
        "kernel": platform.release(),
    }


if __name__ == "__main__":
    for key, value in machine().items():
        print(f"{key}: {value}")
