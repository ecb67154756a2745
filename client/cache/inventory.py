"""Inventory reports: what the verified log says about the tools a cache or platform holds.

An inventory is a JSON array of ``{"tool_id", "version"[, "schema_digest"]}``, parsed
with the notice schema's own field parsers and codes. ``check`` reports each entry's
status at the trusted checkpoint; ``diff`` what changed between two signed checkpoints,
naming the log indexes that caused each change. Reports are deterministic and
content-free (RFC 8785 JSON or Markdown, sorted, identifiers, statuses, dates and
indexes only), made ``at`` a stated instant.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from deplog.client.errors import ErrorCode, FormatError
from deplog.client.follow.state import LocalState, StateError
from deplog.client.model import canonical
from deplog.client.model.notice import (
    parse_schema_digest,
    parse_tool_id,
    parse_version,
    require_object,
    require_str,
)
from deplog.client.model.status import VersionStatus
from deplog.client.model.table import version_row
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.timestamps import format_timestamp

MAX_INVENTORY_ITEMS = 100_000
_FIELDS = frozenset({"tool_id", "version", "schema_digest"})


class InventoryFormatError(FormatError):
    """An inventory that is no list of tool identities, or a diff of checkpoints not synced."""

    codes = frozenset({ErrorCode.MALFORMED_INVENTORY, ErrorCode.BAD_CHECKPOINT_RANGE})
    code = ErrorCode.MALFORMED_INVENTORY


@dataclass(frozen=True, order=True)
class Item:
    """One inventory entry; ordering makes reports independent of input order."""

    tool_id: str
    version: str
    schema_digest: str = ""


def parse_inventory(data: bytes) -> list[Item]:
    """Parse and validate an inventory; duplicates are kept once, order is not kept."""
    value = canonical.loads(data, max_depth=3)
    if not isinstance(value, list) or len(value) > MAX_INVENTORY_ITEMS:
        raise InventoryFormatError()
    items = set()
    for entry in value:
        obj = require_object(entry, required=("tool_id", "version"), allowed=_FIELDS)
        tool_id, version = require_str(obj["tool_id"]), require_str(obj["version"])
        parse_tool_id(tool_id)
        parse_version(version)
        digest = parse_schema_digest(obj["schema_digest"]) if "schema_digest" in obj else ""
        items.add(Item(tool_id, version, digest))
    return sorted(items)


def _status_fields(status: VersionStatus) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status.status, "notices": list(status.notices)}
    if status.pending:
        out["pending"] = list(status.pending)
    if status.effective_at is not None:
        out["effective_at"] = format_timestamp(status.effective_at)
    if status.sunset_at is not None:
        out["sunset_at"] = format_timestamp(status.sunset_at)
    if status.replacement is not None:
        out["replacement"] = status.replacement.to_json()
    if status.schema_digest is not None:
        out["schema_digest_noticed"] = status.schema_digest
    return out


def _identity(item: Item) -> dict[str, Any]:
    out = {"tool_id": item.tool_id, "version": item.version}
    if item.schema_digest:
        out["schema_digest"] = item.schema_digest
    return out


def check(state: LocalState, items: list[Item], at: datetime) -> dict[str, Any]:
    """Each item's status at the trusted checkpoint, as of ``at``."""
    trusted = state.trusted
    if trusted is None:
        raise StateError(ErrorCode.NO_STATE, "the follower state holds no checkpoint yet")
    entries = []
    for item in sorted(items):
        index, _ = state.tool_status(item.tool_id)
        status = version_row(index, item.tool_id, item.version, at).decided
        entry = {**_identity(item), **_status_fields(status)}
        if item.schema_digest and status.schema_digest not in (None, item.schema_digest):
            entry["schema_mismatch"] = True
        entries.append(entry)
    return {
        "report": "inventory-check",
        "checkpoint": trusted.checkpoint.to_json(),
        "at": format_timestamp(at),
        "items": entries,
    }


def _change(before: VersionStatus, after: VersionStatus) -> tuple[str, list[int]] | None:
    """The kind of change between two statuses, and the log indexes that caused it."""
    new_notices = sorted(set(after.notices) - set(before.notices))
    withdrawals = sorted({w for _, w in after.withdrawn} - {w for _, w in before.withdrawn})
    if before.status == after.status and not new_notices and not withdrawals:
        return None
    if withdrawals and before.status != after.status:
        return "withdrawn", withdrawals
    kind = {
        "deprecated": "newly_deprecated",
        "revoked": "revoked",
        "sunset": "sunset",
        "active": "restored",
    }[after.status]
    if before.status == after.status:
        kind = "notices_changed"
    return kind, sorted(set(new_notices) | set(withdrawals))


def diff(
    state: LocalState, items: list[Item], old: Checkpoint, new: Checkpoint, at: datetime
) -> dict[str, Any]:
    """What changed for the inventory between two checkpoints no newer than the trusted one."""
    if not old.size <= new.size <= state.size:
        raise InventoryFormatError(
            ErrorCode.BAD_CHECKPOINT_RANGE, "checkpoints must be ordered and already synced"
        )
    changes = []
    for item in sorted(items):
        before, after = (
            version_row(
                state.tool_status_at(item.tool_id, size), item.tool_id, item.version, at
            ).decided
            for size in (old.size, new.size)
        )
        found = _change(before, after)
        if found is not None:
            kind, caused_by = found
            changes.append(
                {
                    **_identity(item),
                    "change": kind,
                    "from": before.status,
                    "to": after.status,
                    "caused_by": caused_by,
                }
            )
    return {
        "report": "inventory-diff",
        "from": old.to_json(),
        "to": new.to_json(),
        "at": format_timestamp(at),
        "changes": changes,
    }


def to_json(report: dict[str, Any]) -> bytes:
    """The report's RFC 8785 bytes, newline-terminated."""
    return canonical.dumps(report) + b"\n"


def to_markdown(report: dict[str, Any]) -> str:
    """A Markdown rendering with the same content, for humans and tickets."""
    lines = []
    if report["report"] == "inventory-check":
        cp = report["checkpoint"]
        lines += [
            f"# Inventory status at {cp['origin']} size {cp['size']}",
            "",
            f"As of {report['at']}.",
            "",
            "| tool | version | status | sunset | replacement | notices |",
            "|---|---|---|---|---|---|",
        ]
        for e in report["items"]:
            replacement = e.get("replacement")
            lines.append(
                f"| `{e['tool_id']}` | {e['version']} | {e['status']}"
                f"{' (schema mismatch)' if e.get('schema_mismatch') else ''} | "
                f"{e.get('sunset_at', '')} | "
                f"{replacement['tool_id'] + '@' + replacement['version'] if replacement else ''} "
                f"| {', '.join(str(i) for i in e['notices'])} |"
            )
    else:
        lines += [
            f"# Inventory changes, size {report['from']['size']} to "
            f"{report['to']['size']} of {report['to']['origin']}",
            "",
            f"As of {report['at']}.",
            "",
            "| tool | version | change | from | to | caused by |",
            "|---|---|---|---|---|---|",
        ]
        for c in report["changes"]:
            lines.append(
                f"| `{c['tool_id']}` | {c['version']} | {c['change']} | {c['from']} | "
                f"{c['to']} | {', '.join(str(i) for i in c['caused_by'])} |"
            )
        if not report["changes"]:
            lines.append("| (no changes) | | | | | |")
    return "\n".join(lines) + "\n"
