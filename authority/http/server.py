"""The authority's HTTP API: thin aiohttp handlers over the publication and the readers.

Every refusal is ``{"error": "<stable code>"}`` with the status ``status.py`` gives it, and
echoes no submitted value. Storage and proof work runs on threads, never on the event loop:
appends on the sequencer's writer thread, reads on the reader threads (``ReaderPool``).
What is served, and when, is the publication's (``publication.py``): the handlers here
parse, bound and answer.

Rules, cited by name:

* **Tiles.** ``GET /tile/...`` serves the tiles directory's files with the headers a cache
  needs: entry bundles as static files, hash tiles (8 KiB at most) from their bytes read
  off the loop, the latest ``HELD_TILES`` of them kept in memory (tiles never change).
  On a shared database (``Database.shared``) tiles are read from the database, at sizes
  up to the served checkpoint's. A tile from bytes has a digest of them as ETag (the
  same on every process), and ``If-None-Match`` answered 304.
* **Health.** ``/healthz``: 200 ``ok``; 503 ``degraded`` with the ``reasons`` of
  ``Publication.health``, and in both what the process can still do (``can``,
  ``Publication.abilities``); 503 ``storage_corrupt`` once the background storage audit found a
  problem (appends are refused from then on). Entries of the log that fail validation are
  reported beside the status (``invalid_entries``): the log serves on.
* **Pages.** ``GET /v1/entries`` answers as many entries as fit in ``--max-page-mb`` (at
  least one; a follower asks again from the next), built on a reader thread, and written in
  slices that the client must read within ``--write-timeout`` or be disconnected; at most
  ``PAGES_IN_FLIGHT`` pages at once, ``PAGES_PER_ADDRESS`` for one client address, whose
  pages wait for its share of ``--entries-mb-per-address`` (a page's worth of bytes is
  taken before it is built, and what it did not use given back).
* **Compression.** A proof's answer (inclusion, consistency, map) over ``COMPRESS_ABOVE``
  bytes is compressed when the client accepts it; clients bound its decoded bytes.
* **Stop.** ``stop`` runs every shutdown step, the publication's included, even when one
  fails.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import hdrs, web
from prometheus_client import CollectorRegistry

from deplog.authority import collectors
from deplog.authority.explorer.config import ExplorerConfig
from deplog.authority.explorer.routes import add_explorer
from deplog.authority.http.limits import Rate, RateLimitedError, RateLimiter
from deplog.authority.http.metrics import Metrics
from deplog.authority.http.plumbing import (
    METRICS,
    HTTPRequestError,
    RequestError,
    errors_and_metrics,
    query_param,
)
from deplog.authority.http.push import PushHub
from deplog.authority.log import Log
from deplog.authority.options import MEBIBYTES, option
from deplog.authority.publication import MAP_PROOF_WAIT, Publication
from deplog.authority.sequencer import SequencerLimits
from deplog.authority.storage import audit
from deplog.authority.storage.backends import open_database
from deplog.authority.storage.errors import IntegrityError
from deplog.authority.storage.reader import MAX_NOTICES_PAGE, ReaderPool
from deplog.authority.supervise import Supervisor
from deplog.authority.tiles import TilesDirectory, served_tile
from deplog.authority.witnessing import Witnessing
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.map.proof import MapProofDocument
from deplog.client.model import canonical
from deplog.client.model.entries import PublisherStatement
from deplog.client.model.notice import MAX_ENVELOPE_BYTES, Envelope, parse_tool_id
from deplog.client.tlog.note import Signer
from deplog.client.tlog.tiles import TILE_HEIGHT, TILE_WIDTH, EntryTile, HashTile, parse_tile_path

log = logging.getLogger("deplog.authority")

MAX_ENTRIES_PER_REQUEST = 1000
MAX_INT = (1 << 63) - 1
_JSON = "application/json"
TILES_DIR = "tiles"
"""The tiles directory's name in the data directory, unless ``--tiles-dir`` says otherwise."""
TILE_CACHE = "public, max-age=31536000, immutable"
"""A tile, full or partial, never changes, so caches keep it for a year."""
HELD_TILES = 256
"""Hash tiles the authority keeps in memory once served (2 MiB at most): they never change."""
PAGES_IN_FLIGHT = 32
"""Entries pages built or being written at once (*Pages*); more wait."""
PAGES_PER_ADDRESS = 4
"""Entries pages one client address has in flight at most; more is ``429 rate_limited``."""
COMPRESS_ABOVE = 512
"""Bytes over which a proof's answer is compressed: a shorter one saves less than the header."""
_WRITE_SLICE = 64 * 1024
_TILE_TYPE = "application/octet-stream"
_MAP_PROOF_BINARY = "application/octet-stream"
"""The media type of the binary map proof (docs/fold-spec.md section 6)."""


