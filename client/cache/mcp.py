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
agents learn of it before calls fail.

A tool's ``schema_digest`` is ``sha256:`` and the hex SHA-256 of its input
schema as RFC 8785 canonical JSON (``schema_digest``): the rule everything
deplog hashes follows, so a publisher computes the digest for a notice from
the same schema the server lists. A call refused on deplog's authority
carries ``_meta["dev.deplog/refusal"]`` (``refusal_annotation``): the
verdict, reason, tool, the notices behind it and the checkpoint it was
decided at.

With ``with_proof``, every tool listed on a decision gets
``_meta["dev.deplog/proof"]``: the ``deplog.map_proof/v1`` JSON proof of its
status record at the guard's checkpoint, which the agent verifies itself
(``deplog.client.verify_tool_status``) instead of trusting the gateway.
"""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from deplog.client.cache.guard import Decision, Guard, Verdict
from deplog.client.model import canonical
from deplog.client.model.notice import parse_tool_id
from deplog.client.model.semver import Version

__all__ = [
    "DEPRECATION_KEY",
    "IDENTITY_KEY",
    "PROOF_KEY",
    "REFUSAL_KEY",
    "deprecation_annotation",
    "guard_tools_list",
    "http_date",
    "identity_annotation",
    "identity_decision",
    "may_list",
    "refusal_annotation",
    "schema_digest",
]

IDENTITY_KEY = "dev.deplog/tool"
DEPRECATION_KEY = "dev.deplog/deprecation"
PROOF_KEY = "dev.deplog/proof"
REFUSAL_KEY = "dev.deplog/refusal"


def schema_digest(input_schema: dict[str, Any]) -> str:
    """``sha256:<hex>`` of a tool's input schema in RFC 8785 canonical JSON."""
    return "sha256:" + hashlib.sha256(canonical.dumps(input_schema)).hexdigest()


def identity_annotation(
    tool_id: str, version: str, input_schema: dict[str, Any] | None
) -> dict[str, str]:
    """The ``dev.deplog/tool`` object a tool author's server lists; bad ids raise
    ``DeplogError`` (``bad_tool_id``, ``bad_version``) before anything is served."""
    parse_tool_id(tool_id)
    Version.parse(version)
    identity = {"tool_id": tool_id, "version": version}
    if input_schema is not None:
        identity["schema_digest"] = schema_digest(input_schema)
    return identity


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
    if decision.processed_through is not None:
        out["checkpoint_size"] = decision.processed_through.size
        out["checkpoint"] = decision.processed_through.checkpoint
    return out


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


def identity_decision(
    identity: object, guard: Guard, *, cached_at: datetime, with_proof: bool = False
) -> Decision | None:
    """The guard's decision on a listed ``dev.deplog/tool`` value; None when it is no object
    (deplog knows nothing about the tool), ``unknown``/``bad_identifier`` when malformed."""
    if not isinstance(identity, dict):
        return None
    tool_id, version = identity.get("tool_id"), identity.get("version")
    digest = identity.get("schema_digest")
    if not isinstance(tool_id, str) or not isinstance(version, str):
        return Decision(Verdict.UNKNOWN, "bad_identifier", str(tool_id), str(version), None)
    return guard.check(
        tool_id,
        version,
        cached_at=cached_at,
        schema_digest=digest if isinstance(digest, str) else None,
        with_proof=with_proof,
    )


def may_list(decision: Decision, *, keep_unverified: bool = False) -> bool:
    """Whether a tool with this decision is listed (and callable): served or warned, and,
    with ``keep_unverified``, stale or unknown too."""
    return decision.may_serve or (
        keep_unverified and decision.verdict in (Verdict.STALE, Verdict.UNKNOWN)
    )


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
        decision = identity_decision(identity, guard, cached_at=cached_at, with_proof=with_proof)
        if decision is None:
            kept.append(tool)
        elif may_list(decision, keep_unverified=keep_unverified):
            if decision.proof is not None:
                tool["_meta"][PROOF_KEY] = json.loads(decision.proof)
            if decision.verdict == Verdict.WARN:
                tool["_meta"][DEPRECATION_KEY] = deprecation_annotation(decision)
            kept.append(tool)
    out["tools"] = kept
    return out
