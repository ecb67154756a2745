"""Tool status as a pure fold of the notices in the log.

``StatusIndex.apply`` takes authorized notices in log order; a ``(tool_id, version)``'s
status is a function of the folded prefix and the time of the question. Rules:

1. A deprecate or revoke notice applies to a version when it affects it, its
   ``effective_at`` has passed, and it has not been withdrawn.
2. A withdraw retracts its target from its own ``effective_at``; the target stays
   recorded, reported as withdrawn.
3. Precedence: ``revoked`` > ``sunset`` (an applying deprecate past its ``sunset_at``) >
   ``deprecated`` > ``active``.
4. Notices not yet effective are ``pending`` and change nothing.
5. An entry of the signed tree that fails validation and names the tool
   (``InvalidMark``, docs/fold-spec.md) makes every version ``unknown``.

The fold reads only ``FoldNotice``'s fields, which a map record's item has too
(``client.map.record``), so a proof's record and the full log fold the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, Literal, Protocol

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.model.notice import (
    Affected,
    Replacement,
    parse_tool_id,
    parse_version,
)
from deplog.client.model.semver import Version
from deplog.client.tlog.timestamps import format_timestamp

Status = Literal["active", "deprecated", "sunset", "revoked", "unknown"]


class StatusError(DeplogError):
    """A notice that cannot be folded in: out of log order, or a withdraw with no target."""

    codes = frozenset({ErrorCode.INDEX_NOT_INCREASING, ErrorCode.UNKNOWN_WITHDRAW_TARGET})


@dataclass(frozen=True)
class VersionStatus:
    """The status of one tool version at one time, and the notices behind it: those that
    apply, are ``pending`` or ``withdrawn`` (with their withdraw), the earliest
    ``effective_at`` of those deciding and ``sunset_at`` of a deprecate, the latest
    ``replacement`` and ``schema_digest``, the union of reasons and advisories, and the
    ``invalid`` entries about the tool."""

    tool_id: str
    version: str
    status: Status
    notices: tuple[int, ...] = ()
    pending: tuple[int, ...] = ()
    withdrawn: tuple[tuple[int, int], ...] = ()
    effective_at: datetime | None = None
    sunset_at: datetime | None = None
    replacement: Replacement | None = None
    schema_digest: str | None = None
    reasons: tuple[str, ...] = ()
    advisories: tuple[str, ...] = ()
    invalid: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """JSON form (every key present; absent values are null or empty)."""
        return {
            "tool_id": self.tool_id,
            "version": self.version,
            "status": self.status,
            "notices": list(self.notices),
            "pending": list(self.pending),
            "withdrawn": [{"index": i, "withdrawn_by": w} for i, w in self.withdrawn],
            "effective_at": _ts(self.effective_at),
            "sunset_at": _ts(self.sunset_at),
            "replacement": self.replacement.to_json() if self.replacement else None,
            "schema_digest": self.schema_digest,
            "reasons": list(self.reasons),
            "advisories": list(self.advisories),
            "invalid": list(self.invalid),
        }


def _ts(dt: datetime | None) -> str | None:
    return None if dt is None else format_timestamp(dt)


class FoldNotice(Protocol):
    """What the fold reads of a notice (``publisher`` None for a map record's item)."""

    @property
    def tool_id(self) -> str: ...
    @property
    def action(self) -> str: ...
    @property
    def publisher(self) -> str | None: ...
    @property
    def affected(self) -> Affected | None: ...
    @property
    def withdraws(self) -> int | None: ...
    @property
    def effective_at(self) -> datetime: ...
    @property
    def sunset_at(self) -> datetime | None: ...
    @property
    def reasons(self) -> tuple[str, ...]: ...
    @property
    def advisories(self) -> tuple[str, ...]: ...
    @property
    def replacement(self) -> Replacement | None: ...
    @property
    def schema_digest(self) -> str | None: ...
    def affects(self, version: Version) -> bool: ...


@dataclass(frozen=True)
class InvalidMark:
    """The mark of an entry at ``index`` that fails validation and names ``tool_id`` (rule 5)."""

    tool_id: str
    index: int
    action: Literal["invalid"] = "invalid"
    publisher: None = None
    affected: None = None
    withdraws: None = None
    effective_at: datetime = datetime(1970, 1, 1, tzinfo=UTC)
    sunset_at: None = None
    reasons: tuple[str, ...] = ()
    advisories: tuple[str, ...] = ()
    replacement: None = None
    schema_digest: None = None

    def affects(self, version: Version) -> bool:
        """Never: a mark decides by being there (rule 5)."""
        return False


@dataclass
class ToolFold:
    """One tool's folded entries: notices by log index, withdrawals, invalid marks."""

    # Deprecate/revoke notices by log index (dicts keep insertion = log order).
    notices: dict[int, FoldNotice] = field(default_factory=dict)
    # Target index -> [(withdraw index, withdraw effective_at)].
    withdrawals: dict[int, list[tuple[int, datetime]]] = field(default_factory=dict)
    withdraws: dict[int, FoldNotice] = field(default_factory=dict)
    invalid: list[int] = field(default_factory=list)
    last_index: int = -1


class StatusIndex:
    """The folded status of every tool seen in the log."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolFold] = {}
        self._last_index = -1

    def copy(self) -> StatusIndex:
        """An independent copy: applying to it leaves this index as it was."""
        twin = StatusIndex()
        twin._last_index = self._last_index
        twin._tools = {
            tool_id: ToolFold(
                dict(tool.notices),
                {target: list(ws) for target, ws in tool.withdrawals.items()},
                dict(tool.withdraws),
                list(tool.invalid),
                tool.last_index,
            )
            for tool_id, tool in self._tools.items()
        }
        return twin

    def apply(self, index: int, notice: FoldNotice) -> None:
        """Fold in the notice at log ``index``; indexes must strictly increase."""
        if index <= self._last_index:
            raise StatusError(ErrorCode.INDEX_NOT_INCREASING)
        tool = self._tools.get(notice.tool_id)
        if notice.action == "invalid":
            if tool is None:
                tool = self._tools[notice.tool_id] = ToolFold()
            tool.invalid.append(index)
        elif notice.action == "withdraw":
            assert notice.withdraws is not None  # guaranteed by Notice.from_json
            target = tool.notices.get(notice.withdraws) if tool is not None else None
            if target is None or target.publisher != notice.publisher:
                raise StatusError(ErrorCode.UNKNOWN_WITHDRAW_TARGET)
            assert tool is not None
            tool.withdrawals.setdefault(notice.withdraws, []).append((index, notice.effective_at))
            tool.withdraws[index] = notice
        else:
            if tool is None:
                tool = self._tools[notice.tool_id] = ToolFold()
            tool.notices[index] = notice
        tool.last_index = index
        self._last_index = index

    def last_index(self, tool_id: str) -> int | None:
        """The last log index that touched ``tool_id``, or None if none did."""
        tool = self._tools.get(tool_id)
        return None if tool is None else tool.last_index

    def next_transition(self, tool_id: str, now: datetime) -> datetime | None:
        """The next time after ``now`` a status of ``tool_id`` changes without a new entry."""
        tool = self._tools.get(tool_id)
        if tool is None:
            return None
        now = _utc(now)
        times = [
            moment
            for notice in (*tool.notices.values(), *tool.withdraws.values())
            for moment in (notice.effective_at, notice.sunset_at)
            if moment is not None and moment > now
        ]
        return min(times, default=None)

    def lookup(self, tool_id: str, version: str, now: datetime) -> VersionStatus:
        """The status of ``tool_id`` at ``version`` at ``now``."""
        parse_tool_id(tool_id)
        v = parse_version(version)
        tool = self._tools.get(tool_id)
        about = () if tool is None else [i for i, n in tool.notices.items() if n.affects(v)]
        return self.decide(tool_id, v.text, about, _utc(now))

    def tool(self, tool_id: str) -> ToolFold | None:
        """What the fold holds of ``tool_id``, or None if no entry names it."""
        return self._tools.get(tool_id)

    def decide(
        self, tool_id: str, version: str, about: Iterable[int], now: datetime
    ) -> VersionStatus:
        """Rules 1-5 over the deprecate/revoke notices at ``about`` (log order), reported
        under ``version``: a lookup's, or a row's of ``client.model.table``."""
        tool = self._tools.get(tool_id)
        if tool is None:
            return VersionStatus(tool_id, version, "active")
        now = _utc(now)
        applying: list[tuple[int, FoldNotice]] = []
        pending: set[int] = set()
        withdrawn: list[tuple[int, int]] = []
        for idx in about:
            n = tool.notices[idx]
            done = [w for w, at in tool.withdrawals.get(idx, ()) if at <= now]
            if done:
                withdrawn.append((idx, min(done)))
                continue
            pending.update(w for w, _ in tool.withdrawals.get(idx, ()))
            if n.effective_at > now:
                pending.add(idx)
            else:
                applying.append((idx, n))

        revokes = [n for _, n in applying if n.action == "revoke"]
        deprecates = [n for _, n in applying if n.action == "deprecate"]
        sunsets = [n.sunset_at for n in deprecates if n.sunset_at is not None]
        sunset_at = min(sunsets) if sunsets else None
        status: Status
        if tool.invalid:
            status, deciding = "unknown", []
        elif revokes:
            status, deciding = "revoked", revokes
        elif sunset_at is not None and sunset_at <= now:
            status, deciding = "sunset", deprecates
        elif deprecates:
            status, deciding = "deprecated", deprecates
        else:
            status, deciding = "active", []

        reasons: dict[str, None] = {}
        advisories: dict[str, None] = {}
        replacement: Replacement | None = None
        digest: str | None = None
        for _, n in applying:
            reasons.update(dict.fromkeys(n.reasons))
            advisories.update(dict.fromkeys(n.advisories))
            replacement = n.replacement or replacement
            digest = n.schema_digest or digest
        return VersionStatus(
            tool_id=tool_id,
            version=version,
            status=status,
            notices=tuple(i for i, _ in applying),
            pending=tuple(sorted(pending)),
            withdrawn=tuple(withdrawn),
            effective_at=min((n.effective_at for n in deciding), default=None),
            sunset_at=sunset_at,
            replacement=replacement,
            schema_digest=digest,
            reasons=tuple(reasons),
            advisories=tuple(advisories),
            invalid=tuple(tool.invalid),
        )


def _utc(now: datetime) -> datetime:
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    return now.astimezone(UTC)


class FoldSource(Protocol):
    """Where a ``StatusChange`` folds its two sides from: the follower's stored notices."""

    def tool_status_at(self, tool_id: str, size: int) -> StatusIndex:
        """The fold of the tool's notices among the log's first ``size`` entries."""
        ...

    def named_versions(self, tool_id: str, start: int, end: int) -> Iterable[str]:
        """The exact versions named by the tool's notices in ``[start, end)``."""
        ...


@dataclass(frozen=True)
class StatusChange:
    """How one tool's statuses differ between the log's first ``old_size`` and ``new_size``
    entries, folded from ``source`` only when asked. ``versions`` lists the exact versions
    the new notices name whose status differs; a version only a range covers is asked
    with ``changed``."""

    tool_id: str
    old_size: int
    new_size: int
    at: datetime
    source: FoldSource = field(repr=False, compare=False)

    @property
    def before(self) -> StatusIndex:
        return self.source.tool_status_at(self.tool_id, self.old_size)

    @property
    def after(self) -> StatusIndex:
        return self.source.tool_status_at(self.tool_id, self.new_size)

    def changed(self, version: str, now: datetime | None = None) -> bool:
        """Whether ``version``'s status (or the notices behind it) differs."""
        return version in self.changed_among((version,), now)

    def changed_among(self, versions: Iterable[str], now: datetime | None = None) -> set[str]:
        """Those of ``versions`` whose status (or the notices behind it) differs."""
        when = now or self.at
        before, after = self.before, self.after
        out: set[str] = set()
        for version in versions:
            try:
                old = before.lookup(self.tool_id, version, when).to_json()
                new = after.lookup(self.tool_id, version, when).to_json()
            except DeplogError:
                continue
            if old != new:
                out.add(version)
        return out

    @cached_property
    def versions(self) -> frozenset[str]:
        named = self.source.named_versions(self.tool_id, self.old_size, self.new_size)
        return frozenset(self.changed_among(dict.fromkeys(named)))
