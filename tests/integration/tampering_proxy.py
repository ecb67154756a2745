"""A tampering proxy: a real aiohttp process between a light verifier and an authority.

``python -m tests.integration.tampering_proxy UPSTREAM --port PORT`` passes every GET through,
except what its mode alters; ``POST /_tamper?mode=MODE`` (body: a note for ``note``)
sets it. Modes: ``honest``; ``proof`` (a map proof's last byte, a sibling), ``record``
(the last byte of a map proof's record), ``map_line`` (one character of the checkpoint's
``deplog-map/v1`` line), ``consistency`` (a consistency proof's first hash), ``note``
(``/checkpoint`` answers the posted note: a rollback, a fork, a stale one).
"""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp
from aiohttp import web

from deplog.client.tlog.note import encode_base64

_KEPT_HEADERS = ("Content-Type", "Deplog-Checkpoint-Size")


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]


def tampered(mode: str, path: str, body: bytes) -> bytes:
    """``body`` as ``mode`` alters the answer to ``path``."""
    if path.endswith("/proof") and mode == "proof":
        return _flip(body, len(body) - 1)
    if path.endswith("/proof") and mode == "record":
        return _flip(body, 6 + int.from_bytes(body[2:6], "big") - 1)
    if path == "/checkpoint" and mode == "map_line":
        at = body.index(b"deplog-map/v1 ") + len(b"deplog-map/v1 ")
        return body[:at] + (b"B" if body[at : at + 1] == b"A" else b"A") + body[at + 1 :]
    if path == "/v1/proofs/consistency" and mode == "consistency":
        proof = json.loads(body)
        proof["proof"][0] = encode_base64(bytes(32))
        return json.dumps(proof).encode()
    return body


def build(upstream: str) -> web.Application:
    mode = {"name": "honest", "note": b""}

    async def set_mode(request: web.Request) -> web.Response:
        mode["name"], mode["note"] = request.query["mode"], await request.read()
        return web.Response(text="ok\n")

    async def forward(request: web.Request) -> web.Response:
        if mode["name"] == "note" and request.path == "/checkpoint":
            return web.Response(body=mode["note"], content_type="text/plain")
        async with (
            aiohttp.ClientSession() as session,
            session.get(upstream + request.path_qs, allow_redirects=False) as answer,
        ):
            body = await answer.read()
            headers = {h: answer.headers[h] for h in _KEPT_HEADERS if h in answer.headers}
            status = answer.status
        if status == 200:
            body = tampered(str(mode["name"]), request.path, body)
        return web.Response(body=body, status=status, headers=headers)

    app = web.Application()
    app.router.add_post("/_tamper", set_mode)
    app.router.add_get("/{path:.*}", forward)
    return app


async def serve(upstream: str, port: int) -> None:
    """Serve until killed, saying where once listening (as ``ServiceProcess`` waits for)."""
    runner = web.AppRunner(build(upstream))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"serving on http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    assert sys.argv[2] == "--port"
    asyncio.run(serve(sys.argv[1].rstrip("/"), int(sys.argv[3])))