@dataclass(frozen=True)
class ServerConfig:
    """Where the log lives and how much the server accepts."""

    db_path: Path
    origin: str
    db_url: str | None = None
    """A PostgreSQL database holding the log instead of ``db_path`` (``--db``)."""
    max_body: int = MAX_ENVELOPE_BYTES
    max_entries: int = MAX_ENTRIES_PER_REQUEST
    reader_threads: int = 2
    max_db_bytes: int | None = option(
        None,
        "database size quota in MiB; past it appends get 503 storage_unavailable",
        flag="--max-db-mb",
        units=MEBIBYTES,
    )
    refresh_interval: float = option(
        10.0, "seconds between re-cosignings of the current checkpoint", flag="--witness-refresh"
    )
    address_rate: Rate = option(
        Rate(2000, 4000),
        "submissions a second from one client address, RATE[/BURST], 0 = no limit",
        flag="--rate-per-address",
        parse=Rate.parse,
    )
    publisher_rate: Rate = option(
        Rate(500, 1000),
        "accepted notices a second per publisher, RATE[/BURST], 0 = no limit",
        flag="--rate-per-publisher",
        parse=Rate.parse,
    )
    body_timeout: float = option(
        10.0, "seconds a client has to send a request body", note="then 408"
    )
    max_subscribers: int = option(10_000, "live checkpoint push streams at most", note="then 503")
    max_subscribers_per_address: int = option(
        100, "live checkpoint push streams from one client address at most", note="then 503"
    )
    max_page_bytes: int = option(
        4 * 1024 * 1024,
        "bytes of base64 entries in one GET /v1/entries answer (at least one entry)",
        flag="--max-page-mb",
        units=MEBIBYTES,
    )
    write_timeout: float = option(
        30.0, "seconds a client has to read one GET /v1/entries answer", note="then closed"
    )
    page_rate: int = option(
        16 * 1024 * 1024,
        "bytes of GET /v1/entries answers a second to one client address, 0 = no limit",
        flag="--entries-mb-per-address",
        units=MEBIBYTES,
        note="then pages wait",
    )
    tiles: bool = option(True, "write the C2SP tlog-tiles directory and serve GET /tile/...")
    tiles_dir: Path | None = option(
        None,
        "the tiles directory (publish it with nginx, rsync, a CDN)",
        parse=Path,
        note="<data>/tiles",
    )
    map_proof_wait: float = option(
        MAP_PROOF_WAIT,
        "seconds a map proof waits for the publication of the batch the map is at",
        note="then 503 map_not_published",
    )
    limits: SequencerLimits = field(default_factory=SequencerLimits)
    explorer: ExplorerConfig = field(default_factory=ExplorerConfig)

    @property
    def database(self) -> Path | str:
        """The log's database: the PostgreSQL URL if there is one, else the SQLite file."""
        return self.db_url if self.db_url is not None else self.db_path

    @property
    def tiles_path(self) -> Path | None:
        """Where the tiles directory is, or None when tiles are off or come from the database."""
        if not self.tiles or open_database(self.database).shared:
            return None
        return self.tiles_dir if self.tiles_dir is not None else self.db_path.parent / TILES_DIR


def error_response(err: DeplogError, status: int) -> web.Response:
    """A refusal as the API answers it: its stable code as JSON, with its status."""
    return web.json_response({"error": err.code}, status=status)


