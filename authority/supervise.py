"""Supervised background tasks: a failure is logged once, counted, and the task restarts.

A server's background work has no caller to report to, so an exception that ends it
would go unnoticed while the server looks healthy. Rules:

1. Every background task of a server runs under its ``Supervisor``, never a bare
   ``asyncio.create_task``.
2. An unexpected exception ends the task's run, never the server. It is counted per task
   (``deplog_background_failures_total{task}``) and logged as one line without a traceback
   (the task, the exception, where it was raised); the same failure again is not logged
   again until the task fails differently or ran longer than ``cap`` seconds in between.
3. A restartable task runs again after a jittered, capped exponential backoff (``base``
   doubling up to ``cap``, times [0.5, 1]), reset once a run lasted longer than ``cap``;
   a one-shot task (``restart=False``) is not run again.
4. A task that returns is done; cancellation is never a failure.
5. ``stop`` cancels every task and waits for all of them, never raises, and no new task
   starts after it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from deplog.authority import collectors

log = logging.getLogger("deplog.supervise")

BACKOFF_BASE = 0.5
"""Seconds before the first restart of a failed task (before jitter)."""
BACKOFF_CAP = 30.0
"""Seconds between restarts at most; also how long a run must last to count as recovered."""
_MAX_MESSAGE = 200

Work = Callable[[], Awaitable[None]]
"""Starts one run of a task; called again for each restart."""


def _describe(err: Exception) -> str:
    """``Type: message at file:line in function``, the innermost frame: one line of context."""
    message = " ".join(str(err).split())[:_MAX_MESSAGE]
    frames = traceback.extract_tb(err.__traceback__)
    where = ""
    if frames:
        frame = frames[-1]
        where = f" at {Path(frame.filename).name}:{frame.lineno} in {frame.name}"
    return f"{type(err).__name__}: {message}{where}" if message else f"{type(err).__name__}{where}"


class Supervisor:
    """Runs a server's background tasks under rules 1 to 5."""

    def __init__(self, *, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP) -> None:
        self.base = base
        self.cap = cap
        self.failures: dict[str, int] = {}
        self._logged: dict[str, str] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False

    def spawn(self, name: str, work: Work, *, restart: bool = True) -> None:
        """Run ``work`` in the background as task ``name`` (a bounded metrics label)."""
        if self._stopping:
            return
        self.failures.setdefault(name, 0)
        task = asyncio.create_task(self._run(name, work, restart), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, name: str, work: Work, restart: bool) -> None:
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            started = loop.time()
            try:
                await work()
                return
            except Exception as err:
                recovered = loop.time() - started > self.cap
                if recovered:
                    attempt = 0
                    self._logged.pop(name, None)
                delay = min(self.cap, self.base * 2**attempt) * random.uniform(0.5, 1.0)
                self._failed(name, err, delay if restart else None)
            if not restart:
                return
            attempt += 1
            await asyncio.sleep(delay)

    def _failed(self, name: str, err: Exception, delay: float | None) -> None:
        self.failures[name] += 1
        described = _describe(err)
        if self._logged.get(name) == described:
            return
        self._logged[name] = described
        then = "not restarted" if delay is None else f"restarting in {delay:.1f} s"
        log.error("background task %s failed (%s); %s", name, described, then)

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """``deplog_background_failures_total{task}`` (rule 2)."""
        collectors.labeled_counter(
            registry,
            "deplog_background_failures_total",
            "Unexpected failures of background tasks (each restarted), by task.",
            "task",
            lambda: self.failures,
        )

    async def stop(self) -> None:
        """Cancel every task and wait until each has ended (rule 5)."""
        self._stopping = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
