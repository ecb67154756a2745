"""Where a log is read from, and the one sequence of steps that reads it into the trust state.

A ``LogSource`` answers three questions about one log: its latest checkpoint, a
consistency proof between two sizes, and the leaves in a range; a ``MapProofSource``
also a tool's map proof (the JSON API serves them, a tiles directory holds none). Every
way of reading a log (the HTTP API, tiles, a file, a test double) is one implementation.
Rules:

1. A source is untrusted whatever its transport: it promises the shape of its answers,
   never their truth, which ``client.follow.trust`` checks before anything is kept.
2. ``entries(start, end)`` answers a non-empty prefix of ``[start, end)``; ``fetch_page``
   holds every source to that (an empty page, a longer one, a leaf over
   ``MAX_ENTRY_BYTES``: ``bad_response``), so a source can neither stall a sync nor
   stretch a page.
3. A source that cannot answer raises ``FetchError`` (``fetch_failed``,
   ``response_too_large``, ``bad_response``, ``redirect_refused``), value-free.
4. ``sync_step`` is the one order in which untrusted answers meet the checks: the
   follower and the tests' local log both step through it.
5. A failing consistency proof makes ``sync_step`` read the first leaves of the new tree,
   up to the trusted size, within ``PROVE_SECONDS`` and ``PROVE_BYTES`` (one page held
   at a time), for the trust state to prove a fork from; leaves it cannot have leave
   the suspicion as it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Final, Protocol, runtime_checkable

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.trust import (
    Advanced,
    AdvanceSession,
    SuspectedForkError,
    TrustedState,
)
from deplog.client.model.entries import MAX_ENTRY_BYTES
from deplog.client.tlog.proofs import (
    ConsistencyProof,
    ProofError,
    TreeFrontier,
    consistency_path,
    leaf_hash,
)

PAGE_SIZE: Final = 1000
"""The most entries asked for at once: the authority's ``/v1/entries`` limit."""

CHUNK_SIZE: Final = 20_000
"""Entries an advance verifies between two committed chunks (what a kill may cost)."""

PROVE_SECONDS: Final = 60.0
"""How long reading a tree's prefix to prove a fork may take (rule 5)."""
PROVE_BYTES: Final = 256 * 1024 * 1024
"""How many bytes of leaves reading a tree's prefix may fetch (rule 5)."""

OnProgress = Callable[[int, int], None]
"""Hears a sync's progress: (entries done, entries to do), counted from where this process
took the advance up (a resumed one from its last committed chunk), so a rate is true."""


class FetchError(DeplogError):
    """The authority could not be reached or answered something unusable."""

    codes = frozenset(
        {
            ErrorCode.FETCH_FAILED,
            ErrorCode.RESPONSE_TOO_LARGE,
            ErrorCode.BAD_RESPONSE,
            ErrorCode.REDIRECT_REFUSED,
        }
    )
    code = ErrorCode.FETCH_FAILED


class LogSource(Protocol):
    """One log, read from somewhere untrusted (rules 1 to 3)."""

    async def checkpoint(self) -> bytes:
        """The latest checkpoint note as served, signatures included; not yet verified."""
        ...

    async def consistency(self, old: int, new: int) -> ConsistencyProof:
        """A consistency proof from size ``old`` to size ``new`` as served (maybe wrong)."""
        ...

    async def entries(self, start: int, end: int) -> Sequence[bytes]:
        """Leaves from index ``start`` on: a non-empty prefix of ``[start, end)`` as served."""
        ...


@runtime_checkable
class MapProofSource(Protocol):
    """A source that also serves tools' map proofs: the JSON API (tiles hold none)."""

    async def map_proof(self, tool_id: str) -> tuple[int, bytes]:
        """The binary map proof of ``tool_id`` and the checkpoint size it says it was made
        at (both unverified)."""
        ...


@runtime_checkable
class CheckpointStream(Protocol):
    """A source that also announces checkpoints as the log publishes them."""

    def checkpoints(self) -> AsyncIterator[bytes]:
        """Each announced checkpoint note, a hint verified like any other, until the stream ends."""
        ...


