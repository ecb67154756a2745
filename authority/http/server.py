"""The authority's HTTP API: thin aiohttp handlers over ``Sequencer`` and ``LogReader``.

Every refusal is ``{"error": "<stable code>"}`` with the status ``status.py``
gives the code (a 4xx, or 503 when the authority cannot take work right now);
no response echoes a submitted value.
Storage and proof work runs on threads, never on the event loop: appends on
the sequencer's single writer thread, reads on a small pool of reader threads.

Publication (``AuthorityState``), one order in one place:

1. The served checkpoint changes only in ``_serve``, called with the
   publication lock held, and never to a smaller size.
2. The served note is rendered only by ``_render``: the served checkpoint with
   the cosignature lines gathered for that very size (``Witnessing.note_for``).
   ``GET /checkpoint`` returns it and every push carries it; a witness's late
   line re-renders it, and a line for another size leaves it as it is.
3. ``publish`` takes the lock, has a larger checkpoint witnessed as
   publication requires, then serves it; a receipt's note is rendered the same
   way for the receipt's own size, and never lacks the embedded cosignature:
   without it the append fails with 503 ``embedded_witness_unavailable`` (the
   notice stays durable; a resubmission returns the receipt once the witness
   cosigns), as a missed publication quorum fails with
   ``witness_quorum_unavailable``. Each failed publication is counted by reason
   (``deplog_publication_failures_total``); a run of them is logged once.
   With a tiles directory, ``_render`` also queues the note for its ``checkpoint``
   file on the writer thread (after the tiles of every batch committed before it),
   and ``publish`` returns only once the file holds it: a receipt's checkpoint is
   in the directory by the time the receipt is sent.
4. ``GET /v1/entries`` serves entries up to ``entries_size``: the largest
   checkpoint this server signed and sent out for witnessing, served or not.
   A map-verifying witness (``witness serve --verify-map``) must fold a
   checkpoint's entries before it cosigns, so a publication quorum that
   requires one would wait forever on entries served only under the published
   checkpoint. Those entries are committed and immutable, and their checkpoint
   is signed (one root per size): withholding a checkpoint is about its
   cosignatures, never about its data. Proofs and the map stay at the served
   checkpoint (they vouch for what is served).
5. Until a publication succeeds after start, the served checkpoint is the one
   last saved under a quorum, or else the latest checkpoint with whatever lines
   the witnesses gave it; ``/healthz`` reports the missing embedded cosignature.
6. Background work (re-cosigning, external witnessing rounds, the storage
   audit) runs under one ``Supervisor``; ``stop`` runs every shutdown step even
   when one fails.
6. ``publish`` returns the checkpoint actually served (``Published``), at least
   the size it was asked to publish, and receipts prove into it.
7. With a ``Cluster`` (many processes on one PostgreSQL log, ``authority/
   cluster.py``), publishing is a round: under the round lock, a ``published``
   row that already covers the checkpoint is learned; otherwise the latest
   signed checkpoint of the database (which may hold other processes' entries)
   is witnessed, saved as the row, notified, and served once committed. Every
   process learns rows from the others (``learn``: notification, or polling
   every ``Cluster.poll_interval``), and serves one only after its log signature
   and its witnesses' lines verify; a row that does not is logged, counted
   (``deplog_published_rejected_total``) and never served. The refresh loop
   shares the fresh lines it gathered through the row too, so every process
   serves recent cosignatures. Tiles are served from the database, at sizes up
   to the served checkpoint's, and no tiles directory is written; their ETag is
   a digest of their bytes (the same on every process), and ``If-None-Match``
   answers 304 as for a file.

``/healthz``: 200 ``ok``; 503 ``degraded`` with ``reasons`` (stable codes:
``storage_unavailable`` while appends fail and none succeeded since; the code
of a failed publication until one succeeds, the refresh loop's included;
``embedded_witness_unavailable`` while the embedded witness cannot cosign;
``cosignatures_stale`` when the served embedded cosignature is older than
``STALE_REFRESHES`` refresh intervals); 503 ``storage_corrupt``. Entries of the log
that fail validation (docs/fold-spec.md: none unless storage was altered or a bug let
one in) are reported beside the status, as ``invalid_entries`` (their count and the
first ones): the log serves on, as every verifier goes on past them.

Map proofs (``GET /v1/tools/{tool_id}/proof``) are made at the served checkpoint
and nowhere else: the map is at one size (the last committed batch's: its tables,
and on SQLite the rows the writer folded and has not written yet, read above them,
``client.mapstore`` rule 8), so a proof read while that batch is not yet served
waits for its publication, at most ``map_proof_wait`` seconds (``--map-proof-wait``,
counted by the ``deplog_map_proofs_waiting`` gauge), then answers 503
``map_not_published``.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import functools
import hashlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import hdrs, web

from deplog.authority.explorer.config import ExplorerConfig
from deplog.authority.explorer.routes import add_explorer
from deplog.authority.http.limits import Rate, RateLimiter
from deplog.authority.http.metrics import Metrics
from deplog.authority.http.plumbing import METRICS, HTTPRequestError, errors_and_metrics
from deplog.authority.http.push import PushHub
from deplog.authority.log import Log
from deplog.authority.options import MEBIBYTES, option
from deplog.authority.sequencer import Published, Sequencer, SequencerLimits
from deplog.authority.storage import audit, store
from deplog.authority.storage.backends import open_database
from deplog.authority.storage.errors import IntegrityError, StorageError
from deplog.authority.storage.reader import LogReader
from deplog.authority.supervise import Supervisor
from deplog.authority.tiles import DEFAULT_PARTIAL_GRACE, TilesDirectory, served_tile
from deplog.authority.witnessing import (
    EmbeddedWitnessUnavailableError,
    QuorumUnavailableError,
    Witnessing,
)
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.mapstore import ViewMoved
from deplog.client.model import canonical
from deplog.client.model.entries import PublisherStatement
from deplog.client.model.notice import MAX_ENVELOPE_BYTES, Envelope, parse_tool_id
from deplog.client.model.vmap import COMPILED_UPDATE, MapProof, MapProofDocument
from deplog.client.storage_faults import StorageFault
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Signer, parse_note
from deplog.client.tlog.tiles import (
    TILE_HEIGHT,
    TILE_WIDTH,
    EntryTile,
    HashTile,
    parse_tile_path,
)
from deplog.client.waiting import wait_until

if TYPE_CHECKING:
    from deplog.authority.storage.cluster import Cluster

__all__ = [
    "FULL_TILE_CACHE",
    "JSON",
    "MAP_PROOF_BINARY",
    "MAP_PROOF_WAIT",
    "MAX_ENTRIES_PER_REQUEST",
    "MAX_INT",
    "PARTIAL_TILE_CACHE",
    "STALE_REFRESHES",
    "TILES_DIR",
    "TILE_TYPE",
    "AuthorityState",
    "MapNotPublishedError",
    "RequestError",
    "ServerConfig",
    "build_admin_app",
    "build_app",
    "error_response",
]

log = logging.getLogger("deplog.authority")

MAX_ENTRIES_PER_REQUEST = 1000
MAX_INT = (1 << 63) - 1
JSON = "application/json"
STALE_REFRESHES = 3
"""Refresh intervals after which the served embedded cosignature counts as stale."""
TILES_DIR = "tiles"
"""The tiles directory's name in the data directory, unless ``--tiles-dir`` says otherwise."""
FULL_TILE_CACHE = "public, max-age=31536000, immutable"
"""A full tile never changes (its path names its content), so caches keep it for a year."""
PARTIAL_TILE_CACHE = "public, max-age=60"
"""A partial tile's bytes never change either, but it is removed once superseded (after
the grace period), so caches drop it soon."""
TILE_TYPE = "application/octet-stream"
MAP_PROOF_WAIT = 5.0
"""Seconds a map proof waits for the publication of the batch its map is at, by default
(``--map-proof-wait``)."""
MAP_PROOF_BINARY = "application/octet-stream"
"""The media type of the binary map proof (docs/fold-spec.md section 6)."""
_PUBLICATION_FAILURES = (EmbeddedWitnessUnavailableError, QuorumUnavailableError, StorageError)
_PUBLICATION_CODES = frozenset(
    error.code for error in (EmbeddedWitnessUnavailableError, QuorumUnavailableError)
)


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
    max_subscribers: int = option(1024, "live checkpoint push streams at most", note="then 503")
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
    partial_grace: float = option(
        DEFAULT_PARTIAL_GRACE,
        "seconds a superseded partial tile is kept for readers of the previous checkpoint",
        flag="--tiles-partial-grace",
    )
    limits: SequencerLimits = field(default_factory=SequencerLimits)
    explorer: ExplorerConfig = field(default_factory=ExplorerConfig)

    @property
    def database(self) -> Path | str:
        """The log's database: the PostgreSQL URL if there is one, else the SQLite file."""
        return self.db_url if self.db_url is not None else self.db_path

    @property
    def tiles_path(self) -> Path | None:
        """Where the tiles directory is, or None when tiles are off or come from the
        database (a log many processes share, rule 7)."""
        if not self.tiles or open_database(self.database).shared:
            return None
        return self.tiles_dir if self.tiles_dir is not None else self.db_path.parent / TILES_DIR


