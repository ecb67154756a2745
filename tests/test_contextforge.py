"""The ContextForge plugin's settings and violations (without the gateway: see
tests/integration/test_contextforge.py for the real one)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from deplog.client.cache.mcp import REFUSAL_KEY
from deplog.client.errors import DeplogError
from deplog.client.follow.http import HttpLogSource
from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import TrustedState
from deplog.client.mcp import contextforge
from deplog.client.mcp.contextforge import (
    STATE_KEY,
    GatewayGuard,
    PluginSettings,
    ToolIdentity,
)
from deplog.client.mcp.contextforge import violation_fields as violation
from deplog.client.tlog.note import Signer
from tests.builders import ORIGIN, LocalLog, make_envelope, serving_log

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
    assert fields["description"].startswith(
        "deplog refused the call to tool:org.acme/search@1.0.0: the deplog log says it is "
        "revoked since "
    )
    assert f"log indexes {index})." in fields["description"]
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


def gateway_guard(state: Path, **extra: Any) -> GatewayGuard:
    """The plugin's guard, looking at the state's path on every call."""
    return GatewayGuard(PluginSettings.from_config(config(state, **extra)), interval=0)


def plugin_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (record.levelno, record.getMessage())
        for record in caplog.records
        if record.name == "deplog.client.mcp.contextforge"
    ]


def test_a_missing_state_loads_and_blocks_naming_the_path_and_the_command(
    tmp_path: Path,
) -> None:
    path = tmp_path / "typo-state.db"
    gateway = gateway_guard(path)
    decision = gateway.decide("search")
    assert decision is not None and gateway.blocks(decision)
    fields = gateway.violation(decision)
    assert fields["code"] == "DEPLOG_NOT_SYNCED"
    assert f"no follower state at {path}" in fields["description"]
    assert f"deplog follow URL --log-key KEY --state {path}" in fields["description"]
    assert fields["details"][STATE_KEY] == {"path": str(path), "problem": "missing"}


def test_a_state_that_appears_after_load_is_decided_from_without_a_new_plugin(
    tmp_path: Path, local: LocalLog
) -> None:
    path = tmp_path / "state.db"
    gateway = gateway_guard(path)
    decision = gateway.decide("search")
    assert decision is not None and decision.reason == "not_synced"
    state = LocalState(path, ORIGIN)
    local.sync(TrustedState(state, local.signer.verifier()))
    decision = gateway.decide("search")
    assert decision is not None and decision.reason == "active"
    assert not gateway.blocks(decision)
    state.close()


def test_the_load_line_names_the_state_and_the_number_of_tools(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="deplog.client.mcp.contextforge")
    path = tmp_path / "state.db"
    tools = {
        "search": {"tool_id": TOOL, "version": "1.0.0"},
        "fetch": {"tool_id": "tool:org.acme/fetch", "version": "2.0.0"},
    }
    for _ in range(3):  # the gateway makes a plugin per tool context, again every 30 s
        gateway_guard(path, tools=tools)
    loaded = [line for level, line in plugin_lines(caplog) if "loaded" in line]
    assert loaded == [
        f"deplog plugin loaded: guarding 2 tools (fetch, search) with the follower state {path} "
        "(freshness 300 s, unverified tools blocked)"
    ]


def test_each_state_transition_is_logged_once_not_per_call(
    tmp_path: Path, local: LocalLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="deplog.client.mcp.contextforge")
    path = tmp_path / "state.db"
    gateways = [gateway_guard(path), gateway_guard(path)]  # two instances, one process
    for gateway in gateways * 3:
        gateway.decide("search")
    state = LocalState(path, ORIGIN)
    local.sync(TrustedState(state, local.signer.verifier()))
    for gateway in gateways * 3:
        gateway.decide("search")
    path.unlink()
    for gateway in gateways * 3:
        gateway.decide("search")
    state.close()
    lines = [(level, line) for level, line in plugin_lines(caplog) if "loaded" not in line]
    assert [level for level, _ in lines] == [logging.ERROR, logging.INFO, logging.ERROR]
    assert (
        "unavailable (missing), every guarded call is refused with DEPLOG_NOT_SYNCED"
        in (lines[0][1])
    )
    assert lines[1][1] == f"deplog: the follower state at {path} is available: deciding from it"
    assert lines[0][1] == lines[2][1]


def test_a_stale_state_s_violation_names_the_follower_to_check(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.sync(trusted)
    gateway = gateway_guard(trusted.state.path)
    gateway.guard.clock = lambda: 4e9  # long after the last verified sync
    decision = gateway.decide("search")
    assert decision is not None and decision.reason == "checkpoint_stale"
    description = gateway.violation(decision)["description"]
    assert "more than 300 s ago: check that `deplog follow` runs on this host" in description
    assert f"--state {trusted.state.path}" in description


def test_keep_unverified_serves_while_the_state_is_missing(tmp_path: Path) -> None:
    """The documented opt-out of failing closed covers a missing state too."""
    gateway = gateway_guard(tmp_path / "state.db", keep_unverified=True)
    decision = gateway.decide("search")
    assert decision is not None and decision.reason == "not_synced"
    assert not gateway.blocks(decision)


# -- a light verifier instead of a state ------------------------------------------------


@pytest.fixture
async def lights() -> AsyncIterator[None]:
    """Stop the process's light verifiers after the test (the plugin keeps them running)."""
    yield
    for light, running in contextforge._lights.values():
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        assert isinstance(light.source, HttpLogSource)
        await light.source.close()
    contextforge._lights.clear()


