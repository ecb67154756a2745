"""Light verification beside the full follower: join time, bytes fetched and memory for
a host using 50 tools, the cost of a refresh, and the verify time of one map proof.

Run by hand (not in CI):

    python bench/bench_light.py 10000 100000 1000000

Each log (N notices over 1000 tools) is built once with ``bench_follower``'s builder
into ``--fixtures`` (default /tmp/deplog-follower-fixtures, shared with it) and reused;
the authority serving it runs as its own process. Per size, in the same run:

- the light join, in a child process: one checkpoint, then the binary map proofs of 50
  tools (8 at a time), all verified; the 50 are ``bench`` tools (N/1000 notices each,
  so their records grow with the log) or ``fresh`` ones (a handful each: every run
  posts one more to each first), the realistic host; its wall time, the bytes it
  fetched (header lines, from aiohttp's trace hooks, and bodies by their
  Content-Length, which the authority always sends) and its
  peak RSS above the RSS it had once its imports were done (``VmHWM`` and ``VmRSS``,
  /proc/self/status); run twice, asking for compressed answers (aiohttp's default) and
  for ``identity``: the bytes of both are printed, the rest from the first;
- a refresh after one new notice: the checkpoint and one consistency proof (time and
  bytes), then re-proving the 50 tools at the new checkpoint, median of 5;
- verifying one proof (binary parse, path to the map root, record decode), median of
  the 50 proofs each verified 200 times;
- the full follower's ``deplog follow --once`` from nothing, as ``bench_follower``
  measures it (wall time and whole-process max RSS).

Measuring starts once the authority's startup storage audit (a read of every leaf) has
ended. Each row ends with the 1-minute load average when it was measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_follower import FIXTURES, fixture, follow_once, publish, tool_of

from deplog.client.follow.http import HttpLogSource
from deplog.client.follow.light import LightVerifier
from deplog.client.map.line import require_map_root
from deplog.client.map.proof import MapProof, verify_map_proof
from deplog.client.tlog.note import Signer, Verifier
from tests.builders import make_envelope
from tests.integration import harness
from tests.integration.harness import AuthorityProcess

HOSTS = {
    "bench": [tool_of(k) for k in range(50)],  # N/1000 notices each: records grow with N
    "fresh": [f"tool:org.bench/host{k}" for k in range(50)],  # a notice more each run
}


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` memory field, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class Counted:
    """An aiohttp session whose responses' bytes (header lines and body) are counted."""

    def __init__(self, encoding: str) -> None:
        self.bytes = 0
        trace = aiohttp.TraceConfig()
        trace.on_request_end.append(self._end)
        headers = {} if encoding == "compressed" else {"Accept-Encoding": encoding}
        self.session = aiohttp.ClientSession(trace_configs=[trace], headers=headers)

    async def _end(self, session: Any, context: Any, params: Any) -> None:
        response = params.response
        headers = sum(len(k) + len(v) + 4 for k, v in response.raw_headers)  # ": ", CRLF
        self.bytes += 17 + headers + (response.content_length or 0)  # and the status line

    def take(self) -> int:
        counted, self.bytes = self.bytes, 0
        return counted


async def child(
    url: str, key: str, publisher: Signer, tools: list[str], encoding: str
) -> dict[str, Any]:
    """The light join, then refreshes, in this (fresh) process: what ``main`` prints."""
    base_rss = status_kib("VmRSS")
    counted = Counted(encoding)
    source = HttpLogSource(url, session=counted.session)
    light = LightVerifier(source, Verifier.parse(key))
    started = time.perf_counter()
    await light.refresh()
    await light.prepare(tools)
    join = time.perf_counter() - started
    joined = {"join_s": join, "join_bytes": counted.take()}
    joined["rss_above_kib"] = status_kib("VmHWM") - base_rss
    now = datetime.now(UTC)
    assert all(light.check(t, "1.0.0", cached_at=now).may_serve for t in tools)
    refreshes, reproofs, refresh_bytes, reproof_bytes = [], [], [], []
    raw: list[bytes] = []
    for _ in range(5):
        trusted = light.trusted
        assert trusted is not None
        await publish(url, publisher, trusted.size, 1)
        started = time.perf_counter()
        assert await light.refresh()
        refreshes.append(time.perf_counter() - started)
        refresh_bytes.append(counted.take())
        started = time.perf_counter()
        await light.prepare(tools)
        reproofs.append(time.perf_counter() - started)
        reproof_bytes.append(counted.take())
    trusted = light.trusted
    assert trusted is not None
    for tool in tools:
        size, proof = await source.map_proof(tool)
        if size == trusted.size:
            raw.append(proof)
    root = require_map_root(trusted.checkpoint)
    per_proof = []
    for tool, proof in zip(tools, raw, strict=False):
        started = time.perf_counter()
        for _ in range(200):
            verify_map_proof(root, tool, MapProof.from_binary(proof))
        per_proof.append((time.perf_counter() - started) / 200)
    await counted.session.close()
    return joined | {
        "refresh_s": statistics.median(refreshes),
        "refresh_bytes": statistics.median(refresh_bytes),
        "reproof_s": statistics.median(reproofs),
        "reproof_bytes": statistics.median(reproof_bytes),
        "proof_bytes": statistics.median(len(p) for p in raw),
        "verify_proof_us": 1e6 * statistics.median(per_proof),
    }


