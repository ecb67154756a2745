"""A follower over a log source other than HTTP: the in-memory source of a real local log.

Its behaviour against a real authority and a hostile server is specified in
``tests/integration/test_follower*.py``; here, what taking any ``LogSource``
means for it, and that its state file knows which log it follows
(``client.follow.state`` invariant 4).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from deplog.client.errors import ErrorCode
from deplog.client.follow.follower import Follower, SyncFollower, SyncResult
from deplog.client.follow.state import LocalState, StateError
from tests.builders import ORIGIN, LocalLog


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


# --- a state file knows which log it follows ----------------------------------------------


def started_over(tmp_path: Path, notices: int) -> LocalLog:
    """An authority started over under the same origin: a fresh log key, a new log."""
    (tmp_path / "started-over").mkdir()
    log = LocalLog(tmp_path / "started-over")
    if notices:
        log.publish_many(notices)
    return log


async def synced_state(local: LocalLog, path: Path) -> None:
    async with Follower(local.snapshot(), local.signer.verifier(), path) as follower:
        await follower.sync()


def forget_log_key(path: Path) -> None:
    """Make ``path`` a state written before log keys were recorded."""
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE log_key")


async def test_a_state_records_its_log_key_with_its_first_verified_step(
    local: LocalLog, tmp_path: Path
) -> None:
    key = local.signer.verifier()
    async with Follower(local.snapshot(), key, tmp_path / "s.db") as follower:
        assert follower.state.log_key is None
        await follower.sync()
        assert follower.state.log_key == key.vkey()


@pytest.mark.parametrize(
    "notices", [0, 1, 3], ids=["smaller: a rollback", "same size: a fork", "larger: a suspicion"]
)
async def test_a_state_is_refused_for_another_key_of_its_origin_never_taken_for_a_fork(
    local: LocalLog, tmp_path: Path, notices: int
) -> None:
    local.publish()
    path = tmp_path / "s.db"
    await synced_state(local, path)
    restarted = started_over(tmp_path, notices)
    before = sorted(tmp_path.iterdir())
    with pytest.raises(StateError) as refused:
        Follower(restarted.snapshot(), restarted.signer.verifier(), path)
    assert refused.value.code == ErrorCode.STATE_FOR_ANOTHER_LOG
    assert refused.value.path == path
    assert refused.value.built_for == f"the log key {local.signer.verifier().vkey()}"
    assert sorted(tmp_path.iterdir()) == before  # no evidence file
    state = LocalState(path, ORIGIN)
    assert (state.size, state.log_key) == (2, local.signer.verifier().vkey())
    state.close()


async def test_a_state_written_before_keys_were_recorded_adopts_its_key_on_its_next_step(
    local: LocalLog, tmp_path: Path
) -> None:
    path = tmp_path / "s.db"
    await synced_state(local, path)
    forget_log_key(path)
    async with Follower(local.snapshot(), local.signer.verifier(), path) as follower:
        assert follower.state.log_key is None
        assert not (await follower.sync()).advanced  # the log is still at its size
        assert follower.state.log_key == local.signer.verifier().vkey()


async def test_a_state_written_before_keys_were_recorded_refuses_a_key_that_never_signed_it(
    local: LocalLog, tmp_path: Path
) -> None:
    path = tmp_path / "s.db"
    await synced_state(local, path)
    forget_log_key(path)
    restarted = started_over(tmp_path, 1)
    with pytest.raises(StateError) as refused:
        Follower(restarted.snapshot(), restarted.signer.verifier(), path)
    assert refused.value.code == ErrorCode.STATE_FOR_ANOTHER_LOG
    key_id = local.signer.verifier().key_id.hex()
    assert refused.value.built_for == f"the log key {ORIGIN}+{key_id}"
