"""Guarding an MCP tools/list result with deplog identities in ``_meta``."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deplog.client.cache.guard import Guard
from deplog.client.cache.mcp import (
    DEPRECATION_KEY,
    IDENTITY_KEY,
    guard_tools_list,
    http_date,
    identity_annotation,
    refusal_annotation,
    schema_digest,
)
from deplog.client.errors import DeplogError
from deplog.client.follow.trust import TrustedState
from deplog.client.model import canonical
from deplog.client.model.notice import parse_schema_digest
from tests.builders import LocalLog

TOOL = "tool:org.acme/search"


def tool(name: str, version: str | None = None, **identity: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}}
    if version is not None:
        entry["_meta"] = {IDENTITY_KEY: {"tool_id": TOOL, "version": version, **identity}}
    return entry


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
    assert note["sunset"] == "Thu, 01 Jan 2099 00:00:00 GMT"
    assert note["deprecation"] == f"@{int(datetime(2026, 3, 1, tzinfo=UTC).timestamp())}"
    assert note["replacement"] == {"tool_id": TOOL, "version": "2.0.0"}
    assert note["notices"] == [index]


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
    result = {"tools": [tool("a", "1.0.0", schema_digest="sha256:" + "b" * 64)]}
    assert listed(guard_tools_list(result, Guard(trusted.state), cached_at=now())) == []


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
