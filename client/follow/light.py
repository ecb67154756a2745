"""The light verifier: verified verdicts on the tools a host uses, without following the log.

It holds only the last verified checkpoint (``LightState``, a file if the host names
one) and, at that checkpoint, the map proofs of the tools it was asked about. Rules:

1. A checkpoint passes the follower's rules 1 and 2, read once for both
   (``client.follow.trust.CheckpointRules``): the policy, never below the trusted size
   (``rollback``), another root at the trusted size a proven ``fork`` with evidence, a
   failing consistency proof a ``suspected_fork``. A refused one changes nothing, and a
   same-size note only replaces the trusted one if its quorum is newer.
2. The state file holds the last verified note, written atomically after each change;
   at load it is verified again and is the trust floor. Its time counts only from its
   quorum's cosignatures (under ``quorum none``, from the next refresh).
3. A tool's status comes only from its map proof verified under the trusted map root
   (``client.map.proof``). A proof the source says it made at another size is not
   used: a larger one refreshes the checkpoint once; a proof that does not verify makes
   the tool ``unknown`` with its code (``bad_map_proof``, ``malformed_map_proof``,
   ``missing_map_line``) until the checkpoint moves; a failed fetch, ``fetch_failed``
   until the next ``prepare``. Proofs are kept until the checkpoint moves, for at most
   ``MAX_TOOLS`` tools.
4. Verdicts and reasons are the guard's (``client.cache.guard.decide``), fresh from the
   quorum's time; a notice counts as processed when the first verified checkpoint that
   covers it was (at most ``MAX_ADVANCES`` remembered, older ones at the oldest: later,
   so a copy is judged stale rather than fresh).
5. Each decision names its guarantee: ``map_witnessed`` when the policy's
   ``map-quorum`` of map-verifying witnesses cosigned the checkpoint, else
   ``log_signed`` (the log's word on its map line, a lie only full followers and
   auditors detect).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import random
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Final

from deplog.client.cache.guard import (
    DEFAULT_FRESHNESS,
    Decision,
    Found,
    ProcessedThrough,
    Verdict,
    decide,
    notices_behind,
    valid_identity,
)
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.source import CheckpointStream, LogSource, MapProofSource
from deplog.client.follow.state import TrustedCheckpoint
from deplog.client.follow.trust import Candidate, CheckpointRules
from deplog.client.map.line import require_map_root
from deplog.client.map.proof import MapProof, MapProofDocument, verify_map_proof
from deplog.client.model.status import StatusIndex
from deplog.client.plumbing.files import write_atomic
from deplog.client.plumbing.waiting import wait_until
from deplog.client.tlog.note import MAX_NOTE_SIZE, Verifier
from deplog.client.tlog.policy import Policy
from deplog.client.tlog.proofs import EMPTY_ROOT, ConsistencyProof

__all__ = ["MAX_ADVANCES", "MAX_TOOLS", "Guarantee", "LightState", "LightVerifier"]

MAX_TOOLS: Final = 10_000
"""Tools whose proofs a light verifier keeps at one checkpoint (about 1 KB each)."""
MAX_ADVANCES: Final = 1024
"""Advances whose times are remembered, to date when a notice was processed (rule 4)."""
FETCHES: Final = 8
"""Map proofs fetched at once."""
_EPOCH: Final = datetime.fromtimestamp(0, UTC)

log = logging.getLogger(__name__)


class Guarantee(StrEnum):
    """What a light verifier's decision rests on (rule 5)."""

    MAP_WITNESSED = "map_witnessed"
    LOG_SIGNED = "log_signed"


class LightState:
    """The last verified checkpoint, kept in memory and, with ``path``, in a file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.trusted: TrustedCheckpoint | None = None
        self.map_witnessed = False

    @property
    def size(self) -> int:
        return 0 if self.trusted is None else self.trusted.size

    @property
    def root(self) -> bytes:
        return EMPTY_ROOT if self.trusted is None else self.trusted.checkpoint.root_hash

    def load(self, rules: CheckpointRules) -> None:
        """The persisted note, verified again (rule 2); nothing if there is no file."""
        if self.path is None or not self.path.exists():
            return
        with open(self.path, "rb") as f:
            note = f.read(MAX_NOTE_SIZE + 1)
        candidate = rules.check_checkpoint(note)
        quorum = candidate.witnessed_at
        at = _EPOCH if quorum is None else datetime.fromtimestamp(quorum, UTC)
        self.set(candidate, at)

    def set(self, candidate: Candidate, verified_at: datetime) -> None:
        """Trust ``candidate`` (rule 1 passed) as current at ``verified_at``, then persist it."""
        if self.path is not None and (self.trusted is None or self.trusted.note != candidate.note):
            write_atomic(self.path, [candidate.note])
        self.trusted = TrustedCheckpoint(candidate.note, candidate.checkpoint, verified_at)
        self.map_witnessed = candidate.map_witnessed_at is not None


@dataclass(frozen=True)
class _Proven:
    """A tool's map proof verified at the trusted checkpoint, its record as a status index."""

    proof: MapProof
    index: StatusIndex