class RequestError(DeplogError):
    """A read the API cannot answer: a malformed parameter, or a range the log cannot serve."""

    codes = frozenset(
        {
            ErrorCode.BAD_PARAMETER,
            ErrorCode.REPEATED_PARAMETER,
            ErrorCode.OUT_OF_RANGE,
            ErrorCode.SIZE_NOT_PUBLISHED,
            ErrorCode.RANGE_TOO_LARGE,
        }
    )


class MapNotPublishedError(DeplogError):
    """The map is at a batch whose checkpoint is not served yet (its publication waits for
    witnesses): no proof can be made at the served checkpoint now; retry."""

    code = ErrorCode.MAP_NOT_PUBLISHED
    retry_after = 1


def error_response(err: DeplogError, status: int) -> web.Response:
    return web.json_response({"error": err.code}, status=status)


class AuthorityState:
    """What the handlers share: the sequencer, the reader pool, the served checkpoint.

    ``checkpoint`` and ``note`` follow the publication rules of this module.
    """

    def __init__(
        self,
        config: ServerConfig,
        log: Log,
        witnessing: Callable[[AuthorityState], Witnessing] | None = None,
        tiles: TilesDirectory | None = None,
        cluster: Cluster | None = None,
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.supervisor = Supervisor()
        self.sequencer = Sequencer(
            log, config.limits, publish=self.publish, tiles=tiles, prove=self._prove
        )
        self._checkpoint_file: asyncio.Future[None] | None = None
        self._readers = concurrent.futures.ThreadPoolExecutor(
            config.reader_threads, thread_name_prefix="reader"
        )
        self._local = threading.local()
        self._all_readers: list[LogReader] = []
        self._lock = threading.Lock()
        self._db_errors = open_database(config.database).errors
        self._publishing = asyncio.Lock()
        published = log.published
        assert published is not None  # Log always publishes on open
        self.checkpoint = published
        self.entries_size = published.size
        self.note = published.note
        self.published_at = time.time()
        self._next_serve = asyncio.Event()
        self._learned_note: bytes | None = None
        self.push = PushHub(config.max_subscribers)
        self.checkpoint_requests = 0
        self.map_proofs_waiting = 0
        self.publication_failures: dict[str, int] = {}
        self._publication_failing: str | None = None
        self.address_limit = RateLimiter(config.address_rate, ErrorCode.RATE_LIMITED)
        self.publisher_limit = RateLimiter(config.publisher_rate, ErrorCode.PUBLISHER_RATE_LIMITED)
        self.witnessing = witnessing(self) if witnessing is not None else None
        if self.witnessing is not None:
            self.witnessing.on_change = self._cosigned
        self.corrupt: str | None = None
        self.published_rejected = 0
        self.poll_failures = 0
        self._rejected_size: int | None = None
        self._learn_now = asyncio.Event()
        self._signed_elsewhere = asyncio.Event()

    async def start(self) -> None:
        if self.cluster is not None:
            await self.cluster.prepare()
        try:
            await self.publish(self.checkpoint, force=True)
        except _PUBLICATION_FAILURES:
            # Serve what last met the quorum (rule 5); the refresh loop keeps trying.
            saved = await self.sequencer.call(self.sequencer.log.last_published)
            async with self._publishing:
                if saved is not None and self.witnessing is not None:
                    self.witnessing.remember(*saved)
                    self.checkpoint = saved[0]
                self._render()
        await self.sequencer.start()
        if self.cluster is not None:
            self.supervisor.spawn("published_listener", self._listen_published)
            self.supervisor.spawn("published_poll", self._poll_published)
        if self.witnessing is not None and self.config.refresh_interval > 0:
            self.supervisor.spawn("cosignature_refresh", self._refresh_cosignatures)
        self.supervisor.spawn("storage_audit", self._audit_storage)

    async def _audit_storage(self) -> None:
        """Rehash every stored leaf and subtree once, off the event loop, after starting.

        Start-up itself only checks the root at the latest checkpoint (O(log n));
        this finds what that cannot, such as a leaf's bytes altered on disk, and
        then stops all appends (``storage_corrupt``) and fails ``/healthz``.
        """
        # Its own niced process (see storage/audit.py): rehashing a large log must
        # not take the interpreter lock from the request handlers, and it can be killed.
        # A database URL travels in the environment, never in argv (its password).
        target, variables = open_database(self.config.database).passed_to_child(audit.DB_ENV)
        env = {**os.environ, **variables} if variables else None
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            audit.__name__,
            target,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            # Inherited: its progress lines reach the operator's stderr.
            stderr=None,
        )
        with contextlib.suppress(ProcessLookupError):  # it may already have ended
            audit.lower_priority(process.pid, os.getpid())
        try:
            out, _ = await process.communicate()
        except asyncio.CancelledError:
            process.kill()
            await process.wait()
            raise
        if process.returncode not in (audit.EXIT_OK, audit.EXIT_CORRUPT):
            log.warning("the storage audit could not run (exit %s)", process.returncode)
            return
        problem = json.loads(out)["problem"]
        if problem is not None:
            log.error("storage audit failed: %s; refusing appends", problem)
            self.corrupt = problem

    async def stop(self) -> None:
        """Every step runs, in order, even when an earlier one failed (rule 6)."""
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("push streams", self.push.close),
            ("background tasks", self.supervisor.stop),
            # Drains its queue: publishing still needs the witnesses.
            ("sequencer", self.sequencer.stop),
        ]
        if self.witnessing is not None:
            steps.append(("witnesses", self.witnessing.stop))
        if self.cluster is not None:
            steps.append(("cluster connections", self.cluster.close))
        steps.append(("readers", self.close))
        for name, step in steps:
            try:
                result = step()
                if asyncio.iscoroutine(result):
                    await result
            except Exception as err:
                log.error("stopping the %s failed: %s", name, type(err).__name__)

    async def publish(self, checkpoint: store.StoredCheckpoint, force: bool = False) -> Published:
        """Witness a larger checkpoint and serve it; returns the served checkpoint and note,
        at least ``checkpoint``'s size, for receipts (rules 3, 6 and 7)."""
        async with self._publishing:
            try:
                if checkpoint.size > self.checkpoint.size or force:
                    if self.cluster is None:
                        await self._witness(checkpoint)
                        self._serve(checkpoint)
                    else:
                        await self._publish_round(checkpoint, force)
                    if self._checkpoint_file is not None:
                        await asyncio.shield(self._checkpoint_file)
                if self.checkpoint.size < checkpoint.size:
                    raise StorageError()  # a round that could not read what it published
                if self.witnessing is not None and not self.witnessing.cosigned_by_embedded(
                    self.checkpoint.size
                ):
                    raise EmbeddedWitnessUnavailableError()
            except _PUBLICATION_FAILURES as err:
                self._publication_failed(err.code, checkpoint.size)
                raise
            if self._publication_failing is not None:
                log.info("publication resumed at size %d", self.checkpoint.size)
                self._publication_failing = None
            return Published(self.checkpoint, self.note)

    async def _publish_round(self, checkpoint: store.StoredCheckpoint, force: bool) -> None:
        """Rule 7: one round under the cluster's lock; the caller holds ``_publishing``.
        ``force`` (at start) witnesses the latest checkpoint even if it is published."""
        assert self.cluster is not None
        try:
            async with self.cluster.round() as round_:
                row = round_.published
                if not force and row is not None and row[0] >= checkpoint.size:
                    await self._learn(*row)
                    if self.checkpoint.size >= checkpoint.size:
                        return
                latest = await self._latest_signed()
                if latest is None or latest.size < checkpoint.size:
                    raise StorageError()
                note = latest.note
                if self.witnessing is not None:
                    await self.witnessing.witness_new(latest)
                    note = self.witnessing.note_for(latest)
                await round_.save(latest.size, note)
        except self.cluster.errors as err:
            log.warning("publication round failed: %s", type(err).__name__)
            raise StorageError() from None
        self._serve(latest)

    async def _latest_signed(self) -> store.StoredCheckpoint | None:
        """The database's latest checkpoint, once its log signature verified (another
        process may have signed it)."""
        latest: store.StoredCheckpoint | None = await self.read(lambda r: r.latest_checkpoint())
        if latest is not None:
            self._verified(latest)
        return latest

    def _verified(self, stored: store.StoredCheckpoint) -> None:
        """Raise ``IntegrityError`` unless ``stored`` is signed by this log's key as stored."""
        try:
            checkpoint, _ = open_checkpoint(stored.note, self.sequencer.log.verifier)
        except DeplogError:
            raise IntegrityError(
                ErrorCode.CHECKPOINT_INVALID, "a stored checkpoint is not signed by the log key"
            ) from None
        if (checkpoint.size, checkpoint.root_hash) != (stored.size, stored.root):
            raise IntegrityError(ErrorCode.CHECKPOINT_INVALID, "a checkpoint row disagrees")

    async def _learn(self, size: int, note: bytes) -> None:
        """Serve a ``published`` row from the database if it is not behind the served
        checkpoint and verifies (rule 7); the caller holds ``_publishing``."""
        if size < self.checkpoint.size:
            return
        stored = await self.read(lambda r: r.checkpoint_at(size))
        try:
            if stored is None:
                raise IntegrityError(ErrorCode.CHECKPOINT_INVALID, "no checkpoint row")
            self._verified(stored)
            if parse_note(note)[0] != parse_note(stored.note)[0]:
                raise IntegrityError(ErrorCode.CHECKPOINT_INVALID, "another checkpoint text")
            if self.witnessing is not None:
                self.witnessing.remember(stored, note)
        except DeplogError as err:
            self.published_rejected += 1
            if self._rejected_size != size:
                log.error("published checkpoint %d not served: %s (%s)", size, err.code, err)
                self._rejected_size = size
            return
        if size > self.checkpoint.size:
            self._serve(stored)
        else:
            self._render()  # the same size with fresher lines

    async def _listen_published(self) -> None:
        """Supervised: wake the poller on every notification of a new published row."""
        assert self.cluster is not None
        await self.cluster.listen(self._learn_now.set, self._signed_elsewhere_now)

    def _signed_elsewhere_now(self) -> None:
        self._signed_elsewhere.set()
        self._learn_now.set()

    async def _poll_published(self) -> None:
        """Supervised: learn the published row when notified, and every poll interval.

        A database failure does not end the loop (a supervisor's backoff would stretch
        the interval): it is counted (``deplog_published_poll_failures_total``), logged
        once until a poll succeeds again, and the next poll comes one interval later."""
        assert self.cluster is not None
        failing = False
        failures: tuple[type[Exception], ...] = (*self.cluster.errors, StorageError)
        while True:
            await wait_until(self._learn_now, self.cluster.poll_interval)
            self._learn_now.clear()
            try:
                await self._poll_once()
                if self._signed_elsewhere.is_set():
                    self._signed_elsewhere.clear()
                    await self._publish_signed_elsewhere()
            except failures as err:
                self.poll_failures += 1
                if not failing:
                    log.warning("reading the published checkpoint failed: %s", type(err).__name__)
                    failing = True
                continue
            if failing:
                log.info("reading the published checkpoint works again")
                failing = False

    async def _publish_signed_elsewhere(self) -> None:
        """An admin command signed a checkpoint no round publishes: publish it now rather
        than at the next refresh (every process tries; one round does it, rule 1)."""
        latest = await self._latest_signed()
        if latest is not None and latest.size > self.checkpoint.size:
            with contextlib.suppress(*_PUBLICATION_FAILURES):  # withheld: the refresh retries
                await self.publish(latest)

    async def _poll_once(self) -> None:
        assert self.cluster is not None
        row = await self.cluster.published()
        if row is None or row[0] < self.checkpoint.size:
            return
        if row[0] == self.checkpoint.size and row[1] == self._learned_note:
            return
        async with self._publishing:
            await self._learn(*row)
        self._learned_note = row[1]

    async def _share_lines(self) -> None:
        """Save the served checkpoint's fresh lines as the published row (rule 7), merged
        with the row's own, unless the row has moved past it (then learn it)."""
        assert self.cluster is not None and self.witnessing is not None
        async with self._publishing:
            try:
                async with self.cluster.round() as round_:
                    row = round_.published
                    if row is not None and row[0] > self.checkpoint.size:
                        await self._learn(*row)
                        return
                    if row is not None and row[0] == self.checkpoint.size:
                        with contextlib.suppress(DeplogError):
                            self.witnessing.remember(self.checkpoint, row[1])
                    if self.witnessing.cosigned_by_embedded(self.checkpoint.size):
                        await round_.save(
                            self.checkpoint.size, self.witnessing.note_for(self.checkpoint)
                        )
            except self.cluster.errors as err:
                log.warning("sharing cosignatures failed: %s", type(err).__name__)
                return
            self._render()

    async def _prove(self, indexes: Sequence[int], size: int) -> list[tuple[bytes, ...]]:
        """Inclusion proofs at ``size`` from the database (it may be past this process's
        own appends)."""
        proofs = await self.read(lambda r: [r.inclusion(i, size).hashes for i in indexes])
        return [tuple(p) for p in proofs]

    async def _witness(self, checkpoint: store.StoredCheckpoint) -> None:
        if self.witnessing is None:
            return
        # Its entries are served from now on (rule 4): a map-verifying witness fetches them.
        self.entries_size = max(self.entries_size, checkpoint.size)
        await self.witnessing.witness_new(checkpoint)
        if self.witnessing.quorum:
            note = self.witnessing.note_for(checkpoint)
            await self.sequencer.call(self.sequencer.log.save_published, checkpoint, note)

    def _publication_failed(self, code: str, size: int) -> None:
        self.publication_failures[code] = self.publication_failures.get(code, 0) + 1
        if self._publication_failing != code:
            log.warning("checkpoint %d not published: %s; appends get 503 until it is", size, code)
            self._publication_failing = code

    def _serve(self, checkpoint: store.StoredCheckpoint) -> None:
        """Make ``checkpoint`` the served one (rule 1); the caller holds the lock."""
        assert self._publishing.locked() and checkpoint.size >= self.checkpoint.size
        self.checkpoint, self.published_at = checkpoint, time.time()
        if self.witnessing is not None:
            self.witnessing.forget_below(checkpoint.size)
        self._render()
        self._next_serve.set()
        self._next_serve = asyncio.Event()

    def _render(self) -> None:
        """Render the served note and push it (rule 2): the only writer of ``note``."""
        if self.witnessing is not None:
            self.note = self.witnessing.note_for(self.checkpoint)
        else:
            self.note = self.checkpoint.note
        self.push.publish(self.note)
        self._queue_checkpoint_file()

    def _queue_checkpoint_file(self) -> None:
        """Queue the served note for the tiles directory's ``checkpoint`` file (rule 3)."""
        tiles = self.sequencer.tiles
        if tiles is None:
            return
        try:
            written = self.sequencer.schedule(
                _write_checkpoint_file, tiles, self.checkpoint.size, self.note
            )
        except RuntimeError:  # the writer thread has stopped: we are shutting down
            return
        written.add_done_callback(_consume_failure)
        self._checkpoint_file = written

    def _cosigned(self, size: int) -> None:
        """A witness gave a line for ``size``: the served note changes only if it is its size."""
        if size == self.checkpoint.size:
            self._render()

    async def _refresh_cosignatures(self) -> None:
        """Re-submit the served checkpoint to every witness, so timestamps stay recent; and
        publish the latest checkpoint if its publication failed."""
        assert self.witnessing is not None
        while True:
            await asyncio.sleep(self.config.refresh_interval)
            if self.cluster is None:
                latest = self.sequencer.log.published
            else:  # the database's latest, whichever process signed it
                latest = await self._latest_signed()
            if latest is not None and latest.size > self.checkpoint.size:
                with contextlib.suppress(*_PUBLICATION_FAILURES):  # withheld: try again later
                    await self.publish(latest)
                continue
            await self.witnessing.cosign_all(self.checkpoint, self.witnessing.witnesses)
            if self.cluster is not None:
                await self._share_lines()

    def health(self, now: float) -> list[str]:
        """Why the server is degraded, as stable codes; empty when it is ok."""
        reasons = []
        failing = self.sequencer.failing
        if failing is not None and failing not in _PUBLICATION_CODES:
            reasons.append(failing)  # the storage: clears when an append succeeds
        if self._publication_failing is not None:
            reasons.append(self._publication_failing)  # clears when a publication succeeds
        if self.witnessing is not None:
            if self.witnessing.embedded_failing:
                reasons.append(EmbeddedWitnessUnavailableError.code)
            age = self.witnessing.embedded_age(self.checkpoint.size, now)
            bound = STALE_REFRESHES * self.config.refresh_interval
            if age is not None and bound > 0 and age > bound:
                reasons.append("cosignatures_stale")
        return sorted(set(reasons))

    async def map_proof(self, tool_id: str) -> tuple[bytes, MapProof]:
        """The served note and the proof of ``tool_id`` in the map at its size.

        The map may be one batch ahead of the served checkpoint (committed, not yet
        published) or, by the time the read returns, one behind: read again after
        the next publication, or at once, until both agree or ``map_proof_wait`` ends.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.map_proof_wait
        while True:
            served = self._next_serve
            stored = self.sequencer.log.map
            view = stored.view  # the rows the writer holds, as of its last commit
            try:
                size, proof = await self.read(
                    functools.partial(
                        LogReader.map_proof,
                        tool_id=tool_id,
                        view=view,
                        moved=lambda: stored.slices != view.slices,  # noqa: B023
                    )
                )
            except ViewMoved:  # the writer wrote a slice meanwhile: read again
                size = -1
            if size == self.checkpoint.size:
                return self.note, proof
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise MapNotPublishedError()
            if size > self.checkpoint.size:
                self.map_proofs_waiting += 1
                try:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(served.wait(), remaining)
                finally:
                    self.map_proofs_waiting -= 1

    async def consistency_proof(self, old: int, new: int) -> Sequence[bytes]:
        proof = await self.read(lambda r: r.consistency(old, new))
        hashes: Sequence[bytes] = proof.hashes
        return hashes

    def _reader(self) -> LogReader:
        reader: LogReader | None = getattr(self._local, "reader", None)
        if reader is None:
            reader = LogReader(self.config.database)
            self._local.reader = reader
            with self._lock:
                self._all_readers.append(reader)
        return reader

    def _read(self, fn: Callable[[LogReader], Any]) -> Any:
        """Reader thread: a database failure is 503 ``storage_unavailable``, and the
        thread's reader is dropped, so the next read reconnects (a restarted server)."""
        try:
            return fn(self._reader())
        except self._db_errors:
            reader: LogReader | None = getattr(self._local, "reader", None)
            if reader is not None:
                self._local.reader = None
                with self._lock:
                    self._all_readers.remove(reader)
                with contextlib.suppress(Exception):
                    reader.close()
            raise StorageError() from None

    async def read(self, fn: Callable[[LogReader], Any]) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._read, fn)

    def close(self) -> None:
        self._readers.shutdown(wait=True)
        for reader in self._all_readers:
            reader.close()


