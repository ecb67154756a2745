"""The data each explorer page shows: plain dicts built from the log's read side.

Rules:

1. Every function reads through a ``LogReader`` (on a reader thread) and is bounded: at
   most ``PAGE_SIZE`` rows (``RECENT_ENTRIES`` on the home page), a map record per tool
   shown, one leaf per notice page, ``MAX_SCANNED_LEAVES`` for an advisory.
2. A tool's status is ``GET /v1/tools/...``'s (``LogReader.tool``: the status table
   of the tool's map record at the served checkpoint); publishers are those of ``GET
   /v1/publishers``.
3. Nothing is rendered here: values go to the templates, which escape them.
4. A log index at or past the served checkpoint is ``not_found``, like one never written.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from deplog.authority.http.plumbing import HTTPRequestError
from deplog.authority.storage.reader import LogReader
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.map.proof import MapProof
from deplog.client.model import canonical
from deplog.client.model.entries import NoticeEntry, PublisherEntry
from deplog.client.model.notice import parse_advisories, parse_tool_id
from deplog.client.model.rules import decode_leaf, readable_tool_id
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.cosignature import ALGORITHMS, cosignatures
from deplog.client.tlog.note import Verifier, parse_note
from deplog.client.tlog.policy import Policy

PAGE_SIZE: Final = 25
RECENT_ENTRIES: Final = 10
GROWTH_POINTS: Final = 24
MAX_QUERY_CHARS: Final = 200
MAX_SEARCH_PAGE: Final = 100
"""Search results past page 100 are refused: a narrower query finds them."""
CHART: Final = {"left": 48, "top": 8, "width": 340, "height": 100}
"""The growth chart's plot area inside its 400 by 150 viewBox; axis labels go around it."""


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


def home_page(
    reader: LogReader, served: Served, now: float, before_raw: str | None
) -> dict[str, Any]:
    """The home page: checkpoint, cosigners, growth, and entries below ``before`` (default:
    the latest), ``RECENT_ENTRIES`` at a time."""
    size = served.size
    before = _decimal(before_raw, 1, size) if before_raw else size
    entries = reader.recent_entries(before, RECENT_ENTRIES)
    return {
        "checkpoint": checkpoint_view(served, now),
        "growth": _chart(reader.growth(size, GROWTH_POINTS)),
        "recent": [_entry_summary(i, leaf) for i, leaf in entries],
        "newer": None if before == size else min(size, before + RECENT_ENTRIES),
        "older": entries[-1][0] if entries and entries[-1][0] > 0 else None,
    }


def _chart(points: list[tuple[int, str]]) -> dict[str, Any]:
    """An SVG polyline of log size over signing time, in the plot area of ``CHART``."""
    if not points:
        return {"points": "", "first": None, "last": None, "max": 0} | CHART
    left, top, width, height = CHART["left"], CHART["top"], CHART["width"], CHART["height"]
    times = [datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() for _, t in points]
    t0, t1 = times[0], times[-1]
    most = max(s for s, _ in points)
    coords = []
    for (s, _), t in zip(points, times, strict=True):
        x = left + (0.0 if t1 == t0 else width * (t - t0) / (t1 - t0))
        coords.append(f"{x:.1f},{top + height - height * s / most:.1f}")
    return {
        "points": " ".join(coords),
        "first": points[0][1],
        "last": points[-1][1],
        "max": most,
    } | CHART


def _advisory(text: str) -> str | None:
    """``text`` as a CVE or GHSA id in its canonical case, or None if it is none."""
    head, _, rest = text.partition("-")
    if head not in ("cve", "ghsa") or not rest:
        return None
    candidate = head.upper() + "-" + (rest.upper() if head == "cve" else rest)
    try:
        parse_advisories([candidate])
    except DeplogError:
        return None
    return candidate


