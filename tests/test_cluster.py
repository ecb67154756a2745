"""``authority.storage.cluster``: what processes sharing one PostgreSQL log agree on, rule by rule.

Each ``Cluster`` here stands for one authority process (its own connections) on a
real, migrated database of the session's throwaway cluster; no mocks.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import psycopg
import pytest

from deplog.authority.storage.cluster import IDLE, PUBLISHED_CHANNEL, Cluster
from tests.conftest import migrated

pytestmark = pytest.mark.slow  # PostgreSQL

SETTLE = 0.3
"""Seconds after which a task that could proceed would have."""


@pytest.fixture
def db(pg_url: str) -> str:
    return migrated(pg_url)


@pytest.fixture
async def processes(db: str) -> AsyncIterator[tuple[Cluster, Cluster]]:
    first, second = Cluster(db, round_timeout=10), Cluster(db, round_timeout=10)
    await first.prepare()
    await second.prepare()
    yield first, second
    await first.close()
    await second.close()


async def test_rounds_of_two_processes_never_overlap_and_the_second_sees_the_first_row(
    processes: tuple[Cluster, Cluster],
) -> None:
    first, second = processes
    seen: list[tuple[int, bytes] | None] = []

    async def second_round() -> None:
        async with second.round() as round_:
            seen.append(round_.published)

    async with first.round() as round_:
        assert round_.published is None
        waiting = asyncio.create_task(second_round())
        await asyncio.sleep(SETTLE)
        assert not waiting.done()  # the lock is the first process's until it commits
        round_.save(5, b"note of 5\n")
    await asyncio.wait_for(waiting, 10)
    assert seen == [(5, b"note of 5\n")]


async def test_a_saved_row_never_moves_to_a_smaller_size(
    processes: tuple[Cluster, Cluster],
) -> None:
    first, second = processes
    async with first.round() as round_:
        round_.save(7, b"seven\n")
    async with second.round() as round_:
        round_.save(6, b"six\n")  # a late round: silently not applied
    assert await first.published() == (7, b"seven\n")


async def test_a_killed_process_round_frees_the_lock_at_once(
    processes: tuple[Cluster, Cluster], db: str
) -> None:
    first, second = processes
    entered = asyncio.Event()
    hold = asyncio.Event()

    async def stuck_round() -> None:
        async with first.round() as round_:
            round_.save(3, b"three\n")  # never committed
            entered.set()
            await hold.wait()

    stuck = asyncio.create_task(stuck_round())
    await asyncio.wait_for(entered.wait(), 10)
    with psycopg.connect(db, autocommit=True) as admin:  # the process dies: its backend goes
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE state <> 'idle' AND application_name = 'deplog-cluster'"
        )
    async with asyncio.timeout(5):
        async with second.round() as round_:
            assert round_.published is None  # the dead round's row was never committed
    hold.set()
    with pytest.raises(psycopg.Error):
        await stuck


HOLD_A_ROUND = """
import asyncio, sys
from deplog.authority.storage.cluster import Cluster

