"""Read path: GET /checkpoint requests/s under wrk, against two same-run baselines.

Run by hand (not in CI):  python bench/bench_read.py [--seconds 5] [--rounds 3]

Needs ``wrk`` and ``nginx`` on PATH (Debian: ``apt-get install -y wrk nginx``).
It starts a real authority on 127.0.0.1 (one publisher, a few notices), fetches
its /checkpoint bytes, and serves the very same bytes from
  (a) a minimal aiohttp handler (one process, same headers): the ceiling for
      any aiohttp handler on this machine;
  (b) nginx with one worker, as a static file, from a temporary config on a
      127.0.0.1 port (no system service is touched).
Each target gets ``--rounds`` interleaved wrk runs (one thread, 32
connections); figures are the medians, printed with ratios to the baselines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import free_port, median, start_minimal_server, wait_http
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess

NGINX_CONF = """
worker_processes 1;
daemon off;
user root;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {tmp}/www;
        location = /checkpoint {{
            default_type "text/plain; charset=utf-8";
            add_header Cache-Control no-cache;
        }}
    }}
}}
"""


def wrk(url: str, seconds: float, connections: int) -> float:
    """Requests/s that wrk measured against ``url``."""
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"non-2xx answers from {url}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert match is not None, out
    return float(match.group(1))


def start_nginx(tmp: Path, body: bytes) -> tuple[subprocess.Popen[bytes], str]:
    (tmp / "www").mkdir()
    (tmp / "www" / "checkpoint").write_bytes(body)
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, port=port))
    proc = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(tmp)])
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/checkpoint", timeout=10)
    return proc, url


async def fetch(url: str) -> bytes:
    async with aiohttp.ClientSession() as http, http.get(url + "/checkpoint") as r:
        return await r.read()


async def publish(url: str, publisher: Signer, count: int) -> None:
    async with aiohttp.ClientSession() as http:
        for sequence in range(1, count + 1):
            body = make_envelope(publisher, sequence).canonical_bytes()
            headers = {"Content-Type": "application/json"}
            async with http.post(url + "/v1/notices", data=body, headers=headers) as r:
                assert r.status == 201, await r.text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one wrk run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    for tool in ("wrk", "nginx"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install -y wrk nginx)")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        tmp.chmod(0o755)
        authority = AuthorityProcess(tmp / "authority")
        publisher = Signer.generate("acme")
        with contextlib.redirect_stdout(io.StringIO()):
            authority.init()
            authority.add_publisher(publisher, "org.acme")
        authority.start()
        procs: list[subprocess.Popen[str] | subprocess.Popen[bytes]] = []
        try:
            asyncio.run(publish(authority.url, publisher, 10))
            body = asyncio.run(fetch(authority.url))
            (tmp / "checkpoint").write_bytes(body)
            minimal, minimal_url = start_minimal_server(tmp / "checkpoint")
            procs.append(minimal)
            nginx, nginx_url = start_nginx(tmp, body)
            procs.append(nginx)
            assert asyncio.run(fetch(minimal_url)) == body
            assert asyncio.run(fetch(nginx_url)) == body
            targets = {"deplog": authority.url, "aiohttp": minimal_url, "nginx": nginx_url}
            rates: dict[str, list[float]] = {name: [] for name in targets}
            for _ in range(args.rounds):
                for name, url in targets.items():
                    rates[name].append(wrk(url + "/checkpoint", args.seconds, args.connections))
                    time.sleep(0.5)
            deplog, base, static = (median(rates[n]) for n in ("deplog", "aiohttp", "nginx"))
            print(
                f"checkpoint body {len(body)} B; wrk -t1 -c{args.connections} "
                f"-d{args.seconds:g}s, median of {args.rounds} interleaved rounds"
            )
            for name in targets:
                runs = ", ".join(f"{r:.0f}" for r in rates[name])
                print(f"  {name:8} {median(rates[name]):>8.0f} req/s  (runs: {runs})")
            print(
                f"deplog / minimal aiohttp = {deplog / base:.2f} (target >= 0.80); "
                f"deplog / nginx = {deplog / static:.2f}"
            )
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=10)
            authority.stop()


if __name__ == "__main__":
    main()