def search_page(
    reader: LogReader,
    served: Served,
    query: str | None,
    page_raw: str | None,
    now: datetime,
    proof_at: Callable[[LogReader, str], MapProof | None],
) -> dict[str, Any]:
    """Tools whose id contains the query (every tool for none), publishers whose id or
    namespace does, notices naming an advisory; paged, each tool with its status from its
    map proof at the served checkpoint (``proof_at``: None if the map is elsewhere). An
    exact tool id is a redirect (``{"redirect": tool_id}``)."""
    page = _decimal(page_raw, 1, MAX_SEARCH_PAGE + 1) if page_raw else 1
    text = (query or "").strip().lower()[:MAX_QUERY_CHARS]
    offset = (page - 1) * PAGE_SIZE
    advisory = _advisory(text)
    out: dict[str, Any] = {"query": text, "page": page, "publishers": [], "advisory": advisory}
    if advisory is not None:
        indexes, partial = reader.leaves_containing(
            f'"{advisory}"'.encode(), served.size, PAGE_SIZE
        )
        summaries = [_entry_summary(i, reader.entries(i, i + 1)[0]) for i in indexes]
        names = list(dict.fromkeys(e["tool_id"] for e in summaries if e["tool_id"]))
        out.update(notices=summaries, partial=partial, more=False)
    else:
        names = reader.search_tools(text, served.size, offset, PAGE_SIZE + 1)
        if text.startswith("tool:") and names[:1] == [text]:
            return {"redirect": text}
        out.update(notices=[], partial=False, more=len(names) > PAGE_SIZE)
        names = names[:PAGE_SIZE]
    out["tools"] = []
    for t in names:
        proof = proof_at(reader, t)
        status = proof and reader.tool(t, served.size, now, proof.record, limit=1)["status"]
        out["tools"].append({"tool_id": t, "status": status})
    if text and page == 1:
        for p in reader.publishers()["publishers"]:
            if any(text in name for name in [p["publisher"], *p["namespaces"]]):
                out["publishers"].append(p)
        out["publishers"] = out["publishers"][:PAGE_SIZE]
    return out


def tool_page(
    reader: LogReader,
    served: Served,
    tool_id: str,
    now: datetime,
    record: bytes | None,
    query: Mapping[str, str],
) -> dict[str, Any]:
    """A tool's status table from its map ``record`` at the served checkpoint (the API's
    own, ``LogReader.tool``): ``?page=N`` of its rows, its notices ``?after=INDEX``; or
    ``not_found`` if no entry names it or the page is past its rows. ``query["origin"]``
    is the address the offline check names."""
    parse_tool_id(tool_id)
    page = _decimal(query["page"], 1, 2**31) if query.get("page") else 1
    after = _decimal(query["after"], 0, served.size) if query.get("after") else -1
    status = reader.tool(tool_id, served.size, now, record, after, PAGE_SIZE)
    offset = (page - 1) * PAGE_SIZE
    if status["last_index"] is None or (page > 1 and offset >= len(status["rows"])):
        raise _not_found()
    return {
        "page": page,
        "after": after,
        "rows": status["rows"][offset : offset + PAGE_SIZE],
        "more_rows": len(status["rows"]) > offset + PAGE_SIZE,
        "status": status,
        "tool_id": tool_id,
        "log_key": served.log_key.vkey(),
        "origin": query["origin"],
    }


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
        statement = {"namespaces": [], "keys": []} | entry.statement.to_json()
        out.update(kind="publisher", statement=statement, key=None)
    return out


def _raw(leaf: bytes) -> object:
    """The leaf as JSON for the page, or as text when it is none (an invalid entry)."""
    try:
        return canonical.loads(leaf)
    except DeplogError:
        return leaf.decode("utf-8", errors="replace")


def publishers_page(reader: LogReader) -> dict[str, Any]:
    """Every publisher and key; a revoked publisher's keys are ``revoked``, a revoked key
    is ``rotated`` if a later one is active."""
    publishers = reader.publishers()["publishers"]
    for p in publishers:
        for k in p["keys"]:
            label = k["status"]
            if p["status"] == "revoked":
                label = "revoked"
            elif label == "revoked" and any(
                o["status"] == "active" and o["added_at"] > k["added_at"] for o in p["keys"]
            ):
                label = "rotated"
            k["label"] = label
    return {"publishers": publishers}
