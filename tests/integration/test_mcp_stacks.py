"""deplog in a real MCP stack: an SDK server process, a guarded client session, an authority.

The server (``tests.integration.mcp_tool_server``) runs as its own process over
stdio or streamable HTTP and lists tools stamped with deplog identities; the
client follows the same authority with push. A revoke published to the
authority must, by push alone (both followers poll once an hour), drop the tool
from the guarded listing, refuse the call without reaching the server, and reach
the client as ``notifications/tools/list_changed`` from the server. How fast is a
figure (bench/bench_propagation.py, bench/bench_mcp.py); ``PUSH_BOUND`` only
catches a push that never came.

A lying server (``tests.integration.mcp_lying_server``) says false things about its
tools to escape the log's notices: each lie must be refused with its own reason, by
both sessions, while its honest tools are listed and called.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client

from deplog.client.cache.guard import Guard
from deplog.client.cache.mcp import (
    DEPRECATION_KEY,
    IDENTITY_KEY,
    PROOF_KEY,
    REFUSAL_KEY,
    ToolVersion,
    schema_digest,
)
from deplog.client.follow.follower import Follower
from deplog.client.follow.http import HttpLogSource
from deplog.client.follow.light import LightVerifier
from deplog.client.mcp.compat import SDK_MAJOR, to_wire
from deplog.client.mcp.session import GuardedClientSession, ProvenClientSession
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope, unused_port
from tests.doctext import ROOT, code_blocks, section
from tests.integration.harness import ORIGIN, AuthorityProcess, wait_for_push_subscribers
from tests.integration.mcp_lying_server import OLD_SCHEMA, PINS

pytestmark = pytest.mark.slow  # MCP server processes and a real authority

JSON = {"Content-Type": "application/json"}
MCP_DOC = ROOT / "docs" / "mcp.md"
NO_POLLING = 3600.0
PUSH_BOUND = 10.0


class Notifications:
    """What the server sent the client, as a ``message_handler``."""

    def __init__(self) -> None:
        self.list_changed: list[float] = []

    async def __call__(self, message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, types.ToolListChangedNotification):
            self.list_changed.append(time.monotonic())


async def wait_for_port(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the MCP server did not start listening")


@contextlib.asynccontextmanager
async def server_streams(
    transport: str,
    authority: AuthorityProcess,
    state: Path,
    module: str = "tests.integration.mcp_tool_server",
) -> AsyncIterator[tuple[Any, Any]]:
    """The client's streams to a freshly started MCP server process (``module``)."""
    key = authority.keys / (ORIGIN.replace("/", "_") + ".pub")
    args = ["-m", module, transport, authority.url, str(key)]
    if transport == "stdio":
        params = StdioServerParameters(
            command=sys.executable, args=[*args, str(state)], cwd=str(Path.cwd())
        )
        async with stdio_client(params) as streams:
            yield streams[0], streams[1]
        return
    port = unused_port()
    process = await asyncio.create_subprocess_exec(sys.executable, *args, str(state), str(port))
    try:
        await wait_for_port(port, time.monotonic() + 30)
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as streams:
            yield streams[0], streams[1]
    finally:
        process.terminate()
        await process.wait()


async def revoke(http: aiohttp.ClientSession, url: str, publisher: Signer) -> float:
    body = make_envelope(
        publisher, 1, action="revoke", reasons=["security"], advisories=["CVE-2026-1234"]
    ).canonical_bytes()
    async with http.post(url + "/v1/notices", data=body, headers=JSON) as response:
        assert response.status == 201
    return time.monotonic()


