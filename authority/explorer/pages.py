"""The data each explorer page shows: plain dicts built from the log's read side.

Rules:

1. Every function reads through a ``LogReader`` (on a reader thread) and is bounded: at
   most ``PAGE_SIZE`` rows, ``LogReader.tool``'s fold, one leaf per notice page.
2. Tool status and publishers are those of ``GET /v1/tools/...`` and ``GET
   /v1/publishers``; nothing here folds notices again.
3. Nothing is rendered here: values go to the templates, which escape them.
4. A log index at or past the served checkpoint is ``not_found``, like one never written.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from deplog.authority.http.plumbing import HTTPRequestError
from deplog.authority.storage.reader import LogReader
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.model import canonical
from deplog.client.model.entries import NoticeEntry, PublisherEntry
from deplog.client.model.notice import parse_tool_id
from deplog.client.model.rules import decode_leaf, readable_tool_id
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.cosignature import ALGORITHMS, cosignatures
from deplog.client.tlog.note import Verifier, parse_note
from deplog.client.tlog.policy import Policy

__all__ = [
    "GROWTH_POINTS",
    "MAX_QUERY_CHARS",
    "MAX_SEARCH_PAGE",
    "PAGE_SIZE",
    "RECENT_ENTRIES",
    "Served",
    "checkpoint_view",
    "home_page",
    "notice_page",
    "publishers_page",
    "search_page",
    "tool_page",
]

PAGE_SIZE: Final = 25
RECENT_ENTRIES: Final = 10
GROWTH_POINTS: Final = 24
MAX_QUERY_CHARS: Final = 200
MAX_SEARCH_PAGE: Final = 100
"""Search results past page 100 are refused: a narrower query finds them."""


_OPTIONAL_NOTICE_FIELDS: Final = (
    "affected",
    "withdraws",
    "schema_digest",
    "advisories",
    "replacement",
    "sunset_at",
    "message",
)


@dataclass(frozen=True)
class Served:
    """What the explorer knows besides the database: the served note and the trusted keys."""

    note: bytes
    size: int
    published_at: float
    log_key: Verifier
    witnesses: tuple[Verifier, ...]
    policy_quorum: int
    tree_lines: tuple[Verifier, ...] = ()
    """The witnesses that may sign a checkpoint's first three lines only."""

    def policy(self) -> Policy | None:
        """The tlog-policy ``authority policy`` prints, or None without witnesses."""
        if not self.witnesses:
            return None
        witnesses = list(self.witnesses)
        return Policy.k_of_n(self.log_key, witnesses, _required(self), self.tree_lines)


def _not_found() -> HTTPRequestError:
    return HTTPRequestError(ErrorCode.NOT_FOUND, "no such page")


