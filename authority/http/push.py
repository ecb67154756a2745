"""Push: every newly published checkpoint is streamed to subscribers (Server-Sent Events).

A push message is only a hint: it carries the cosigned note, which a follower verifies
like any other, so a dropped or forged message costs nothing but latency. Bounded: at most
``max_subscribers`` streams, ``max_per_address`` from one client address, each with a queue
of ``queue_size`` messages; a subscriber that falls behind is dropped (its stream ends, it
reconnects), never waited for. The fan-out runs in its own task, ``FAN_OUT_SLICE``
subscribers between two yields to the loop, so a publisher's receipt never waits for it;
notes reach each subscriber in the order they were published.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry

from deplog.authority import collectors
from deplog.client.errors import DeplogError, ErrorCode

__all__ = ["PushHub", "TooManySubscribersError", "sse_event"]

KEEPALIVE_SECONDS = 15.0
FAN_OUT_SLICE = 256
"""Subscribers offered a note between two yields to the event loop."""


class TooManySubscribersError(DeplogError):
    """The push stream is at its subscriber bound; poll instead, or retry later."""

    code = ErrorCode.TOO_MANY_SUBSCRIBERS


def sse_event(note: bytes) -> bytes:
    """One ``checkpoint`` event: each line of the note as a ``data:`` line."""
    lines = note.decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the note's final newline: the client adds it back
    body = "".join(f"data: {line}\n" for line in lines)
    return f"event: checkpoint\n{body}\n".encode()


@dataclass
class PushHub:
    """The set of live subscribers and the latest message."""

    max_subscribers: int = 10_000
    max_per_address: int = 100
    queue_size: int = 8
    subscribers: set[asyncio.Queue[bytes | None]] = field(default_factory=set)
    by_address: Counter[str] = field(default_factory=Counter)
    latest: bytes | None = None
    dropped: int = 0
    _fan_out: asyncio.Task[None] | None = None

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """The live streams and the subscribers dropped for falling behind."""
        collectors.gauge(
            registry,
            "deplog_push_subscribers",
            "Live checkpoint push streams.",
            lambda: float(len(self.subscribers)),
        )
        collectors.counter(
            registry,
            "deplog_push_dropped_total",
            "Push subscribers dropped for falling behind.",
            lambda: float(self.dropped),
        )

    def publish(self, note: bytes) -> None:
        """Offer a new note to every subscriber, in a task of its own (a stream that starts
        later sends it itself), without ever waiting for one."""
        if note == self.latest:
            return
        self.latest = note
        if self.subscribers:
            offer = self._offer(sse_event(note), list(self.subscribers), self._fan_out)
            self._fan_out = asyncio.get_running_loop().create_task(offer)

    async def _offer(
        self,
        message: bytes,
        queues: list[asyncio.Queue[bytes | None]],
        previous: asyncio.Task[None] | None,
    ) -> None:
        if previous is not None:
            await previous
        for n, queue in enumerate(queues):
            if n % FAN_OUT_SLICE == 0:
                await asyncio.sleep(0)
            if queue not in self.subscribers:
                continue
            try:
                queue.put_nowait(message)
            except asyncio.QueueFull:
                self._drop(queue)

    def _drop(self, queue: asyncio.Queue[bytes | None]) -> None:
        self.subscribers.discard(queue)
        self.dropped += 1
        with contextlib.suppress(asyncio.QueueEmpty):
            while True:
                queue.get_nowait()
        queue.put_nowait(None)  # tells the stream to end

    def close(self) -> None:
        if self._fan_out is not None:
            self._fan_out.cancel()
        for queue in list(self.subscribers):
            self._drop(queue)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/checkpoints/stream``: the latest checkpoint now, then each new one."""
        address = request.remote or "unknown"
        if (
            len(self.subscribers) >= self.max_subscribers
            or self.by_address[address] >= self.max_per_address
        ):
            raise TooManySubscribersError()
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(self.queue_size)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        self.subscribers.add(queue)
        self.by_address[address] += 1
        try:
            if self.latest is not None:
                await response.write(sse_event(self.latest))
            while True:
                try:
                    async with asyncio.timeout(KEEPALIVE_SECONDS):
                        message = await queue.get()
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if message is None:
                    break
                await response.write(message)
        except ConnectionResetError:
            pass  # the subscriber went away
        finally:
            self.subscribers.discard(queue)
            self.by_address[address] -= 1
            if not self.by_address[address]:
                del self.by_address[address]
        return response
