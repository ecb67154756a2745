"""Batching of submissions: many concurrent notices share one commit and one checkpoint.

Submissions wait in a bounded queue. Whenever the writer thread is free, the
sequencer takes everything queued (up to ``max_batch``) as one batch, after an
optional gathering delay of ``interval`` seconds, and hands it to the ``Log``.
Without a delay, batching is natural: submissions that arrive while one batch
commits form the next, so an idle log answers at once and a busy one shares
each commit among many (measured in bench/bench_append.py: the default of no
delay gave both lower latency and higher throughput than 5 ms).

A submission's future resolves only after its batch is committed and the
checkpoint that includes it is signed and stored, so a 201 is durable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from authority.log import Log, Sequenced, StorageError
from client.entries import PublisherStatement
from client.errors import DeplogError
from client.notice import Envelope

T = TypeVar("T")


class OverloadedError(DeplogError):
    """Too many submissions are waiting; the client should retry later."""

    code = "overloaded"
    http_status = 503


@dataclass(frozen=True)
class SequencerLimits:
    """Bounds of the append path; see the README's "Limits" table."""

    interval: float = 0.0
    max_batch: int = 512
    max_pending: int = 8192


class Sequencer:
    """Owns the writer thread and the ``Log``; the only way to append."""

    def __init__(self, log: Log, limits: SequencerLimits | None = None) -> None:
        self.log = log
        self.limits = limits or SequencerLimits()
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sequencer")
        self._queue: asyncio.Queue[tuple[Envelope, asyncio.Future[Sequenced]]] = asyncio.Queue(
            self.limits.max_pending
        )
        self._task: asyncio.Task[None] | None = None
        self.on_publish: Callable[[Any], None] | None = None
        self.batches = 0

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sequencer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.call(self.log.close)
        self._writer.shutdown(wait=True)

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the writer thread, after whatever is running there."""
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    async def submit(self, envelope: Envelope) -> Sequenced:
        """Queue one envelope and wait until it is sequenced or refused."""
        future: asyncio.Future[Sequenced] = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait((envelope, future))
        except asyncio.QueueFull:
            raise OverloadedError() from None
        return await future

    async def append_publisher(self, statement: PublisherStatement) -> int:
        index = await self.call(self.log.append_publisher, statement)
        checkpoint = await self.call(self.log.publish)
        if self.on_publish is not None:
            self.on_publish(checkpoint)
        return index

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            if self.limits.interval > 0 and self._queue.qsize() < self.limits.max_batch - 1:
                await asyncio.sleep(self.limits.interval)
            while len(batch) < self.limits.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            await self._process(batch)

    async def _process(self, batch: list[tuple[Envelope, asyncio.Future[Sequenced]]]) -> None:
        envelopes = [envelope for envelope, _ in batch]
        try:
            results = await self.call(self.log.sequence, envelopes)
        except DeplogError as err:
            failure: DeplogError = err
            results = [Sequenced(None, False, None, failure) for _ in batch]
        except Exception:  # a bug, not bad input: fail the batch, keep serving
            results = [Sequenced(None, False, None, StorageError()) for _ in batch]
        self.batches += 1
        if self.on_publish is not None and self.log.published is not None:
            self.on_publish(self.log.published)
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
