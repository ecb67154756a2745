"""deplog as a plugin of the real ContextForge gateway: configuration, not code.

Needs the gateway (``mcp-contextforge-gateway``, which pins ``mcp<2``) in the
running environment: ``.ci/run`` runs this file in its own venv with
``deplog[contextforge]``; elsewhere it is skipped, and says so.

A real authority, a real ``deplog follow`` (the host follower), the test MCP
server (streamable HTTP) registered with a real gateway process that loads
``deplog.client.mcp.contextforge.DeplogPlugin`` from its ``plugins/config.yaml``
with the settings ``docs/contextforge.md`` makes mandatory:

* a call goes through, a revoke is published, and the next call is blocked with a
  violation whose description is the refusal sentence (verdict, reason, log index);
* the plugin loads whatever the state file does, and blocks every guarded call with
  ``DEPLOG_NOT_SYNCED`` (naming the path and what to do) while the state is missing
  (gateway first, follower later; a typo in the path; the file deleted while the
  gateway runs) or unusable, and decides as soon as a state appears, without a
  restart. "Unusable" is a directory where the file should be, and a file that is
  not an SQLite database: CI runs as root, for whom ``chmod 000`` hides nothing;
* with ``url`` and ``log_key`` instead of ``state``, the plugin decides with a light
  verifier of the authority: a tool past its sunset is blocked once pushed, a good one
  passes, and an authority it cannot reach blocks every guarded call ``DEPLOG_NOT_SYNCED``;
* a plugin that cannot load (a bad ``config:`` block) keeps the gateway from
  starting with ``PLUGINS_FAIL_ON_PLUGIN_ERROR=true``, and does not with the
  ``plugin_settings`` key of the config file, which the gateway ignores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from deplog.client.tlog.note import Signer
from tests.builders import make_envelope, unused_port
from tests.integration.harness import JSON, ORIGIN, AuthorityProcess
from tests.integration.test_mcp_stacks import wait_for_port

pytestmark = pytest.mark.slow  # the ContextForge gateway in its own venv

# The gateway pins mcp 1.x, so it lives in a venv of its own (.ci/run makes
# .venv-contextforge and names its python here); every process of this test runs
# on that python, the test itself on any.
PYTHON = os.environ.get("DEPLOG_CONTEXTFORGE_PYTHON", sys.executable)


@pytest.fixture(scope="module", autouse=True)
def gateway_installed() -> None:
    """The gateway must be importable by ``PYTHON``: asked when a test here runs, not when
    the module is collected (the fast lane deselects it)."""
    found = subprocess.run([PYTHON, "-c", "import mcpgateway"], capture_output=True, check=False)
    if found.returncode == 0:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(
            "CI=true but the ContextForge gateway is not importable by "
            "DEPLOG_CONTEXTFORGE_PYTHON (.ci/run makes .venv-contextforge)"
        )
    pytest.skip(
        "CONTEXTFORGE TEST NOT RUN: set DEPLOG_CONTEXTFORGE_PYTHON to a python with "
        "mcp-contextforge-gateway and deplog[contextforge] installed"
    )


SECRET = "deplog-test-jwt-secret-0123456789abcdef"
ADMIN_PASSWORD = "deplog-test-Admin-passw0rd"
STARTUP = 180.0  # the gateway migrates its database on first start
PUSH_BOUND = 10.0  # catches a block that never came; how fast is a figure, printed below


LOOK_BOUND = 10.0  # a state that appears, or vanishes, is seen within a second; slack for CI


def plugin_config(state: Path | None, **settings: Any) -> str:
    """The gateway's plugins/config.yaml: deplog on tool_pre_invoke, mandatory (JSON is
    YAML); ``settings`` go into the plugin's ``config:`` block (with no ``state``, a
    light verifier's ``url`` and ``log_key``), or beside ``plugins`` for
    ``plugin_settings``."""
    config: dict[str, Any] = {
        "freshness_seconds": 300,
        "tools": {"search": {"tool_id": "tool:org.acme/search", "version": "1.0.0"}},
    }
    if state is not None:
        config["state"] = str(state)
    plugin_settings = settings.pop("plugin_settings", None)
    config.update(settings)
    deplog = {
        "name": "deplog",
        "kind": "deplog.client.mcp.contextforge.DeplogPlugin",
        "hooks": ["tool_pre_invoke"],
        "mode": "sequential",
        "on_error": "fail",
        "priority": 10,
        "config": config,
    }
    document: dict[str, Any] = {"plugins": [deplog]}
    if plugin_settings is not None:
        document["plugin_settings"] = plugin_settings
    return json.dumps(document)


@contextlib.contextmanager
def following(authority: AuthorityProcess, state: Path) -> Iterator[Path]:
    """``deplog follow`` keeping ``state`` current, from its first verified sync on."""
    command = [
        PYTHON, "-m", "deplog.client.cli.main", "follow", authority.url,
        "--log-key", authority.log_verifier.vkey(), "--state", str(state), "--interval", "3600",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().startswith("trusted ")
        yield state
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def host_follower(authority: AuthorityProcess, tmp_path: Path) -> Iterator[Path]:
    """``deplog follow`` keeping the host's state file current; yields its path."""
    with following(authority, tmp_path / "host-state.db") as state:
        yield state


