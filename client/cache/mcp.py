"""Guarding an MCP ``tools/list`` result: what the host checks itself, then what the log says.

A tool server names a tool's deplog identity in its ``_meta["dev.deplog/tool"]``
(``tool_id``, ``version``, optionally ``schema_digest``): the server's claim, never
trusted over what the host can check. The host decides each listed tool by these rules,
in order (``check_listed``, then ``decide_listed``; docs/mcp.md tells hosts):

1. Identity. A tool the host pinned (``pins``: name to ``ToolVersion``) is decided as
   its pin, and only if the server declares that same identity. An unpinned tool is
   decided as it declares; one that declares nothing is not deplog's and passes, unless
   the host ``require_pins``. A declaration that is no tool id and SemVer version is
   ``unknown``/``bad_identifier``. A host relying on deplog for a server it does not
   control pins, and requires pins.
2. Definition. The host digests the listed ``inputSchema`` itself (``sha256:`` of its RFC
   8785 bytes); a declared ``schema_digest`` is never used in its place, and one that
   differs refuses the tool: a declaration can cost a tool its listing, never earn it.
3. The log. The guard decides on that identity and digest: refused tools are dropped,
   and stale or unknown ones unless ``keep_unverified``; a deprecated tool gets
   ``_meta["dev.deplog/deprecation"]`` (RFC 8594 ``Sunset``, RFC 9745 ``Deprecation``,
   replacement, reasons, log indexes). With ``with_proof``, every tool listed on a
   decision gets ``_meta["dev.deplog/proof"]``, its map proof.
4. Refusals by rules 1 and 2 are made on the listing alone: ``refuse`` whatever
   ``keep_unverified`` says, naming no checkpoint. A call to a pinned name the listing
   does not show is refused ``not_listed``.

The reasons rules 1, 2 and 4 add to the guard's (``LISTING_REASONS``):
``identity_missing`` and ``identity_mismatch`` (pinned; the server declares none, or
another), ``not_pinned``, ``not_listed``, ``schema_undigestable`` (the listed schema has
no digest) and ``schema_digest_mismatch``. A call refused on deplog's authority carries
``_meta["dev.deplog/refusal"]`` (``refusal_annotation``) and reads as a sentence
(``refusal_text``), in ``client.model.table.says``'s words.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any, Final

from deplog.client.cache.guard import Decider, Decision, Verdict, valid_identity
from deplog.client.errors import DeplogError
from deplog.client.model import canonical
from deplog.client.model.notice import parse_tool_id
from deplog.client.model.semver import Version
from deplog.client.model.table import says
from deplog.client.tlog.timestamps import format_timestamp

__all__ = [
    "DEPRECATION_KEY",
    "IDENTITY_KEY",
    "LISTING_REASONS",
    "PROOF_KEY",
    "REFUSAL_KEY",
    "ListedIdentity",
    "Pins",
    "ToolVersion",
    "check_listed",
    "checked_pins",
    "decide_listed",
    "deprecation_annotation",
    "deprecation_line",
    "describe_deprecation",
    "guard_tools_list",
    "http_date",
    "identity_annotation",
    "listed_schema_digest",
    "may_list",
    "refusal_annotation",
    "refusal_text",
    "schema_digest",
    "status_words",
    "unlisted_refusal",
]

IDENTITY_KEY = "dev.deplog/tool"
DEPRECATION_KEY = "dev.deplog/deprecation"
PROOF_KEY = "dev.deplog/proof"
REFUSAL_KEY = "dev.deplog/refusal"
LISTING_REASONS = frozenset(
    {
        "identity_missing",
        "identity_mismatch",
        "not_pinned",
        "not_listed",
        "schema_undigestable",
        "schema_digest_mismatch",
    }
)
"""The reasons of refusals made on the listing alone (rules 1, 2 and 4)."""


@dataclass(frozen=True)
class ToolVersion:
    """A deplog identity for a tool: the one its author declares, or the one a host pins."""

    tool_id: str
    version: str


Pins = Mapping[str, ToolVersion]
"""A host's pins: a tool's name on one server to the identity the host holds it to."""


@dataclass(frozen=True)
class ListedIdentity:
    """A listed tool that passed rules 1 and 2: its identity and computed schema digest."""

    tool_id: str
    version: str
    schema_digest: str


def schema_digest(input_schema: dict[str, Any]) -> str:
    """``sha256:<hex>`` of a tool's input schema in RFC 8785 canonical JSON."""
    return "sha256:" + hashlib.sha256(canonical.dumps(input_schema)).hexdigest()


