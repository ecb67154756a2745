"""A real aiohttp server on 127.0.0.1 that redirects before an upstream, for the redirect rule.

``Redirector`` answers a request whose path and query are in ``redirects``
with that status and ``Location``; with ``move_to`` set, every other request
not yet under ``/moved`` is redirected to ``move_to`` plus its path and query
(``/moved`` on the same server: a log moved within its origin; another
server's URL: a log moved to another origin). Anything else is relayed to
``upstream``, method and body included, with ``/moved`` taken off its path.
``requests`` lists every (method, path and query) asked, ``bodies`` what each
carried. Each server is its own origin: two of them on two ports are two
origins, as ``localhost`` and ``127.0.0.1`` are two hosts.

``https_contexts`` makes a self-signed certificate for 127.0.0.1 with the
``openssl`` command (skipped without it, saying so; under ``CI=true`` it fails
instead, as ``.ci/run`` installs it), so a redirector can serve https and a
client trust it.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

MOVED = "/moved"


@dataclass
class Redirector:
    """The script of a redirecting server before ``upstream``; a test changes it at will."""

    upstream: str
    redirects: dict[str, tuple[int, str]] = field(default_factory=dict)
    move_to: str | None = None
    move_status: int = 302
    requests: list[tuple[str, str]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    url: str = ""

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        target = request.path_qs
        body = await request.read()
        self.requests.append((request.method, target))
        self.bodies.append(body)
        if (scripted := self.redirects.get(target)) is not None:
            status, location = scripted
            return web.Response(status=status, headers={"Location": location})
        if self.move_to is not None and not target.startswith(MOVED + "/"):
            location = self.move_to + target
            return web.Response(status=self.move_status, headers={"Location": location})
        headers = {"Content-Type": request.content_type} if body else {}
        async with (
            aiohttp.ClientSession() as http,
            http.request(
                request.method,
                self.upstream + target.removeprefix(MOVED),
                data=body or None,
                headers=headers,
                allow_redirects=False,
            ) as answer,
        ):
            relayed = await answer.read()
            return web.Response(
                status=answer.status,
                body=relayed,
                headers={"Content-Type": answer.headers.get("Content-Type", "text/plain")},
            )


@asynccontextmanager
async def redirector(
    upstream: str, *, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None
) -> AsyncIterator[Redirector]:
    """A ``Redirector`` before ``upstream`` on a free port of 127.0.0.1; its ``url`` names
    it by ``host`` (``localhost`` is another host than ``127.0.0.1``), https with ``tls``."""
    script = Redirector(upstream)
    app = web.Application()
    app.router.add_route("*", "/{path:.*}", script._answer)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = runner.addresses[0][1]
    script.url = f"{'https' if tls else 'http'}://{host}:{port}"
    try:
        yield script
    finally:
        await runner.cleanup()


@asynccontextmanager
async def echo_server() -> AsyncIterator[str]:
    """A server that answers any request with its method and body (``POST: <body>``)."""

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=request.method.encode() + b": " + await request.read())

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", echo)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def https_contexts(directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) TLS contexts for 127.0.0.1: a fresh self-signed certificate,
    which only the client context trusts."""
    if shutil.which("openssl") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("openssl is required under CI=true (.ci/run installs it)")
        pytest.skip("openssl is not installed: the https redirect tests need it")
    key, cert = directory / "tls.key", directory / "tls.crt"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))