class _AuthorityState:
    """What the handlers share, made once the log is open."""

    def __init__(
        self,
        config: ServerConfig,
        log: Log,
        witnessing: Callable[[Publication], Witnessing] | None = None,
        tiles: TilesDirectory | None = None,
    ) -> None:
        self.config = config
        self.database = log.db
        self.tiles_root = config.tiles_path
        self.supervisor = Supervisor()
        self.readers = ReaderPool(log.db, config.reader_threads)
        self.push = PushHub(config.max_subscribers, config.max_subscribers_per_address)
        self.publication = Publication(
            log,
            self.readers,
            self.supervisor,
            limits=config.limits,
            witnessing=witnessing,
            tiles=tiles,
            cluster=log.db.cluster(),
            refresh_interval=config.refresh_interval,
            map_proof_wait=config.map_proof_wait,
            on_note=self.push.publish,
        )
        self.sequencer = self.publication.sequencer
        self.checkpoint_requests = 0
        self.pages = asyncio.Semaphore(PAGES_IN_FLIGHT)
        self.pages_by_address: Counter[str] = Counter()
        self.address_limit = RateLimiter(config.address_rate, ErrorCode.RATE_LIMITED)
        burst = max(2 * config.page_rate, config.max_page_bytes)
        self.page_budget = RateLimiter(Rate(config.page_rate, burst), ErrorCode.RATE_LIMITED)
        self.publisher_limit = RateLimiter(config.publisher_rate, ErrorCode.PUBLISHER_RATE_LIMITED)
        self.corrupt: str | None = None
        """The storage audit's finding: appends are refused and ``/healthz`` fails."""
        self.held_tiles: dict[EntryTile | HashTile, tuple[bytes, str]] = {}
        """The latest hash tiles served, with their ETags, oldest first (*Tiles*)."""

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """What this module counts, then each part's own."""
        collectors.counter(
            registry,
            "deplog_checkpoint_requests_total",
            "GET /checkpoint requests served (not in the request histograms: a hot path).",
            lambda: float(self.checkpoint_requests),
        )
        self.publication.register_metrics(registry)
        self.push.register_metrics(registry)
        self.supervisor.register_metrics(registry)

    async def start(self) -> None:
        await self.publication.start()
        self.supervisor.spawn("storage_audit", self._audit_storage)
        self.supervisor.spawn("push_keep_alive", self.push.keep_alive)

    async def _audit_storage(self) -> None:
        problem = await audit.audit_in_process(self.database)
        if problem is not None:
            log.error("storage audit failed: %s; refusing appends", problem)
            self.corrupt = problem

    async def stop(self) -> None:
        """Every step runs, in order, even when an earlier one failed (*Stop*)."""
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("push streams", self.push.close),
            ("background tasks", self.supervisor.stop),
            *self.publication.stop_steps(),
            ("readers", self.readers.close),
        ]
        for name, step in steps:
            try:
                result = step()
                if asyncio.iscoroutine(result):
                    await result
            except Exception as err:
                log.error("stopping the %s failed: %s", name, type(err).__name__)


_STATE = web.AppKey("state", _AuthorityState)


def _int_param(request: web.Request, name: str) -> int:
    """The query parameter ``name`` as a canonical decimal."""
    raw = query_param(request, name)
    if raw is None or not raw.isascii() or not raw.isdigit() or len(raw) > 19:
        raise RequestError(ErrorCode.BAD_PARAMETER, "missing or malformed integer parameter")
    if len(raw) > 1 and raw[0] == "0":
        raise RequestError(ErrorCode.BAD_PARAMETER, "integer parameter has leading zeros")
    value = int(raw)
    if value > MAX_INT:
        raise RequestError(ErrorCode.BAD_PARAMETER, "integer parameter too large")
    return value


