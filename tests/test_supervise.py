"""The supervisor's rules: failures are counted, logged once, restarted with backoff."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

import pytest

from deplog.authority.supervise import Supervisor

FAST = {"base": 0.01, "cap": 0.05}


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def test_a_task_that_raises_is_restarted_and_each_failure_counted() -> None:
    supervisor = Supervisor(**FAST)
    runs = []

    async def flaky() -> None:
        runs.append(1)
        if len(runs) < 4:
            raise OSError("disk I/O error")
        await asyncio.Event().wait()  # the fourth run keeps going

    supervisor.spawn("flaky", flaky)
    await until(lambda: len(runs) == 4)
    assert supervisor.failures == {"flaky": 3}
    await supervisor.stop()


async def test_repeated_identical_failures_are_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    supervisor = Supervisor(**FAST)

    async def broken() -> None:
        raise ValueError("same problem")

    with caplog.at_level(logging.ERROR, logger="deplog.supervise"):
        supervisor.spawn("broken", broken)
        await until(lambda: supervisor.failures["broken"] >= 5)
        await supervisor.stop()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith("background task broken failed (ValueError: same problem at ")
    assert "in broken" in lines[0] and "restarting in" in lines[0]
    assert all(r.exc_info is None for r in caplog.records)  # no traceback


async def test_a_different_failure_is_logged_again(caplog: pytest.LogCaptureFixture) -> None:
    supervisor = Supervisor(**FAST)
    errors = [KeyError("a"), KeyError("a"), OSError("b")]

    async def varied() -> None:
        if errors:
            raise errors.pop(0)
        await asyncio.Event().wait()

    with caplog.at_level(logging.ERROR, logger="deplog.supervise"):
        supervisor.spawn("varied", varied)
        await until(lambda: not errors and supervisor.failures["varied"] == 3)
        await supervisor.stop()
    assert [r.getMessage().split("(")[1].split(":")[0] for r in caplog.records] == [
        "KeyError",
        "OSError",
    ]


async def test_a_one_shot_task_is_not_run_again() -> None:
    supervisor = Supervisor(**FAST)
    runs = []

    async def once() -> None:
        runs.append(1)
        raise RuntimeError("round failed")

    supervisor.spawn("round", once, restart=False)
    await until(lambda: supervisor.failures["round"] == 1)
    await asyncio.sleep(0.2)
    assert runs == [1]
    await supervisor.stop()


async def test_a_task_that_returns_is_done_and_not_a_failure() -> None:
    supervisor = Supervisor(**FAST)
    runs = []

    async def audit() -> None:
        runs.append(1)

    supervisor.spawn("audit", audit)
    await asyncio.sleep(0.2)
    assert (runs, supervisor.failures) == ([1], {"audit": 0})
    await supervisor.stop()


async def test_stop_cancels_every_task_and_starts_no_new_one() -> None:
    supervisor = Supervisor(**FAST)
    cancelled = []

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(1)
            raise

    supervisor.spawn("a", forever)
    supervisor.spawn("b", forever)
    await asyncio.sleep(0.01)
    await supervisor.stop()
    assert cancelled == [1, 1]
    supervisor.spawn("late", forever)
    await asyncio.sleep(0.01)
    assert cancelled == [1, 1] and "late" not in supervisor.failures
    assert supervisor.failures == {"a": 0, "b": 0}


async def test_backoff_doubles_up_to_the_cap() -> None:
    supervisor = Supervisor(base=0.02, cap=0.08)
    started: list[float] = []
    loop = asyncio.get_running_loop()

    async def failing() -> None:
        started.append(loop.time())
        raise OSError("again")

    supervisor.spawn("failing", failing)
    await until(lambda: len(started) >= 7)
    await supervisor.stop()
    gaps = [b - a for a, b in itertools.pairwise(started)]
    # Jitter scales each delay by 0.5 to 1: 0.01-0.02, 0.02-0.04, then 0.04-0.08 at the cap.
    assert all(gap <= 0.08 + 0.05 for gap in gaps)
    assert all(gap >= 0.04 for gap in gaps[2:])