@pytest.fixture
def tool_server(authority: AuthorityProcess, tmp_path: Path, free_port: int) -> Iterator[str]:
    """The test MCP server over streamable HTTP; yields its URL."""
    key = authority.keys / (ORIGIN.replace("/", "_") + ".pub")
    command = [
        PYTHON, "-m", "tests.integration.mcp_tool_server", "http", authority.url,
        str(key), str(tmp_path / "server-state.db"), str(free_port),
    ]  # fmt: skip
    process = subprocess.Popen(command)
    asyncio.run(wait_for_port(free_port, time.monotonic() + 30))
    yield f"http://127.0.0.1:{free_port}/mcp"
    process.terminate()
    process.wait(timeout=10)


class Gateway:
    """A gateway process with a plugins/config.yaml, its URL, admin token and log."""

    def __init__(self, directory: Path, plugins: str, **environment: str) -> None:
        config = directory / "plugins.yaml"
        config.write_text(plugins)
        self.port = unused_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = directory / "gateway.out"
        env = dict(
            os.environ,
            DATABASE_URL=f"sqlite:///{directory / 'gateway.db'}",
            CACHE_TYPE="database",
            AUTH_REQUIRED="false",
            PLUGINS_ENABLED="true",
            PLUGINS_CONFIG_FILE=str(config),
            PLUGINS_FAIL_ON_PLUGIN_ERROR="true",
            LOG_LEVEL="INFO",
            JWT_SECRET_KEY=SECRET,
            SSRF_ALLOW_LOCALHOST="true",
            SSRF_ALLOW_PRIVATE_NETWORKS="true",
            MCPGATEWAY_UI_ENABLED="false",
            MCPGATEWAY_ADMIN_API_ENABLED="true",
        )
        env.update(environment)
        env = {name: value for name, value in env.items() if value}  # "": leave unset
        binary = Path(PYTHON).parent / "mcpgateway"
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(
                [str(binary), "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=directory,
            )  # fmt: skip
        self.token = subprocess.run(
            [PYTHON, "-m", "mcpgateway.utils.create_jwt_token", "--username",
             "admin@example.com", "--admin", "--secret", SECRET, "--exp", "60"],
            capture_output=True, text=True, check=True, env=env,
        ).stdout.strip()  # fmt: skip

    def started(self) -> bool:
        """Whether it listens (True) or exited first (False); blocks, so that a test's
        event loop can start one too."""
        deadline = time.monotonic() + STARTUP
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return True
            time.sleep(0.1)
        raise AssertionError("the gateway neither listened nor exited")

    def lines(self, text: str) -> list[str]:
        """The log lines that contain ``text``."""
        return [line for line in self.log.read_text().splitlines() if text in line]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def running(directory: Path, plugins: str, **environment: str) -> Iterator[Gateway]:
    """A started gateway, stopped after."""
    gateway = Gateway(directory, plugins, **environment)
    try:
        assert gateway.started(), gateway.log.read_text()[-4000:]
        yield gateway
    finally:
        gateway.stop()


@pytest.fixture
def gateway(host_follower: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The gateway with the deplog plugin, authentication on as docs/contextforge.md runs
    it (the token is the platform admin's); yields its URL and that bearer token."""
    plugins = plugin_config(host_follower)
    with running(
        tmp_path, plugins, AUTH_REQUIRED="true", PLATFORM_ADMIN_PASSWORD=ADMIN_PASSWORD
    ) as started:
        yield started.url, started.token


async def register(http: aiohttp.ClientSession, gateway: str, token: str, server: str) -> Any:
    """Register the test MCP server with the gateway; its tools' gateway names, by
    original name."""
    headers = {"Authorization": f"Bearer {token}"}
    registration = {"name": "acme", "url": server, "transport": "STREAMABLEHTTP"}
    deadline = time.monotonic() + STARTUP
    while True:
        async with http.post(gateway + "/gateways", json=registration, headers=headers) as response:
            if response.status in (200, 201):
                break
            assert time.monotonic() < deadline, (response.status, await response.text())
        await asyncio.sleep(1)
    async with http.get(gateway + "/tools", headers=headers) as response:
        tools = {t["originalName"]: t["name"] for t in await response.json()}
    assert {"search", "fetch", "echo"} <= set(tools)
    return tools


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
    tools = await register(http, url, token, tool_server)

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
    assert (
        "deplog refused the call to tool:org.acme/search@1.0.0: the deplog log says it is "
        "revoked since "
    ) in json.dumps(blocked)
    assert "(verdict refuse, reason revoked, log indexes 1)." in json.dumps(blocked)
    other = await call(http, url, token, tools["echo"], text="still served")
    assert "still served" in json.dumps(other) and "DEPLOG" not in json.dumps(other)
    print(f"blocked {blocked_after * 1000:.0f} ms after the 201:", json.dumps(blocked))


def text(answer: Any) -> str:
    return json.dumps(answer)


async def blocked_until(
    http: aiohttp.ClientSession, gateway: Gateway, tool: str, expected: str
) -> str:
    """Call ``tool`` until its answer contains ``expected`` (within ``LOOK_BOUND``)."""
    deadline = time.monotonic() + LOOK_BOUND
    answer = text(await call(http, gateway.url, gateway.token, tool))
    while expected not in answer:
        assert time.monotonic() < deadline, answer
        await asyncio.sleep(0.1)
        answer = text(await call(http, gateway.url, gateway.token, tool))
    return answer


def assert_loaded_and_quiet(gateway: Gateway, state: Path) -> None:
    """The plugin loaded (one line naming the state and its tool), and the log holds no
    load failure and no traceback."""
    loaded = gateway.lines("deplog plugin loaded")
    assert len(loaded) == 1
    assert f"guarding 1 tool (search) with the follower state {state}" in loaded[0]
    assert not gateway.lines("Failed to load plugin")
    assert not gateway.lines("Traceback")


async def test_a_gateway_started_before_the_follower_blocks_until_the_state_appears(
    authority: AuthorityProcess, http: aiohttp.ClientSession, tool_server: str, tmp_path: Path
) -> None:
    state = tmp_path / "host-state.db"
    with running(tmp_path, plugin_config(state)) as gateway:
        tools = await register(http, gateway.url, gateway.token, tool_server)
        for _ in range(5):
            refused = text(await call(http, gateway.url, gateway.token, tools["search"]))
            assert "DEPLOG_NOT_SYNCED" in refused and "results for q" not in refused
            assert f"no follower state at {state}" in refused
            assert f"deplog follow URL --log-key KEY --state {state}" in refused
        other = await call(http, gateway.url, gateway.token, tools["echo"], text="unguarded")
        assert "unguarded" in text(other) and "DEPLOG" not in text(other)

        with following(authority, state):
            served = await blocked_until(http, gateway, tools["search"], "results for q")
            assert "DEPLOG" not in served

        assert_loaded_and_quiet(gateway, state)
        assert len(gateway.lines("the follower state is unavailable (missing)")) == 1
        assert len(gateway.lines(f"the follower state at {state} is available")) == 1


async def test_a_state_deleted_while_the_gateway_runs_blocks_its_tools_at_once(
    http: aiohttp.ClientSession, tool_server: str, host_follower: Path, tmp_path: Path
) -> None:
    with running(tmp_path, plugin_config(host_follower)) as gateway:
        tools = await register(http, gateway.url, gateway.token, tool_server)
        served = text(await call(http, gateway.url, gateway.token, tools["search"]))
        assert "results for q" in served
        host_follower.unlink()  # the follower runs on, writing to a file nobody can open
        deleted = time.monotonic()
        refused = await blocked_until(http, gateway, tools["search"], "DEPLOG_NOT_SYNCED")
        print(f"blocked {(time.monotonic() - deleted) * 1000:.0f} ms after the deletion")
        assert f"no follower state at {host_follower}" in refused
        assert_loaded_and_quiet(gateway, host_follower)
        assert len(gateway.lines("the follower state is unavailable (missing)")) == 1


def typo(state: Path) -> tuple[Path, str]:
    return state.with_name("host-stat.db"), "no follower state at {path}"


def directory(state: Path) -> tuple[Path, str]:
    path = state.with_name("state-directory.db")
    path.mkdir()
    return path, "{path} is a directory, not a follower state file"


def not_sqlite(state: Path) -> tuple[Path, str]:
    path = state.with_name("notes.db")
    path.write_text("an operator's notes, not an SQLite database\n" * 8)
    return path, "{path} is not a follower state (file is not a database)"


@pytest.mark.parametrize(
    ("unusable", "code"),
    [(typo, "missing"), (directory, "not_a_file"), (not_sqlite, "not_a_state")],
    ids=["typo", "directory", "not_sqlite"],
)
async def test_a_state_path_the_plugin_cannot_use_blocks_every_guarded_call(
    http: aiohttp.ClientSession,
    tool_server: str,
    host_follower: Path,
    tmp_path: Path,
    unusable: Any,
    code: str,
) -> None:
    path, message = unusable(host_follower)
    with running(tmp_path, plugin_config(path)) as gateway:
        tools = await register(http, gateway.url, gateway.token, tool_server)
        for _ in range(3):
            refused = text(await call(http, gateway.url, gateway.token, tools["search"]))
            assert "DEPLOG_NOT_SYNCED" in refused and "results for q" not in refused
            assert message.format(path=path) in refused
        other = await call(http, gateway.url, gateway.token, tools["echo"], text="unguarded")
        assert "unguarded" in text(other)
        assert_loaded_and_quiet(gateway, path)
        assert len(gateway.lines(f"the follower state is unavailable ({code})")) == 1


def test_a_plugin_that_cannot_load_keeps_the_gateway_from_starting(
    host_follower: Path, tmp_path: Path
) -> None:
    gateway = Gateway(tmp_path, plugin_config(host_follower, freshness_seconds=0))
    try:
        assert not gateway.started()
        assert gateway.process.returncode != 0
        assert gateway.lines("Failed to load plugin deplog")
    finally:
        gateway.stop()


async def test_the_config_file_s_fail_on_plugin_error_is_ignored_by_the_gateway(
    http: aiohttp.ClientSession, tool_server: str, host_follower: Path, tmp_path: Path
) -> None:
    """Why the mandatory setting is the environment's: with the config file's
    ``plugin_settings`` alone, the gateway starts without the plugin and serves."""
    plugins = plugin_config(
        host_follower, freshness_seconds=0, plugin_settings={"fail_on_plugin_error": True}
    )
    with running(tmp_path, plugins, PLUGINS_FAIL_ON_PLUGIN_ERROR="") as gateway:
        tools = await register(http, gateway.url, gateway.token, tool_server)
        served = text(await call(http, gateway.url, gateway.token, tools["search"]))
        assert "results for q" in served
        assert gateway.lines("Failed to load plugin deplog")


# -- a light verifier instead of a state ------------------------------------------------

LIGHT_TOOLS = {
    "search": {"tool_id": "tool:org.acme/search", "version": "1.0.0"},
    "fetch": {"tool_id": "tool:org.acme/fetch", "version": "2.0.0"},
}


async def test_a_light_plugin_refuses_a_tool_past_its_sunset_and_passes_a_good_one(
    authority: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tool_server: str,
    tmp_path: Path,
) -> None:
    """No state file: the plugin's light verifier proves each tool's map record at the
    authority's checkpoint, and the push stream tells it of the deprecation."""
    key = authority.log_verifier.vkey()
    plugins = plugin_config(None, url=authority.url, log_key=key, tools=LIGHT_TOOLS)
    with running(tmp_path, plugins) as gateway:
        tools = await register(http, gateway.url, gateway.token, tool_server)
        served = text(await call(http, gateway.url, gateway.token, tools["search"]))
        assert "results for q" in served and "DEPLOG" not in served

        body = make_envelope(
            publisher, 1, sunset_at="2026-01-02T00:00:00Z", reasons=["superseded"]
        ).canonical_bytes()
        async with http.post(authority.url + "/v1/notices", data=body, headers=JSON) as response:
            assert response.status == 201
        refused = await blocked_until(http, gateway, tools["search"], "DEPLOG_SUNSET")
        assert "results for q" not in refused
        assert "(verdict refuse, reason sunset, log indexes 1)." in refused
        fetched = text(await call(http, gateway.url, gateway.token, tools["fetch"], url="u"))
        assert "fetched u" in fetched and "DEPLOG" not in fetched
        loaded = gateway.lines("deplog plugin loaded")
        assert len(loaded) == 1 and f"with the light verifier of {authority.url}" in loaded[0]
        assert not gateway.lines("Traceback")


async def test_a_light_plugin_whose_authority_is_unreachable_blocks_every_guarded_call(
    authority: AuthorityProcess,
    http: aiohttp.ClientSession,
    tool_server: str,
    tmp_path: Path,
) -> None:
    """Fail closed: nothing verified is ``DEPLOG_NOT_SYNCED``, naming what to check."""
    nowhere = f"http://127.0.0.1:{unused_port()}"
    key = authority.log_verifier.vkey()
    plugins = plugin_config(None, url=nowhere, log_key=key, tools=LIGHT_TOOLS)
    with running(tmp_path, plugins) as gateway:
        tools = await register(http, gateway.url, gateway.token, tool_server)
        for name, arguments in [("search", {"query": "q"}), ("fetch", {"url": "u"})] * 2:
            answer = await call(http, gateway.url, gateway.token, tools[name], **arguments)
            refused = text(answer)
            assert "DEPLOG_NOT_SYNCED" in refused and "results for" not in refused
            assert "fetched" not in refused
            assert f"the light verifier of {nowhere} has verified no checkpoint" in refused
        other = await call(http, gateway.url, gateway.token, tools["echo"], text="unguarded")
        assert "unguarded" in text(other) and "DEPLOG" not in text(other)
        assert not gateway.lines("Traceback")
