"""The push hub (``authority/http/push.py``) over real connections: a note is fanned out by
a task of its own, in slices, so whoever published it (a receipt) is not held up by it."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from deplog.authority.http import push
from deplog.authority.http.push import FAN_OUT_SLICE, KEPT_EVENTS, PushHub

STREAMS = 2 * FAN_OUT_SLICE + 10


@pytest.fixture
async def served() -> AsyncIterator[tuple[PushHub, int]]:
    """A hub behind a real aiohttp server on 127.0.0.1."""
    hub = PushHub()
    app = web.Application()
    app.router.add_get("/stream", hub.stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    keep_alive = asyncio.create_task(hub.keep_alive())  # the server's supervisor runs it
    yield hub, port
    keep_alive.cancel()
    hub.close()
    await runner.cleanup()


def pending(sock: socket.socket) -> bytes:
    with contextlib.suppress(BlockingIOError):
        return sock.recv(1 << 16)
    return b""


async def test_publish_returns_before_any_stream_is_written_and_every_one_gets_the_note(
    served: tuple[PushHub, int],
) -> None:
    hub, port = served
    clients = []
    for n in range(STREAMS):
        sock = socket.create_connection(
            ("127.0.0.1", port), source_address=(f"127.0.2.{n // 90 + 1}", 0)
        )
        sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.setblocking(False)
        clients.append(sock)
        await asyncio.sleep(0.001)  # the server accepts it
    try:
        while len(hub.subscribers) < STREAMS:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        for sock in clients:
            pending(sock)  # the response's headers
        hub.publish(b"origin\n1\nroot\n")
        await asyncio.sleep(0)  # one turn of the loop: what a receipt's answer would get
        assert sum(bool(pending(sock)) for sock in clients) < STREAMS
        assert hub._fan_out is not None
        await hub._fan_out
        await asyncio.sleep(0.1)
        assert all(b"data: origin" in pending(sock) for sock in clients)
    finally:
        for sock in clients:
            sock.close()


async def test_notes_faster_than_the_fan_out_reach_a_stream_in_order_the_latest_kept_only(
    served: tuple[PushHub, int],
) -> None:
    hub, port = served
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.setblocking(False)
    try:
        while not hub.subscribers:
            await asyncio.sleep(0.01)
        for n in range(KEPT_EVENTS + 4):  # all before the fan-out task first runs
            hub.publish(b"origin\n%d\nroot\n" % n)
        assert hub._fan_out is not None
        await hub._fan_out
        await asyncio.sleep(0.1)
        numbers = re.findall(rb"data: (\d+)\n", pending(sock))
        assert numbers == [b"%d" % n for n in range(4, KEPT_EVENTS + 4)]
    finally:
        sock.close()


async def test_an_idle_stream_gets_a_keep_alive_comment(
    served: tuple[PushHub, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(push, "KEEPALIVE_SECONDS", 0.05)
    _, port = served
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.setblocking(False)
    try:
        received = b""
        while b": keep-alive\n\n" not in received:
            await asyncio.sleep(0.01)
            received += pending(sock)
    finally:
        sock.close()
