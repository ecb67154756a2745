"""A TCP relay that delays what crosses it: the WAN delay this kernel cannot add (no netem).

    python -m tests.integration.delay_relay --route LISTEN=TARGET[@SOURCE] ... [--delay S]
        [--loss P] [--seed N]

Each ``--route`` accepts on ``LISTEN`` (host:port) and connects each accepted connection to
``TARGET`` (host:port), from the address ``SOURCE`` if given (on loopback any 127.x.y.z
works: the target sees which route a connection came by). Every chunk read on one side is
written to the other ``--delay`` seconds later, in order, in both directions: a one-way
delay of the payload. A chunk is "lost" with probability ``--loss``: a byte stream cannot
drop bytes, so it arrives one retransmission timeout (``RTO``) late instead, as TCP would
deliver it. The kernel's own segments (handshake, ACKs, keepalives) are not delayed: the
relay delays what the applications exchange, which is what their timings feel.

The end of a stream is passed on once the delayed bytes before it are written (a
half-close); a reset on either side closes both.
The relay prints ``relaying`` once every route listens, and runs until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
from collections.abc import Awaitable, Callable

RTO = 0.2
"""Seconds a lost chunk arrives late: Linux's minimum retransmission timeout."""
CHUNK = 65536
_LIVE: set[asyncio.Task[None]] = set()


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


async def _carry(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    delay: float,
    loss: float,
    rng: random.Random,
) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` later (``RTO`` more if lost), and
    pass the end of the stream on (a half-close: the other direction goes on)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, chunk = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not chunk:
                writer.write_eof()
                return
            writer.write(chunk)
            await writer.drain()

    delivery = asyncio.create_task(deliver())
    due = 0.0
    try:
        while True:
            chunk = await reader.read(CHUNK)
            late = RTO if chunk and rng.random() < loss else 0.0
            due = max(due, loop.time() + delay + late)  # in order, never earlier
            queue.put_nowait((due, chunk))
            if not chunk:
                break
        await delivery
    finally:
        delivery.cancel()
        await asyncio.gather(delivery, return_exceptions=True)


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _route(
    target: tuple[str, int], source: str | None, delay: float, loss: float, rng: random.Random
) -> Handler:
    """What one route does with an accepted connection."""

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(
                *target, local_addr=(source, 0) if source else None
            )
        except OSError:
            writer.close()
            return
        directions = [
            asyncio.create_task(_carry(reader, up_writer, delay, loss, rng)),
            asyncio.create_task(_carry(up_reader, writer, delay, loss, rng)),
        ]
        _LIVE.update(directions)  # the loop holds tasks weakly: a stalled one would vanish
        try:
            await asyncio.gather(*directions)
        except OSError:  # reset on either side: both go
            pass
        finally:
            for direction in directions:
                direction.cancel()
            await asyncio.gather(*directions, return_exceptions=True)
            _LIVE.difference_update(directions)
            writer.close()
            up_writer.close()

    return accepted


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="delay_relay")
    parser.add_argument("--route", action="append", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--loss", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    servers = []
    for route in args.route:
        listen, _, rest = route.partition("=")
        target, _, source = rest.partition("@")
        handler = _route(_address(target), source or None, args.delay, args.loss, rng)
        servers.append(await asyncio.start_server(handler, *_address(listen)))
    print("relaying", flush=True)
    await asyncio.gather(*(server.serve_forever() for server in servers))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1:]))