def listed_schema_digest(tool: Mapping[str, Any]) -> str | None:
    """The digest of a listed tool's ``inputSchema`` (rule 2), or None when it has none."""
    schema = tool.get("inputSchema")
    if not isinstance(schema, dict):
        return None
    try:
        return schema_digest(schema)
    except (DeplogError, RecursionError):  # a float, an unsafe integer, nesting past the stack
        return None


def identity_annotation(
    tool_id: str, version: str, input_schema: dict[str, Any] | None
) -> dict[str, str]:
    """The ``dev.deplog/tool`` object a tool author's server lists (ids checked first)."""
    parse_tool_id(tool_id)
    Version.parse(version)
    identity = {"tool_id": tool_id, "version": version}
    if input_schema is not None:
        identity["schema_digest"] = schema_digest(input_schema)
    return identity


def checked_pins(pins: Pins | None) -> dict[str, ToolVersion]:
    """A host's pins, each checked (``bad_tool_id``, ``bad_version``) before any listing."""
    out = dict(pins or {})
    for pin in out.values():
        identity_annotation(pin.tool_id, pin.version, None)
    return out


def check_listed(
    tool: Mapping[str, Any], pins: Pins, *, require_pins: bool = False
) -> ListedIdentity | Decision | None:
    """Rules 1 and 2 on one listed tool: None (not deplog's), a ``Decision``, or an identity."""
    name = tool.get("name")
    meta = tool.get("_meta")
    declared = meta.get(IDENTITY_KEY) if isinstance(meta, dict) else None
    said = declared if isinstance(declared, dict) else None
    pin = pins.get(name) if isinstance(name, str) else None
    identity = _identity(said, pin, require_pins=require_pins)
    if not isinstance(identity, ToolVersion):
        return identity
    tool_id, version = identity.tool_id, identity.version
    digest = listed_schema_digest(tool)
    if digest is None:
        return _refused("schema_undigestable", tool_id, version)
    assert said is not None  # rule 1 passes no tool that declares nothing
    if "schema_digest" in said and said["schema_digest"] != digest:
        return _refused("schema_digest_mismatch", tool_id, version)
    return ListedIdentity(tool_id, version, digest)


def _identity(
    said: dict[str, Any] | None, pin: ToolVersion | None, *, require_pins: bool
) -> ToolVersion | Decision | None:
    """Rule 1: the identity a listed tool is decided as, a ``Decision``, or None."""
    tool_id, version = (None, None) if said is None else (said.get("tool_id"), said.get("version"))
    if pin is not None:
        if said is None:
            return _refused("identity_missing", pin.tool_id, pin.version)
        if (tool_id, version) != (pin.tool_id, pin.version):
            return _refused("identity_mismatch", pin.tool_id, pin.version)
        return pin
    named = isinstance(tool_id, str) and isinstance(version, str)
    if require_pins:
        return _refused("not_pinned", *((str(tool_id), str(version)) if named else ("", "")))
    if said is None:
        return None
    if not valid_identity(tool_id, version):
        return Decision(Verdict.UNKNOWN, "bad_identifier", str(tool_id), str(version), None)
    return ToolVersion(str(tool_id), str(version))


