"""Guarding an MCP tools/list result: the host's pins and the digest it computes from the
listed schema, then the guard's verdicts on the deplog identities in ``_meta``."""

from __future__ import annotations

import functools
import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from deplog.client.cache import guard as guard_module
from deplog.client.cache import mcp as mcp_module
from deplog.client.cache.guard import Decision, Guard, Verdict
from deplog.client.cache.mcp import (
    DEPRECATION_KEY,
    IDENTITY_KEY,
    LISTING_REASONS,
    ListedIdentity,
    ToolVersion,
    check_listed,
    checked_pins,
    guard_tools_list,
    http_date,
    identity_annotation,
    may_list,
    refusal_annotation,
    schema_digest,
    unlisted_refusal,
)
from deplog.client.errors import DeplogError
from deplog.client.follow.trust import TrustedState
from deplog.client.model import canonical
from deplog.client.model.notice import parse_schema_digest
from tests.builders import LocalLog

TOOL = "tool:org.acme/search"


SCHEMA = {"type": "object"}
OTHER_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def tool(name: str, version: str | None = None, **identity: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "inputSchema": SCHEMA}
    if version is not None:
        entry["_meta"] = {IDENTITY_KEY: {"tool_id": TOOL, "version": version, **identity}}
    return entry


def reason_of(checked: object) -> tuple[str, str] | None:
    """A listing decision's verdict and reason (None: the check made none)."""
    return (checked.verdict.value, checked.reason) if isinstance(checked, Decision) else None


def listed(result: dict[str, Any]) -> list[str]:
    return [t["name"] for t in result["tools"]]


def now() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=1)


