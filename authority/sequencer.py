"""Batching of submissions: many concurrent notices share one commit and one checkpoint.

Submissions wait in a bounded queue; whenever the writer thread is free, everything queued
(up to ``max_batch``, after an optional gathering ``interval``) is one batch for the
``Log``. Without a delay batching is natural: an idle log answers at once, a busy one
shares each commit (bench/bench_append.py: lower latency and higher throughput than 5 ms).

Rules, cited by name:

* **Durable before answered.** A submission's future resolves only after its batch is
  committed and the checkpoint including it signed and stored, so a 201 is durable. The
  receipt proves into the checkpoint actually published (``Published``), possibly a larger
  one (``prove``). A failed publication leaves the batch durable but unacknowledged: a
  resubmission returns the receipt later.
* **In order.** Batches and admin appends are committed and published one at a time, so
  ``publish`` never gets a checkpoint smaller than the one before; a batch's tiles are
  written right after its commit (``tiles.py`` rule 2). ``failing`` is the code of the
  latest failed batch, None once one succeeds, or for ``storage_unavailable`` once the
  publication found the database writable again (``reached_again``; ``/healthz``).
* **Idle.** ``MAP_FLUSH_IDLE`` seconds without a submission after a batch, and after an
  admin append, the writer writes the map's held rows a slice a transaction while no
  submission waits; a failure is logged once and counted (``map_flush_failures``), and the
  rows wait for the next batch or idle moment.
* **Stop.** ``stop`` refuses new submissions (``ShuttingDownError``), sequences everything
  queued as usual (the batch in progress is never cut short), then closes the log: no
  caller is left waiting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from deplog.authority import collectors
from deplog.authority.log import Log, Sequenced
from deplog.authority.options import MILLISECONDS, option
from deplog.authority.storage.errors import StorageError
from deplog.authority.storage.store import StoredCheckpoint
from deplog.authority.tiles import TilesDirectory
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.model.entries import PublisherStatement
from deplog.client.model.notice import Envelope
from deplog.client.plumbing.storage_faults import StorageFault

T = TypeVar("T")
log = logging.getLogger("deplog.sequencer")

MAP_FLUSH_IDLE = 0.05
"""Seconds without a submission after a batch before the map's rows are written."""


class OverloadedError(DeplogError):
    """Too many submissions are waiting; the client should retry later."""

    code = ErrorCode.OVERLOADED


class ShuttingDownError(DeplogError):
    """The sequencer is stopping and takes no new submissions; retry once it is back."""

    code = ErrorCode.SHUTTING_DOWN


@dataclass(frozen=True)
class SequencerLimits:
    """Bounds of the append path; see the README's "Limits" table."""

    interval: float = option(
        0.0,
        "extra time a batch gathers submissions",
        flag="--batch-interval-ms",
        units=MILLISECONDS,
        note="natural batching",
    )
    max_batch: int = option(512, "submissions per batch at most")
    max_pending: int = option(8192, "queued submissions before 503 overloaded")


@dataclass(frozen=True)
class Receipted:
    """An accepted submission: its index, whether it is new, and its receipt."""

    index: int
    created: bool
    receipt: bytes


@dataclass(frozen=True)
class Published:
    """What a publication made visible, at least the size asked for: what receipts carry."""

    checkpoint: StoredCheckpoint
    note: bytes


Publish = Callable[[StoredCheckpoint], Awaitable[Published]]
"""Publishes a checkpoint, or a larger one including it (witnessing it first)."""

Prove = Callable[[Sequence[int], int], Awaitable[list[tuple[bytes, ...]]]]
"""The inclusion proofs of leaves ``indexes`` in the tree of the given size."""

_Submission = tuple[Envelope, asyncio.Future[Receipted]]


async def _publish_unwitnessed(checkpoint: StoredCheckpoint) -> Published:
    return Published(checkpoint, checkpoint.note)


