"""A tiles directory served by a real aiohttp static server, and a tampering proxy before it.

``static_server`` serves a directory's files at their paths on 127.0.0.1 (404
for a missing one), as nginx or a CDN origin would. ``TamperingProxy`` forwards
every GET to such a server and relays the answer, except where a test scripts
it: ``rewrite`` maps a path's body to the bytes actually sent (a corrupt or
stale tile), ``raw`` replaces a path's whole response (``Raw``: a 404, an
oversized or stalled body), ``redirect`` answers a path with a 302 to a
location, ``stall`` delays a path's answer by seconds. ``requests`` lists every path asked for.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import aiohttp
from aiohttp import web

from tests.integration.scripted_authority import Raw

_T = TypeVar("_T")


@asynccontextmanager
async def _serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def static_server(directory: Path) -> AsyncIterator[str]:
    """Serve ``directory`` as static files until the block ends; yields its base URL."""
    app = web.Application()
    app.router.add_static("/", directory)
    async with _serving(app) as url:
        yield url


@dataclass
class TamperingProxy:
    """The script of a proxy in front of ``upstream``; a test changes it between requests."""

    upstream: str
    rewrite: dict[str, Callable[[bytes], bytes]] = field(default_factory=dict)
    raw: dict[str, Raw] = field(default_factory=dict)
    stall: dict[str, float] = field(default_factory=dict)
    redirect: dict[str, str] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    url: str = ""

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        self.requests.append(path)
        await asyncio.sleep(self.stall.get(path, 0.0))
        if (location := self.redirect.get(path)) is not None:
            raise web.HTTPFound(location)
        if (raw := self.raw.get(path)) is not None:
            return await raw.respond(request)
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{self.upstream}/{path}") as answer,
        ):
            body = await answer.read()
            status = answer.status
        if status == 200 and path in self.rewrite:
            body = self.rewrite[path](body)
        return web.Response(status=status, body=body)


@asynccontextmanager
async def tampering_proxy(upstream: str) -> AsyncIterator[TamperingProxy]:
    """A ``TamperingProxy`` before ``upstream`` on a free port (its ``url``)."""
    proxy = TamperingProxy(upstream)
    app = web.Application()
    app.router.add_get("/{path:.+}", proxy._forward)
    async with _serving(app) as url:
        proxy.url = url
        yield proxy


@contextmanager
def in_thread(opened: AbstractAsyncContextManager[_T]) -> Iterator[_T]:
    """Enter ``opened`` (a server) on an event loop of its own thread, for blocking callers
    such as the ``deplog`` command line, which runs its own loop."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        value = asyncio.run_coroutine_threadsafe(opened.__aenter__(), loop).result(30)
        try:
            yield value
        finally:
            asyncio.run_coroutine_threadsafe(opened.__aexit__(None, None, None), loop).result(30)
            asyncio.run_coroutine_threadsafe(_cancel_the_rest(), loop).result(30)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


async def _cancel_the_rest() -> None:
    """End requests still held open (a stalled answer) before the loop stops."""
    rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