def _iso(posix: float) -> str:
    return datetime.fromtimestamp(posix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _required(served: Served) -> int:
    """Cosignatures the policy requires (0 without witnesses)."""
    return 0 if not served.witnesses else max(1, min(served.policy_quorum, len(served.witnesses)))


def checkpoint_view(served: Served, now: float) -> dict[str, Any]:
    """The served checkpoint, its verified cosigners and whether the policy is met."""
    text, _ = parse_note(served.note)
    checkpoint = Checkpoint.from_text(text)
    valid = {
        c.name: c
        for c in cosignatures(served.note, list(served.witnesses), tree_lines=served.tree_lines)
    }
    required = _required(served)
    cosigners = []
    for witness in served.witnesses:
        cosig = valid.get(witness.name)
        cosigners.append(
            {
                "name": witness.name,
                "key": witness.vkey(),
                "cosigned": cosig is not None,
                "timestamp": None if cosig is None else _iso(cosig.timestamp),
                "age": None if cosig is None else max(0, int(now - cosig.timestamp)),
                "algorithm": ALGORITHMS[witness.sig_type],
                "statement": None if cosig is None else cosig.statement,
            }
        )
    counted = sum(1 for c in cosigners if c["cosigned"])
    return {
        "origin": checkpoint.origin,
        "size": checkpoint.size,
        "root": base64.b64encode(checkpoint.root_hash).decode("ascii"),
        "published_at": _iso(served.published_at),
        "age": max(0, int(now - served.published_at)),
        "log_key": served.log_key.vkey(),
        "cosigners": cosigners,
        "required": required,
        "counted": counted,
        "policy_met": required > 0 and counted >= required,
    }


def _entry_summary(index: int, leaf: bytes) -> dict[str, Any]:
    entry = decode_leaf(leaf)
    if isinstance(entry, DeplogError):  # in the signed tree, but no entry (fold-spec 3.1)
        return {
            "index": index,
            "kind": "invalid",
            "tool_id": readable_tool_id(leaf),
            "action": "invalid",
            "publisher": None,
            "issued_at": None,
        }
    if isinstance(entry, NoticeEntry):
        notice = entry.envelope.notice
        return {
            "index": index,
            "kind": "notice",
            "tool_id": notice.tool_id,
            "action": notice.action,
            "publisher": notice.publisher,
            "issued_at": _canonical_time(notice.issued_at),
        }
    assert isinstance(entry, PublisherEntry)
    statement = entry.statement
    return {
        "index": index,
        "kind": "publisher",
        "tool_id": None,
        "action": statement.action,
        "publisher": statement.publisher,
        "issued_at": _canonical_time(statement.issued_at),
    }


def _canonical_time(moment: datetime) -> str:
    """RFC 3339 UTC, seconds precision, as notices carry it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def home_page(reader: LogReader, served: Served, now: float) -> dict[str, Any]:
    """The home page: checkpoint, cosigners, growth, the latest entries."""
    size = served.size
    growth = reader.growth(size, GROWTH_POINTS)
    recent = [_entry_summary(i, leaf) for i, leaf in reader.recent_entries(size, RECENT_ENTRIES)]
    return {
        "checkpoint": checkpoint_view(served, now),
        "growth": _chart(growth),
        "recent": recent,
    }


def _chart(points: list[tuple[int, str]]) -> dict[str, Any]:
    """An SVG polyline (viewBox 0 0 300 100) of log size over signing time."""
    if not points:
        return {"points": "", "first": None, "last": None, "max": 0}
    times = [datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() for _, t in points]
    t0, t1 = times[0], times[-1]
    top = max(s for s, _ in points)
    coords = []
    for (s, _), t in zip(points, times, strict=True):
        x = 0.0 if t1 == t0 else 300 * (t - t0) / (t1 - t0)
        y = 100 - 100 * s / top
        coords.append(f"{x:.1f},{y:.1f}")
    return {"points": " ".join(coords), "first": points[0][1], "last": points[-1][1], "max": top}


def search_page(
    reader: LogReader, served: Served, query: str | None, page_raw: str | None
) -> dict[str, Any]:
    """Tools whose id, publishers whose id or namespace, contains the query; paged."""
    page = _decimal(page_raw, 1, MAX_SEARCH_PAGE + 1) if page_raw else 1
    text = (query or "").strip().lower()[:MAX_QUERY_CHARS]
    if not text:
        return {"query": "", "page": 1, "tools": [], "publishers": [], "more": False}
    offset = (page - 1) * PAGE_SIZE
    tools = reader.search_tools(text, served.size, offset, PAGE_SIZE + 1)
    publishers = []
    if page == 1:
        for p in reader.publishers()["publishers"]:
            names = [p["publisher"], *p["namespaces"]]
            if any(text in name for name in names):
                publishers.append(p)
    return {
        "query": text,
        "page": page,
        "tools": tools[:PAGE_SIZE],
        "publishers": publishers[:PAGE_SIZE],
        "more": len(tools) > PAGE_SIZE,
    }


def tool_page(
    reader: LogReader, served: Served, tool_id: str, now: datetime, record: bytes | None
) -> dict[str, Any]:
    """A tool's status from the API's own table, or ``not_found`` if no notice names it."""
    parse_tool_id(tool_id)
    described = reader.tool(tool_id, served.size, now, record)
    if described["last_index"] is None:
        raise _not_found()
    return {"tool": described, "tool_id": tool_id, "log_key": served.log_key.vkey()}


def _decimal(raw: str, low: int, high: int) -> int:
    """A canonical decimal in ``[low, high)``; anything else is ``not_found``."""
    if not raw.isascii() or not raw.isdigit() or len(raw) > 19 or (len(raw) > 1 and raw[0] == "0"):
        raise _not_found()
    if not low <= (number := int(raw)) < high:
        raise _not_found()
    return number


def notice_page(reader: LogReader, served: Served, raw_index: str) -> dict[str, Any]:
    """One log entry by index: decoded, its signer and key, and the leaf in base64."""
    index = _decimal(raw_index, 0, served.size)
    leaf = reader.entries(index, index + 1)[0]
    entry = decode_leaf(leaf)
    publishers = {p["publisher"]: p for p in reader.publishers()["publishers"]}
    out: dict[str, Any] = {
        "index": index,
        "size": served.size,
        "leaf_b64": base64.b64encode(leaf).decode("ascii"),
        "raw": _raw(leaf),
        "log_key": served.log_key.vkey(),
        # One per line; " tree-lines" after a witness that may sign the first three lines
        # only (explorer.js reads it).
        "witness_keys": [
            w.vkey() + (" tree-lines" if w in served.tree_lines else "") for w in served.witnesses
        ],
        "quorum": _required(served),
    }
    finding = reader.invalid_entry(index)
    if isinstance(entry, DeplogError):  # fold-spec 3.1: in the signed tree, but no entry
        finding = (ErrorCode.BAD_LEAF, entry.code, readable_tool_id(leaf))
    if finding is not None:
        code, cause, tool_id = finding
        out.update(kind="invalid", code=code, cause=cause, tool_id=tool_id, key=None)
    elif isinstance(entry, NoticeEntry):
        envelope = entry.envelope
        notice = envelope.notice
        key_id = envelope.key_id.hex()
        signer = publishers.get(notice.publisher)
        key = None
        if signer is not None:
            key = next((k for k in signer["keys"] if k["key_id"] == key_id), None)
        shown = notice.to_json()
        for name in _OPTIONAL_NOTICE_FIELDS:
            shown.setdefault(name, None)
        if shown["affected"] is not None:
            shown["affected"] = {"versions": [], "ranges": []} | shown["affected"]
        out.update(kind="notice", notice=shown, key_id=key_id, key=key)
    else:
        assert isinstance(entry, PublisherEntry)
        out.update(kind="publisher", statement=entry.statement.to_json(), key=None)
    return out


def _raw(leaf: bytes) -> object:
    """The leaf as JSON for the page, or as text when it is none (an invalid entry)."""
    try:
        return canonical.loads(leaf)
    except DeplogError:
        return leaf.decode("utf-8", errors="replace")


def publishers_page(reader: LogReader) -> dict[str, Any]:
    """Every publisher and key; a revoked key is ``rotated`` if a later one is active."""
    publishers = reader.publishers()["publishers"]
    for p in publishers:
        for k in p["keys"]:
            label = k["status"]
            if label == "revoked" and any(
                o["status"] == "active" and o["added_at"] > k["added_at"] for o in p["keys"]
            ):
                label = "rotated"
            k["label"] = label
    return {"publishers": publishers}