def test_tools_without_a_deplog_identity_pass_through(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.sync(trusted)
    result = {"tools": [tool("plain")], "nextCursor": "abc"}
    assert guard_tools_list(result, Guard(trusted.state), cached_at=now()) == result


def test_revoked_and_sunset_tools_are_dropped(trusted: TrustedState, local: LocalLog) -> None:
    local.publish(action="revoke", reasons=["other"], affected={"versions": ["1.0.0"]})
    local.publish(affected={"versions": ["2.0.0"]}, sunset_at="2026-02-01T00:00:00Z")
    local.sync(trusted)
    result = {"tools": [tool("a", "1.0.0"), tool("b", "2.0.0"), tool("c", "3.0.0")]}
    assert listed(guard_tools_list(result, Guard(trusted.state), cached_at=now())) == ["c"]


def test_deprecated_tools_are_annotated_with_rfc_dates(
    trusted: TrustedState, local: LocalLog
) -> None:
    index = local.publish(
        affected={"versions": ["1.0.0"]},
        effective_at="2026-03-01T00:00:00Z",
        sunset_at="2099-01-01T00:00:00Z",
        replacement={"tool_id": TOOL, "version": "2.0.0"},
    )
    local.sync(trusted)
    [annotated] = guard_tools_list(
        {"tools": [tool("a", "1.0.0")]}, Guard(trusted.state), cached_at=now()
    )["tools"]
    note = annotated["_meta"][DEPRECATION_KEY]
    assert (note["deprecated_since"], note["sunset_at"]) == (
        "2026-03-01T00:00:00Z",
        "2099-01-01T00:00:00Z",
    )
    assert note["http_headers"] == {
        "Deprecation": f"@{int(datetime(2026, 3, 1, tzinfo=UTC).timestamp())}",
        "Sunset": "Thu, 01 Jan 2099 00:00:00 GMT",
    }
    assert note["replacement"] == {"tool_id": TOOL, "version": "2.0.0"}
    assert note["notices"] == [index]
    assert "description" not in annotated  # only when asked for


def test_describe_deprecations_adds_one_line_to_the_description(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.publish(
        affected={"versions": ["1.0.0"]},
        effective_at="2026-03-01T00:00:00Z",
        sunset_at="2099-01-01T00:00:00Z",
        replacement={"tool_id": TOOL, "version": "2.0.0"},
    )
    local.sync(trusted)
    listed = {"tools": [{**tool("a", "1.0.0"), "description": "Search the web."}]}
    [annotated] = guard_tools_list(
        listed, Guard(trusted.state), cached_at=now(), describe_deprecations=True
    )["tools"]
    assert annotated["description"] == (
        "Search the web.\n\ndeplog: this tool is deprecated since 2026-03-01T00:00:00Z, "
        f"sunset at 2099-01-01T00:00:00Z; reasons superseded; use {TOOL}@2.0.0 instead."
    )


def test_the_input_result_is_not_modified(trusted: TrustedState, local: LocalLog) -> None:
    local.publish(affected={"versions": ["1.0.0"]})
    local.sync(trusted)
    result = {"tools": [tool("a", "1.0.0")]}
    guard_tools_list(result, Guard(trusted.state), cached_at=now())
    assert DEPRECATION_KEY not in result["tools"][0]["_meta"]


def test_unverified_state_drops_identified_tools_unless_asked_to_keep_them(
    trusted: TrustedState,
) -> None:
    result = {"tools": [tool("a", "1.0.0"), tool("plain")]}
    guard = Guard(trusted.state)
    assert listed(guard_tools_list(result, guard, cached_at=now())) == ["plain"]
    kept = guard_tools_list(result, guard, cached_at=now(), keep_unverified=True)
    assert listed(kept) == ["a", "plain"]


def test_a_mismatching_schema_digest_is_dropped(trusted: TrustedState, local: LocalLog) -> None:
    local.publish(affected={"versions": ["1.0.0"]}, schema_digest="sha256:" + "a" * 64)
    local.sync(trusted)
    result = {"tools": [tool("a", "1.0.0")]}
    assert listed(guard_tools_list(result, Guard(trusted.state), cached_at=now())) == []


def test_a_schema_other_than_the_notices_is_dropped_whatever_digest_it_declares(
    trusted: TrustedState, local: LocalLog
) -> None:
    named = schema_digest(OTHER_SCHEMA)
    local.publish(affected={"versions": ["1.0.0"]}, schema_digest=named)
    local.sync(trusted)
    result = {"tools": [tool("a", "1.0.0", schema_digest=named)]}  # lists SCHEMA
    kept = guard_tools_list(result, Guard(trusted.state), cached_at=now(), keep_unverified=True)
    assert listed(kept) == []


def test_a_listed_tool_goes_to_the_guard_with_the_digest_of_its_listed_schema() -> None:
    checked = check_listed(tool("a", "1.0.0"), {})
    assert checked == ListedIdentity(TOOL, "1.0.0", schema_digest(SCHEMA))


def test_a_declared_digest_of_the_listed_schema_is_accepted() -> None:
    checked = check_listed(tool("a", "1.0.0", schema_digest=schema_digest(SCHEMA)), {})
    assert checked == ListedIdentity(TOOL, "1.0.0", schema_digest(SCHEMA))


@pytest.mark.parametrize("declared", [schema_digest(OTHER_SCHEMA), "sha256:x", 7])
def test_a_declared_digest_other_than_the_listed_schemas_is_refused(declared: Any) -> None:
    checked = check_listed(tool("a", "1.0.0", schema_digest=declared), {})
    assert reason_of(checked) == ("refuse", "schema_digest_mismatch")


@pytest.mark.parametrize(
    "schema",
    [
        None,
        ["not", "an", "object"],
        {"type": "object", "properties": {"x": {"type": "number", "default": 0.5}}},
        {"type": "object", "maximum": 2**53},
        {"type": "object", "title": "\ud800"},
        {"type": "object", "x": functools.reduce(lambda inner, _: [inner], range(5000), [])},
    ],
    ids=["missing", "not_an_object", "float", "beyond_2_53", "lone_surrogate", "too_deep"],
)
def test_a_schema_without_a_digest_is_refused_undigestable(schema: Any) -> None:
    entry = tool("a", "1.0.0", schema_digest=schema_digest(SCHEMA))  # no fallback to it
    entry["inputSchema"] = schema
    if schema is None:
        del entry["inputSchema"]
    assert reason_of(check_listed(entry, {})) == ("refuse", "schema_undigestable")


def test_the_largest_safe_integer_in_a_schema_has_a_digest() -> None:
    entry = tool("a", "1.0.0")
    entry["inputSchema"] = {"type": "object", "maximum": 2**53 - 1}
    assert isinstance(check_listed(entry, {}), ListedIdentity)


def test_a_pinned_tool_declaring_its_pin_is_decided_as_the_pin() -> None:
    checked = check_listed(tool("a", "1.0.0"), {"a": ToolVersion(TOOL, "1.0.0")})
    assert checked == ListedIdentity(TOOL, "1.0.0", schema_digest(SCHEMA))


def test_a_pinned_tool_declaring_no_identity_is_refused_identity_missing() -> None:
    checked = check_listed(tool("a"), {"a": ToolVersion(TOOL, "1.0.0")})
    assert reason_of(checked) == ("refuse", "identity_missing")
    assert isinstance(checked, Decision) and (checked.tool_id, checked.version) == (TOOL, "1.0.0")


@pytest.mark.parametrize(
    "declared",
    [
        {"tool_id": "tool:org.acme/other", "version": "1.0.0"},
        {"tool_id": TOOL, "version": "1.0.1"},
        {"tool_id": TOOL},
        {"tool_id": 5, "version": "1.0.0"},
    ],
    ids=["another_tool", "another_version", "no_version", "malformed"],
)
def test_a_pinned_tool_declaring_another_identity_is_refused_identity_mismatch(
    declared: dict[str, Any],
) -> None:
    entry = {"name": "a", "inputSchema": SCHEMA, "_meta": {IDENTITY_KEY: declared}}
    checked = check_listed(entry, {"a": ToolVersion(TOOL, "1.0.0")})
    assert reason_of(checked) == ("refuse", "identity_mismatch")
    assert isinstance(checked, Decision) and checked.tool_id == TOOL


def test_a_pinned_tool_that_drops_its_identity_is_dropped_even_keeping_unverified(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.sync(trusted)
    result = {"tools": [tool("a"), tool("plain")]}
    pins = {"a": ToolVersion(TOOL, "1.0.0")}
    guard = Guard(trusted.state)
    kept = guard_tools_list(result, guard, cached_at=now(), keep_unverified=True, pins=pins)
    assert listed(kept) == ["plain"]


def test_requiring_pins_refuses_unpinned_tools_whatever_they_declare() -> None:
    assert reason_of(check_listed(tool("plain"), {}, require_pins=True)) == (
        "refuse",
        "not_pinned",
    )
    declared = check_listed(tool("a", "1.0.0"), {}, require_pins=True)
    assert reason_of(declared) == ("refuse", "not_pinned")
    assert isinstance(declared, Decision) and declared.tool_id == TOOL


def test_requiring_pins_lists_only_pinned_tools(trusted: TrustedState, local: LocalLog) -> None:
    local.sync(trusted)
    result = {"tools": [tool("a", "1.0.0"), tool("b", "1.0.0"), tool("plain"), "not a tool"]}
    pins = {"a": ToolVersion(TOOL, "1.0.0")}
    guard = Guard(trusted.state)
    kept = guard_tools_list(result, guard, cached_at=now(), pins=pins, require_pins=True)
    assert listed(kept) == ["a"]


def test_a_call_to_a_pinned_name_no_listing_shows_is_refused_not_listed() -> None:
    refused = unlisted_refusal("a", {"a": ToolVersion(TOOL, "1.0.0")})
    assert refused is not None and (refused.verdict, refused.reason, refused.tool_id) == (
        "refuse",
        "not_listed",
        TOOL,
    )
    assert reason_of(unlisted_refusal("b", {}, require_pins=True)) == ("refuse", "not_pinned")
    assert unlisted_refusal("b", {}) is None


@pytest.mark.parametrize(
    ("pin", "code"),
    [(ToolVersion("search", "1.0.0"), "bad_tool_id"), (ToolVersion(TOOL, "1.0"), "bad_version")],
)
def test_a_bad_pin_fails_when_given(pin: ToolVersion, code: str) -> None:
    with pytest.raises(DeplogError) as raised:
        checked_pins({"a": pin})
    assert raised.value.code == code


def test_listing_refusals_name_no_checkpoint() -> None:
    refused = check_listed(tool("a"), {"a": ToolVersion(TOOL, "1.0.0")})
    assert isinstance(refused, Decision)
    assert set(refusal_annotation(refused)) == {"verdict", "reason", "tool_id", "version"}


def test_every_listing_reason_is_in_the_tables_of_the_module_and_the_docs() -> None:
    docs = (Path(__file__).resolve().parents[1] / "docs" / "mcp.md").read_text()
    rules = (mcp_module.__doc__ or "").split("The reasons rules", 1)[1]
    tables = [rules, guard_module.__doc__ or ""]
    for reason in LISTING_REASONS:
        assert all(f"``{reason}``" in table for table in tables)
        assert f"| `refuse` | `{reason}` |" in docs


def test_http_date_is_imf_fixdate() -> None:
    assert http_date(datetime(2027, 6, 1, 12, 30, tzinfo=UTC)) == "Tue, 01 Jun 2027 12:30:00 GMT"


def test_the_schema_digest_is_sha256_of_the_canonical_schema() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    reordered = {"required": ["q"], "properties": {"q": {"type": "string"}}, "type": "object"}
    digest = schema_digest(schema)
    assert digest == schema_digest(reordered)
    assert digest == "sha256:" + hashlib.sha256(canonical.dumps(schema)).hexdigest()
    assert parse_schema_digest(digest) == digest


def test_an_identity_names_the_tool_version_and_listed_schema() -> None:
    schema = {"type": "object"}
    assert identity_annotation(TOOL, "1.2.3", schema) == {
        "tool_id": TOOL,
        "version": "1.2.3",
        "schema_digest": schema_digest(schema),
    }


@pytest.mark.parametrize(
    ("tool_id", "version", "code"),
    [("search", "1.0.0", "bad_tool_id"), (TOOL, "1.0", "bad_version")],
)
def test_a_bad_identity_is_refused_with_a_stable_code(
    tool_id: str, version: str, code: str
) -> None:
    with pytest.raises(DeplogError) as raised:
        identity_annotation(tool_id, version, None)
    assert raised.value.code == code


def test_a_refusal_names_verdict_reason_notices_and_checkpoint(
    trusted: TrustedState, local: LocalLog
) -> None:
    index = local.publish(action="revoke", reasons=["other"], affected={"versions": ["1.0.0"]})
    local.sync(trusted)
    decision = Guard(trusted.state).check(TOOL, "1.0.0", cached_at=now())
    refusal = refusal_annotation(decision)
    assert refusal == {
        "verdict": "refuse",
        "reason": "revoked",
        "tool_id": TOOL,
        "version": "1.0.0",
        "notices": [index],
        "checkpoint_size": trusted.state.size,
        "checkpoint": trusted.state.trusted.note.decode() if trusted.state.trusted else None,
    }


@pytest.mark.parametrize("keep_unverified", [False, True])
def test_a_tool_the_log_holds_an_invalid_entry_about_is_never_listed(
    keep_unverified: bool,
) -> None:
    """``keep_unverified`` lets through what deplog could not verify, never what the log
    itself says no verifier can vouch for (docs/fold-spec.md 3.1)."""
    decision = Decision(Verdict.UNKNOWN, "invalid_entry", "tool:org.acme/search", "1.0.0", None)
    assert not may_list(decision, keep_unverified=keep_unverified)
    stale = Decision(Verdict.STALE, "checkpoint_stale", "tool:org.acme/search", "1.0.0", None)
    assert may_list(stale, keep_unverified=True)