async def post_fresh(url: str, publisher: Signer) -> None:
    """One deprecation of each ``fresh`` host tool, at the log's next sequence numbers."""
    async with aiohttp.ClientSession() as http:
        async with http.get(url + "/checkpoint") as response:
            sequence = int((await response.read()).split(b"\n")[1])  # entry 0 registers
        for tool in HOSTS["fresh"]:
            body = make_envelope(publisher, sequence, tool=tool).canonical_bytes()
            sequence += 1
            headers = {"Content-Type": "application/json"}
            async with http.post(url + "/v1/notices", data=body, headers=headers) as r:
                assert r.status == 201, await r.text()


def audited(authority: AuthorityProcess, since: int) -> None:
    """Wait until the storage audit the authority started with has read every leaf."""
    deadline = time.monotonic() + 900
    while not re.search(r" (\d+)/\1 leaves", authority.output.read_text()[since:]):
        assert time.monotonic() < deadline, "the storage audit did not end"
        time.sleep(0.5)


def light_join(
    url: str, key: str, publisher_file: Path, hosts: str, encoding: str
) -> dict[str, Any]:
    """``child`` in a fresh process, so its memory is its own."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", url, key, str(publisher_file), hosts, encoding],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    parser.add_argument("--no-full", action="store_true", help="skip the full follower")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    harness.STARTUP_TIMEOUT = 600  # an authority opens a 10^6-entry log in about a minute
    if args.child:
        url, key, publisher_file, hosts, encoding = args.child
        publisher = Signer.parse(Path(publisher_file).read_text().strip())
        print(json.dumps(asyncio.run(child(url, key, publisher, HOSTS[hosts], encoding))))
        return
    print(
        "| notices | host tools | light join | bytes (identity) | RSS above imports | refresh "
        "| bytes (identity) | re-prove 50 | bytes (identity) | proof | verify/proof "
        "| full follow | full max RSS | load |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for entries in args.sizes:
        authority, publisher = fixture(args.fixtures, entries)
        key_file = args.fixtures / str(entries) / "publisher.key"
        try:
            since = len(authority.output.read_text()) if authority.output.exists() else 0
            authority.start()  # stopped even if it never answers
            audited(authority, since)
            key = authority.log_verifier.vkey()
            asyncio.run(post_fresh(authority.url, publisher))
            joins = {
                hosts: [
                    light_join(authority.url, key, key_file, hosts, encoding)
                    for encoding in ("compressed", "identity")
                ]
                for hosts in HOSTS
            }
            seconds = rss = float("nan")
            if not args.no_full:
                with tempfile.TemporaryDirectory() as tmp:
                    seconds, _, rss = follow_once(authority, Path(tmp) / "state.db")
        finally:
            authority.stop()
        for hosts, (light, identity) in joins.items():
            print_row(entries, hosts, light, identity, seconds, rss)


def print_row(
    entries: int,
    hosts: str,
    light: dict[str, Any],
    identity: dict[str, Any],
    seconds: float,
    rss: float,
) -> None:
    """One line of the table: ``light``'s figures, and ``identity``'s bytes beside them."""

    def kib(name: str) -> str:
        return f"{light[name] / 1024:.1f} ({identity[name] / 1024:.1f}) KiB"

    print(
        f"| {entries:,} | {hosts} | {1000 * light['join_s']:.0f} ms | {kib('join_bytes')}"
        f" | {light['rss_above_kib'] / 1024:.1f} MiB"
        f" | {1000 * light['refresh_s']:.1f} ms | {kib('refresh_bytes')}"
        f" | {1000 * light['reproof_s']:.0f} ms | {kib('reproof_bytes')}"
        f" | {light['proof_bytes']:.0f} B | {light['verify_proof_us']:.0f} µs"
        f" | {seconds:.1f} s | {rss:.0f} MiB | {os.getloadavg()[0]:.1f} |",
        flush=True,
    )


if __name__ == "__main__":
    main()
