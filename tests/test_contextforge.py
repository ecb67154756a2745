"""The ContextForge plugin's settings and violations (without the gateway: see
tests/integration/test_contextforge.py for the real one)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from deplog.client.cache.mcp import REFUSAL_KEY
from deplog.client.errors import DeplogError
from deplog.client.follow.trust import TrustedState
from deplog.client.mcp.contextforge import GatewayGuard, PluginSettings, ToolIdentity
from deplog.client.mcp.contextforge import violation_fields as violation
from tests.builders import LocalLog

TOOL = "tool:org.acme/search"


def config(state: Path, **extra: Any) -> dict[str, Any]:
    tools = {"search": {"tool_id": TOOL, "version": "1.0.0"}}
    return {"state": str(state), "tools": tools, **extra}


def test_settings_name_the_state_tools_and_freshness(tmp_path: Path) -> None:
    settings = PluginSettings.from_config(config(tmp_path / "s.db", freshness_seconds=30))
    assert settings.tools == {"search": ToolIdentity(TOOL, "1.0.0")}
    assert settings.freshness == timedelta(seconds=30)
    assert settings.keep_unverified is False


@pytest.mark.parametrize(
    "bad",
    [
        {"unknown_setting": 1},
        {"freshness_seconds": 0},
        {"keep_unverified": "yes"},
        {"tools": {"search": {"tool_id": TOOL}}},
        {"tools": {"search": {"tool_id": TOOL, "version": "1.0.0", "extra": 1}}},
    ],
)
def test_bad_settings_are_refused_at_start_up(tmp_path: Path, bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PluginSettings.from_config(config(tmp_path / "s.db", **bad))


@pytest.mark.parametrize(
    ("identity", "code"),
    [
        ({"tool_id": "search", "version": "1.0.0"}, "bad_tool_id"),
        ({"tool_id": TOOL, "version": "one"}, "bad_version"),
        ({"tool_id": TOOL, "version": "1.0.0", "schema_digest": "md5:00"}, "bad_digest"),
    ],
)
def test_a_bad_identity_is_refused_with_its_code(
    tmp_path: Path, identity: dict[str, str], code: str
) -> None:
    with pytest.raises(DeplogError) as raised:
        PluginSettings.from_config(config(tmp_path / "s.db", tools={"search": identity}))
    assert raised.value.code == code


def test_the_original_name_is_matched_before_the_gateway_s_name(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.publish(action="revoke", reasons=["other"], affected={"versions": ["1.0.0"]})
    local.sync(trusted)
    gateway = GatewayGuard(PluginSettings.from_config(config(trusted.state.path)))
    decision = gateway.decide("search", "acme-search")
    assert decision is not None and gateway.blocks(decision)
    assert gateway.decide(None, "acme-search") is None  # not configured: untouched


def test_a_violation_names_verdict_reason_and_log_index(
    trusted: TrustedState, local: LocalLog
) -> None:
    index = local.publish(action="revoke", reasons=["other"], affected={"versions": ["1.0.0"]})
    local.sync(trusted)
    gateway = GatewayGuard(PluginSettings.from_config(config(trusted.state.path)))
    decision = gateway.decide("search")
    assert decision is not None
    fields = violation(decision)
    assert fields["code"] == "DEPLOG_REVOKED"
    assert fields["reason"] == "deplog refuse: revoked"
    assert f"log indexes [{index}]" in fields["description"]
    assert fields["details"][REFUSAL_KEY]["notices"] == [index]


def test_a_stale_state_blocks_unless_unverified_tools_are_kept(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.sync(trusted)
    for keep, blocked in ((False, True), (True, False)):
        settings = PluginSettings.from_config(config(trusted.state.path, keep_unverified=keep))
        gateway = GatewayGuard(settings)
        gateway.guard.clock = lambda: 4e9  # long after the last verified sync
        decision = gateway.decide("search")
        assert decision is not None and decision.reason == "checkpoint_stale"
        assert gateway.blocks(decision) is blocked