def _refused(reason: str, tool_id: str, version: str) -> Decision:
    """A refusal on the listing alone: no checkpoint was asked (rule 4)."""
    return Decision(Verdict.REFUSE, reason, tool_id, version, None)


def decide_listed(
    checked: ListedIdentity | Decision | None,
    guard: Decider,
    *,
    cached_at: datetime,
    with_proof: bool = False,
) -> Decision | None:
    """The decision on a tool ``check_listed`` checked: its own, else the guard's (rule 3)."""
    if not isinstance(checked, ListedIdentity):
        return checked
    return guard.check(
        checked.tool_id,
        checked.version,
        cached_at=cached_at,
        schema_digest=checked.schema_digest,
        with_proof=with_proof,
    )


def unlisted_refusal(name: str, pins: Pins, *, require_pins: bool = False) -> Decision | None:
    """The refusal of a call to a name no listing showed (rule 4), or None."""
    pin = pins.get(name)
    if pin is not None:
        return _refused("not_listed", pin.tool_id, pin.version)
    return _refused("not_pinned", "", "") if require_pins else None


def refusal_annotation(decision: Decision) -> dict[str, Any]:
    """The ``dev.deplog/refusal`` object of a call the guard did not let through."""
    out: dict[str, Any] = {
        "verdict": decision.verdict.value,
        "reason": decision.reason,
        "tool_id": decision.tool_id,
        "version": decision.version,
    }
    if decision.status is not None:
        out["notices"] = list(decision.status.notices)
    if decision.message is not None:
        out["message"] = decision.message
    if decision.processed_through is not None:
        out["checkpoint_size"] = decision.processed_through.size
        out["checkpoint"] = decision.processed_through.checkpoint
    if decision.guarantee is not None:
        out["guarantee"] = decision.guarantee
    return out


_WHY: Final = {
    "schema_mismatch": "its input schema is not the one the publisher's notice names",
    "checkpoint_stale": "the log state it is checked against was verified too long ago",
    "not_synced": "no state of the log has been verified yet",
    "state_advancing": "the log state was advancing while it was checked; try again",
    "invalid_entry": "an entry of the log about it fails validation, so no version of it "
    "can be vouched for",
    "bad_identifier": "it declares no valid deplog tool id and version",
    "cache_predates_notice": "the tool list predates the tool's latest notice",
    "identity_missing": "the server does not declare the identity the host pinned",
    "identity_mismatch": "the server declares another identity than the one the host pinned",
    "not_pinned": "the host serves only the tools it pinned, and this one is not",
    "not_listed": "the server's tool list does not show it",
    "schema_undigestable": "its listed input schema cannot be digested",
    "schema_digest_mismatch": "its listed input schema differs from the digest it declares",
}
"""Why a tool is refused in words, for the reasons that are no status of the log's."""


def status_words(decision: Decision) -> str:
    """The status behind a decision in ``table.says``'s words, with the deciding message."""
    assert decision.status is not None
    return says({**decision.status.to_json(), "message": decision.message})


def refusal_text(decision: Decision, name: str | None = None) -> str:
    """A refused call as a sentence a model can act on: what was refused, why (the
    publisher's reasons, advisories and message), what to use instead, since when, and the
    checkpoint it was decided at."""
    subject = f"{decision.tool_id}@{decision.version}" if decision.tool_id else f"the tool {name}"
    if decision.status is not None and decision.reason in ("revoked", "sunset"):
        why = f"the deplog log says it is {status_words(decision)}"
    else:
        why = _WHY.get(decision.reason, "deplog cannot vouch for it")
    through = decision.processed_through
    if decision.reason in LISTING_REASONS:
        at = "decided on the tool server's listing alone"
    elif through is None:
        at = "nothing of the log verified yet"
    else:
        at = f"decided at checkpoint size {through.size} of the log"
    notices = "" if decision.status is None else ", ".join(map(str, decision.status.notices))
    return (
        f"deplog refused the call to {subject}: {why}. Do not call it again as it is; "
        f"{at} (verdict {decision.verdict.value}, reason {decision.reason}"
        f"{f', log indexes {notices}' if notices else ''})."
    )


