"""Guarding an MCP ``tools/list`` result: what the host checks itself, then what the log says.

A tool server names a tool's deplog identity in its ``_meta``, under the key
``dev.deplog/tool``: ``{"tool_id": "tool:<namespace>/<name>", "version":
"<semver>"}`` and optionally ``"schema_digest": "sha256:<hex>"``. Everything in
it is the server's claim about itself, which is never trusted over what the
host can check (invariant 7). The host decides each listed tool by these
rules, in order (``check_listed``, then ``decide_listed``):

1. Identity. The host may pin identities (``pins``: the tool's name on that
   server to a ``ToolVersion``). A pinned tool is decided as its pin, and only
   if the server declares that same identity: a tool that declares none is
   refused ``identity_missing``, one that declares another (or a malformed one)
   ``identity_mismatch``. An unpinned tool is decided as the server declares
   it; one that declares nothing is not deplog's and passes untouched, unless
   the host ``require_pins`` (then every unpinned tool is refused
   ``not_pinned``, whatever it declares). A declared identity that is not a
   tool id and a SemVer version is ``unknown``/``bad_identifier``.
   Without a pin, the declaration is the only identity there is, and a lying
   server can drop or change it to escape a revoke: a host that relies on
   deplog for a server it does not control pins that server's tools, and
   requires pins so that a tool renamed on the server does not escape either.
2. Definition. The host computes the tool's ``schema_digest`` itself, from
   the ``inputSchema`` it received (the definition the agent will call):
   ``sha256:`` and the hex SHA-256 of the schema as RFC 8785 canonical JSON,
   the rule everything deplog hashes follows, so a publisher computes the
   digest for a notice from the same schema the server lists. A schema that is
   missing, not an object, or not canonical JSON as deplog encodes it (a float,
   an integer beyond 2^53 - 1, a lone surrogate) cannot be digested and is
   refused ``schema_undigestable``. A declared ``schema_digest`` is never used
   in the computed one's place: one that differs from it is refused
   ``schema_digest_mismatch`` (an honest server declares the digest of what it
   lists, ``client.mcp.server.stamp_tools``), so a declaration can cost a tool
   its listing, never earn it one.
3. The log. The identity of rule 1 and the digest of rule 2 go to the guard
   (``Guard.check``): refused (revoked, sunset, ``schema_mismatch``) tools are
   dropped; so are stale and unknown verdicts unless ``keep_unverified`` (fail
   closed by default: a gateway that cannot show its deprecation data is
   current does not list the tool). A deprecated tool stays and gets
   ``_meta["dev.deplog/deprecation"]`` with the sunset as an HTTP-date (RFC
   8594 ``Sunset``), the deprecation as ``@<epoch seconds>`` (RFC 9745
   ``Deprecation``), the replacement, reasons and the log indexes behind it,
   so agents learn of it before calls fail.
4. Refusals by rules 1 and 2 are made on the listing alone, before the log is
   asked: their verdict is ``refuse`` whatever ``keep_unverified`` says (they
   are the server's doing, not a state the host cannot verify), and their
   decision names no checkpoint. A call to a name the host pinned that the
   server's listing does not show is refused ``not_listed`` (its definition
   and identity are unknown; ``unlisted_refusal``).

The reasons rules 1, 2 and 4 add to the guard's (``LISTING_REASONS``):

  refuse   ``identity_missing``        pinned; the server declares no identity
           ``identity_mismatch``       pinned; the server declares another identity
           ``not_pinned``              ``require_pins``, and the host pinned no such name
           ``not_listed``              a call to a pinned name the listing does not show
           ``schema_undigestable``     the listed input schema has no digest (rule 2)
           ``schema_digest_mismatch``  the server declares a digest other than the
                                       listed schema's

A call refused on deplog's authority carries ``_meta["dev.deplog/refusal"]``
(``refusal_annotation``): the verdict, reason, tool, the notices behind it and
the checkpoint it was decided at (none for a refusal on the listing alone).

With ``with_proof``, every tool listed on a decision gets
``_meta["dev.deplog/proof"]``: the ``deplog.map_proof/v1`` JSON proof of its
status record at the guard's checkpoint, which the agent verifies itself
(``deplog.client.verify_tool_status``) instead of trusting the gateway.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from deplog.client.cache.guard import Decision, Guard, Verdict
from deplog.client.errors import DeplogError
from deplog.client.model import canonical
from deplog.client.model.notice import parse_tool_id
from deplog.client.model.semver import Version

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
    "guard_tools_list",
    "http_date",
    "identity_annotation",
    "listed_schema_digest",
    "may_list",
    "refusal_annotation",
    "schema_digest",
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
    """A listed tool that passed rules 1 and 2: the identity the host goes by and the
    digest the host computed from the listed schema, for the guard to decide (rule 3)."""

    tool_id: str
    version: str
    schema_digest: str


def schema_digest(input_schema: dict[str, Any]) -> str:
    """``sha256:<hex>`` of a tool's input schema in RFC 8785 canonical JSON."""
    return "sha256:" + hashlib.sha256(canonical.dumps(input_schema)).hexdigest()


