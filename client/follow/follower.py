"""The follower: fetches from an authority and feeds ``TrustedState``, one verified step a sync.

A sync is: fetch ``/checkpoint``; verify it (signature, no rollback, no fork);
if it is new, fetch a consistency proof from the trusted size and verify it;
then fetch the new entries in pages of at most ``page_size`` and verify each
page as it arrives (memory stays bounded by one page); finally the tree must
match the checkpoint and the advance commits. Every response body is read
with a size bound and a timeout. ``run`` repeats syncs on an interval with
jittered exponential backoff after failures; a fork stops it for good.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import (
    Advanced,
    Candidate,
    ForkError,
    TrustedState,
)
from deplog.client.model import canonical
from deplog.client.model.canonical import JSONFormatError
from deplog.client.model.status import StatusChange
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.policy import Policy
from deplog.client.tlog.proofs import ConsistencyProof

__all__ = [
    "MAX_CHECKPOINT_BYTES",
    "MAX_PAGE_BYTES",
    "MAX_PROOF_BYTES",
    "PAGE_SIZE",
    "PUSH_READ_TIMEOUT",
    "FetchError",
    "Follower",
    "OnAdvance",
    "SyncFollower",
    "SyncResult",
]

log = logging.getLogger("deplog.follower")

PAGE_SIZE = 1000
MAX_CHECKPOINT_BYTES = 1 << 20
MAX_PROOF_BYTES = 64 * 1024
MAX_PAGE_BYTES = 128 * 1024 * 1024
PUSH_READ_TIMEOUT = 60.0  # the authority sends a keep-alive every 15 s


class FetchError(DeplogError):
    """The authority could not be reached or answered something unusable."""

    codes = frozenset(
        {ErrorCode.FETCH_FAILED, ErrorCode.RESPONSE_TOO_LARGE, ErrorCode.BAD_RESPONSE}
    )


@dataclass(frozen=True)
class SyncResult:
    """One completed sync: where the trusted state was, where it is, what changed."""

    old_size: int
    new_size: int
    tools: frozenset[str]
    verified_at: datetime
    changes: tuple[StatusChange, ...] = ()

    @property
    def advanced(self) -> bool:
        return self.new_size > self.old_size


OnAdvance = Callable[[SyncResult], Awaitable[None] | None]
"""Called after every verified advance, with what it changed (sync or async)."""


class Follower:
    """Follows one authority into a local state file."""

    def __init__(
        self,
        url: str,
        trust: Verifier | Policy,
        state_path: Path | str,
        *,
        page_size: int = PAGE_SIZE,
        timeout: float = 10.0,
        evidence_dir: Path | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        if not 1 <= page_size <= PAGE_SIZE:
            raise ValueError("page_size must be between 1 and 1000")
        self.url = url.rstrip("/")
        policy = trust if isinstance(trust, Policy) else Policy.single_log(trust)
        if len(policy.logs) != 1:
            raise ValueError("a follower follows exactly one log")
        self.state = LocalState(state_path, policy.logs[0].verifier.name)
        self.trust = TrustedState(self.state, policy, evidence_dir)
        self.page_size = page_size
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._session = session
        self._own_session = session is None
        self._step = asyncio.Lock()
        self._listeners: list[OnAdvance] = []

    async def __aenter__(self) -> Follower:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
        self._session = None
        self.state.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    async def _get(self, path: str, limit: int) -> bytes:
        try:
            async with self._http().get(self.url + path, timeout=self.timeout) as response:
                if response.status != 200:
                    raise FetchError(ErrorCode.FETCH_FAILED, f"HTTP {response.status}")
                if (response.content_length or 0) > limit:
                    raise FetchError(ErrorCode.RESPONSE_TOO_LARGE, "response exceeds its bound")
                body = bytearray()
                async for chunk in response.content.iter_chunked(64 * 1024):
                    body += chunk
                    if len(body) > limit:
                        raise FetchError(ErrorCode.RESPONSE_TOO_LARGE, "response exceeds its bound")
                return bytes(body)
        except (aiohttp.ClientError, TimeoutError):
            raise FetchError(ErrorCode.FETCH_FAILED, "authority unreachable") from None

    async def _get_json(self, path: str, limit: int) -> Any:
        """A JSON response, parsed strictly (bounded depth, no duplicate keys)."""
        try:
            return canonical.loads(await self._get(path, limit), max_depth=4)
        except JSONFormatError:
            raise FetchError(ErrorCode.BAD_RESPONSE, "response is not the expected JSON") from None

    async def sync(self) -> SyncResult:
        """One verified step to the authority's latest checkpoint."""
        return await self.sync_to(await self._get("/checkpoint", MAX_CHECKPOINT_BYTES))

    async def sync_to(self, note: bytes) -> SyncResult:
        """One verified step to the checkpoint ``note`` (fetched, or pushed to us).

        Steps run one at a time (a push can arrive during a poll); listeners
        registered with ``add_listener`` hear about every advance.
        """
        async with self._step:
            candidate = self.trust.check_checkpoint(note)
            old_size = self.state.size
            if candidate.checkpoint.size == old_size and self.state.trusted is not None:
                self.trust.refresh(candidate)
                return SyncResult(old_size, old_size, frozenset(), self.state.trusted.verified_at)
            new_size = candidate.checkpoint.size
            proof_json = await self._get_json(
                f"/v1/proofs/consistency?old={old_size}&new={new_size}", MAX_PROOF_BYTES
            )
            try:
                proof = ConsistencyProof.from_json(proof_json)
            except DeplogError:
                raise FetchError(ErrorCode.BAD_RESPONSE, "malformed consistency proof") from None
            self.trust.check_consistency(candidate, proof)
            advanced = await self._fetch_and_advance(candidate)
            assert self.state.trusted is not None
            result = SyncResult(
                advanced.old_size,
                advanced.new_size,
                advanced.tools,
                self.state.trusted.verified_at,
                advanced.changes,
            )
        for listener in list(self._listeners):
            outcome = listener(result)
            if outcome is not None:
                await outcome
        return result

    def add_listener(self, listener: OnAdvance) -> None:
        """Call ``listener`` after every verified advance (e.g. to evict cache keys)."""
        self._listeners.append(listener)

    async def _fetch_and_advance(self, candidate: Candidate) -> Advanced:
        size = candidate.checkpoint.size
        with self.trust.advance(candidate) as session:
            start = session.next_index
            while start < size:
                end = min(size, start + self.page_size)
                page = await self._get_json(f"/v1/entries?start={start}&end={end}", MAX_PAGE_BYTES)
                leaves = _decode_page(page, start, end)
                session.add(leaves)
                start += len(leaves)
            return session.finish()

    async def run(
        self,
        interval: float = 30.0,
        *,
        on_advance: OnAdvance | None = None,
        stop: asyncio.Event | None = None,
        max_backoff: float = 300.0,
        push: bool = True,
    ) -> None:
        """Stay in sync until ``stop`` is set; a fork ends the loop (ForkError).

        Polls every ``interval`` seconds, with jittered exponential backoff
        after failures. With ``push``, it also listens to the authority's
        checkpoint stream and takes a verified step as soon as a new checkpoint
        is announced; the stream only hints, polling goes on underneath, and a
        dropped stream is reconnected with jittered backoff.
        """
        stop = stop or asyncio.Event()
        if on_advance is not None:
            self.add_listener(on_advance)
        listener = asyncio.create_task(self.listen(stop)) if push else None
        try:
            await self._poll(interval, stop, max_backoff)
        finally:
            if on_advance is not None:
                self._listeners.remove(on_advance)
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener

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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)

    async def listen(self, stop: asyncio.Event, max_backoff: float = 30.0) -> None:
        """Follow the push stream until ``stop``; each announced checkpoint is verified."""
        failures = 0
        while not stop.is_set():
            try:
                async for note in self._stream():
                    failures = 0
                    await self._on_push(note)
            except (aiohttp.ClientError, TimeoutError, FetchError) as err:
                log.info("push stream lost: %s", type(err).__name__)
            failures += 1
            delay = min(max_backoff, 0.25 * 2 ** min(failures, 10)) * random.uniform(0.5, 1.5)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)

    async def _on_push(self, note: bytes) -> None:
        """A pushed checkpoint is a hint: verified first, acted on only if it is news."""
        try:
            await self.sync_to(note)
        except ForkError:
            raise
        except DeplogError as err:  # stale, unverifiable, or the sync failed: polling goes on
            log.info("pushed checkpoint not taken: %s", err.code)

    async def _stream(self) -> AsyncIterator[bytes]:
        """The checkpoint notes of the SSE stream, as they arrive (bounded per event)."""
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeout.total, sock_read=PUSH_READ_TIMEOUT
        )
        async with self._http().get(
            self.url + "/v1/checkpoints/stream", timeout=timeout
        ) as response:
            if response.status != 200:
                raise FetchError(ErrorCode.FETCH_FAILED, f"HTTP {response.status}")
            data: list[str] = []
            size = 0
            async for raw in response.content:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if line.startswith("data:"):
                    value = line[5:].removeprefix(" ")
                    size += len(value) + 1
                    if size > MAX_CHECKPOINT_BYTES:
                        raise FetchError(ErrorCode.RESPONSE_TOO_LARGE, "pushed event is too large")
                    data.append(value)
                elif not line:
                    if data:
                        yield ("\n".join(data) + "\n").encode("utf-8")
                    data, size = [], 0


def _decode_page(page: Any, start: int, end: int) -> list[bytes]:
    """The leaves of an entries response, which must start at ``start`` and not overrun."""
    if not isinstance(page, dict) or page.get("start") != start:
        raise FetchError(ErrorCode.BAD_RESPONSE, "entries response starts elsewhere")
    entries = page.get("entries")
    if not isinstance(entries, list) or not entries or len(entries) > end - start:
        raise FetchError(ErrorCode.BAD_RESPONSE, "entries response has a wrong count")
    leaves = []
    for item in entries:
        try:
            leaves.append(base64.b64decode(item, validate=True))
        except (ValueError, TypeError):
            raise FetchError(ErrorCode.BAD_RESPONSE, "entry is not base64") from None
    return leaves


class SyncFollower:
    """A blocking wrapper for code without an event loop: ``sync()`` and ``close()``."""

    def __init__(
        self, url: str, trust: Verifier | Policy, state_path: Path | str, **kwargs: Any
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self.follower = Follower(url, trust, state_path, **kwargs)

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
