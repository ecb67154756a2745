"""The follower: keeps a local state file in step with one log, one verified step at a time.

Each step is ``client.follow.source.sync_step`` over the follower's source (the
authority's HTTP API unless given another ``LogSource``); the trust state decides
(``client.follow.trust``). ``run`` polls with jittered exponential backoff and also acts
on the checkpoints a source announces. Under a hostile network path:

1. Only a proven fork (``ForkError``) ends ``run``, as soon as it is seen, polled or
   pushed.
2. A failing consistency proof (``SuspectedForkError``) is retried like any failed step;
   the state does not advance and goes stale. ``SUSPICION_ESCALATION`` in a row are said
   once, loudly (an ERROR line naming the evidence); ``counters`` count every one.
3. A pushed event that is over-long, malformed or no verifiable checkpoint is dropped
   and counted; a broken stream is reopened with jittered backoff. Polling goes on.
4. Only a ``DeplogError`` leaves ``run`` for a reason the network chose; anything else is
   a bug and ends ``run`` at once.
5. With a ``fallback`` source (the JSON API behind tiles), a step that fails for a reason
   another path may not have (``RETRY_ELSEWHERE``) is taken again at once through it, to
   its own latest checkpoint; the fallback also announces checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.http import DEFAULT_TIMEOUT, HttpLogSource
from deplog.client.follow.source import (
    CHUNK_SIZE,
    PAGE_SIZE,
    CheckpointStream,
    FetchError,
    LogSource,
    OnProgress,
    sync_step,
)
from deplog.client.follow.state import DEFAULT_MEMORY_BUDGET_MIB, LocalState
from deplog.client.follow.trust import (
    Advanced,
    ForkError,
    RollbackError,
    SuspectedForkError,
    TrustedState,
)
from deplog.client.model.rules import InvalidEntry
from deplog.client.model.status import StatusChange
from deplog.client.plumbing.waiting import wait_until
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.policy import Policy

log = logging.getLogger("deplog.follower")

SUSPICION_ESCALATION = 3
"""Consecutive failing consistency proofs after which the follower escalates (rule 2)."""
RETRY_ELSEWHERE = frozenset(
    {
        ErrorCode.FETCH_FAILED,
        ErrorCode.RESPONSE_TOO_LARGE,
        ErrorCode.BAD_RESPONSE,
        ErrorCode.REDIRECT_REFUSED,
        ErrorCode.BAD_TILE,
        ErrorCode.MALFORMED_TILE,
        ErrorCode.MALFORMED_BUNDLE,
        ErrorCode.SUSPECTED_FORK,
        ErrorCode.ROLLBACK,
    }
)
"""Failures of one path to a log that another path may not have (rule 5)."""


@dataclass
class FollowerCounters:
    """What the follower has shrugged off so far, for metrics and alerting (rules 2, 3)."""

    suspicions: int = 0
    consecutive_suspicions: int = 0
    escalations: int = 0
    push_dropped: int = 0
    push_reconnects: int = 0
    last_evidence: Path | None = None
    """The unproven evidence file of the latest suspicion."""


@dataclass(frozen=True)
class SyncResult:
    """One completed sync: where the trusted state was, where it is, what changed."""

    old_size: int
    new_size: int
    tools: frozenset[str]
    verified_at: datetime
    changes: tuple[StatusChange, ...] = ()
    noticed: tuple[object, ...] = ()
    invalid: tuple[InvalidEntry, ...] = ()

    @property
    def advanced(self) -> bool:
        return self.new_size > self.old_size


OnAdvance = Callable[[SyncResult], Awaitable[None] | None]
"""Called after every verified advance, with what it changed (sync or async)."""


class Follower:
    """Follows one log into a local state file: the library's way to keep a guard current.

    ``source`` is the authority's base URL or a ``LogSource`` the caller keeps (as it does
    ``fallback``). A state built for another log is refused here (``StateError``).
    """

    def __init__(
        self,
        source: str | LogSource,
        trust: Verifier | Policy,
        state_path: Path | str,
        *,
        page_size: int = PAGE_SIZE,
        timeout: float | None = None,
        evidence_dir: Path | None = None,
        fallback: LogSource | None = None,
        chunk_size: int = CHUNK_SIZE,
        memory_mib: float = DEFAULT_MEMORY_BUDGET_MIB,
    ) -> None:
        if not 1 <= page_size <= PAGE_SIZE:
            raise ValueError("page_size must be between 1 and 1000")
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        self._owned: HttpLogSource | None = None
        if isinstance(source, str):
            self._owned = HttpLogSource(
                source, timeout=DEFAULT_TIMEOUT if timeout is None else timeout
            )
            self.source: LogSource = self._owned
        elif timeout is not None:
            raise ValueError("timeout applies to a follower built from a URL")
        else:
            self.source = source
        policy = trust if isinstance(trust, Policy) else Policy.single_log(trust)
        if len(policy.logs) != 1:
            raise ValueError("a follower follows exactly one log")
        self.state = LocalState(state_path, policy.logs[0].verifier.name, memory_mib=memory_mib)
        try:
            self.trust = TrustedState(self.state, policy, evidence_dir)
        except BaseException:  # another log's state (StateError): close it, then say so
            self.state.close()
            raise
        self.page_size = page_size
        self.fallback = fallback
        self.chunk_size = chunk_size
        self._step = asyncio.Lock()
        self._listeners: list[OnAdvance] = []
        self.counters = FollowerCounters()

    async def __aenter__(self) -> Follower:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the state file, and the HTTP source if the follower built it."""
        if self._owned is not None:
            await self._owned.close()
        self.state.close()

    async def sync(self, on_progress: OnProgress | None = None) -> SyncResult:
        """One verified step to the log's latest checkpoint (``on_progress``: see sync_to)."""
        return await self.sync_to(await self.source.checkpoint(), on_progress)

    async def sync_to(self, note: bytes, on_progress: OnProgress | None = None) -> SyncResult:
        """One verified step to the checkpoint ``note`` (fetched, or pushed to us)."""
        async with self._step:
            old_size = self.state.size
            try:
                advanced = await self._step_via(self.source, note, on_progress)
            except DeplogError as failure:
                if isinstance(failure, SuspectedForkError):
                    self._suspect(failure)
                if self.fallback is None or failure.code not in RETRY_ELSEWHERE:
                    raise
                log.warning(
                    "sync via the log source failed: %s; retrying via the fallback", failure.code
                )
                advanced = await self._sync_fallback(self.fallback, on_progress)
            self.counters.consecutive_suspicions = 0
            trusted = self.state.trusted
            assert trusted is not None
            if advanced is None:
                return SyncResult(old_size, old_size, frozenset(), trusted.verified_at)
            result = SyncResult(
                advanced.old_size,
                advanced.new_size,
                advanced.tools,
                trusted.verified_at,
                advanced.changes,
                advanced.noticed,
                advanced.invalid,
            )
        for listener in list(self._listeners):
            outcome = listener(result)
            if outcome is not None:
                await outcome
        return result

    async def _step_via(
        self, source: LogSource, note: bytes | None, on_progress: OnProgress | None
    ) -> Advanced | None:
        """One ``sync_step`` over ``source`` with the follower's page and chunk sizes."""
        return await sync_step(
            source,
            self.trust,
            note,
            page_size=self.page_size,
            chunk_size=self.chunk_size,
            on_progress=on_progress,
        )

    async def _sync_fallback(
        self, fallback: LogSource, on_progress: OnProgress | None
    ) -> Advanced | None:
        try:
            return await self._step_via(fallback, None, on_progress)
        except SuspectedForkError as suspicion:
            self._suspect(suspicion)
            raise

    def _suspect(self, suspicion: SuspectedForkError) -> None:
        """Count a failing proof; say so loudly, once, when it persists (rule 2)."""
        counters = self.counters
        counters.suspicions += 1
        counters.consecutive_suspicions += 1
        counters.last_evidence = suspicion.evidence
        if counters.consecutive_suspicions == SUSPICION_ESCALATION:
            counters.escalations += 1
            log.error(
                "consistency proofs keep failing between signed checkpoints (%d in a row): "
                "a possible fork or a tampering network path; the state will not advance "
                "and goes stale; unproven evidence: %s",
                counters.consecutive_suspicions,
                suspicion.evidence,
            )

    def add_listener(self, listener: OnAdvance) -> None:
        """Call ``listener`` after every verified advance (e.g. to evict cache keys)."""
        self._listeners.append(listener)

    async def run(
        self,
        interval: float = 30.0,
        *,
        on_advance: OnAdvance | None = None,
        stop: asyncio.Event | None = None,
        max_backoff: float = 300.0,
        push: bool = True,
    ) -> None:
        """Stay in sync until ``stop``, polling and, with ``push``, listening (rules 1 to 3)."""
        stop = stop or asyncio.Event()
        if on_advance is not None:
            self.add_listener(on_advance)
        tasks = {asyncio.create_task(self._poll(interval, stop, max_backoff))}
        if push and self._announcer() is not None:
            tasks.add(asyncio.create_task(self.listen(stop)))
        try:
            while tasks and not stop.is_set():
                done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()  # a fork (or a bug) ends everything here
        finally:
            if on_advance is not None:
                self._listeners.remove(on_advance)
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _poll(self, interval: float, stop: asyncio.Event, max_backoff: float) -> None:
        failures = 0
        while not stop.is_set():
            try:
                await self.sync()
                failures = 0
                delay = interval
            except ForkError:
                raise
            except DeplogError as err:
                failures += 1
                delay = min(max_backoff, interval * 2 ** min(failures, 10))
                log.warning("sync failed: %s (attempt %d)", err.code, failures)
            delay *= random.uniform(0.8, 1.2)
            await wait_until(stop, delay)

    async def listen(self, stop: asyncio.Event, max_backoff: float = 30.0) -> None:
        """Follow the source's checkpoint announcements until ``stop`` (rules 1, 3)."""
        announcer = self._announcer()
        if announcer is None:
            raise TypeError("this log source announces no checkpoints")
        failures = 0
        while not stop.is_set():
            try:
                async for note in _until(stop, announcer.checkpoints()):
                    failures = 0
                    await self._on_push(note)
            except FetchError as err:
                if err.code != ErrorCode.FETCH_FAILED:  # response_too_large, bad_response
                    self.counters.push_dropped += 1
                log.info("push stream lost: %s", err.code)
            if stop.is_set():
                return
            failures += 1
            self.counters.push_reconnects += 1
            delay = min(max_backoff, 0.25 * 2 ** min(failures, 10)) * random.uniform(0.5, 1.5)
            await wait_until(stop, delay)

    def _announcer(self) -> CheckpointStream | None:
        """The source that announces checkpoints: the log source, else the fallback (rule 5)."""
        for source in (self.source, self.fallback):
            if isinstance(source, CheckpointStream):
                return source
        return None

    async def _on_push(self, note: bytes) -> None:
        """A pushed checkpoint is a hint: verified first, acted on only if it is news."""
        try:
            self.trust.check_checkpoint(note)
        except ForkError:
            raise
        except RollbackError:
            log.info("ignored a stale pushed checkpoint")
            return
        except DeplogError as err:
            self.counters.push_dropped += 1
            log.info("dropped a pushed event that is no acceptable checkpoint: %s", err.code)
            return
        try:
            await self.sync_to(note)
        except ForkError:
            raise
        except DeplogError as err:
            log.info("sync after push failed: %s (polling will retry)", err.code)