def deprecation_line(decision: Decision) -> str:
    """The one line ``describe_deprecations`` adds to a deprecated tool's description."""
    return f"deplog: this tool is {status_words(decision)}."


def http_date(moment: datetime) -> str:
    """RFC 9110 IMF-fixdate, as RFC 8594's ``Sunset`` field uses."""
    return format_datetime(moment.astimezone(UTC), usegmt=True)


def deprecation_annotation(decision: Decision) -> dict[str, Any]:
    """The ``dev.deplog/deprecation`` object for a deprecated tool's ``_meta``: RFC 3339
    dates, and the RFC 9745 ``Deprecation`` and RFC 8594 ``Sunset`` header values under
    ``http_headers``, for a host that forwards them as HTTP fields."""
    status = decision.status
    assert status is not None
    out: dict[str, Any] = {"status": status.status, "notices": list(status.notices)}
    headers = {}
    if status.effective_at is not None:
        out["deprecated_since"] = format_timestamp(status.effective_at)
        headers["Deprecation"] = f"@{int(status.effective_at.timestamp())}"
    if status.sunset_at is not None:
        out["sunset_at"] = format_timestamp(status.sunset_at)
        headers["Sunset"] = http_date(status.sunset_at)
    if headers:
        out["http_headers"] = headers
    if status.replacement is not None:
        out["replacement"] = status.replacement.to_json()
    if status.reasons:
        out["reasons"] = list(status.reasons)
    if status.advisories:
        out["advisories"] = list(status.advisories)
    if decision.message is not None:
        out["message"] = decision.message
    if decision.processed_through is not None:
        out["checkpoint_size"] = decision.processed_through.size
    return out


def describe_deprecation(tool: dict[str, Any], decision: Decision) -> None:
    """Add ``deprecation_line`` to a listed tool's ``description`` (``describe_deprecations``)."""
    described = tool.get("description")
    line = deprecation_line(decision)
    tool["description"] = f"{described}\n\n{line}" if isinstance(described, str) else line


def may_list(decision: Decision, *, keep_unverified: bool = False) -> bool:
    """Whether a tool with this decision is listed and callable (rule 3; never on
    ``invalid_entry``, which is no lack of verification)."""
    return decision.may_serve or (
        keep_unverified
        and decision.verdict in (Verdict.STALE, Verdict.UNKNOWN)
        and decision.reason != "invalid_entry"
    )


def guard_tools_list(
    result: dict[str, Any],
    guard: Decider,
    *,
    cached_at: datetime,
    keep_unverified: bool = False,
    with_proof: bool = False,
    pins: Pins | None = None,
    require_pins: bool = False,
    describe_deprecations: bool = False,
) -> dict[str, Any]:
    """A copy of an MCP ``tools/list`` result with the rules applied (and, with
    ``describe_deprecations``, ``deprecation_line`` added to deprecated tools' descriptions)."""
    pinned = checked_pins(pins)
    out = copy.deepcopy(result)
    kept = []
    for tool in out.get("tools", []):
        entry = tool if isinstance(tool, dict) else {}  # not a tool: nobody's identity
        checked = check_listed(entry, pinned, require_pins=require_pins)
        decision = decide_listed(checked, guard, cached_at=cached_at, with_proof=with_proof)
        if decision is None:
            kept.append(tool)
        elif may_list(decision, keep_unverified=keep_unverified):
            if decision.proof is not None:
                tool["_meta"][PROOF_KEY] = json.loads(decision.proof)
            if decision.verdict == Verdict.WARN:
                tool["_meta"][DEPRECATION_KEY] = deprecation_annotation(decision)
                if describe_deprecations:
                    describe_deprecation(tool, decision)
            kept.append(tool)
    out["tools"] = kept
    return out
