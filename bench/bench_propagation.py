"""Propagation: from a publisher's 201 to 100 polling followers refusing the version.

Run by hand (not in CI):  python bench/bench_propagation.py [--modes poll:0.5 poll:5 push:5]

Starts a real authority on 127.0.0.1 and runs ``--followers`` Follower
instances in this one process (asyncio; each with its own state file in a tmp
dir, its own HTTP session, ``Follower.run(interval)``) and one Guard each.
Mode ``poll:I`` polls every I seconds with the checkpoint push stream off
(``push=False``); ``push:I`` is the default ``run``: the push stream plus
polling every I seconds underneath. After every follower has synced, it publishes ``--revokes``
revoke notices one after another; each follower's ``on_advance`` callback asks
its guard about the revoked version, and the first time the guard says
refuse is that follower's propagation time for that revoke. Reported: p50 /
p99 / max over all follower-revoke pairs, measured from the 201 (and from the
POST being sent), per mode. Baselines: measured in the same run, the time one
lone follower takes for one sync (fetch, verify, fold) started right at the
201: the floor for any notify-then-sync design; and, from the interval,
polling alone makes the expected delay about interval/2 (``run`` jitters each
wait by +-20%) and the worst about 1.2 x interval.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, pct
from deplog.client.cache.guard import Guard, Verdict
from deplog.client.follow.follower import Follower, SyncResult
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess

TOOL = "tool:org.acme/search"
HEADERS = {"Content-Type": "application/json"}


async def post(url: str, publisher: Signer, sequence: int, version: str) -> tuple[float, float]:
    """Publish a revoke of ``version``; returns (perf_counter at send, at the 201)."""
    envelope = make_envelope(
        publisher,
        sequence,
        tool=TOOL,
        action="revoke",
        affected={"versions": [version]},
        reasons=["critical_bug"],
    )
    async with aiohttp.ClientSession() as http:
        sent = time.perf_counter()
        async with http.post(
            url + "/v1/notices", data=envelope.canonical_bytes(), headers=HEADERS
        ) as r:
            await r.read()
            assert r.status == 201, r.status
            return sent, time.perf_counter()


async def scenario(
    authority: AuthorityProcess,
    publisher: Signer,
    tmp: Path,
    args: argparse.Namespace,
    interval: float,
    push: bool,
    first_sequence: int,
) -> tuple[list[float], list[float]]:
    cached_at = datetime.now(UTC)
    target: dict[str, str] = {"version": ""}
    refused: list[dict[str, float]] = [{} for _ in range(args.followers)]
    followers = [
        Follower(authority.url, authority.log_verifier, tmp / f"f{first_sequence}-{k}.db")
        for k in range(args.followers)
    ]
    guards = [Guard(f.state) for f in followers]
    stop = asyncio.Event()

    def on_advance(k: int) -> Callable[[SyncResult], None]:
        def callback(result: SyncResult) -> None:
            version = target["version"]
            if version and version not in refused[k]:
                decision = guards[k].check(TOOL, version, cached_at=cached_at)
                if decision.verdict == Verdict.REFUSE:
                    refused[k][version] = time.perf_counter()

        return callback

    tasks = [
        asyncio.create_task(f.run(interval, on_advance=on_advance(k), stop=stop, push=push))
        for k, f in enumerate(followers)
    ]
    size = authority_size(authority)
    while any(f.state.size < size for f in followers):
        await asyncio.sleep(0.05)
    from_201: list[float] = []
    from_send: list[float] = []
    try:
        for n in range(args.revokes):
            version = f"{n + 1}.0.{first_sequence}"
            target["version"] = version
            sent, answered = await post(authority.url, publisher, first_sequence + n, version)
            deadline = time.perf_counter() + 2 * interval + 10
            while time.perf_counter() < deadline and any(version not in r for r in refused):
                await asyncio.sleep(0.01)
            missing = sum(version not in r for r in refused)
            if missing:
                raise RuntimeError(f"{missing} followers never refused {version}")
            from_201 += [r[version] - answered for r in refused]
            from_send += [r[version] - sent for r in refused]
            await asyncio.sleep(interval * 0.37)  # desynchronise the next revoke from polls
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for f in followers:
            await f.close()
    return from_201, from_send


async def lone_sync(authority: AuthorityProcess, publisher: Signer, tmp: Path, first: int) -> float:
    """Median over 5 revokes of one follower's sync started at the 201."""
    out = []
    async with Follower(authority.url, authority.log_verifier, tmp / "lone.db") as follower:
        await follower.sync()
        for n in range(5):
            _, answered = await post(authority.url, publisher, first + n, f"{n + 1}.1.{first}")
            await follower.sync()
            out.append(time.perf_counter() - answered)
    return median(out)


def authority_size(authority: AuthorityProcess) -> int:
    with urllib.request.urlopen(authority.url + "/healthz") as response:
        return int(json.load(response)["size"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["poll:0.5", "poll:5", "push:5"])
    parser.add_argument("--followers", type=int, default=100)
    parser.add_argument("--revokes", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        authority = AuthorityProcess(tmp / "authority")
        publisher = Signer.generate("acme")
        with contextlib.redirect_stdout(io.StringIO()):
            authority.init()
            authority.add_publisher(publisher, "org.acme")
        authority.start()
        try:
            sequence = 1
            for mode in args.modes:
                kind, _, every = mode.partition(":")
                interval, push = float(every), kind == "push"
                from_201, from_send = asyncio.run(
                    scenario(authority, publisher, tmp, args, interval, push, sequence)
                )
                sequence += args.revokes
                pairs = len(from_201)
                print(
                    f"{'push + ' if push else ''}polling every {interval:g} s, "
                    f"{args.followers} followers, "
                    f"{args.revokes} revokes ({pairs} pairs): from the 201 p50 "
                    f"{1000 * median(from_201):.0f} ms p99 {1000 * pct(from_201, 99):.0f} ms "
                    f"max {1000 * max(from_201):.0f} ms; from the POST p50 "
                    f"{1000 * median(from_send):.0f} ms p99 {1000 * pct(from_send, 99):.0f} ms; "
                    f"baseline (polling alone) ~{500 * interval:.0f} ms / "
                    f"<= {1200 * interval:.0f} ms"
                )
            floor = asyncio.run(lone_sync(authority, publisher, tmp, sequence))
            print(f"baseline: one lone follower's sync started at the 201: {1000 * floor:.1f} ms")
        finally:
            authority.stop()


if __name__ == "__main__":
    main()
