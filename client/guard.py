"""The guard: what a cache asks before it serves a cached tool definition.

``Guard.check`` answers from the follower's verified local state only, with a
verdict from a closed set and a stable reason code, and always says which
signed checkpoint the answer was made at ("processed through"). It never says
serve when the last verified sync is older than the freshness bound: a cache
that stopped hearing from the log stops serving on the log's authority.

Verdicts, in the order they are decided:

  unknown  ``not_synced``            nothing verified yet: look the tool up live
           ``bad_identifier``        not a deplog tool id or SemVer version
  stale    ``checkpoint_stale``      the last verified sync is older than the bound
  refuse   ``revoked``               a revoke notice is in effect
           ``sunset``                a deprecation's sunset time has passed
           ``schema_mismatch``       notices describe this version's definition by a
                                     digest, and the cached definition has another
  stale    ``cache_predates_notice`` the cached entry was fetched before the latest
                                     notice about this version was processed: refetch
  warn     ``deprecated``            serve, and pass the deprecation on
  serve    ``active``                no notice in effect

Freshness is measured from ``verified_at`` of the trusted checkpoint: with a
witness policy, the time its quorum of witnesses cosigned it (witnesses other
than the log vouch that it was the latest tree they saw then); with ``quorum
none``, the time the follower last verified the log's latest checkpoint,
which is only the log's own word that nothing newer exists: whoever can
answer as the log could then replay an old signed checkpoint and keep a
cache "fresh". Deploy with witnesses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from client.errors import DeplogError
from client.notice import parse_tool_id
from client.semver import Version
from client.state import LocalState
from client.status import VersionStatus

DEFAULT_FRESHNESS = timedelta(minutes=5)


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

    @property
    def may_serve(self) -> bool:
        return self.verdict in (Verdict.SERVE, Verdict.WARN)


class Guard:
    """Decides from a follower's ``LocalState``; cheap enough for every cache hit."""

    def __init__(
        self,
        state: LocalState,
        *,
        freshness: timedelta = DEFAULT_FRESHNESS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if freshness <= timedelta(0):
            raise ValueError("freshness must be positive")
        self.state = state
        self.freshness = freshness.total_seconds()
        self.clock = clock

    def check(
        self,
        tool_id: str,
        version: str,
        *,
        cached_at: datetime,
        schema_digest: str | None = None,
    ) -> Decision:
        trusted = self.state.trusted

        def decide(verdict: Verdict, reason: str, status: VersionStatus | None = None) -> Decision:
            through = None
            if trusted is not None:
                through = ProcessedThrough(trusted.note.decode(), trusted.size, trusted.verified_at)
            return Decision(verdict, reason, tool_id, version, through, status)

        if trusted is None:
            return decide(Verdict.UNKNOWN, "not_synced")
        try:
            parse_tool_id(tool_id)
            Version.parse(version)
        except DeplogError:
            return decide(Verdict.UNKNOWN, "bad_identifier")
        now = self.clock()
        if now - trusted.verified_at.timestamp() > self.freshness:
            return decide(Verdict.STALE, "checkpoint_stale")
        index, processed = self.state.tool_status(tool_id)
        status = index.lookup(tool_id, version, datetime.fromtimestamp(now, UTC))
        if status.status == "revoked":
            return decide(Verdict.REFUSE, "revoked", status)
        if status.status == "sunset":
            return decide(Verdict.REFUSE, "sunset", status)
        if (
            schema_digest is not None
            and status.schema_digest is not None
            and status.schema_digest != schema_digest
        ):
            return decide(Verdict.REFUSE, "schema_mismatch", status)
        behind = (*status.notices, *status.pending, *(i for pair in status.withdrawn for i in pair))
        last_processed = max((processed[i] for i in behind if i in processed), default=None)
        if last_processed is not None and cached_at.timestamp() < last_processed:
            return decide(Verdict.STALE, "cache_predates_notice", status)
        if status.status == "deprecated":
            return decide(Verdict.WARN, "deprecated", status)
        return decide(Verdict.SERVE, "active", status)