class MemoryLogSource:
    """A log in memory, the test double: a note and leaves nothing ties together (honest, or
    lying: rule 1), served in pages of at most ``page_size`` leaves."""

    def __init__(self, note: bytes, leaves: Iterable[bytes], *, page_size: int = PAGE_SIZE) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.note = note
        self.leaves = tuple(leaves)
        self.page_size = page_size
        self._hashes = tuple(leaf_hash(leaf) for leaf in self.leaves)

    async def checkpoint(self) -> bytes:
        return self.note

    async def consistency(self, old: int, new: int) -> ConsistencyProof:
        try:
            return ConsistencyProof(old, new, tuple(consistency_path(self._hashes, old, new)))
        except ProofError:
            raise FetchError(ErrorCode.FETCH_FAILED, "no proof between those sizes") from None

    async def entries(self, start: int, end: int) -> Sequence[bytes]:
        if not 0 <= start < end <= len(self.leaves):
            raise FetchError(ErrorCode.FETCH_FAILED, "no entries in that range")
        return self.leaves[start : min(end, start + self.page_size)]


async def fetch_page(source: LogSource, start: int, end: int) -> Sequence[bytes]:
    """The next leaves of ``[start, end)`` from ``source``, refused unless it kept rule 2."""
    leaves = await source.entries(start, end)
    if not leaves:
        raise FetchError(ErrorCode.BAD_RESPONSE, "entries page is empty")
    if len(leaves) > end - start:
        raise FetchError(ErrorCode.BAD_RESPONSE, "entries page is longer than asked")
    if any(len(leaf) > MAX_ENTRY_BYTES for leaf in leaves):
        raise FetchError(ErrorCode.BAD_RESPONSE, "entry is over 65535 bytes")
    return leaves


async def sync_step(
    source: LogSource,
    trusted: TrustedState,
    note: bytes | None = None,
    *,
    page_size: int = PAGE_SIZE,
    chunk_size: int = CHUNK_SIZE,
    on_progress: OnProgress | None = None,
) -> Advanced | None:
    """One verified step of ``trusted`` to the source's latest checkpoint, or to ``note``
    (one the caller holds): an interrupted advance first, then the trust state's rules
    in order, pages of ``page_size`` entries, a chunk committed every ``chunk_size``.
    What it changed, or None; a refusal leaves the trusted checkpoint where it was."""
    if page_size < 1 or chunk_size < 1:
        raise ValueError("page_size and chunk_size must be at least 1")
    start_size = trusted.state.size
    noticed: tuple[object, ...] = ()
    resumed = trusted.resume()
    if resumed is not None:
        noticed = (await _run(source, resumed, page_size, chunk_size, on_progress)).noticed
    if note is None:
        note = await source.checkpoint()
    candidate = trusted.check_checkpoint(note)
    old, new = trusted.state.size, candidate.checkpoint.size
    if new == old and trusted.state.trusted is not None:
        trusted.refresh(candidate)
    else:
        proof = await source.consistency(old, new)
        try:
            trusted.check_consistency(candidate, proof)
        except SuspectedForkError:
            prefix = await prefix_root(source, old, page_size)
            if prefix is not None:
                trusted.prove_fork(candidate, proof, prefix)
            raise
        step = await _run(source, trusted.advance(candidate), page_size, chunk_size, on_progress)
        noticed += step.noticed
    if trusted.state.size == start_size:
        return None
    return trusted.advanced(start_size, trusted.state.size, noticed)


async def prefix_root(source: LogSource, size: int, page_size: int = PAGE_SIZE) -> bytes | None:
    """The root of the first ``size`` leaves ``source`` serves, or None if they cannot be
    had within ``PROVE_SECONDS`` and ``PROVE_BYTES`` (rule 5)."""
    frontier, fetched = TreeFrontier(), 0
    try:
        async with asyncio.timeout(PROVE_SECONDS):
            while frontier.size < size:
                end = min(size, frontier.size + page_size)
                for leaf in await fetch_page(source, frontier.size, end):
                    fetched += len(leaf)
                    frontier.append(leaf_hash(leaf))
                if fetched > PROVE_BYTES:
                    return None
    except (DeplogError, TimeoutError):
        return None
    return frontier.root()


async def _run(
    source: LogSource,
    session: AdvanceSession,
    page_size: int,
    chunk_size: int,
    on_progress: OnProgress | None,
) -> Advanced:
    """Feed ``session`` its entries page by page, committing each proven chunk."""
    first, new = session.next_index, session.checkpoint.size
    with session:
        while session.next_index < new:
            start = session.next_index
            session.add(await fetch_page(source, start, min(new, start + page_size)))
            if session.chunk_entries >= chunk_size and session.next_index < new:
                session.commit_chunk(await source.consistency(session.next_index, new))
            if on_progress is not None:
                on_progress(session.next_index - first, new - first)
        return session.finish()
