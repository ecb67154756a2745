"""An authority stand-in on 127.0.0.1 whose answers a test scripts.

A real aiohttp application with the authority's read routes (``/checkpoint``,
``/v1/proofs/consistency``, ``/v1/entries``, ``/v1/checkpoints/stream``, one tool's
map proof). By
default the first three answer from a ``LogSource`` in the authority's wire
format, so serving an honest source (an authority ``Log`` read in-process)
makes it an honest authority and serving a ``MemoryLogSource`` over chosen
leaves makes it a lying one. A test can then replace one answer (a
checkpoint, a proof, a rewritten page) or a route's whole response (``Raw``,
the only thing the stream and map proof routes ever serve).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.web import ContentCoding

from deplog.client.follow.source import LogSource, MemoryLogSource
from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import ConsistencyProof, leaf_hash, root_from_leaf_hashes
from tests.builders import unused_port

STREAM = "/v1/checkpoints/stream"
MAP_PROOF_OF = "tool:org.acme/search"
MAP_PROOF = f"/v1/tools/{MAP_PROOF_OF}/proof"


def signed_log(signer: Signer, leaves: list[bytes]) -> MemoryLogSource:
    """A log of the chosen ``leaves`` under a checkpoint ``signer`` signs for its origin.

    With the real log key, a lie the key vouches for: only the follower's
    checks of the leaves themselves can refuse it.
    """
    root = root_from_leaf_hashes([leaf_hash(leaf) for leaf in leaves])
    return MemoryLogSource(
        sign_checkpoint(Checkpoint(signer.name, len(leaves), root), signer), leaves
    )


def unreachable_url() -> str:
    """A URL on 127.0.0.1 where nothing listens."""
    return f"http://127.0.0.1:{unused_port()}"


@dataclass(frozen=True)
class Raw:
    """A whole response served verbatim.

    ``headers`` are added; ``chunked`` leaves out its Content-Length; ``gzip`` encodes it;
    ``declared_length`` announces a
    Content-Length of that many bytes but sends only ``body`` (a client that
    trusts its bound never asks for the rest); ``delay`` stalls before answering.
    """

    body: bytes
    status: int = 200
    chunked: bool = False
    gzip: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    declared_length: int | None = None
    delay: float = 0.0

    async def respond(self, request: web.Request) -> web.StreamResponse:
        """This response, sent to ``request`` after ``delay``."""
        await asyncio.sleep(self.delay)
        if self.declared_length is not None:
            streamed = web.StreamResponse(status=self.status)
            streamed.content_length = self.declared_length
            await streamed.prepare(request)
            await streamed.write(self.body)
            return streamed
        response = web.Response(status=self.status, body=self.body, headers=self.headers)
        if self.chunked:
            response.enable_chunked_encoding()
        if self.gzip:
            response.enable_compression(ContentCoding.gzip)
        return response


@dataclass
class ScriptedAuthority:
    """The script of the routes; a test changes it between requests.

    ``source`` answers by default; ``checkpoint`` and ``proof`` replace its
    answer on one route, ``rewrite_page`` maps each page it serves (start,
    leaves) to the leaves actually sent, and ``raw`` replaces a route's whole
    response. ``requests`` lists the paths asked for, ``ranges`` each
    ``(start, end)`` asked of ``/v1/entries``.
    """

    source: LogSource | None = None
    checkpoint: bytes | None = None
    proof: ConsistencyProof | None = None
    rewrite_page: Callable[[int, list[bytes]], list[bytes]] | None = None
    raw: dict[str, Raw] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    ranges: list[tuple[int, int]] = field(default_factory=list)
    url: str = ""

    def serve(self, source: LogSource) -> None:
        """Answer honestly from ``source`` on every route again."""
        self.source, self.checkpoint, self.proof, self.rewrite_page = source, None, None, None
        self.raw.clear()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/checkpoint", self._checkpoint)
        app.router.add_get("/v1/proofs/consistency", self._consistency)
        app.router.add_get("/v1/entries", self._entries)
        app.router.add_get(STREAM, self._scripted)
        app.router.add_get(MAP_PROOF, self._scripted)
        return app

    def _source(self) -> LogSource:
        assert self.source is not None, "serve() a source first"
        return self.source

    async def _raw(self, request: web.Request) -> web.StreamResponse | None:
        self.requests.append(request.path)
        if request.path not in self.raw:
            return None
        return await self.raw[request.path].respond(request)

    async def _checkpoint(self, request: web.Request) -> web.StreamResponse:
        if (raw := await self._raw(request)) is not None:
            return raw
        note = self.checkpoint if self.checkpoint is not None else await self._source().checkpoint()
        return web.Response(body=note, content_type="text/plain")

    async def _consistency(self, request: web.Request) -> web.StreamResponse:
        if (raw := await self._raw(request)) is not None:
            return raw
        old, new = int(request.query["old"]), int(request.query["new"])
        proof = self.proof or await self._source().consistency(old, new)
        return web.json_response(proof.to_json())

    async def _entries(self, request: web.Request) -> web.StreamResponse:
        start, end = int(request.query["start"]), int(request.query["end"])
        self.ranges.append((start, end))
        if (raw := await self._raw(request)) is not None:
            return raw
        leaves = list(await self._source().entries(start, end))
        if self.rewrite_page is not None:
            leaves = self.rewrite_page(start, leaves)
        encoded = [base64.b64encode(leaf).decode() for leaf in leaves]
        return web.json_response({"start": start, "entries": encoded})

    async def _scripted(self, request: web.Request) -> web.StreamResponse:
        raw = await self._raw(request)
        assert raw is not None, "script this route with raw[path]"
        return raw


@asynccontextmanager
async def running(authority: ScriptedAuthority) -> AsyncIterator[ScriptedAuthority]:
    """Serve ``authority`` on a free port of 127.0.0.1 (its ``url``) until the block ends."""
    runner = web.AppRunner(authority.app(), shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    authority.url = f"http://{host}:{port}"
    try:
        yield authority
    finally:
        await runner.cleanup()