class Sequencer:
    """Owns the writer thread and the ``Log``: the only way to append."""

    def __init__(
        self,
        log: Log,
        limits: SequencerLimits | None = None,
        publish: Publish | None = None,
        tiles: TilesDirectory | None = None,
        prove: Prove | None = None,
    ) -> None:
        self.log = log
        self.tiles = tiles
        self.limits = limits or SequencerLimits()
        self.publish = publish or _publish_unwitnessed
        self.prove = prove or self._prove_on_writer
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sequencer")
        # ``None`` is stop's marker: everything queued before it is still sequenced.
        self._queue: asyncio.Queue[_Submission | None] = asyncio.Queue(self.limits.max_pending)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._appending = asyncio.Lock()
        self.batches = 0
        self.failing: str | None = None
        self.map_flush_failures = 0
        self._map_flush_ok = True
        self._flush_when_idle = False

    def reached_again(self) -> None:
        """The database took a write again: a lost connection's failure is over (a full
        disk's is not: only an append shows it)."""
        if self.failing == StorageError.code:
            self.failing = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sequencer")

    async def stop(self) -> None:
        """Drain (*Stop*), then close the log; a second call returns at once."""
        if self._stopping:
            return
        self._stopping = True
        if self._task is None:  # never started: still answer what was queued
            await self.start()
        assert self._task is not None
        await self._queue.put(None)
        await self._task
        await self.call(self.log.close)
        if self.tiles is not None:
            await self.call(self.tiles.close)
        self._writer.shutdown(wait=True)

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """The queue, the batches and the map's idle writes, and the log's metrics."""
        collectors.gauge(
            registry,
            "deplog_pending_submissions",
            "Submissions waiting to be sequenced.",
            lambda: float(self.pending),
        )
        collectors.counter(
            registry,
            "deplog_batches_total",
            "Batches sequenced since start.",
            lambda: float(self.batches),
        )
        collectors.counter(
            registry,
            "deplog_map_flush_failures_total",
            "Writes of the tool-status map's held rows that failed (kept, retried later).",
            lambda: float(self.map_flush_failures),
        )
        self.log.register_metrics(registry)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the writer thread, after whatever is running there."""
        return await self.schedule(fn, *args)

    def schedule(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue ``fn`` on the writer thread without waiting for it; RuntimeError once stopped."""
        return asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    async def submit(self, envelope: Envelope) -> Receipted:
        """Queue one envelope and wait until it is receipted or refused (raises)."""
        if self._stopping:
            raise ShuttingDownError()
        future: asyncio.Future[Receipted] = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait((envelope, future))
        except asyncio.QueueFull:
            raise OverloadedError() from None
        return await future

    async def append_publisher(self, statement: PublisherStatement) -> int:
        async with self._appending:
            index = await self.call(self.log.append_publisher, statement)
            checkpoint = await self.call(self.log.publish)
            await self._publish_with_tiles(checkpoint)
        await self._flush_map()  # an admin append comes alone: no batch follows to write it
        return index

    async def _publish_with_tiles(self, checkpoint: StoredCheckpoint) -> Published:
        """Publish ``checkpoint`` while its tiles are written; both must succeed."""
        tiles = self.schedule(self._write_tiles)  # queued before any checkpoint file write
        published, written = await asyncio.gather(
            self.publish(checkpoint), tiles, return_exceptions=True
        )
        for outcome in (written, published):
            if isinstance(outcome, BaseException):
                raise outcome
        assert isinstance(published, Published)
        if published.checkpoint.size < checkpoint.size:
            raise AssertionError("a publication served less than it was asked to publish")
        return published

    async def _prove_on_writer(self, indexes: Sequence[int], size: int) -> list[tuple[bytes, ...]]:
        """Proofs from the log's own tree: enough while this process is the only writer."""

        def prove() -> list[tuple[bytes, ...]]:
            with self.log.tree.memoized():
                return [tuple(self.log.tree.inclusion_proof(i, size)) for i in indexes]

        return await self.call(prove)

    def _write_tiles(self) -> None:
        """A tiles directory that cannot be written fails the batch: nothing is published."""
        if self.tiles is None or self.log.published is None:
            return
        try:
            self.tiles.extend(self.log.published.size)
        except (OSError, StorageFault) as err:
            log.error("writing the tiles directory failed: %s", err)
            raise StorageError.of(err) from None

    async def _run(self) -> None:
        """Sequence batches until stop's marker, which follows every earlier submission."""
        stopping = False
        while not stopping:
            first = await self._next()
            if first is None:
                return
            batch = [first]
            if self.limits.interval > 0 and self._queue.qsize() < self.limits.max_batch - 1:
                await asyncio.sleep(self.limits.interval)
            while len(batch) < self.limits.max_batch and not self._queue.empty():
                queued = self._queue.get_nowait()
                if queued is None:
                    stopping = True
                    break
                batch.append(queued)
            await self._process(batch)

    async def _next(self) -> _Submission | None:
        """The next queued submission, the map's rows written first after a batch (*Idle*)."""
        if self._flush_when_idle:
            self._flush_when_idle = False
            try:
                async with asyncio.timeout(MAP_FLUSH_IDLE):
                    return await self._queue.get()
            except TimeoutError:
                await self._flush_map()
        return await self._queue.get()

    async def _flush_map(self) -> None:
        """Write the map's held rows a slice at a time while no submission waits (*Idle*)."""
        try:
            more = True
            while more and self._queue.empty():
                async with self._appending:
                    more = await self.call(self.log.write_map_slice)
        except Exception as err:  # a storage failure, or a bug: the appends go on either way
            if self._map_flush_ok:
                if isinstance(err, DeplogError):
                    log.warning(
                        "writing the tool-status map's rows failed (%s); the next batch "
                        "writes them",
                        err.code,
                    )
                else:  # a bug, not the storage: its traceback belongs in the log
                    log.exception("writing the tool-status map's rows failed")
            self.map_flush_failures += 1
            self._map_flush_ok = False
        else:
            self._map_flush_ok = True

    async def _process(self, batch: list[_Submission]) -> None:
        self._flush_when_idle = True
        futures = [future for _, future in batch]
        try:
            async with self._appending:
                results = await self.call(self.log.sequence, [envelope for envelope, _ in batch])
                checkpoint = self.log.published
                assert checkpoint is not None
                published = await self._publish_with_tiles(checkpoint)
                results = await self._prove_into(results, published.checkpoint)
        except DeplogError as err:
            self.failing = err.code
            _fail(futures, err)
            return
        except Exception as err:  # fail the batch, keep serving
            if isinstance(err, self.log.db.errors):  # a read outside the log's own handling
                log.error("sequencing failed: the database raised %s", type(err).__name__)
            else:  # a bug, not bad input
                log.exception("sequencing failed")
            self.failing = StorageError.code
            _fail(futures, StorageError())
            return
        finally:
            self.batches += 1
        self.failing = None
        for future, result in zip(futures, results, strict=True):
            if future.done():
                continue
            if result.error is not None:
                future.set_exception(result.error)
            else:
                assert result.index is not None
                receipt = result.receipt(published.note)
                future.set_result(Receipted(result.index, result.created, receipt))

    async def _prove_into(
        self, results: list[Sequenced], checkpoint: StoredCheckpoint
    ) -> list[Sequenced]:
        """The batch's results with their proofs into ``checkpoint`` (the published one)."""
        moved = [
            i
            for i, r in enumerate(results)
            if r.index is not None and r.checkpoint is not None and r.checkpoint != checkpoint
        ]
        if not moved:
            return results
        proofs = await self.prove([results[i].index or 0 for i in moved], checkpoint.size)
        out = list(results)
        for i, proof in zip(moved, proofs, strict=True):
            out[i] = dataclasses.replace(results[i], proof=proof, checkpoint=checkpoint)
        return out


def _fail(futures: list[asyncio.Future[Receipted]], error: DeplogError) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(error)
