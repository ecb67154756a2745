"""Push: every newly published checkpoint is streamed to subscribers (Server-Sent Events).

A push message is only a hint: it carries the cosigned note, which a follower verifies
like any other, so a dropped or forged message costs nothing but latency. Bounded: at most
``max_subscribers`` streams, ``max_per_address`` from one client address, each with at most
``MAX_BUFFERED`` bytes unsent; a subscriber that falls behind is dropped (its stream ends,
it reconnects), never waited for. One fan-out task writes to each stream's transport,
``FAN_OUT_SLICE`` streams between two yields to the loop, so a publisher's receipt never
waits for it; a stream it has not reached yet when newer notes come gets them all in one
write (the last ``KEPT_EVENTS``; older ones are skipped), so the fan-out's work per stream
is bounded however fast notes come, and each stream gets notes in the order published.
A stream's own state is its connection and a few fields: one keep-alive loop
(``keep_alive``, run by the server's supervisor) writes a comment to every stream each
``KEEPALIVE_SECONDS`` (a stream has no timer of its own).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import HttpVersion11, web
from prometheus_client import CollectorRegistry

from deplog.authority import collectors
from deplog.authority.http.plumbing import connection_lost
from deplog.client.errors import DeplogError, ErrorCode

KEEPALIVE_SECONDS = 15.0
FAN_OUT_SLICE = 32
"""Streams written between two yields to the event loop."""
KEPT_EVENTS = 16
"""Latest events a stream the fan-out has not reached yet is sent in one write."""
MAX_BUFFERED = 64 * 1024
"""Bytes a stream may leave unsent before it is dropped as fallen behind."""


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


def _chunk(data: bytes) -> tuple[bytes, bytes]:
    """``data`` as written to a stream: one chunk of an HTTP/1.1 chunked body, and as is
    (HTTP/1.0)."""
    return b"%x\r\n%b\r\n" % (len(data), data), data


_KEEPALIVE = _chunk(b": keep-alive\n\n")


@dataclass(eq=False, slots=True)
class _Stream:
    """One subscriber: its connection, its client address, the count of events it was
    sent (``PushHub.published`` then), and its end."""

    transport: asyncio.Transport
    chunked: bool
    address: str
    sent: int
    ended: asyncio.Future[None]


@dataclass
class PushHub:
    """The set of live subscribers and the latest events."""

    max_subscribers: int = 10_000
    max_per_address: int = 100
    subscribers: set[_Stream] = field(default_factory=set)
    by_address: Counter[str] = field(default_factory=Counter)
    published: int = 0
    events: list[bytes] = field(default_factory=list)
    """The latest ``KEPT_EVENTS`` events, oldest first."""
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
        """Offer a new note to every subscriber by the fan-out task (a stream that starts
        later sends it itself), without ever waiting for one."""
        event = sse_event(note)
        if self.events and event == self.events[-1]:
            return
        self.published += 1
        self.events = [*self.events[1 - KEPT_EVENTS :], event]
        if self.subscribers and (self._fan_out is None or self._fan_out.done()):
            self._fan_out = asyncio.get_running_loop().create_task(self._fan_out_all())

    async def _fan_out_all(self) -> None:
        """Until every stream has the latest event: each behind gets what it missed."""
        framed: dict[tuple[int, int], tuple[bytes, bytes]] = {}

        def missed(stream: _Stream) -> tuple[bytes, bytes]:
            count = min(self.published - stream.sent, KEPT_EVENTS)
            stream.sent = self.published
            if (self.published, count) not in framed:
                framed[self.published, count] = _chunk(b"".join(self.events[-count:]))
            return framed[self.published, count]

        while behind := [s for s in self.subscribers if s.sent < self.published]:
            framed.clear()
            await self._write_each(behind, missed)

    async def keep_alive(self) -> None:
        """A comment to every stream every ``KEEPALIVE_SECONDS``: proxies keep it open, and
        a client gone is found (a supervised background task of the server's)."""
        while True:
            await asyncio.sleep(KEEPALIVE_SECONDS)
            await self._write_each(list(self.subscribers), lambda _: _KEEPALIVE)

    async def _write_each(
        self, streams: list[_Stream], chunk_of: Callable[[_Stream], tuple[bytes, bytes]]
    ) -> None:
        """``chunk_of`` each of ``streams`` still subscribed, written to it, ``FAN_OUT_SLICE``
        streams between two yields to the loop."""
        for n, stream in enumerate(streams):
            if n % FAN_OUT_SLICE == 0:
                await asyncio.sleep(0)
            if stream in self.subscribers:
                self._send(stream, chunk_of(stream))

    def _send(self, stream: _Stream, chunk: tuple[bytes, bytes]) -> None:
        """Write ``chunk`` to ``stream``, or end a stream that is gone or fell behind."""
        transport = stream.transport
        if transport.is_closing():
            self._drop(stream, behind=False)
        elif transport.get_write_buffer_size() > MAX_BUFFERED:
            self._drop(stream)
        else:
            transport.write(chunk[0] if stream.chunked else chunk[1])

    def _drop(self, stream: _Stream, behind: bool = True) -> None:
        self.subscribers.discard(stream)
        self.dropped += behind
        if not stream.ended.done():
            stream.ended.set_result(None)

    def close(self) -> None:
        if self._fan_out is not None:
            self._fan_out.cancel()
        for stream in list(self.subscribers):
            self._drop(stream)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/checkpoints/stream``: the latest checkpoint now, then each new one."""
        address = request.remote or "unknown"
        if (
            len(self.subscribers) >= self.max_subscribers
            or self.by_address[address] >= self.max_per_address
        ):
            raise TooManySubscribersError()
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)  # HTTP/1.1: chunked, each write below one chunk
        transport = request.transport
        if not isinstance(transport, asyncio.Transport):
            return response
        chunked = request.version >= HttpVersion11
        ended = asyncio.get_running_loop().create_future()
        stream = _Stream(transport, chunked, address, self.published, ended)
        lost = connection_lost(request)
        if lost is not None:  # the slot is freed at once, not at the next keep-alive
            lost.add_done_callback(lambda _: self._drop(stream, behind=False))
        self.subscribers.add(stream)
        self.by_address[address] += 1
        try:
            if self.events:
                self._send(stream, _chunk(self.events[-1]))
            await stream.ended
        finally:
            self.subscribers.discard(stream)
            self.by_address[address] -= 1
            if not self.by_address[address]:
                del self.by_address[address]
        return response
