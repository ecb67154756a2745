"""A tool's status table: what the log says about a tool, as rows, from its fold.

``tool_status`` is the one answer every surface gives (``deplog status``,
``GET /v1/tools/{id}``, the explorer, inventories, MCP and ContextForge). Rules:

1. **Every row.** A row per exact version any notice names and per distinct range any
   notice carries (its OSV events written plainly, ``covers``); withdrawn and pending
   notices still make their rows.
2. **One decision.** A version row is ``StatusIndex.lookup``; a range row is the same
   decision (``StatusIndex.decide``) over the notices carrying that range.
3. **The deciding notice's words.** A row's ``message`` is that of the latest notice
   that decides its status, when the source keeps messages (a follower's notices, the
   authority's leaves through ``messages``); a map record keeps none (``None``).
4. **Worst first.** ``ToolStatus.status`` is the worst row's: ``revoked``, ``sunset``,
   ``unknown``, ``deprecated``, ``active`` (the order of the read-only commands' exits);
   a tool no notice names is ``active`` with no rows.
5. **Linear.** Folding a table reads each notice once, plus, per version row, one
   containment test per distinct range.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from deplog.client.model.notice import VersionRange, parse_tool_id
from deplog.client.model.semver import Version
from deplog.client.model.status import Status, StatusIndex, ToolFold, VersionStatus
from deplog.client.tlog.timestamps import format_timestamp

SEVERITY: Final[tuple[Status, ...]] = ("revoked", "sunset", "unknown", "deprecated", "active")
"""Statuses from worst to best (rule 4)."""
_DECIDES: Final = {"revoked": "revoke", "sunset": "deprecate", "deprecated": "deprecate"}

Messages = Callable[[int], str | None]
"""The message of the notice at a log index, where the caller keeps notices' messages."""


@dataclass(frozen=True)
class StatusRow:
    """One row: an exact ``version`` or a ``range``, what it ``covers`` in words, its
    decided status, when each pending notice takes effect, and the deciding message."""

    covers: str
    decided: VersionStatus
    version: str | None = None
    range: VersionRange | None = None
    pending_at: tuple[tuple[int, datetime], ...] = ()
    message: str | None = None

    @property
    def status(self) -> Status:
        return self.decided.status

    def to_json(self) -> dict[str, Any]:
        """The decided status's JSON, with the row's own keys (every key present)."""
        out = self.decided.to_json()
        del out["tool_id"]
        out.update(
            kind="version" if self.version is not None else "range",
            covers=self.covers,
            version=self.version,
            range=None if self.range is None else self.range.to_json(),
            pending=[{"index": i, "effective_at": format_timestamp(t)} for i, t in self.pending_at],
            message=self.message,
        )
        return out


@dataclass(frozen=True)
class ToolStatus:
    """A tool's table: its rows, every notice's summary in log order, the invalid entries
    naming it, the last index that touched it, and the worst row's status (rule 4)."""

    tool_id: str
    rows: tuple[StatusRow, ...]
    notices: tuple[dict[str, Any], ...]
    invalid: tuple[int, ...]
    last_index: int | None
    status: Status

    def to_json(self) -> dict[str, Any]:
        """The table as JSON (``GET /v1/tools/{tool_id}``, ``deplog status --json``)."""
        return {
            "tool_id": self.tool_id,
            "status": self.status,
            "last_index": self.last_index,
            "rows": [row.to_json() for row in self.rows],
            "notices": list(self.notices),
            "invalid": list(self.invalid),
        }


def covers(rng: VersionRange) -> str:
    """A range's versions in words: ``1.0.0 up to 2.0.0 (not included)``, ``1.0.0
    through 1.0.7``, ``every version below 2.0.0``, ``2.5.0 and later``, comma-joined."""
    parts = []
    for i in range(0, len(rng.events), 2):
        start = rng.events[i][1]
        if i + 1 == len(rng.events):
            parts.append("every version" if start == "0" else f"{start} and later")
            continue
        kind, end = rng.events[i + 1]
        if start == "0":
            parts.append(f"every version {'below' if kind == 'fixed' else 'through'} {end}")
        else:
            parts.append(f"{start} {'up to' if kind == 'fixed' else 'through'} {end}")
            parts[-1] += " (not included)" if kind == "fixed" else ""
    return ", ".join(parts)


