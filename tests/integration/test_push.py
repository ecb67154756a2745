"""Push invalidation: fast when the stream is up, correct when it is not, never trusted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from deplog.authority.http.push import sse_event
from deplog.client.cache.guard import Guard, Verdict
from deplog.client.cache.guarded_cache import GuardedCache
from deplog.client.follow.follower import Follower
from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.note import Signer
from tests.builders import ORIGIN, LocalLog, make_envelope
from tests.integration.harness import AuthorityProcess

pytestmark = pytest.mark.slow  # real authority processes

JSON = {"Content-Type": "application/json"}
TOOL = "tool:org.acme/search"
NO_POLLING = 3600.0  # the poll loop syncs once at start, then not within a test


def later() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=60)


async def revoke(
    http: aiohttp.ClientSession, url: str, publisher: Signer, sequence: int, version: str = "1.0.0"
) -> float:
    """Publish a revoke; returns the time the 201 arrived."""
    body = make_envelope(
        publisher, sequence, action="revoke", reasons=["other"], affected={"versions": [version]}
    ).canonical_bytes()
    async with http.post(url + "/v1/notices", data=body, headers=JSON) as response:
        assert response.status == 201
    return time.monotonic()


async def refused_by(guard: Guard, version: str, deadline: float) -> float:
    while time.monotonic() < deadline:
        if guard.check(TOOL, version, cached_at=later()).verdict == Verdict.REFUSE:
            return time.monotonic()
        await asyncio.sleep(0.005)
    raise AssertionError("the follower never refused the revoked version")


@pytest.mark.both_backends
async def test_a_pushed_revocation_is_refused_within_a_second_without_polling(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    async with Follower(authority.url, authority.log_verifier, tmp_path / "s.db") as follower:
        stop = asyncio.Event()
        running = asyncio.create_task(follower.run(NO_POLLING, stop=stop))
        guard = Guard(follower.state)
        await asyncio.sleep(0.5)  # the first poll and the stream subscription
        for sequence in range(1, 4):
            acknowledged = await revoke(http, authority.url, publisher, sequence, f"{sequence}.0.0")
            refused = await refused_by(guard, f"{sequence}.0.0", acknowledged + 5)
            assert refused - acknowledged < 1.0
        stop.set()
        await running


async def test_listen_returns_within_a_second_of_stop_while_the_stream_is_live(
    authority: AuthorityProcess, tmp_path: Path
) -> None:
    async with Follower(authority.url, authority.log_verifier, tmp_path / "s.db") as follower:
        stop = asyncio.Event()
        listening = asyncio.create_task(follower.listen(stop))
        await asyncio.sleep(1.0)  # subscribed: the stream is live, nothing new to push
        assert not listening.done()
        stop.set()
        stopped = time.monotonic()
        await asyncio.wait_for(listening, 5)
        assert time.monotonic() - stopped < 1.0


async def test_with_the_stream_refused_it_still_converges_by_polling(
    authority_files: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    authority_files.extra_args = ["--max-subscribers", "0"]
    authority_files.start()
    try:
        async with Follower(
            authority_files.url, authority_files.log_verifier, tmp_path / "s.db"
        ) as follower:
            stop = asyncio.Event()
            running = asyncio.create_task(follower.run(0.3, stop=stop))
            acknowledged = await revoke(http, authority_files.url, publisher, 1)
            await refused_by(Guard(follower.state), "1.0.0", acknowledged + 10)
            stop.set()
            await running
    finally:
        authority_files.stop()


async def test_listeners_evict_only_the_changed_key_of_the_right_namespace(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    evicted: list[tuple[str, str]] = []
    async with Follower(authority.url, authority.log_verifier, tmp_path / "s.db") as follower:
        await follower.sync()
        cache: GuardedCache[str] = GuardedCache(
            Guard(follower.state), on_evict=lambda key, _: evicted.append(key)
        )
        follower.add_listener(cache.on_advance)
        for tool in (TOOL, "tool:org.other/search"):
            for version in ("1.0.0", "2.0.0"):
                cache.put(tool, version, "definition")
        await revoke(http, authority.url, publisher, 1)
        await follower.sync()
    assert evicted == [(TOOL, "1.0.0")]


# -- a hostile push stream ------------------------------------------------------------


@pytest.fixture
async def forger(tmp_path: Path) -> AsyncIterator[tuple[str, LocalLog, list[str], list[bytes]]]:
    """A server whose reads are an honest log's and whose push stream says what tests want."""
    local = LocalLog(tmp_path)
    requests: list[str] = []
    pushes: list[bytes] = []

    async def checkpoint(request: web.Request) -> web.Response:
        requests.append(request.path)
        assert local.log.published is not None
        return web.Response(body=local.log.published.note)

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for note in pushes:
            await response.write(sse_event(note))
        await asyncio.sleep(2)
        return response

    async def other(request: web.Request) -> web.Response:
        requests.append(request.path)
        return web.json_response({"error": "not_found"}, status=404)

    app = web.Application()
    app.router.add_get("/checkpoint", checkpoint)
    app.router.add_get("/v1/checkpoints/stream", stream)
    app.router.add_get("/{tail:.*}", other)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", local, requests, pushes
    await runner.cleanup()


async def test_forged_and_stale_pushes_change_nothing(
    forger: tuple[str, LocalLog, list[str], list[bytes]], tmp_path: Path
) -> None:
    url, local, requests, pushes = forger
    assert local.log.published is not None
    stale = local.log.published.note
    local.publish()
    assert local.log.published is not None
    impostor = Signer.generate(ORIGIN)
    forged = sign_checkpoint(Checkpoint(ORIGIN, 99, b"\x07" * 32), impostor)
    async with Follower(url, local.signer.verifier(), tmp_path / "s.db") as follower:
        # Trust the honest size-2 checkpoint first, fed directly: the forger serves no proofs.
        candidate = follower.trust.check_checkpoint(local.log.published.note)
        with follower.trust.advance(candidate) as session:
            session.add(local.log.tree.leaf_data(0, 2))
            session.finish()
        before = (follower.state.size, follower.state.root)
        pushes.extend([stale, forged])
        requests.clear()
        stop = asyncio.Event()
        listening = asyncio.create_task(follower.listen(stop))
        await asyncio.sleep(0.5)
        stop.set()
        listening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await listening
        assert (follower.state.size, follower.state.root) == before
        assert requests == []  # neither push made the follower fetch anything