def _write_checkpoint_file(tiles: TilesDirectory, size: int, note: bytes) -> None:
    """Writer thread: a checkpoint file that cannot be written fails the publication."""
    try:
        tiles.publish_checkpoint(size, note)
    except (OSError, StorageFault) as err:
        log.error("writing the tiles directory's checkpoint failed: %s", err)
        raise StorageError() from None


def _consume_failure(future: asyncio.Future[None]) -> None:
    """Failures are logged where they happen; a write nobody awaits must not warn again."""
    if not future.cancelled():
        future.exception()


_STATE = web.AppKey("state", AuthorityState)


def _int_param(request: web.Request, name: str) -> int:
    """The query parameter ``name`` as a canonical decimal; given twice it is refused, never
    resolved (which one a cache or proxy in front honours is not ours to guess)."""
    given = request.query.getall(name, [])
    if len(given) > 1:
        raise RequestError(ErrorCode.REPEATED_PARAMETER, "a query parameter is given twice")
    raw = given[0] if given else None
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
    if request.content_type != JSON:
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
        body=state.note,
        content_type="text/plain",
        charset="utf-8",
        headers={"Cache-Control": "no-cache"},
    )


async def _get_tile(request: web.Request) -> web.StreamResponse:
    """A file of the tiles directory, with the headers a cache needs (see the README).

    The path is parsed to a tile and the file named by its one canonical path, so
    no request names anything else in or outside the directory.
    """
    state = request.app[_STATE]
    root = state.config.tiles_path
    tile = parse_tile_path("tile/" + request.match_info["path"])
    if state.cluster is not None and state.config.tiles:
        return await _get_tile_from_database(request, state, tile)
    if root is None or not (path := root / tile.path).is_file():
        raise HTTPRequestError(ErrorCode.NOT_FOUND)
    cache = PARTIAL_TILE_CACHE if tile.partial else FULL_TILE_CACHE
    return web.FileResponse(path, headers={hdrs.CACHE_CONTROL: cache, hdrs.CONTENT_TYPE: TILE_TYPE})