async def _post_notice(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    if state.corrupt is not None:
        raise IntegrityError()
    state.address_limit.take(request.remote or "unknown")
    if request.content_type != _JSON:
        raise HTTPRequestError(ErrorCode.UNSUPPORTED_MEDIA_TYPE)
    try:
        body = await asyncio.wait_for(request.read(), state.config.body_timeout)
    except TimeoutError:
        raise HTTPRequestError(ErrorCode.REQUEST_TIMEOUT) from None
    envelope = Envelope.parse(body)
    # Checked before and charged after sequencing: only accepted notices use up a
    # publisher's budget, so forged envelopes naming it cannot lock it out.
    state.publisher_limit.check(envelope.notice.publisher)
    result = await state.sequencer.submit(envelope)
    if result.created:
        state.publisher_limit.charge(envelope.notice.publisher)
    return web.Response(
        body=result.receipt,
        status=201 if result.created else 200,
        content_type="text/plain",
        charset="utf-8",
        headers={"Deplog-Index": str(result.index)},
    )


async def _get_checkpoint(request: web.Request) -> web.Response:
    """The served checkpoint: prepared bytes, counted here, not by the middleware."""
    state = request.app[_STATE]
    state.checkpoint_requests += 1
    return web.Response(
        body=state.publication.note,
        content_type="text/plain",
        charset="utf-8",
        headers={"Cache-Control": "no-cache"},
    )


async def _get_tile(request: web.Request) -> web.StreamResponse:
    """A tile by its one canonical path (*Tiles*): no request names another file."""
    state = request.app[_STATE]
    root = state.tiles_root
    tile = parse_tile_path("tile/" + request.match_info["path"])
    shared = state.database.shared and state.config.tiles
    if shared and _tile_leaves(tile) > state.publication.checkpoint.size:
        raise HTTPRequestError(ErrorCode.NOT_FOUND)
    if (held := state.held_tiles.get(tile)) is not None:
        body, etag = held
    elif shared:
        body = await state.readers.read(lambda r: served_tile(r.conn, tile))
    elif root is None:
        raise HTTPRequestError(ErrorCode.NOT_FOUND)
    elif isinstance(tile, EntryTile):  # up to 16 MiB: sent from the file, never held
        if not (path := root / tile.path).is_file():
            raise HTTPRequestError(ErrorCode.NOT_FOUND)
        return web.FileResponse(
            path, headers={hdrs.CACHE_CONTROL: TILE_CACHE, hdrs.CONTENT_TYPE: _TILE_TYPE}
        )
    else:  # 8 KiB at most: one read off the loop costs less than the file response's steps
        read = (root / tile.path).read_bytes
        try:
            body = await asyncio.get_running_loop().run_in_executor(None, read)
        except (FileNotFoundError, IsADirectoryError):
            raise HTTPRequestError(ErrorCode.NOT_FOUND) from None
    if held is None:
        etag = hashlib.sha256(body).hexdigest()[:32]
        if isinstance(tile, HashTile):
            state.held_tiles[tile] = body, etag
            while len(state.held_tiles) > HELD_TILES:
                del state.held_tiles[next(iter(state.held_tiles))]
    if any(match.value in (etag, "*") for match in request.if_none_match or ()):
        response = web.Response(status=304, headers={hdrs.CACHE_CONTROL: TILE_CACHE})
    else:
        response = web.Response(
            body=body, headers={hdrs.CACHE_CONTROL: TILE_CACHE, hdrs.CONTENT_TYPE: _TILE_TYPE}
        )
    response.etag = etag
    return response


def _tile_leaves(tile: EntryTile | HashTile) -> int:
    """The size of the smallest tree that has ``tile``."""
    if isinstance(tile, EntryTile):
        return tile.leaf_indices.stop
    return (tile.index * TILE_WIDTH + tile.width) << (TILE_HEIGHT * tile.level)


def _published(state: _AuthorityState, size: int) -> None:
    if size > state.publication.checkpoint.size:
        raise RequestError(ErrorCode.SIZE_NOT_PUBLISHED, "no published checkpoint has that size")


async def _get_inclusion(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    index, size = _int_param(request, "index"), _int_param(request, "size")
    if index >= size:
        raise RequestError(ErrorCode.OUT_OF_RANGE, "index must be below size")
    _published(state, size)
    proof = await state.readers.read(lambda r: r.inclusion(index, size))
    return _compressed(web.json_response(proof.to_json()))


async def _get_consistency(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    old, new = _int_param(request, "old"), _int_param(request, "new")
    if old > new:
        raise RequestError(ErrorCode.OUT_OF_RANGE, "old must not exceed new")
    _published(state, new)
    proof = await state.readers.read(lambda r: r.consistency(old, new))
    return _compressed(web.json_response(proof.to_json()))


async def _get_entries(request: web.Request) -> web.StreamResponse:
    state = request.app[_STATE]
    start, end = _int_param(request, "start"), _int_param(request, "end")
    # The checks that need no state first: a range is refused the same way at any log size.
    if start >= end:
        raise RequestError(ErrorCode.OUT_OF_RANGE, "start must be below end")
    if end - start > state.config.max_entries:
        raise RequestError(ErrorCode.RANGE_TOO_LARGE, "too many entries in one request")
    if end > max(state.publication.checkpoint.size, state.publication.entries_size):
        raise RequestError(ErrorCode.SIZE_NOT_PUBLISHED, "range goes past the signed checkpoints")
    address = request.remote or "unknown"
    if state.pages_by_address[address] >= PAGES_PER_ADDRESS:
        raise RateLimitedError(ErrorCode.RATE_LIMITED, 1)
    state.pages_by_address[address] += 1
    budget, need = state.page_budget, state.config.max_page_bytes
    try:
        while (delay := budget.delay(address, need)) > 0:
            await asyncio.sleep(delay)
        budget.charge(address, need)
        async with state.pages:
            page = await state.readers.read(
                lambda r: r.entries_page(start, end, state.config.max_page_bytes)
            )
            budget.charge(address, len(page) - need)
            return await _send(request, page, state.config.write_timeout)
    finally:
        state.pages_by_address[address] -= 1
        if not state.pages_by_address[address]:
            del state.pages_by_address[address]


async def _send(request: web.Request, body: bytes, timeout: float) -> web.StreamResponse:
    """``body`` written a slice at a time, all within ``timeout`` (*Pages*); a client that
    does not read it in time is disconnected."""
    response = web.StreamResponse(headers={hdrs.CONTENT_TYPE: _JSON})
    response.content_length = len(body)
    try:
        async with asyncio.timeout(timeout):
            await response.prepare(request)
            view = memoryview(body)
            for offset in range(0, len(body), _WRITE_SLICE):
                await response.write(view[offset : offset + _WRITE_SLICE])
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()
        raise ConnectionResetError("the client did not read its page in time") from None
    return response


async def _get_tool(request: web.Request) -> web.Response:
    """A tool's status table at the served checkpoint, folded from its map record there,
    with one page of its notices (``?after=INDEX&limit=N``)."""
    state = request.app[_STATE]
    tool_id = request.match_info["tool_id"]
    parse_tool_id(tool_id)
    after = _int_param(request, "after") if "after" in request.query else -1
    limit = _int_param(request, "limit") if "limit" in request.query else MAX_NOTICES_PAGE
    if not 0 < limit <= MAX_NOTICES_PAGE:
        raise RequestError(ErrorCode.BAD_PARAMETER, f"limit is 1 to {MAX_NOTICES_PAGE}")
    _, proof = await state.publication.map_proof(tool_id)
    size = state.publication.checkpoint.size  # map_proof returns at the served size
    now = datetime.now(UTC)
    table = await state.readers.read(
        lambda r: r.tool(tool_id, size, now, proof.record, after, limit)
    )
    return web.json_response(table)


async def _get_tool_proof(request: web.Request) -> web.Response:
    """A tool's map proof at the served checkpoint, as JSON or binary."""
    state = request.app[_STATE]
    tool_id = request.match_info["tool_id"]
    parse_tool_id(tool_id)
    wanted = query_param(request, "format")
    if wanted not in (None, "json", "binary"):
        raise RequestError(ErrorCode.BAD_PARAMETER, "format is json or binary")
    if wanted is None:
        binary = request.headers.get(hdrs.ACCEPT, "").strip() == _MAP_PROOF_BINARY
    else:
        binary = wanted == "binary"
    note, proof = await state.publication.map_proof(tool_id)
    headers = {"Deplog-Checkpoint-Size": str(state.publication.checkpoint.size)}
    if binary:
        body, content_type = proof.to_binary(), _MAP_PROOF_BINARY
    else:
        body, content_type = MapProofDocument(note, tool_id, proof).encode(), _JSON
    return _compressed(web.Response(body=body, content_type=content_type, headers=headers))


def _compressed(response: web.Response) -> web.Response:
    """``response``, compressed if it is a long one (*Compression*); caches keep each coding."""
    if (response.content_length or 0) > COMPRESS_ABOVE:
        response.headers[hdrs.VARY] = hdrs.ACCEPT_ENCODING
        response.enable_compression()
    return response


async def _get_publishers(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    return web.json_response(await state.readers.read(lambda r: r.publishers()))


async def _get_checkpoint_stream(request: web.Request) -> web.StreamResponse:
    return await request.app[_STATE].push.stream(request)


async def _get_healthz(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    if state.corrupt is not None:
        return web.json_response(
            {"status": "storage_corrupt", "problem": state.corrupt}, status=503
        )
    report: dict[str, object] = {
        "status": "ok",
        "size": state.publication.checkpoint.size,
        "pending": state.sequencer.pending,
    }
    invalid, first = state.sequencer.log.invalid_entries
    if invalid:
        report["invalid_entries"] = {"count": invalid, "first": [e.to_json() for e in first]}
    reasons = state.publication.health(time.time())
    report["can"] = state.publication.abilities(reasons)
    if reasons:
        report.update(status="degraded", reasons=reasons)
        return web.json_response(report, status=503)
    return web.json_response(report)


async def _get_metrics(request: web.Request) -> web.Response:
    """Scraped on the event loop: the callbacks read state that only the loop changes."""
    body, content_type = request.app[METRICS].exposition(request.headers.get(hdrs.ACCEPT, ""))
    return web.Response(body=body, headers={hdrs.CONTENT_TYPE: content_type})


async def _post_admin_publisher(request: web.Request) -> web.Response:
    """Admin-only (served on the Unix socket): append a publisher statement."""
    state = request.app[_STATE]
    statement = PublisherStatement.from_json(canonical.loads(await request.read()))
    index = await state.sequencer.append_publisher(statement)
    return web.json_response({"index": index}, status=201)


def _open_log(config: ServerConfig, signer: Signer) -> tuple[Log, TilesDirectory | None]:
    opened = Log(config.database, signer, config.origin, max_bytes=config.max_db_bytes)
    opened.warm_map()
    if config.tiles_path is None:
        return opened, None
    try:
        tiles = TilesDirectory.open(config.tiles_path, opened)
    except BaseException:
        opened.close()
        raise
    return opened, tiles


def build_app(
    config: ServerConfig,
    signer: Signer,
    witnessing: Callable[[Publication], Witnessing] | None = None,
) -> web.Application:
    """The public application; the log opens on startup and closes on cleanup."""
    app = web.Application(
        client_max_size=config.max_body,
        middlewares=[errors_and_metrics(error_response, [_get_checkpoint])],
    )
    metrics = Metrics()
    app[METRICS] = metrics

    async def open_log(app: web.Application) -> None:
        loop = asyncio.get_running_loop()
        log, tiles = await loop.run_in_executor(None, lambda: _open_log(config, signer))
        state = _AuthorityState(config, log, witnessing, tiles)
        try:
            await state.start()
        except BaseException:  # a failed start leaves nothing running behind its one line
            await state.stop()
            raise
        app[_STATE] = state
        state.register_metrics(metrics.registry)

    async def close_log(app: web.Application) -> None:
        await app[_STATE].stop()

    async def end_streams(app: web.Application) -> None:
        app[_STATE].push.close()  # before shutdown waits for handlers: streams end now

    app.on_startup.append(open_log)
    app.on_shutdown.append(end_streams)
    app.on_cleanup.append(close_log)
    app.router.add_post("/v1/notices", _post_notice)
    app.router.add_get("/checkpoint", _get_checkpoint)
    app.router.add_get("/tile/{path:.+}", _get_tile)
    app.router.add_get("/v1/proofs/inclusion", _get_inclusion)
    app.router.add_get("/v1/proofs/consistency", _get_consistency)
    app.router.add_get("/v1/entries", _get_entries)
    # A tool id has exactly one "/", so ".../proof" after one is a proof, and a tool
    # named "proof" (tool:org.example/proof) still reaches the catch-all below.
    app.router.add_get("/v1/tools/{tool_id:[^/]+/[^/]+}/proof", _get_tool_proof)
    app.router.add_get("/v1/tools/{tool_id:.+}", _get_tool)
    app.router.add_get("/v1/publishers", _get_publishers)
    app.router.add_get("/v1/checkpoints/stream", _get_checkpoint_stream)
    app.router.add_get("/healthz", _get_healthz)
    app.router.add_get("/metrics", _get_metrics)
    add_explorer(
        app,
        lambda: app[_STATE].publication,
        config.explorer,
        signer.verifier(),
        config.address_rate,
    )
    return app


def build_admin_app(public: web.Application) -> web.Application:
    """The operator's app, served only on a 0600 Unix socket beside the database."""
    admin = web.Application(
        client_max_size=16 * 1024, middlewares=[errors_and_metrics(error_response)]
    )
    admin[METRICS] = Metrics()

    async def share_state(app: web.Application) -> None:
        app[_STATE] = public[_STATE]

    admin.on_startup.append(share_state)
    admin.router.add_post("/admin/publishers", _post_admin_publisher)
    return admin
