"""A follower over a log source other than HTTP: the in-memory source of a real local log.

Its behaviour against a real authority and a hostile server is specified in
``tests/integration/test_follower*.py``; here, what taking any ``LogSource``
means for it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from deplog.client.follow.follower import Follower, SyncFollower, SyncResult
from tests.builders import LocalLog


async def test_a_follower_steps_over_any_log_source(local: LocalLog, tmp_path: Path) -> None:
    local.publish()
    heard: list[SyncResult] = []
    async with Follower(local.snapshot(), local.signer.verifier(), tmp_path / "s.db") as follower:
        follower.add_listener(heard.append)
        result = await follower.sync()
        assert (result.old_size, result.new_size) == (0, 2)
        assert heard == [result]
        assert not (await follower.sync()).advanced


def test_a_follower_on_a_given_source_takes_no_request_timeout(
    local: LocalLog, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="timeout"):
        Follower(local.snapshot(), local.signer.verifier(), tmp_path / "s.db", timeout=1.0)


async def test_a_source_that_announces_nothing_is_polled_only(
    local: LocalLog, tmp_path: Path
) -> None:
    stop = asyncio.Event()
    async with Follower(local.snapshot(), local.signer.verifier(), tmp_path / "s.db") as follower:
        with pytest.raises(TypeError):
            await follower.listen(stop)
        await asyncio.wait_for(
            follower.run(0.05, on_advance=lambda _: stop.set(), stop=stop, push=True), 10
        )
        assert follower.state.size == 1


def test_a_sync_follower_steps_over_any_log_source(local: LocalLog, tmp_path: Path) -> None:
    with SyncFollower(local.snapshot(), local.signer.verifier(), tmp_path / "s.db") as follower:
        assert follower.sync().new_size == 1