def _tile_leaves(tile: EntryTile | HashTile) -> int:
    """The size of the smallest tree that has ``tile``."""
    if isinstance(tile, EntryTile):
        return tile.leaf_indices.stop
    return (tile.index * TILE_WIDTH + tile.width) << (TILE_HEIGHT * tile.level)


async def _get_tile_from_database(
    request: web.Request, state: AuthorityState, tile: EntryTile | HashTile
) -> web.Response:
    """Rule 7: a tile of a tree no larger than the served one, read from the database.
    A tile's bytes never change, so a digest of them is an ETag every process agrees on
    (a file's ETag comes from its mtime and size, which a database does not have)."""
    if _tile_leaves(tile) > state.checkpoint.size:
        raise HTTPRequestError(ErrorCode.NOT_FOUND)
    body = await state.read(lambda r: served_tile(r.conn, tile))
    cache = PARTIAL_TILE_CACHE if tile.partial else FULL_TILE_CACHE
    etag = hashlib.sha256(body).hexdigest()[:32]
    if any(match.value in (etag, "*") for match in request.if_none_match or ()):
        response = web.Response(status=304, headers={hdrs.CACHE_CONTROL: cache})
    else:
        response = web.Response(
            body=body, headers={hdrs.CACHE_CONTROL: cache, hdrs.CONTENT_TYPE: TILE_TYPE}
        )
    response.etag = etag
    return response


