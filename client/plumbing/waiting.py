"""Waiting for an event, at most some seconds, in a loop that a cancellation must end.

Python 3.11's ``asyncio.wait_for`` drops a cancellation that comes in the same turn as
the result, so a loop waiting "for a wake-up or an interval" outlived its stop
(``tests/test_server_stop.py``); every such wait goes through ``wait_until``, on
``asyncio.timeout``, which has no such window.
"""

from __future__ import annotations

import asyncio


async def wait_until(event: asyncio.Event, seconds: float) -> bool:
    """Wait for ``event`` at most ``seconds``: True if it is set, False once they passed."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True
