"""The guard: what a cache asks before it serves a cached tool definition.

``Guard.check`` answers from the follower's verified state only, with a verdict from a
closed set and a stable reason, and always names the signed checkpoint it was made at
("processed through"). It never says serve once the last verified sync is older than the
freshness bound. Verdicts, in the order they are decided:

  unknown  ``not_synced``            nothing verified yet: look the tool up live
           ``bad_identifier``        not a deplog tool id or SemVer version
           ``invalid_entry``         the signed log holds an entry about the tool that
                                     fails validation (docs/fold-spec.md)
  stale    ``checkpoint_stale``      the last verified sync is older than the bound
  refuse   ``revoked``               a revoke notice is in effect
           ``sunset``                a deprecation's sunset time has passed
           ``schema_mismatch``       the notices name another digest of the definition
  stale    ``cache_predates_notice`` the cached entry predates the latest notice: refetch
  stale    ``state_advancing``       the follower committed during each of
                                     ``SNAPSHOT_ATTEMPTS`` reads: ask again
  warn     ``deprecated``            serve, and pass the deprecation on
  serve    ``active``                no notice in effect

An MCP host refuses on a listing alone with ``client.cache.mcp``'s reasons:
``identity_missing``, ``identity_mismatch``, ``not_pinned``, ``not_listed``,
``schema_undigestable``, ``schema_digest_mismatch``. With ``with_proof`` a decision made
from a status carries the map proof of the tool's record (None without a map).

Freshness is measured from the trusted checkpoint's ``verified_at``: with witnesses,
when their quorum cosigned it; with ``quorum none``, only the log's own word, which
whoever answers as the log can replay. Deploy with witnesses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from deplog.client.errors import DeplogError
from deplog.client.follow.mapcheck import MapProver
from deplog.client.follow.state import Folded, TrustedCheckpoint
from deplog.client.model.notice import parse_tool_id, parse_version
from deplog.client.model.status import StatusIndex, VersionStatus
from deplog.client.model.table import version_row

DEFAULT_FRESHNESS = timedelta(minutes=5)
MEMO_ENTRIES = 100_000
SNAPSHOT_ATTEMPTS = 8
"""Decisions tried before a state that changes under every read is reported stale."""
MEMO_PROOFS = 10_000
"""Map proofs a guard keeps (about 1.5 KB each): a gateway's listings at one checkpoint."""


class Verdict(StrEnum):
    """What the cache may do with its entry."""

    SERVE = "serve"
    WARN = "serve_with_warning"
    REFUSE = "refuse"
    STALE = "stale"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ProcessedThrough:
    """The signed checkpoint a decision was made at, and when it was last verified."""

    checkpoint: str
    size: int
    verified_at: datetime


@dataclass(frozen=True)
class Decision:
    """A guard verdict with its reason code, the status behind it and its checkpoint."""

    verdict: Verdict
    reason: str
    tool_id: str
    version: str
    processed_through: ProcessedThrough | None
    status: VersionStatus | None = None
    proof: bytes | None = None
    """The JSON map proof behind ``status``, when asked for (``with_proof``)."""
    guarantee: str | None = None
    """A light verifier's guarantee (``map_witnessed``, ``log_signed``); None: followed."""
    message: str | None = None
    """The deciding notice's message (``client.model.table`` rule 3), where the state keeps it."""

    @property
    def may_serve(self) -> bool:
        return self.verdict in (Verdict.SERVE, Verdict.WARN)


def valid_identity(tool_id: object, version: object) -> bool:
    """Whether ``tool_id`` and ``version`` are a deplog tool id and a SemVer version."""
    try:
        parse_tool_id(tool_id)
        parse_version(version)
    except DeplogError:
        return False
    return True


def refusal(status: VersionStatus, schema_digest: str | None) -> str | None:
    """Why a version with this status is refused, in the guard's order, or None."""
    if status.status in ("revoked", "sunset"):
        return status.status
    if (
        schema_digest is not None
        and status.schema_digest is not None
        and status.schema_digest != schema_digest
    ):
        return "schema_mismatch"
    return None


def served(status: VersionStatus) -> tuple[Verdict, str]:
    """The verdict on a version that is not refused."""
    if status.status == "unknown":
        return Verdict.UNKNOWN, "invalid_entry"
    if status.status == "deprecated":
        return Verdict.WARN, "deprecated"
    return Verdict.SERVE, "active"


def notices_behind(status: VersionStatus) -> tuple[int, ...]:
    """The log indexes of every notice behind ``status`` (a newer one makes a copy stale)."""
    return (*status.notices, *status.pending, *(i for pair in status.withdrawn for i in pair))


Found = tuple[VersionStatus, float | None, str | None]
"""A version's status, its latest notice's processing time and the deciding message."""
StatusLookup = Callable[[], Found | None]
"""A version's status and when its latest notice was processed (None: a bad identifier)."""


def decide(
    through: ProcessedThrough | None,
    tool_id: str,
    version: str,
    cached_at: datetime,
    schema_digest: str | None,
    *,
    now: float,
    freshness: float,
    status: StatusLookup,
) -> Decision:
    """The verdict at ``through`` in the module's order; ``status`` is asked only once the
    checkpoint is known fresh (one reading for the guard and the light verifier)."""
    if through is None:
        return Decision(Verdict.UNKNOWN, "not_synced", tool_id, version, None)
    if now - through.verified_at.timestamp() > freshness:
        return Decision(Verdict.STALE, "checkpoint_stale", tool_id, version, through)
    looked_up = status()
    if looked_up is None:
        return Decision(Verdict.UNKNOWN, "bad_identifier", tool_id, version, through)
    found, last_processed, message = looked_up

    def verdict(verdict: Verdict, reason: str) -> Decision:
        return Decision(verdict, reason, tool_id, version, through, found, message=message)

    if found.status == "unknown":
        return verdict(*served(found))
    refused = refusal(found, schema_digest)
    if refused is not None:
        return verdict(Verdict.REFUSE, refused)
    if last_processed is not None and cached_at.timestamp() < last_processed:
        return verdict(Verdict.STALE, "cache_predates_notice")
    return verdict(*served(found))