async def _get_inclusion(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    index, size = _int_param(request, "index"), _int_param(request, "size")
    if index >= size:
        raise RequestError(ErrorCode.OUT_OF_RANGE, "index must be below size")
    if size > state.checkpoint.size:
        raise RequestError(ErrorCode.SIZE_NOT_PUBLISHED, "no published checkpoint has that size")
    proof = await state.read(lambda r: r.inclusion(index, size))
    return web.json_response(proof.to_json())


async def _get_consistency(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    old, new = _int_param(request, "old"), _int_param(request, "new")
    if old > new:
        raise RequestError(ErrorCode.OUT_OF_RANGE, "old must not exceed new")
    if new > state.checkpoint.size:
        raise RequestError(ErrorCode.SIZE_NOT_PUBLISHED, "no published checkpoint has that size")
    proof = await state.read(lambda r: r.consistency(old, new))
    return web.json_response(proof.to_json())


async def _get_entries(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    start, end = _int_param(request, "start"), _int_param(request, "end")
    # The checks that need no state first: a range is refused the same way at any log size.
    if start >= end:
        raise RequestError(ErrorCode.OUT_OF_RANGE, "start must be below end")
    if end - start > state.config.max_entries:
        raise RequestError(ErrorCode.RANGE_TOO_LARGE, "too many entries in one request")
    if end > max(state.checkpoint.size, state.entries_size):
        raise RequestError(ErrorCode.SIZE_NOT_PUBLISHED, "range goes past the signed checkpoints")
    leaves = await state.read(lambda r: r.entries(start, end))
    return web.json_response(
        {"start": start, "entries": [base64.b64encode(leaf).decode() for leaf in leaves]}
    )


async def _get_tool(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    tool_id = request.match_info["tool_id"]
    parse_tool_id(tool_id)
    size = state.checkpoint.size
    now = datetime.now(UTC)
    described = await state.read(lambda r: r.tool(tool_id, size, now))
    return web.json_response(described)


async def _get_tool_proof(request: web.Request) -> web.Response:
    """The map proof of a tool at the served checkpoint: JSON (with that checkpoint's note)
    unless ``?format=binary`` or an ``Accept`` of only the binary type asks for the compact
    form; ``Deplog-Checkpoint-Size`` names the checkpoint either way."""
    state = request.app[_STATE]
    tool_id = request.match_info["tool_id"]
    parse_tool_id(tool_id)
    wanted = request.query.get("format")
    if wanted not in (None, "json", "binary"):
        raise RequestError(ErrorCode.BAD_PARAMETER, "format is json or binary")
    if wanted is None:
        binary = request.headers.get(hdrs.ACCEPT, "").strip() == MAP_PROOF_BINARY
    else:
        binary = wanted == "binary"
    note, proof = await state.map_proof(tool_id)
    headers = {"Deplog-Checkpoint-Size": str(state.checkpoint.size)}
    if binary:
        return web.Response(body=proof.to_binary(), content_type=MAP_PROOF_BINARY, headers=headers)
    document = MapProofDocument(note, tool_id, proof)
    return web.Response(body=document.encode(), content_type=JSON, headers=headers)


async def _get_publishers(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    return web.json_response(await state.read(lambda r: r.publishers()))


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
        "size": state.checkpoint.size,
        "pending": state.sequencer.pending,
    }
    invalid, first = state.sequencer.log.invalid_entries
    if invalid:
        report["invalid_entries"] = {
            "count": invalid,
            "first": [entry.to_json() for entry in first],
        }
    reasons = state.health(time.time())
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
    """Open the log, fill its map cache, then complete its tiles directory before anything
    is served."""
    if not COMPILED_UPDATE:
        log.warning(
            "the tool-status map's batch update is not compiled (installed without a C "
            "compiler): appends run its Python, slower; reinstall with one"
        )
    opened = Log(config.database, signer, config.origin, max_bytes=config.max_db_bytes)
    opened.warm_map()
    if config.tiles_path is None:
        return opened, None
    try:
        tiles = TilesDirectory.open(config.tiles_path, opened, partial_grace=config.partial_grace)
    except BaseException:
        opened.close()
        raise
    return opened, tiles


def build_app(
    config: ServerConfig,
    signer: Signer,
    witnessing: Callable[[AuthorityState], Witnessing] | None = None,
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
        cluster = open_database(config.database).cluster()
        state = AuthorityState(config, log, witnessing, tiles, cluster)
        await state.start()
        app[_STATE] = state
        sequencer = state.sequencer
        metrics.gauge(
            "deplog_entries",
            "Leaves in the latest published checkpoint.",
            lambda: float(state.checkpoint.size),
        )
        metrics.gauge(
            "deplog_checkpoint_age_seconds",
            "Seconds since the latest checkpoint was published.",
            lambda: time.time() - state.published_at,
        )
        metrics.gauge(
            "deplog_pending_submissions",
            "Submissions waiting to be sequenced.",
            lambda: float(sequencer.pending),
        )
        metrics.counter(
            "deplog_batches_total",
            "Batches sequenced since start.",
            lambda: float(sequencer.batches),
        )
        metrics.counter(
            "deplog_checkpoint_requests_total",
            "GET /checkpoint requests served (not in the request histograms: a hot path).",
            lambda: float(state.checkpoint_requests),
        )
        metrics.gauge(
            "deplog_map_proofs_waiting",
            "Map proof requests waiting for the publication of the batch the map is at.",
            lambda: float(state.map_proofs_waiting),
        )
        metrics.gauge(
            "deplog_map_unwritten_entries",
            "Log entries folded into the tool-status map whose rows are held in memory, "
            "not yet written (SQLite).",
            lambda: float(state.sequencer.log.map.unwritten),
        )
        metrics.gauge(
            "deplog_map_update_compiled",
            "1 if the tool-status map's batch update runs compiled, 0 if it runs its Python "
            "(installed without a C compiler: appends are slower).",
            lambda: float(COMPILED_UPDATE),
        )
        metrics.counter(
            "deplog_map_flush_failures_total",
            "Writes of the tool-status map's held rows that failed (kept, retried later).",
            lambda: float(state.sequencer.map_flush_failures),
        )
        metrics.gauge(
            "deplog_push_subscribers",
            "Live checkpoint push streams.",
            lambda: float(len(state.push.subscribers)),
        )
        metrics.counter(
            "deplog_push_dropped_total",
            "Push subscribers dropped for falling behind.",
            lambda: float(state.push.dropped),
        )
        metrics.labeled_counter(
            "deplog_publication_failures_total",
            "Checkpoints not published (appends answered 503), by reason.",
            "reason",
            lambda: state.publication_failures,
        )
        metrics.counter(
            "deplog_published_rejected_total",
            "Published rows from the shared database not served: they did not verify.",
            lambda: float(state.published_rejected),
        )
        metrics.counter(
            "deplog_published_poll_failures_total",
            "Polls of the shared database's published checkpoint that failed.",
            lambda: float(state.poll_failures),
        )
        metrics.labeled_counter(
            "deplog_background_failures_total",
            "Unexpected failures of background tasks (each restarted), by task.",
            "task",
            lambda: state.supervisor.failures,
        )
        if state.witnessing is not None:
            witnessing_ = state.witnessing
            metrics.labeled_gauge(
                "deplog_witness_lag_entries",
                "Entries the witness's latest cosignature is behind the published checkpoint.",
                "witness",
                lambda: witnessing_.lag(state.checkpoint),
            )
            metrics.labeled_gauge(
                "deplog_witness_cosignature_age_seconds",
                "Seconds since the witness last cosigned.",
                "witness",
                lambda: witnessing_.cosignature_age(time.time()),
            )

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
    add_explorer(app, lambda: app[_STATE], config.explorer, signer.verifier())
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