def says(row: Mapping[str, Any]) -> str:
    """A row's JSON (or a ``VersionStatus``'s) in words, the same at every surface: its
    status since when, its sunset, the publisher's reasons, advisories and message, and
    what to use instead."""
    words = str(row["status"])
    if row.get("effective_at"):
        words += f" since {row['effective_at']}"
    if row.get("sunset_at"):
        words += f", sunset at {row['sunset_at']}"
    if row.get("reasons"):
        words += f"; reasons {', '.join(row['reasons'])}"
    if row.get("advisories"):
        words += f"; advisories {', '.join(row['advisories'])}"
    if row.get("message"):
        words += f"; the publisher says {json.dumps(row['message'], ensure_ascii=False)}"
    if row.get("replacement"):
        words += f"; use {row['replacement']['tool_id']}@{row['replacement']['version']} instead"
    return words


def version_row(
    index: StatusIndex,
    tool_id: str,
    version: str,
    now: datetime,
    *,
    messages: Messages | None = None,
) -> StatusRow:
    """The row of one version, named by a notice or not (``StatusIndex.lookup``)."""
    decided = index.lookup(tool_id, version, now)
    return _row(index.tool(tool_id), decided, decided.version, decided.version, None, messages)


def tool_status(
    index: StatusIndex, tool_id: str, now: datetime, *, messages: Messages | None = None
) -> ToolStatus:
    """The table of ``tool_id`` at ``now`` from ``index`` (rules 1-5)."""
    parse_tool_id(tool_id)
    tool = index.tool(tool_id)
    if tool is None:
        return ToolStatus(tool_id, (), (), (), None, "active")
    named: dict[tuple[Any, ...], tuple[Version, list[int]]] = {}
    ranges: dict[tuple[tuple[str, str], ...], tuple[VersionRange, list[int]]] = {}
    for idx, n in tool.notices.items():
        assert n.affected is not None  # deprecate/revoke always carry it
        for ver in n.affected.versions:
            named.setdefault(ver.sort_key, (ver, []))[1].append(idx)
        for rng in n.affected.ranges:
            carrying = ranges.setdefault(rng.events, (rng, []))[1]
            if not carrying or carrying[-1] != idx:
                carrying.append(idx)
    rows = []
    for ver, exact in sorted(named.values(), key=lambda pair: (pair[0].sort_key, pair[0].text)):
        about = set(exact)
        for rng, carrying in ranges.values():
            if rng.contains(ver):
                about.update(carrying)
        decided = index.decide(tool_id, ver.text, sorted(about), now)
        rows.append(_row(tool, decided, ver.text, ver.text, None, messages))
    for rng, carrying in ranges.values():
        text = covers(rng)
        decided = index.decide(tool_id, text, carrying, now)
        rows.append(_row(tool, decided, text, None, rng, messages))
    worst = min(
        (row.status for row in rows),
        key=SEVERITY.index,
        default="unknown" if tool.invalid else "active",
    )
    return ToolStatus(
        tool_id, tuple(rows), _summaries(tool), tuple(tool.invalid), tool.last_index, worst
    )


def _row(
    tool: ToolFold | None,
    decided: VersionStatus,
    text: str,
    version: str | None,
    rng: VersionRange | None,
    messages: Messages | None,
) -> StatusRow:
    if tool is None:
        return StatusRow(text, decided, version, rng)
    pending = tuple(
        (i, (tool.notices.get(i) or tool.withdraws[i]).effective_at) for i in decided.pending
    )
    action = _DECIDES.get(decided.status)
    deciding = [i for i in decided.notices if tool.notices[i].action == action]
    message = None
    if deciding:
        latest = deciding[-1]
        message = messages(latest) if messages else getattr(tool.notices[latest], "message", None)
    return StatusRow(text, decided, version, rng, pending, message)


def _summaries(tool: ToolFold) -> tuple[dict[str, Any], ...]:
    """Every notice (deprecate, revoke, withdraw) in log order, as the fold reads it."""
    withdrawn_by = {target: [w for w, _ in ws] for target, ws in tool.withdrawals.items()}
    everything = sorted({**tool.notices, **tool.withdraws}.items())
    return tuple(
        {
            "index": idx,
            "action": n.action,
            "effective_at": format_timestamp(n.effective_at),
            "sunset_at": None if n.sunset_at is None else format_timestamp(n.sunset_at),
            "withdraws": n.withdraws,
            "withdrawn_by": withdrawn_by.get(idx, []),
        }
        for idx, n in everything
    )
