"""``wait_until``: an event or a time bound, and a cancellation always ends the wait."""

from __future__ import annotations

import asyncio

import pytest

from deplog.client.plumbing.waiting import wait_until


async def test_an_event_set_meanwhile_ends_the_wait_with_true() -> None:
    event = asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_until(event, 30) is True


async def test_the_time_bound_ends_the_wait_with_false() -> None:
    assert await wait_until(asyncio.Event(), 0.01) is False


async def test_a_cancellation_in_the_turn_the_event_is_set_is_not_dropped() -> None:
    event = asyncio.Event()
    waiting = asyncio.create_task(wait_until(event, 30))
    await asyncio.sleep(0)  # the task is waiting on the event
    event.set()
    waiting.cancel()  # in the same turn as the wake-up
    with pytest.raises(asyncio.CancelledError):
        await waiting
