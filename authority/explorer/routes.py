"""The explorer's routes on the authority's app: thin handlers over ``pages`` and ``render``.

Rules:

1. Read-only: the served checkpoint comes from the publication and everything else
   through its reader threads (``Publication.readers``), where reading and rendering run
   together, never on the writer thread or the event loop.
2. At most ``MAX_RENDERS`` pages are read and rendered at once (rendering holds the
   interpreter lock, which the sequencer's thread needs); cached pages do not wait.
3. Each request takes a token from the explorer's per-address bucket, sized like the
   API's (``--rate-per-address``); past it, 429 with ``Retry-After``.
4. A refusal is an HTML page with the stable code and its ``status.py`` status, never
   echoing the request; a repeated query parameter is refused as the API refuses it;
   any other failure is the ``internal`` page (500), logged.
5. Routes live under the configured prefix: ``/``, ``/search``, ``/tools/<id>``,
   ``/notices/<index>``, ``/publishers``, ``/witnesses``, ``/assets/<file>``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from aiohttp import web

from deplog.authority.explorer import pages
from deplog.authority.explorer.config import ExplorerConfig
from deplog.authority.explorer.render import (
    PageCache,
    Renderer,
    asset_response,
    load_assets,
    page_headers,
)
from deplog.authority.http.limits import Rate, RateLimitedError, RateLimiter
from deplog.authority.http.plumbing import HTTPRequestError, InternalError, query_param
from deplog.authority.http.status import http_status
from deplog.authority.publication import Publication
from deplog.authority.storage.reader import LogReader
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.map.layer import ViewMoved
from deplog.client.map.proof import MapProof
from deplog.client.model.notice import parse_tool_id
from deplog.client.tlog.note import Verifier

MAX_RENDERS = 1
log = logging.getLogger("deplog.authority")

PageBuilder = Callable[[LogReader, pages.Served], dict[str, Any]]


class Explorer:
    """The explorer of one authority app: its renderer, page cache and rate limit."""

    def __init__(
        self,
        config: ExplorerConfig,
        log_key: Verifier,
        publication: Callable[[], Publication],
        address_rate: Rate,
    ) -> None:
        self.config = config
        self.log_key = log_key
        self.publication = publication
        self.assets = load_assets()
        self.renderer = Renderer(config.prefix, self.assets)
        self.cache = PageCache()
        self.limit = RateLimiter(address_rate, ErrorCode.RATE_LIMITED)
        """Rule 3's bucket."""
        self._renders = asyncio.Semaphore(MAX_RENDERS)

    def served(self, publication: Publication) -> pages.Served:
        witnessing = publication.witnessing
        witnesses = () if witnessing is None else witnessing.witnesses
        return pages.Served(
            note=publication.note,
            size=publication.checkpoint.size,
            published_at=publication.published_at,
            log_key=self.log_key,
            witnesses=tuple(w.verifier for w in witnesses),
            policy_quorum=self.config.policy_quorum,
            tree_lines=tuple(w.verifier for w in witnesses if w.tree_lines),
        )

    async def page(
        self, request: web.Request, template: str, build: PageBuilder
    ) -> web.StreamResponse:
        """Rate-limit, then serve the cached render or read and render on a reader thread; a
        context naming a ``redirect`` (a path under the prefix) is answered 302."""
        publication = self.publication()
        try:
            self.limit.take(request.remote or "unknown")
            served = self.served(publication)
            key = (request.host + request.path_qs, served.size)
            cached = self.cache.get(key)
            if cached is None:

                def work(reader: LogReader) -> tuple[int, bytes]:
                    context = build(reader, served)
                    if "redirect" in context:
                        return 302, context["redirect"].encode()
                    context["served"] = {"size": served.size}
                    return 200, self.renderer.render(template, context)

                async with self._renders:
                    cached = await publication.readers.read(work)
                self.cache.put(key, *cached)
        except DeplogError as err:
            return self.error_page(err)
        except Exception:
            log.exception("internal error on explorer page %s", template)
            return self.error_page(InternalError())
        status, body = cached
        if status == 302:
            location = f"{self.config.prefix}/tools/{quote(body.decode(), safe=':/')}"
            return web.Response(status=302, headers=page_headers() | {"Location": location})
        return web.Response(
            body=body, content_type="text/html", charset="utf-8", headers=page_headers()
        )

    def error_page(self, err: DeplogError) -> web.Response:
        """Rule 4: the code and its status, nothing from the request."""
        status = http_status(err.code)
        if status is None:
            err = InternalError()
            status = 500
        size = self.publication().checkpoint.size
        body = self.renderer.render(
            "error.html", {"code": err.code, "status": status, "served": {"size": size}}
        )
        headers = page_headers()
        if isinstance(err, RateLimitedError):
            headers["Retry-After"] = str(err.retry_after)
        return web.Response(
            body=body, status=status, content_type="text/html", charset="utf-8", headers=headers
        )

    async def home(self, request: web.Request) -> web.StreamResponse:
        now, before = time.time(), request.query.get("before")
        return await self.page(
            request, "home.html", lambda r, served: pages.home_page(r, served, now, before)
        )

    async def search(self, request: web.Request) -> web.StreamResponse:
        try:
            query, page = query_param(request, "q"), query_param(request, "page")
        except DeplogError as err:
            return self.error_page(err)
        now, publication = datetime.now(UTC), self.publication()
        stored = publication.sequencer.log.map
        view = stored.view  # as ``Publication.map_proof`` reads it: taken on the loop

        def proof_at(reader: LogReader, tool_id: str) -> MapProof | None:
            try:
                size, proof = reader.map_proof(tool_id, view, lambda: stored.slices != view.slices)
            except ViewMoved:
                return None
            return proof if size == publication.checkpoint.size else None

        return await self.page(
            request,
            "search.html",
            lambda r, served: pages.search_page(r, served, query, page, now, proof_at),
        )

    async def tool(self, request: web.Request) -> web.StreamResponse:
        tool_id = request.match_info["tool_id"]
        now = datetime.now(UTC)
        try:
            query = {k: query_param(request, k) or "" for k in ("page", "after")}
        except DeplogError as err:
            return self.error_page(err)
        query["origin"] = f"{request.scheme}://{request.host}"
        try:
            parse_tool_id(tool_id)
            _, proof = await self.publication().map_proof(tool_id)
        except DeplogError as err:
            return self.error_page(err)
        return await self.page(
            request,
            "tool.html",
            lambda r, served: pages.tool_page(r, served, tool_id, now, proof.record, query),
        )

    async def notice(self, request: web.Request) -> web.StreamResponse:
        raw = request.match_info["index"]
        return await self.page(
            request, "notice.html", lambda r, served: pages.notice_page(r, served, raw)
        )

    async def publishers(self, request: web.Request) -> web.StreamResponse:
        return await self.page(
            request, "publishers.html", lambda r, served: pages.publishers_page(r)
        )

    async def witnesses(self, request: web.Request) -> web.StreamResponse:
        now = time.time()

        def build(_: LogReader, served: pages.Served) -> dict[str, Any]:
            policy = served.policy()
            return {
                "checkpoint": pages.checkpoint_view(served, now),
                "policy": None if policy is None else policy.to_text(),
            }

        return await self.page(request, "witnesses.html", build)

    async def asset(self, request: web.Request) -> web.StreamResponse:
        asset = self.assets.get(request.match_info["name"])
        if asset is None:
            return self.error_page(HTTPRequestError(ErrorCode.NOT_FOUND))
        try:
            return asset_response(asset, query_param(request, "v"))
        except DeplogError as err:
            return self.error_page(err)


def add_explorer(
    app: web.Application,
    publication: Callable[[], Publication],
    config: ExplorerConfig,
    log_key: Verifier,
    address_rate: Rate,
) -> Explorer | None:
    """Register the explorer's routes on ``app`` under ``config.prefix`` (rule 5)."""
    if not config.enabled:
        return None
    explorer = Explorer(config, log_key, publication, address_rate)
    prefix = config.prefix
    router = app.router
    router.add_get(prefix or "/", explorer.home)
    if prefix:
        router.add_get(prefix + "/", explorer.home)
    router.add_get(prefix + "/search", explorer.search)
    router.add_get(prefix + "/tools/{tool_id:.+}", explorer.tool)
    router.add_get(prefix + "/notices/{index}", explorer.notice)
    router.add_get(prefix + "/publishers", explorer.publishers)
    router.add_get(prefix + "/witnesses", explorer.witnesses)
    router.add_get(prefix + "/assets/{name}", explorer.asset)
    return explorer