def light_config(url: str, **extra: Any) -> dict[str, Any]:
    tools = {"search": {"tool_id": TOOL, "version": "1.0.0"}}
    return {"url": url, "tools": tools, **extra}


@pytest.mark.parametrize(
    "bad",
    [
        {"state": "s.db"},  # a state and a URL
        {},  # no trust
        {"log_key": "k", "policy": "p"},  # two
    ],
)
def test_light_settings_need_a_url_and_exactly_one_trust(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PluginSettings.from_config(light_config("http://127.0.0.1:1", **bad))


@pytest.mark.usefixtures("lights")
async def test_with_a_url_the_plugin_decides_with_a_light_verifier(tmp_path: Path) -> None:
    async with serving_log(tmp_path, ORIGIN) as log:
        envelope = make_envelope(
            log.publisher, 1, action="revoke", reasons=["security"], advisories=["CVE-2026-1234"]
        )
        posted = await log.client.post(
            "/v1/notices",
            data=envelope.canonical_bytes(),
            headers={"Content-Type": "application/json"},
        )
        assert posted.status == 201
        url = str(log.client.make_url("")).rstrip("/")
        key = log.log_key.verifier().vkey()
        gateway = GatewayGuard(PluginSettings.from_config(light_config(url, log_key=key)))
        try:
            await gateway.prepare("search")
            decision = gateway.decide("search")
        finally:
            await gateway.aclose()
    assert decision is not None and gateway.blocks(decision)
    assert (decision.reason, decision.guarantee) == ("revoked", "log_signed")


@pytest.mark.usefixtures("lights")
def test_plugin_instances_of_one_light_configuration_share_one_verifier() -> None:
    key = Signer.generate(ORIGIN).verifier().vkey()
    settings = PluginSettings.from_config(light_config("http://127.0.0.1:1", log_key=key))
    assert GatewayGuard(settings).light is GatewayGuard(settings).light


@pytest.mark.usefixtures("lights")
async def test_a_light_verifier_that_reaches_no_authority_blocks_naming_it() -> None:
    url = "http://127.0.0.1:1"
    key = Signer.generate(ORIGIN).verifier().vkey()
    gateway = GatewayGuard(PluginSettings.from_config(light_config(url, log_key=key)))
    try:
        await gateway.prepare("search")
        decision = gateway.decide("search")
    finally:
        await gateway.aclose()
    assert decision is not None and decision.reason == "not_synced"
    assert url in gateway.violation(decision)["description"]