async def _until(stop: asyncio.Event, notes: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``notes`` until ``stop`` is set: a live stream is left at once when it is, while a
    note being acted on is never cut short."""
    stopped = asyncio.ensure_future(stop.wait())
    following: asyncio.Future[bytes] | None = None
    try:
        while True:
            following = asyncio.ensure_future(anext(notes))
            await asyncio.wait((following, stopped), return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                return
            try:
                note = following.result()
            except StopAsyncIteration:
                return
            yield note
    finally:
        stopped.cancel()
        if following is not None and not following.done():
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await following
        aclose = getattr(notes, "aclose", None)
        if aclose is not None:
            await aclose()


class SyncFollower:
    """A blocking wrapper for code without an event loop: ``sync()`` and ``close()``."""

    def __init__(
        self,
        source: str | LogSource,
        trust: Verifier | Policy,
        state_path: Path | str,
        **kwargs: Any,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self.follower = Follower(source, trust, state_path, **kwargs)
        except BaseException:  # another log's state, say: nothing is left open
            self._loop.close()
            raise

    @property
    def state(self) -> LocalState:
        return self.follower.state

    def sync(self) -> SyncResult:
        return self._loop.run_until_complete(self.follower.sync())

    def close(self) -> None:
        self._loop.run_until_complete(self.follower.close())
        self._loop.close()

    def __enter__(self) -> SyncFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