def listed_schema_digest(tool: Mapping[str, Any]) -> str | None:
    """The digest of a listed tool's ``inputSchema`` (rule 2), or None when it has none:
    missing, not an object, or not canonical JSON as deplog encodes it."""
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
    """The ``dev.deplog/tool`` object a tool author's server lists; bad ids raise
    ``DeplogError`` (``bad_tool_id``, ``bad_version``) before anything is served."""
    parse_tool_id(tool_id)
    Version.parse(version)
    identity = {"tool_id": tool_id, "version": version}
    if input_schema is not None:
        identity["schema_digest"] = schema_digest(input_schema)
    return identity


def checked_pins(pins: Pins | None) -> dict[str, ToolVersion]:
    """A host's pins, each checked (``DeplogError`` ``bad_tool_id`` or ``bad_version``), so
    a typo fails when the session is made, not at the first listing."""
    out = dict(pins or {})
    for pin in out.values():
        identity_annotation(pin.tool_id, pin.version, None)
    return out


def _valid(tool_id: str, version: str) -> bool:
    try:
        parse_tool_id(tool_id)
        Version.parse(version)
    except DeplogError:
        return False
    return True


def check_listed(
    tool: Mapping[str, Any], pins: Pins, *, require_pins: bool = False
) -> ListedIdentity | Decision | None:
    """Rules 1 and 2 on one listed tool (wire form): None when it is not deplog's, a
    ``Decision`` when it is decided on the listing alone (refused, or ``bad_identifier``),
    else the identity and computed digest for the guard."""
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
    """Rule 1: the identity a listed tool is decided as, from what it declares (``said``)
    and the host's pin; a ``Decision`` when that decides it, None when it is not deplog's."""
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
    if not isinstance(tool_id, str) or not isinstance(version, str) or not _valid(tool_id, version):
        return Decision(Verdict.UNKNOWN, "bad_identifier", str(tool_id), str(version), None)
    return ToolVersion(tool_id, version)


def _refused(reason: str, tool_id: str, version: str) -> Decision:
    """A refusal on the listing alone: no checkpoint was asked (rule 4)."""
    return Decision(Verdict.REFUSE, reason, tool_id, version, None)


def decide_listed(
    checked: ListedIdentity | Decision | None,
    guard: Guard,
    *,
    cached_at: datetime,
    with_proof: bool = False,
) -> Decision | None:
    """The decision on a tool ``check_listed`` checked: its own when it made one, else the
    guard's on the identity with the computed digest (rule 3); None when not deplog's."""
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
    """The refusal of a call to a name no listing showed (rule 4): ``not_listed`` when the
    host pinned it, ``not_pinned`` when it requires pins; None when it is not deplog's."""
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


def may_list(decision: Decision, *, keep_unverified: bool = False) -> bool:
    """Whether a tool with this decision is listed (and callable): served or warned, and,
    with ``keep_unverified``, stale or unknown too, but never a tool the log holds an
    invalid entry about (``invalid_entry``): the log itself says it cannot be vouched for,
    which is no lack of verification."""
    return decision.may_serve or (
        keep_unverified
        and decision.verdict in (Verdict.STALE, Verdict.UNKNOWN)
        and decision.reason != "invalid_entry"
    )


def guard_tools_list(
    result: dict[str, Any],
    guard: Guard,
    *,
    cached_at: datetime,
    keep_unverified: bool = False,
    with_proof: bool = False,
    pins: Pins | None = None,
    require_pins: bool = False,
) -> dict[str, Any]:
    """A copy of an MCP ``tools/list`` result with the rules applied (``pins`` checked as
    ``checked_pins`` does)."""
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
            kept.append(tool)
    out["tools"] = kept
    return out
