"""Guarding an MCP ``tools/list`` result: drop what must not be served, annotate the rest.

A tool opts in by naming its deplog identity in its ``_meta``, under the key
``dev.deplog/tool``: ``{"tool_id": "tool:<namespace>/<name>", "version":
"<semver>"}`` and optionally ``"schema_digest": "sha256:<hex>"``. Tools without
it pass through untouched (deplog knows nothing about them).

For a tool with an identity, the guard decides: refused (revoked, sunset,
schema mismatch) tools are dropped; so are stale and unknown verdicts unless
``keep_unverified`` (fail closed by default: a gateway that cannot show its
deprecation data is current does not list the tool). A deprecated tool stays
and gets ``_meta["dev.deplog/deprecation"]`` with the sunset as an HTTP-date
(RFC 8594 ``Sunset``), the deprecation as ``@<epoch seconds>`` (RFC 9745
``Deprecation``), the replacement, reasons and the log indexes behind it, so
agents learn of it before calls fail. With ``with_proof``, every tool listed on
a decision gets ``_meta["dev.deplog/proof"]``: the ``deplog.map_proof/v1`` JSON
proof of its status record at the guard's checkpoint, which the agent verifies
itself (``deplog.client.verify_tool_status``) instead of trusting the gateway.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from deplog.client.cache.guard import Decision, Guard, Verdict

__all__ = [
    "DEPRECATION_KEY",
    "IDENTITY_KEY",
    "PROOF_KEY",
    "deprecation_annotation",
    "guard_tools_list",
    "http_date",
]

IDENTITY_KEY = "dev.deplog/tool"
DEPRECATION_KEY = "dev.deplog/deprecation"
PROOF_KEY = "dev.deplog/proof"


def http_date(moment: datetime) -> str:
    """RFC 9110 IMF-fixdate, as RFC 8594's ``Sunset`` field uses."""
    return format_datetime(moment.astimezone(UTC), usegmt=True)


def deprecation_annotation(decision: Decision) -> dict[str, Any]:
    """The ``dev.deplog/deprecation`` object for a deprecated tool's ``_meta``."""
    status = decision.status
    assert status is not None
    out: dict[str, Any] = {"status": status.status, "notices": list(status.notices)}
    if status.effective_at is not None:
        out["deprecation"] = f"@{int(status.effective_at.timestamp())}"
    if status.sunset_at is not None:
        out["sunset"] = http_date(status.sunset_at)
    if status.replacement is not None:
        out["replacement"] = status.replacement.to_json()
    if status.reasons:
        out["reasons"] = list(status.reasons)
    if decision.processed_through is not None:
        out["checkpoint_size"] = decision.processed_through.size
    return out


def guard_tools_list(
    result: dict[str, Any],
    guard: Guard,
    *,
    cached_at: datetime,
    keep_unverified: bool = False,
    with_proof: bool = False,
) -> dict[str, Any]:
    """A copy of an MCP ``tools/list`` result with deplog's verdicts applied."""
    out = copy.deepcopy(result)
    kept = []
    for tool in out.get("tools", []):
        identity = tool.get("_meta", {}).get(IDENTITY_KEY) if isinstance(tool, dict) else None
        if not isinstance(identity, dict):
            kept.append(tool)
            continue
        tool_id, version = identity.get("tool_id"), identity.get("version")
        digest = identity.get("schema_digest")
        if not isinstance(tool_id, str) or not isinstance(version, str):
            if keep_unverified:
                kept.append(tool)
            continue
        decision = guard.check(
            tool_id,
            version,
            cached_at=cached_at,
            schema_digest=digest if isinstance(digest, str) else None,
            with_proof=with_proof,
        )
        if decision.proof is not None and decision.may_serve:
            tool["_meta"][PROOF_KEY] = json.loads(decision.proof)
        if decision.verdict == Verdict.WARN:
            tool["_meta"][DEPRECATION_KEY] = deprecation_annotation(decision)
            kept.append(tool)
        elif decision.verdict == Verdict.SERVE or (
            keep_unverified and decision.verdict in (Verdict.STALE, Verdict.UNKNOWN)
        ):
            kept.append(tool)
    out["tools"] = kept
    return out