def names(result: Any) -> set[str]:
    return {tool["name"] for tool in to_wire(result)["tools"]}


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_revoked_tool_is_gone_refused_and_announced_by_push(
    transport: str,
    authority: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    notifications = Notifications()
    async with Follower(authority.url, authority.log_verifier, tmp_path / "c.db") as follower:
        await follower.sync()
        stop = asyncio.Event()
        following = asyncio.create_task(follower.run(NO_POLLING, stop=stop))
        async with (
            server_streams(transport, authority, tmp_path / "server.db") as (read, write),
            GuardedClientSession(
                read, write, guard=Guard(follower.state), message_handler=notifications
            ) as session,
        ):
            await session.initialize()
            listed = await session.list_tools()
            assert names(listed) == {"search", "fetch", "echo"}
            served = to_wire(await session.call_tool("search", {"query": "q"}))
            assert not served.get("isError") and "results for q" in str(served["content"])
            await wait_for_push_subscribers(http, authority.url, 2)  # client's and server's

            acknowledged = await revoke(http, authority.url, publisher)
            deadline = acknowledged + PUSH_BOUND
            while time.monotonic() < deadline and (
                "search" in names(await session.list_tools()) or not notifications.list_changed
            ):
                await asyncio.sleep(0.01)
            gone = "search" not in names(await session.list_tools())
            assert (gone, bool(notifications.list_changed)) == (True, True)
            assert time.monotonic() < deadline, "not gone and announced by push"
            assert names(await session.list_tools()) == {"fetch", "echo"}
            refused = to_wire(await session.call_tool("search", {"query": "q"}))
            assert time.monotonic() < deadline
        stop.set()
        await following
    assert refused["isError"] is True
    refusal = refused["_meta"][REFUSAL_KEY]
    assert (refusal["verdict"], refusal["reason"]) == ("refuse", "revoked")
    assert refusal["tool_id"] == "tool:org.acme/search" and refusal["checkpoint_size"] == 2
    assert refused["content"][0]["text"].startswith(
        "deplog refused the call to tool:org.acme/search@1.0.0: the deplog log says it is "
        "revoked since "
    )
    assert "; reasons security; advisories CVE-2026-1234." in refused["content"][0]["text"]
    assert refused["content"][0]["text"].endswith(
        "decided at checkpoint size 2 of the log (verdict refuse, reason revoked, "
        f"log indexes {refusal['notices'][0]})."
    )
    assert notifications.list_changed[0] - acknowledged < PUSH_BOUND


async def test_a_session_guarded_by_a_light_verifier_drops_and_refuses_a_revoked_tool(
    authority: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    await revoke(http, authority.url, publisher)
    async with (
        HttpLogSource(authority.url) as source,
        server_streams("stdio", authority, tmp_path / "server.db") as (read, write),
    ):
        light = LightVerifier(source, authority.log_verifier)
        await light.refresh()
        async with GuardedClientSession(read, write, guard=light) as session:
            await session.initialize()
            assert names(await session.list_tools()) == {"fetch", "echo"}
            refused = to_wire(await session.call_tool("search", {"query": "q"}))
    refusal = refused["_meta"][REFUSAL_KEY]
    assert (refusal["reason"], refusal["guarantee"]) == ("revoked", "log_signed")


async def test_the_server_stamps_the_digest_of_the_schema_it_lists(
    authority: AuthorityProcess, tmp_path: Path
) -> None:
    async with (
        server_streams("stdio", authority, tmp_path / "server.db") as (read, write),
        Follower(authority.url, authority.log_verifier, tmp_path / "c.db") as follower,
    ):
        await follower.sync()
        async with GuardedClientSession(read, write, guard=Guard(follower.state)) as session:
            await session.initialize()
            tools = {t["name"]: t for t in to_wire(await session.list_tools())["tools"]}
    assert tools["fetch"]["_meta"][IDENTITY_KEY] == {
        "tool_id": "tool:org.acme/fetch",
        "version": "2.0.0",
        "schema_digest": schema_digest(tools["fetch"]["inputSchema"]),
    }
    assert IDENTITY_KEY not in tools["echo"].get("_meta", {})


def mcp_doc_example(marker: str) -> str:
    """The example of docs/mcp.md, "Sessions", that holds ``marker``."""
    examples = code_blocks(section(MCP_DOC, "## Sessions"), "python")
    [example] = [code for code in examples if marker in code]
    return example


@pytest.mark.skipif(SDK_MAJOR < 2, reason="docs/mcp.md's examples are written for SDK 2.x")
@pytest.mark.parametrize("session", ["GuardedClientSession", "ProvenClientSession"])
async def test_the_mcp_doc_session_example_runs_as_printed_from_the_installed_package(
    session: str,
    authority: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    """The docs' tool server and agent, saved as files and run outside the checkout."""
    (tmp_path / "tool_server.py").write_text(mcp_doc_example("stamp_tools("))
    (tmp_path / "agent.py").write_text(mcp_doc_example(f"{session}("))
    env = dict(os.environ, DEPLOG_URL=authority.url, DEPLOG_LOG_KEY=authority.log_verifier.vkey())
    env.pop("PYTHONPATH", None)

    async def run() -> list[str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "agent.py", cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0
        return out.decode().splitlines()

    assert await run() == ["['echo', 'fetch', 'search']", "False results for deplog"]
    await revoke(http, authority.url, publisher)
    listed, refused = await run()
    assert listed == "['echo', 'fetch']"
    assert refused.startswith(
        "True deplog refused the call to tool:org.acme/search@1.0.0: the deplog log says it "
        "is revoked since "
    )


async def test_tools_the_guard_cannot_vouch_for_are_hidden_and_refused_unless_kept(
    authority: AuthorityProcess, tmp_path: Path
) -> None:
    async with Follower(authority.url, authority.log_verifier, tmp_path / "c.db") as follower:
        await follower.sync()
        an_hour_later = Guard(follower.state, clock=lambda: time.time() + 3600)
        async with (
            server_streams("stdio", authority, tmp_path / "server.db") as (read, write),
            GuardedClientSession(read, write, guard=an_hour_later) as session,
        ):
            await session.initialize()
            assert names(await session.list_tools()) == {"echo"}
            refused = to_wire(await session.call_tool("search", {"query": "q"}))
            session.keep_unverified = True
            assert names(await session.list_tools()) == {"search", "fetch", "echo"}
            served = to_wire(await session.call_tool("search", {"query": "q"}))
    assert refused["_meta"][REFUSAL_KEY]["reason"] == "checkpoint_stale"
    assert not served.get("isError")


async def test_a_deprecated_tool_is_listed_with_its_deprecation_and_still_called(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    body = make_envelope(
        publisher, 1, tool="tool:org.acme/fetch", affected={"versions": ["2.0.0"]}
    ).canonical_bytes()
    async with http.post(authority.url + "/v1/notices", data=body, headers=JSON) as response:
        assert response.status == 201
    async with Follower(authority.url, authority.log_verifier, tmp_path / "c.db") as follower:
        await follower.sync()
        async with (
            server_streams("stdio", authority, tmp_path / "server.db") as (read, write),
            GuardedClientSession(read, write, guard=Guard(follower.state)) as session,
        ):
            await session.initialize()
            tools = {t["name"]: t for t in to_wire(await session.list_tools())["tools"]}
            called = to_wire(await session.call_tool("fetch", {"url": "u"}))
    assert tools["fetch"]["_meta"][DEPRECATION_KEY]["notices"] == [1]
    assert DEPRECATION_KEY not in tools["search"]["_meta"]
    assert not called.get("isError") and "fetched u" in str(called["content"])


def trusting(authority: AuthorityProcess) -> Callable[[bytes], Checkpoint]:
    """An agent's whole trust without a follower: the log's key."""
    return lambda note: open_checkpoint(note, authority.log_verifier)[0]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_an_agent_without_a_follower_goes_by_the_servers_proofs(
    transport: str,
    authority: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    """The server stamps each tool's map proof from its own follower; the agent checks
    them against the log key alone, and a revoke reaches it through the server's proofs."""
    notifications = Notifications()
    async with (
        server_streams(transport, authority, tmp_path / "server.db") as (read, write),
        ProvenClientSession(
            read, write, verify_checkpoint=trusting(authority), message_handler=notifications
        ) as session,
    ):
        await session.initialize()
        tools = {t["name"]: t for t in to_wire(await session.list_tools())["tools"]}
        served = to_wire(await session.call_tool("search", {"query": "q"}))
        await wait_for_push_subscribers(http, authority.url, 1)  # the server's follower
        acknowledged = await revoke(http, authority.url, publisher)
        deadline = acknowledged + PUSH_BOUND
        while time.monotonic() < deadline and not notifications.list_changed:
            await asyncio.sleep(0.01)
        assert notifications.list_changed, "the server's follower never saw the revoke"
        listed = names(await session.list_tools())
        refused = to_wire(await session.call_tool("search", {"query": "q"}))
    assert set(tools) == {"search", "fetch", "echo"}
    assert tools["search"]["_meta"][PROOF_KEY]["tool_id"] == "tool:org.acme/search"
    assert PROOF_KEY not in tools["echo"].get("_meta", {})
    assert not served.get("isError") and "results for q" in str(served["content"])
    assert listed == {"fetch", "echo"}
    refusal = refused["_meta"][REFUSAL_KEY]
    assert (refused["isError"], refusal["verdict"], refusal["reason"]) == (
        True,
        "refuse",
        "revoked",
    )
    assert refusal["checkpoint_size"] == 2


async def test_proofs_under_another_log_are_never_used_even_when_keeping_unverified(
    authority: AuthorityProcess, tmp_path: Path
) -> None:
    stranger = Signer.generate(authority.log_verifier.name).verifier()

    def verify(note: bytes) -> Checkpoint:
        return open_checkpoint(note, stranger)[0]

    async with (
        server_streams("stdio", authority, tmp_path / "server.db") as (read, write),
        ProvenClientSession(read, write, verify_checkpoint=verify, keep_unverified=True) as session,
    ):
        await session.initialize()
        listed = names(await session.list_tools())
        refused = to_wire(await session.call_tool("fetch", {"url": "u"}))
    assert listed == {"echo"}
    refusal = refused["_meta"][REFUSAL_KEY]
    assert (refusal["verdict"], refusal["reason"]) == ("unknown", "unverified_note")


# -- a server that lies about its tools ------------------------------------------------------

LYING = "tests.integration.mcp_lying_server"
LIED_ABOUT = {
    "fetch": "identity_missing",  # revoked; lists no identity (pinned)
    "lookup": "identity_mismatch",  # revoked; lists itself as another tool (pinned)
    "summarize": "schema_digest_mismatch",  # declares the digest its notice names, lists another
    "translate": "schema_mismatch",  # declares no digest, lists another definition
    "measure": "schema_undigestable",  # a float in its schema
    "count": "schema_undigestable",  # an integer beyond 2^53 in its schema
}


@pytest.fixture
async def lies_logged(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> AuthorityProcess:
    """The authority with the notices the lying server's tools would escape."""
    revoked = {"action": "revoke", "reasons": ["security"], "advisories": ["CVE-2026-1234"]}
    old = schema_digest(OLD_SCHEMA)
    notices: list[dict[str, Any]] = [
        {"tool": "tool:org.acme/fetch", "affected": {"versions": ["2.0.0"]}, **revoked},
        {"tool": "tool:org.acme/lookup", **revoked},
        {"tool": "tool:org.acme/summarize", "schema_digest": old},
        {"tool": "tool:org.acme/translate", "schema_digest": old},
    ]
    for sequence, fields in enumerate(notices, 1):
        body = make_envelope(publisher, sequence, **fields).canonical_bytes()
        async with http.post(authority.url + "/v1/notices", data=body, headers=JSON) as response:
            assert response.status == 201
    return authority


@contextlib.asynccontextmanager
async def host_session(
    kind: str, authority: AuthorityProcess, tmp_path: Path, read: Any, write: Any, **options: Any
) -> AsyncIterator[Any]:
    """The agent's session of ``kind``: ``guarded`` over a follower of its own, ``proven``
    trusting the log key alone."""
    if kind == "guarded":
        async with Follower(authority.url, authority.log_verifier, tmp_path / "c.db") as follower:
            await follower.sync()
            guard = Guard(follower.state)
            async with GuardedClientSession(read, write, guard=guard, **options) as session:
                yield session
        return
    verify = trusting(authority)
    async with ProvenClientSession(read, write, verify_checkpoint=verify, **options) as session:
        yield session


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("kind", ["guarded", "proven"])
async def test_a_lying_servers_tools_are_each_refused_with_their_own_reason(
    kind: str, transport: str, lies_logged: AuthorityProcess, tmp_path: Path
) -> None:
    async with (
        server_streams(transport, lies_logged, tmp_path / "server.db", LYING) as (read, write),
        host_session(kind, lies_logged, tmp_path, read, write, pins=PINS) as session,
    ):
        await session.initialize()
        listed = names(await session.list_tools())
        refused = {name: to_wire(await session.call_tool(name, {})) for name in LIED_ABOUT}
        searched = to_wire(await session.call_tool("search", {"query": "q"}))
        echoed = to_wire(await session.call_tool("echo", {"text": "hi"}))
    assert listed == {"search", "echo"}
    refusals = {name: result["_meta"][REFUSAL_KEY] for name, result in refused.items()}
    assert {name: refusal["reason"] for name, refusal in refusals.items()} == LIED_ABOUT
    for name, result in refused.items():
        reason = LIED_ABOUT[name]
        assert (
            result["isError"] is True
            and f"(verdict refuse, reason {reason}" in result["content"][0]["text"]
        )
        on_the_log = reason == "schema_mismatch"  # the others are decided on the listing
        assert ("checkpoint_size" in refusals[name]) == on_the_log
    assert (refusals["fetch"]["tool_id"], refusals["lookup"]["tool_id"]) == (
        "tool:org.acme/fetch",
        "tool:org.acme/lookup",
    )  # the host's pins, not what the server said
    assert not searched.get("isError") and "results for q" in str(searched["content"])
    assert not echoed.get("isError") and "hi" in str(echoed["content"])


@pytest.mark.parametrize("kind", ["guarded", "proven"])
async def test_requiring_pins_refuses_every_tool_the_host_did_not_pin(
    kind: str, lies_logged: AuthorityProcess, tmp_path: Path
) -> None:
    options = {"pins": PINS, "require_pins": True}
    async with (
        server_streams("stdio", lies_logged, tmp_path / "server.db", LYING) as (read, write),
        host_session(kind, lies_logged, tmp_path, read, write, **options) as session,
    ):
        await session.initialize()
        listed = names(await session.list_tools())
        others = ["echo", *LIED_ABOUT]
        refused = {name: to_wire(await session.call_tool(name, {})) for name in others}
        searched = to_wire(await session.call_tool("search", {"query": "q"}))
    assert listed == {"search"}
    assert {name: result["_meta"][REFUSAL_KEY]["reason"] for name, result in refused.items()} == {
        "echo": "not_pinned",
        "fetch": "identity_missing",
        "lookup": "identity_mismatch",
        "summarize": "not_pinned",
        "translate": "not_pinned",
        "measure": "not_pinned",
        "count": "not_pinned",
    }
    assert refused["echo"]["content"][0]["text"] == (
        "deplog refused the call to the tool echo: the host serves only the tools it pinned, "
        "and this one is not. Do not call it again as it is; decided on the tool server's "
        "listing alone (verdict refuse, reason not_pinned)."
    )
    assert not searched.get("isError")


@pytest.mark.parametrize("kind", ["guarded", "proven"])
async def test_a_tool_the_host_pinned_that_the_server_does_not_list_is_refused_not_listed(
    kind: str, authority: AuthorityProcess, tmp_path: Path
) -> None:
    pins = {
        "search": ToolVersion("tool:org.acme/search", "1.0.0"),
        "archive": ToolVersion("tool:org.acme/archive", "1.0.0"),
    }
    async with (
        server_streams("stdio", authority, tmp_path / "server.db") as (read, write),
        host_session(kind, authority, tmp_path, read, write, pins=pins) as session,
    ):
        await session.initialize()
        refused = to_wire(await session.call_tool("archive", {}))
        searched = to_wire(await session.call_tool("search", {"query": "q"}))
    refusal = refused["_meta"][REFUSAL_KEY]
    assert (refused["isError"], refusal["reason"], refusal["tool_id"]) == (
        True,
        "not_listed",
        "tool:org.acme/archive",
    )
    assert not searched.get("isError") and "results for q" in str(searched["content"])


async def test_without_pins_the_servers_word_is_the_only_identity_there_is(
    lies_logged: AuthorityProcess, tmp_path: Path
) -> None:
    """What the docs warn of: a revoked tool that drops or changes its identity on an
    unpinned server is not deplog's to decide. Its definition still is checked."""
    async with (
        server_streams("stdio", lies_logged, tmp_path / "server.db", LYING) as (read, write),
        host_session("guarded", lies_logged, tmp_path, read, write) as session,
    ):
        await session.initialize()
        listed = names(await session.list_tools())
    assert listed == {"search", "echo", "fetch", "lookup"}