async def main():
    async with Cluster(sys.argv[1]).round():
        print("holding", flush=True)
        await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_a_frozen_process_round_frees_the_lock_within_the_idle_bound(
    processes: tuple[Cluster, Cluster], db: str
) -> None:
    """Rule 5: SIGSTOP (alive, connected, silent) ends the holder's heartbeat."""
    _, second = processes
    holder = subprocess.Popen([sys.executable, "-c", HOLD_A_ROUND, db], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"holding\n"
        os.kill(holder.pid, signal.SIGSTOP)
        started = time.monotonic()
        async with second.round():
            waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait(10)
    assert waited < IDLE + 1.0


async def test_a_live_round_longer_than_the_idle_bound_commits(
    processes: tuple[Cluster, Cluster],
) -> None:
    """Rule 5: the heartbeat keeps a round waiting for a slow witness alive."""
    first, second = processes
    async with first.round() as round_:
        await asyncio.sleep(3 * IDLE)
        round_.save(9, b"nine\n")
    assert await second.published() == (9, b"nine\n")


async def test_witness_progress_is_shared_and_only_grows(
    processes: tuple[Cluster, Cluster],
) -> None:
    first, second = processes
    async with first.witness("w1") as progress:
        assert progress.size is None
        progress.cosigned(10)
    async with second.witness("w1") as progress:
        assert progress.size == 10  # what another process got it to cosign
        progress.cosigned(4)  # a stale success never lowers it
    async with first.witness("w1") as progress:
        assert progress.size == 10
    async with first.witness("w2") as progress:
        assert progress.size is None  # per witness


async def test_requests_to_one_witness_are_serialized_across_processes(
    processes: tuple[Cluster, Cluster],
) -> None:
    first, second = processes
    order: list[str] = []

    async def second_request() -> None:
        async with second.witness("w1") as progress:
            order.append(f"second from {progress.size}")

    async with first.witness("w1") as progress:
        waiting = asyncio.create_task(second_request())
        await asyncio.sleep(SETTLE)
        order.append("first")
        progress.cosigned(8)
    await asyncio.wait_for(waiting, 10)
    assert order == ["first", "second from 8"]


async def test_a_saved_row_wakes_every_listening_process(
    processes: tuple[Cluster, Cluster],
) -> None:
    first, second = processes
    woken = asyncio.Event()
    calls = 0

    def wake() -> None:
        nonlocal calls
        calls += 1
        if calls > 1:  # the first call is the one made on connecting
            woken.set()

    listening = asyncio.create_task(second.listen(wake))
    try:
        while calls == 0:
            await asyncio.sleep(0.01)
        async with first.round() as round_:
            round_.save(2, b"two\n")
        await asyncio.wait_for(woken.wait(), 5)
    finally:
        listening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await listening


async def test_a_lost_listening_connection_ends_listen_with_an_error(
    processes: tuple[Cluster, Cluster], db: str
) -> None:
    """``listen`` never returns quietly: the supervisor must see the failure, count it and
    restart it (the server's polling covers the gap)."""
    _, second = processes
    connected = asyncio.Event()
    listening = asyncio.create_task(second.listen(connected.set))
    await asyncio.wait_for(connected.wait(), 10)
    with psycopg.connect(db, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE query LIKE 'LISTEN {PUBLISHED_CHANNEL};%'"
        )
    with pytest.raises(psycopg.OperationalError):
        await asyncio.wait_for(listening, 10)


async def test_a_round_that_waits_past_its_timeout_fails_once_and_is_not_retried(
    db: str, processes: tuple[Cluster, Cluster]
) -> None:
    """A lock timeout is the round's answer (rule 1), not a lost connection to open again."""
    first, _ = processes
    impatient = Cluster(db, round_timeout=0.5)
    try:
        async with first.round():
            started = time.monotonic()
            with pytest.raises(psycopg.errors.LockNotAvailable):
                async with impatient.round():
                    pass
            waited = time.monotonic() - started
        assert waited < 1.0  # one timeout of 0.5 s, not two
        async with impatient.round() as round_:  # and the next round has a connection
            assert round_.published is None
    finally:
        await impatient.close()


async def test_a_round_holds_the_witnesses_it_names_until_its_commit(
    processes: tuple[Cluster, Cluster],
) -> None:
    """Rule 2 inside a round: a request to a witness the round holds waits for the round,
    and starts from the progress the round committed; other witnesses are free."""
    first, second = processes
    async with first.witness("w1") as progress:
        progress.cosigned(3)
    order: list[str] = []

    async def second_request(name: str) -> None:
        async with second.witness(name) as progress:
            order.append(f"{name} from {progress.size}")

    async with first.round(["w1", "w1"]) as round_:
        assert round_.witnesses.keys() == {"w1"} and round_.witnesses["w1"].size == 3
        held = asyncio.create_task(second_request("w1"))
        await asyncio.wait_for(second_request("w2"), 10)  # not held: not waiting
        await asyncio.sleep(SETTLE)
        order.append("round")
        round_.witnesses["w1"].cosigned(9)
        round_.save(9, b"nine\n")
    await asyncio.wait_for(held, 10)
    assert order == ["w2 from None", "round", "w1 from 9"]
