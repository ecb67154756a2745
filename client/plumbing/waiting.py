"""Waiting for an event, at most some seconds, in a loop that a cancellation must end.

Python 3.11's ``asyncio.wait_for`` returns the inner result and drops the cancellation
when both are ready in one turn: a background loop that waited with it for "a wake-up or
an interval" went on forever after a stop that came with a wake-up, and a server on
PostgreSQL never finished stopping (``tests/test_server_stop.py``). ``asyncio.timeout``
has no such window, so every such wait in deplog goes through ``wait_until``.
"""

from __future__ import annotations

import asyncio

__all__ = ["wait_until"]


async def wait_until(event: asyncio.Event, seconds: float) -> bool:
    """Wait for ``event`` at most ``seconds``: True if it is set, False once they passed."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True