class Decider(Protocol):
    """What a host asks before it uses a tool: a ``Guard`` over a follower's state, or a
    ``LightVerifier`` (``client.follow.light``)."""

    async def prepare(self, tool_ids: Collection[str]) -> None:
        """Fetch what ``check`` needs to decide on these tools now (a guard needs nothing)."""
        ...

    def check(
        self,
        tool_id: str,
        version: str,
        *,
        cached_at: datetime,
        schema_digest: str | None = None,
        with_proof: bool = False,
    ) -> Decision:
        """The verdict for serving a copy of ``tool_id`` at ``version`` fetched at ``cached_at``."""
        ...


class GuardState(Protocol):
    """What the guard reads: a ``LocalState``, a ``StateReader`` or a ``WatchedState``."""

    @property
    def trusted(self) -> TrustedCheckpoint | None: ...

    def tool_status(self, tool_id: str) -> Folded: ...

    @property
    def path(self) -> Path:
        """The state file (map proofs are read from it on a connection of their own)."""
        ...


class Guard:
    """Decides from a follower's state; cheap enough for every cache hit."""

    def __init__(
        self,
        state: GuardState,
        *,
        freshness: timedelta = DEFAULT_FRESHNESS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if freshness <= timedelta(0):
            raise ValueError("freshness must be positive")
        self.state = state
        self.freshness = freshness.total_seconds()
        self.clock = clock
        self._through_for: TrustedCheckpoint | None = None
        self._through_cached: ProcessedThrough | None = None
        self._memo: dict[tuple[str, str], tuple[StatusIndex, float, Found]] = {}
        self._prover: MapProver | None = None
        self._proofs: dict[tuple[str, str], bytes] = {}

    async def prepare(self, tool_ids: Collection[str]) -> None:
        """Nothing to fetch: the follower's state holds every tool."""

    def check(
        self,
        tool_id: str,
        version: str,
        *,
        cached_at: datetime,
        schema_digest: str | None = None,
        with_proof: bool = False,
    ) -> Decision:
        """The verdict for serving a cached entry of ``tool_id`` at ``version``."""
        decision = self._decide(tool_id, version, cached_at, schema_digest)
        through = decision.processed_through
        if not with_proof or decision.status is None or through is None:
            return decision
        return replace(decision, proof=self._proof(through, tool_id))

    def _proof(self, through: ProcessedThrough, tool_id: str) -> bytes | None:
        """The map proof of ``tool_id`` at ``through``, memoized by checkpoint and tool."""
        key = (through.checkpoint, tool_id)
        proof = self._proofs.get(key)
        if proof is not None:
            return proof
        if self._prover is None:
            self._prover = MapProver(self.state.path)
        proof = self._prover.prove(through.checkpoint.encode(), through.size, tool_id)
        if proof is not None:
            if len(self._proofs) >= MEMO_PROOFS:
                self._proofs.clear()
            self._proofs[key] = proof
        return proof

    def _decide(
        self, tool_id: str, version: str, cached_at: datetime, schema_digest: str | None
    ) -> Decision:
        """A decision stands only if the trusted checkpoint is the same object after the fold
        as before it: a verdict never names a checkpoint it was not made at."""
        for _ in range(SNAPSHOT_ATTEMPTS):
            trusted = self.state.trusted
            decision = self._decide_at(trusted, tool_id, version, cached_at, schema_digest)
            if self.state.trusted is trusted:
                return decision
        return Decision(Verdict.STALE, "state_advancing", tool_id, version, None)

    def _decide_at(
        self,
        trusted: TrustedCheckpoint | None,
        tool_id: str,
        version: str,
        cached_at: datetime,
        schema_digest: str | None,
    ) -> Decision:
        through = None if trusted is None else self._through(trusted)
        now = self.clock()
        return decide(
            through,
            tool_id,
            version,
            cached_at,
            schema_digest,
            now=now,
            freshness=self.freshness,
            status=lambda: self._status(tool_id, version, now),
        )

    def _through(self, trusted: TrustedCheckpoint) -> ProcessedThrough:
        """The processed-through statement, prepared once per trusted checkpoint."""
        if self._through_for is not trusted:
            self._through_cached = ProcessedThrough(
                trusted.note.decode(), trusted.size, trusted.verified_at
            )
            self._through_for = trusted
        assert self._through_cached is not None
        return self._through_cached

    def _status(self, tool_id: str, version: str, now: float) -> Found | None:
        """A version's status, its latest notice's processing time and the deciding message,
        memoized (None: not a tool id and version)."""
        index, processed = self.state.tool_status(tool_id)
        memo = self._memo.get((tool_id, version))
        if memo is not None and memo[0] is index and now < memo[1]:
            return memo[2]
        if not valid_identity(tool_id, version):
            return None
        moment = datetime.fromtimestamp(now, UTC)
        row = version_row(index, tool_id, version, moment)
        last_processed = max(
            (processed[i] for i in notices_behind(row.decided) if i in processed), default=None
        )
        transition = index.next_transition(tool_id, moment)
        valid_until = transition.timestamp() if transition is not None else float("inf")
        if len(self._memo) >= MEMO_ENTRIES:
            self._memo.clear()
        found = (row.decided, last_processed, row.message)
        self._memo[(tool_id, version)] = (index, valid_until, found)
        return found
