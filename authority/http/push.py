"""Push: every newly published checkpoint is streamed to subscribers (Server-Sent Events).

A push message is only a hint: it carries the cosigned note, which a follower verifies
like any other, so a dropped or forged message costs nothing but latency. Bounded: at most
``max_subscribers`` streams, each with a queue of ``queue_size`` messages; a subscriber
that falls behind is dropped (its stream ends, it reconnects), never waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry

from deplog.authority import collectors
from deplog.client.errors import DeplogError, ErrorCode

__all__ = ["PushHub", "TooManySubscribersError", "sse_event"]

KEEPALIVE_SECONDS = 15.0


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

    max_subscribers: int = 1024
    queue_size: int = 8
    subscribers: set[asyncio.Queue[bytes | None]] = field(default_factory=set)
    latest: bytes | None = None
    dropped: int = 0

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
        """Offer a new note to every subscriber without ever waiting for one."""
        if note == self.latest:
            return
        self.latest = note
        message = sse_event(note)
        for queue in list(self.subscribers):
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
        for queue in list(self.subscribers):
            self._drop(queue)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/checkpoints/stream``: the latest checkpoint now, then each new one."""
        if len(self.subscribers) >= self.max_subscribers:
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
        return response
