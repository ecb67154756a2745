"""``GET /v1/tools/{id}`` for tools with 10, 1,000 and 10,000 notices: time per request.

Run by hand (not in CI):  python bench/bench_tool_status.py [--requests 20]

It builds one log in process (``Log.sequence`` in batches of 1000) with three tools of
10, 1,000 and 10,000 notices, each notice deprecating a version of its own with a
message (so each tool's table has as many rows as notices, every row's deciding
notice's message read from its leaf), the last one revoking every version; then serves
it with ``authority serve`` and fetches each tool's first page ``--requests`` times, one
request at a time, over HTTP. It prints p50 and p99 per tool and the p50's ratio to the
10-notice tool's, measured in the same run: linear work gives ratios near 100 and 1,000.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine, pct
from deplog.authority import cli as authority_cli
from deplog.authority.log import Log
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import ORIGIN, AuthorityProcess

SIZES = (10, 1_000, 10_000)
BATCH = 1000


def tool(count: int) -> str:
    return f"tool:org.bench/t{count}"


def build(authority: AuthorityProcess, publisher: Signer) -> None:
    """Every tool's notices, one version each, the last a revoke of every version."""
    instance = authority_cli.init(authority.data, authority.keys, ORIGIN, io.StringIO())
    log = Log(instance.db_path, instance.signer, instance.origin)
    every = {"ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}]}]}
    revoke = {"action": "revoke", "reasons": ["other"], "sunset_at": None, "affected": every}
    envelopes = []
    for count in SIZES:
        for n in range(count - 1):
            fields = {"affected": {"versions": [f"1.{n // 1000}.{n % 1000}"]}, "message": "m"}
            envelopes.append((tool(count), fields))
        envelopes.append((tool(count), revoke))
    try:
        for start in range(0, len(envelopes), BATCH):
            batch = [
                make_envelope(publisher, start + k + 1, tool=tool_id, **fields)
                for k, (tool_id, fields) in enumerate(envelopes[start : start + BATCH])
            ]
            assert all(r.error is None for r in log.sequence(batch))
    finally:
        log.close()


async def measure(url: str, requests: int) -> dict[int, list[float]]:
    times: dict[int, list[float]] = {}
    async with aiohttp.ClientSession() as session:
        for count in SIZES:
            times[count] = []
            for _ in range(requests):
                started = time.perf_counter()
                async with session.get(f"{url}/v1/tools/{tool(count)}") as response:
                    body = await response.json()
                    assert response.status == 200 and body["status"] == "revoked", body
                    assert len(body["rows"]) == count, len(body["rows"])
                times[count].append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        authority = AuthorityProcess(
            Path(tmp) / "authority", extra_args=["--rate-per-address", "0"]
        )
        authority.init()
        bench = Signer.generate("bench")
        authority.add_publisher(bench, "org.bench")
        build(authority, bench)
        authority.start()
        try:
            times = asyncio.run(measure(authority.url, args.requests))
        finally:
            authority.stop()
    base = pct(times[SIZES[0]], 50)
    for count in SIZES:
        p50, p99 = pct(times[count], 50), pct(times[count], 99)
        print(
            f"{count:>6} notices: p50 {p50 * 1000:8.1f} ms, p99 {p99 * 1000:8.1f} ms, "
            f"p50 x{p50 / base:.0f} of the 10-notice tool's"
        )


if __name__ == "__main__":
    main()
