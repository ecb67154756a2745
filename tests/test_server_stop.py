"""A server's background loops end when they are stopped, whatever else comes in the
same turn of the event loop.

Python 3.11's ``asyncio.wait_for`` returns the inner result, and drops the cancellation,
when both are ready in one turn: a loop that waited with it for "a wake-up or an
interval" went on forever after a stop that came with a wake-up (a NOTIFY, say), and a
server on PostgreSQL never finished stopping. The loops wait with
``client.plumbing.waiting.wait_until``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from deplog.authority.http.server import _STATE, ServerConfig, build_app
from deplog.client.tlog.note import Signer
from tests.builders import serving

pytestmark = pytest.mark.slow  # PostgreSQL

STOPPED_WITHIN = 10.0
"""Seconds a stopped loop has to end: it waits at most a poll interval (about 1 s)."""


async def test_the_published_poll_ends_on_a_stop_that_comes_with_a_wake_up(
    tmp_path: Path, pg_migrated_url: str
) -> None:
    log_key = Signer.generate("stop.test/log")
    config = ServerConfig(tmp_path / "log.db", log_key.name, db_url=pg_migrated_url)
    app = build_app(config, log_key)
    async with serving(app):
        state = app[_STATE]
        (poll,) = [t for t in state.supervisor._tasks if t.get_name() == "published_poll"]
        await asyncio.sleep(0.2)  # the poll is waiting for a wake-up or its interval
        state.publication._learn_now.set()
        poll.cancel()  # in the same turn as the wake-up
        done, _ = await asyncio.wait([poll], timeout=STOPPED_WITHIN)
        assert done, "the poll went on after it was stopped"
        assert poll.cancelled()