@dataclass(frozen=True)
class _Failed:
    """Why a tool has no verified proof at the trusted checkpoint (rule 3)."""

    code: ErrorCode


class _Unproven(Exception):
    """A status asked of a tool without a verified proof."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class LightVerifier:
    """Decides like a ``Guard`` from the trusted checkpoint and per-tool map proofs only."""

    def __init__(
        self,
        source: LogSource,
        trust: Verifier | Policy,
        *,
        proofs: MapProofSource | None = None,
        state: Path | None = None,
        evidence_dir: Path | None = None,
        freshness: timedelta = DEFAULT_FRESHNESS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if freshness <= timedelta(0):
            raise ValueError("freshness must be positive")
        if proofs is None:
            if not isinstance(source, MapProofSource):
                raise ValueError("this source serves no map proofs: give proofs=")
            proofs = source
        self.source = source
        self.proofs = proofs
        self.freshness = freshness.total_seconds()
        self.clock = clock
        self.state = LightState(state)
        where = evidence_dir or (state.parent if state is not None else Path.cwd())
        self.rules = CheckpointRules(self.state, trust, where, "light verifier")
        self.state.load(self.rules)
        self._tools: dict[str, _Proven | _Failed] = {}
        self._advances: list[tuple[int, float]] = []
        self.failures: dict[str, int] = {}
        """Unexpected failures of the background loops, by loop and exception type."""
        self._step = asyncio.Lock()
        if self.state.trusted is not None:
            self._advances.append((self.state.size, self.clock()))

    @property
    def trusted(self) -> TrustedCheckpoint | None:
        return self.state.trusted

    @property
    def guarantee(self) -> Guarantee:
        return Guarantee.MAP_WITNESSED if self.state.map_witnessed else Guarantee.LOG_SIGNED

    async def refresh(self, note: bytes | None = None) -> bool:
        """Verify the source's latest checkpoint (or ``note``) and trust it (rule 1);
        whether the trusted size moved. A refusal raises and changes nothing."""
        async with self._step:  # one at a time: a slower, smaller one never lands last
            return await self._refresh(note)

    async def _refresh(self, note: bytes | None) -> bool:
        if note is None:
            note = await self.source.checkpoint()
        candidate = self.rules.check_checkpoint(note, self.clock())
        old, new = self.state.size, candidate.checkpoint.size
        now = datetime.fromtimestamp(self.clock(), UTC)
        verified_at = now if candidate.witnessed_at is None else candidate.current_as_of()
        trusted = self.state.trusted
        if trusted is not None and new == old:
            if verified_at > trusted.verified_at:
                self.state.set(candidate, verified_at)
            return False
        if new > old:
            proof = await self.source.consistency(old, new) if old else ConsistencyProof(0, new, ())
            self.rules.check_consistency(candidate, proof)
        self.state.set(candidate, verified_at)
        self._tools.clear()
        self._advances = [*self._advances[-(MAX_ADVANCES - 1) :], (new, now.timestamp())]
        return True

    async def prepare(self, tool_ids: Collection[str]) -> None:
        """Fetch and verify, at the trusted checkpoint, the proofs ``check`` will need for
        ``tool_ids`` (rule 3); with none trusted yet, or a larger one seen on the way, the
        source's checkpoint is verified first (a refusal leaves the tools unproven)."""
        if self.state.trusted is None:
            with contextlib.suppress(DeplogError):
                await self.refresh()
        for _ in range(2):
            trusted = self.state.trusted
            wanted = [
                t
                for t in dict.fromkeys(tool_ids)
                if valid_identity(t, "0.0.0") and _needs_fetch(self._tools.get(t))
            ][:MAX_TOOLS]
            if trusted is None or not wanted:
                return
            if len(self._tools) + len(wanted) > MAX_TOOLS:
                self._tools.clear()
            limit = asyncio.Semaphore(FETCHES)
            sizes = await asyncio.gather(*(self._fetch(t, trusted, limit) for t in wanted))
            if max(sizes) <= trusted.size:
                return
            with contextlib.suppress(DeplogError):  # a refusal leaves the tools failed
                await self.refresh()

    async def _fetch(
        self, tool_id: str, trusted: TrustedCheckpoint, limit: asyncio.Semaphore
    ) -> int:
        """Fetch and verify one tool's proof (rule 3); the size its source named."""
        async with limit:
            try:
                size, raw = await self.proofs.map_proof(tool_id)
            except DeplogError as err:
                self._tools[tool_id] = _Failed(err.code)
                return 0
        if self.state.size != trusted.size:
            return size  # the checkpoint moved meanwhile: the next round fetches again
        if size != trusted.size:
            self._tools[tool_id] = _Failed(ErrorCode.FETCH_FAILED)
            return size
        try:
            proof = MapProof.from_binary(raw)
            record = verify_map_proof(require_map_root(trusted.checkpoint), tool_id, proof)
        except DeplogError as err:
            self._tools[tool_id] = _Failed(err.code)
            return size
        self._tools[tool_id] = _Proven(proof, record.status_index() if record else StatusIndex())
        return size

    def check(
        self,
        tool_id: str,
        version: str,
        *,
        cached_at: datetime,
        schema_digest: str | None = None,
        with_proof: bool = False,
    ) -> Decision:
        """The guard's verdict from the trusted checkpoint and ``tool_id``'s proof (rule 4)."""
        trusted = self.state.trusted
        through = None
        if trusted is not None:
            through = ProcessedThrough(trusted.note.decode(), trusted.size, trusted.verified_at)
        now = self.clock()
        known = self._tools.get(tool_id)

        def status() -> Found | None:
            if not valid_identity(tool_id, version):
                return None
            if not isinstance(known, _Proven):
                raise _Unproven("not_synced" if known is None else known.code.value)
            found = known.index.lookup(tool_id, version, datetime.fromtimestamp(now, UTC))
            behind = notices_behind(found)
            processed = max(map(self._processed_at, behind)) if behind else None
            return found, processed, None  # a map record keeps no message

        try:
            decision = decide(
                through,
                tool_id,
                version,
                cached_at,
                schema_digest,
                now=now,
                freshness=self.freshness,
                status=status,
            )
        except _Unproven as err:
            decision = Decision(Verdict.UNKNOWN, err.reason, tool_id, version, through)
        proof = None
        if with_proof and decision.status is not None and isinstance(known, _Proven):
            assert trusted is not None
            proof = MapProofDocument(trusted.note, tool_id, known.proof).encode()
        return replace(decision, proof=proof, guarantee=self.guarantee.value)

    def _processed_at(self, index: int) -> float:
        """When the first verified checkpoint covering log ``index`` was (rule 4)."""
        sizes = [size for size, _ in self._advances]
        at = bisect.bisect_right(sizes, index)
        return self._advances[min(at, len(self._advances) - 1)][1]

    async def run(self, interval: float = 30.0, *, stop: asyncio.Event | None = None) -> None:
        """Refresh every ``interval`` seconds and on each checkpoint the source pushes, until
        ``stop``; a refusal is logged and the next refresh tries again."""
        stop = stop or asyncio.Event()
        tasks = [asyncio.create_task(self._poll(interval, stop))]
        if isinstance(self.source, CheckpointStream):
            tasks.append(asyncio.create_task(self._listen(self.source, stop)))
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _poll(self, interval: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._refresh_logged()
            await wait_until(stop, interval * random.uniform(0.8, 1.2))

    async def _listen(self, stream: CheckpointStream, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                async for note in stream.checkpoints():
                    await self._refresh_logged(note)
            except DeplogError as err:
                log.info("push stream lost: %s", err.code)
            except Exception as err:  # supervised: counted, logged once, retried
                self._failed("push stream", err)
            await wait_until(stop, random.uniform(0.5, 1.5))

    async def _refresh_logged(self, note: bytes | None = None) -> None:
        try:
            await self.refresh(note)
        except DeplogError as err:
            log.warning("light verifier refresh refused: %s", err.code)
        except Exception as err:  # supervised: counted, logged once, retried
            self._failed("refresh", err)

    def _failed(self, what: str, err: Exception) -> None:
        """An unexpected failure of a background loop: counted, logged once per kind, and the
        loop goes on (verdicts go stale meanwhile, never fail open)."""
        kind = f"{what}: {type(err).__name__}"
        self.failures[kind] = self.failures.get(kind, 0) + 1
        if self.failures[kind] == 1:
            log.exception("light verifier %s failed unexpectedly; retrying", what)


def _needs_fetch(known: _Proven | _Failed | None) -> bool:
    """Whether a tool's proof is fetched again (rule 3): never fetched, or a failed fetch."""
    return known is None or (isinstance(known, _Failed) and known.code == ErrorCode.FETCH_FAILED)
