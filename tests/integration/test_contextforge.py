"""deplog as a plugin of the real ContextForge gateway: configuration, not code.

Needs the gateway (``mcp-contextforge-gateway``, which pins ``mcp<2``) in the
running environment: ``.ci/run`` runs this file in its own venv with
``deplog[contextforge]``; elsewhere it is skipped, and says so.

A real authority, a real ``deplog follow`` (the host follower), the test MCP
server (streamable HTTP) registered with a real gateway process that loads
``deplog.client.mcp.contextforge.DeplogPlugin`` from its ``plugins/config.yaml``:
a call goes through, a revoke is published, and the next call is blocked with a
violation naming the verdict and the log index.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import ORIGIN, AuthorityProcess
from tests.integration.test_mcp_stacks import free_port, wait_for_port

# The gateway pins mcp 1.x, so it lives in a venv of its own (.ci/run makes
# .venv-contextforge and names its python here); every process of this test runs
# on that python, the test itself on any.
PYTHON = os.environ.get("DEPLOG_CONTEXTFORGE_PYTHON", sys.executable)
_HAS_GATEWAY = (
    subprocess.run([PYTHON, "-c", "import mcpgateway"], capture_output=True, check=False).returncode
    == 0
)
if not _HAS_GATEWAY:
    if os.environ.get("CI") == "true":
        raise RuntimeError(
            "CI=true but the ContextForge gateway is not importable by "
            "DEPLOG_CONTEXTFORGE_PYTHON (.ci/run makes .venv-contextforge)"
        )
    pytest.skip(
        "CONTEXTFORGE TEST NOT RUN: set DEPLOG_CONTEXTFORGE_PYTHON to a python with "
        "mcp-contextforge-gateway and deplog[contextforge] installed",
        allow_module_level=True,
    )

SECRET = "deplog-test-jwt-secret-0123456789abcdef"
STARTUP = 180.0  # the gateway migrates its database on first start
PUSH_BOUND = 10.0  # catches a block that never came; how fast is a figure, printed below


def plugin_config(state: Path) -> str:
    """The gateway's plugins/config.yaml: deplog on tool_pre_invoke (JSON is YAML)."""
    deplog = {
        "name": "deplog",
        "kind": "deplog.client.mcp.contextforge.DeplogPlugin",
        "hooks": ["tool_pre_invoke"],
        "mode": "sequential",
        "priority": 10,
        "config": {
            "state": str(state),
            "freshness_seconds": 300,
            "tools": {"search": {"tool_id": "tool:org.acme/search", "version": "1.0.0"}},
        },
    }
    return json.dumps({"plugins": [deplog], "plugin_settings": {"fail_on_plugin_error": True}})


@pytest.fixture
def host_follower(authority: AuthorityProcess, tmp_path: Path) -> Iterator[Path]:
    """``deplog follow`` keeping the host's state file current; yields its path."""
    state = tmp_path / "host-state.db"
    command = [
        PYTHON, "-m", "deplog.client.cli.main", "follow", authority.url,
        "--log-key", authority.log_verifier.vkey(), "--state", str(state), "--interval", "3600",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().startswith("trusted ")
    yield state
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def tool_server(authority: AuthorityProcess, tmp_path: Path) -> Iterator[str]:
    """The test MCP server over streamable HTTP; yields its URL."""
    port = free_port()
    key = authority.keys / (ORIGIN.replace("/", "_") + ".pub")
    command = [
        PYTHON, "-m", "tests.integration.mcp_tool_server", "http", authority.url,
        str(key), str(tmp_path / "server-state.db"), str(port),
    ]  # fmt: skip
    process = subprocess.Popen(command)
    asyncio.run(wait_for_port(port, time.monotonic() + 30))
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def gateway(host_follower: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The gateway with the deplog plugin; yields its URL and an admin bearer token."""
    config = tmp_path / "plugins.yaml"
    config.write_text(plugin_config(host_follower))
    port = free_port()
    env = dict(
        os.environ,
        DATABASE_URL=f"sqlite:///{tmp_path / 'gateway.db'}",
        CACHE_TYPE="database",
        AUTH_REQUIRED="false",
        PLUGINS_ENABLED="true",
        PLUGINS_CONFIG_FILE=str(config),
        JWT_SECRET_KEY=SECRET,
        SSRF_ALLOW_LOCALHOST="true",
        SSRF_ALLOW_PRIVATE_NETWORKS="true",
        MCPGATEWAY_UI_ENABLED="false",
        MCPGATEWAY_ADMIN_API_ENABLED="true",
    )
    binary = Path(PYTHON).parent / "mcpgateway"
    with open(tmp_path / "gateway.out", "w") as out:
        process = subprocess.Popen(
            [str(binary), "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
        )  # fmt: skip
    token = subprocess.run(
        [PYTHON, "-m", "mcpgateway.utils.create_jwt_token", "--username",
         "admin@example.com", "--admin", "--secret", SECRET, "--exp", "60"],
        capture_output=True, text=True, check=True, env=env,
    ).stdout.strip()  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(wait_for_port(port, time.monotonic() + STARTUP))
        yield url, token
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def call(
    http: aiohttp.ClientSession, gateway: str, token: str, tool: str, **arguments: str
) -> Any:
    """tools/call through the gateway's JSON-RPC endpoint."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments or {"query": "q"}},
    }
    headers = {"Authorization": f"Bearer {token}"}
    async with http.post(gateway + "/rpc", json=body, headers=headers) as response:
        return await response.json(content_type=None)


async def test_the_gateway_blocks_a_revoked_tool_with_a_violation_naming_verdict_and_index(
    authority: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tool_server: str,
    gateway: tuple[str, str],
) -> None:
    url, token = gateway
    headers = {"Authorization": f"Bearer {token}"}
    registration = {"name": "acme", "url": tool_server, "transport": "STREAMABLEHTTP"}
    deadline = time.monotonic() + STARTUP
    while True:
        async with http.post(url + "/gateways", json=registration, headers=headers) as response:
            if response.status in (200, 201):
                break
            assert time.monotonic() < deadline, (response.status, await response.text())
        await asyncio.sleep(1)
    async with http.get(url + "/tools", headers=headers) as response:
        tools = {t["originalName"]: t["name"] for t in await response.json()}
    assert {"search", "fetch", "echo"} <= set(tools)

    served = await call(http, url, token, tools["search"])
    assert "results for q" in json.dumps(served), served

    body = make_envelope(
        publisher, 1, action="revoke", reasons=["other"], affected={"versions": ["1.0.0"]}
    ).canonical_bytes()
    async with http.post(
        authority.url + "/v1/notices", data=body, headers={"Content-Type": "application/json"}
    ) as response:
        assert response.status == 201
    published = time.monotonic()
    blocked = await call(http, url, token, tools["search"])
    while "DEPLOG_REVOKED" not in json.dumps(blocked):
        assert time.monotonic() - published < PUSH_BOUND, blocked
        await asyncio.sleep(0.05)
        blocked = await call(http, url, token, tools["search"])
    blocked_after = time.monotonic() - published
    assert "results for q" not in json.dumps(blocked)
    assert "verdict refuse" in json.dumps(blocked) and "log indexes [1]" in json.dumps(blocked)
    other = await call(http, url, token, tools["echo"], text="still served")
    assert "still served" in json.dumps(other) and "DEPLOG" not in json.dumps(other)
    print(f"blocked {blocked_after * 1000:.0f} ms after the 201:", json.dumps(blocked))
