"""An MCP tool server for the integration tests, run as its own process.

``python -m tests.integration.mcp_tool_server TRANSPORT AUTHORITY_URL LOG_KEY STATE [PORT]``
serves three tools with the installed SDK's high-level server (``FastMCP`` on
1.x, ``MCPServer`` on 2.x), over ``stdio`` or ``http`` (streamable HTTP on
127.0.0.1:PORT, path ``/mcp``): ``search`` and ``fetch`` carry deplog identities and
the map proofs of their status from the server's own follower (``stamp_tools``), ``echo``
none. It follows the authority with push and sends ``tools/list_changed`` when deplog's
verdict on one of its tools changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

from deplog.client.cache.guard import Guard
from deplog.client.follow.follower import Follower
from deplog.client.mcp.compat import SDK_MAJOR
from deplog.client.mcp.server import ListChangedNotifier, ToolVersion, stamp_tools
from deplog.client.tlog.keyfile import read_verifier_key

IDENTITIES = {
    "search": ToolVersion("tool:org.acme/search", "1.0.0"),
    "fetch": ToolVersion("tool:org.acme/fetch", "2.0.0"),
}


def build_server() -> Any:
    """The SDK's high-level server with the three test tools."""
    if SDK_MAJOR >= 2:
        from mcp.server.mcpserver import MCPServer as HighLevel
    else:
        from mcp.server.fastmcp import FastMCP as HighLevel
    server = HighLevel("deplog-test-tools", log_level="WARNING")

    @server.tool()
    def search(query: str) -> str:
        """Search for documents."""
        return f"results for {query}"

    @server.tool()
    def fetch(url: str, limit: int = 10) -> str:
        """Fetch a page."""
        return f"fetched {url} ({limit})"

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text (no deplog identity)."""
        return text

    return server


async def serve(transport: str, url: str, log_key: str, state: str, port: int) -> None:
    def prepare(guard: Guard) -> Any:
        server = build_server()
        stamp_tools(server, IDENTITIES, proofs=guard)
        return server

    await serve_with(prepare, IDENTITIES, transport, url, log_key, state, port)


async def serve_with(
    prepare: Callable[[Guard], Any],
    identities: Mapping[str, ToolVersion],
    transport: str,
    url: str,
    log_key: str,
    state: str,
    port: int,
) -> None:
    """Serve ``prepare(guard)``'s server (the guard over the server's own follower of the
    authority at ``url``), announcing verdict changes on ``identities``."""
    async with Follower(url, read_verifier_key(log_key), state) as follower:
        guard = Guard(follower.state)
        server = prepare(guard)
        notifier = ListChangedNotifier(server, guard, identities)
        follower.add_listener(notifier.on_advance)
        await follower.sync()
        stop = asyncio.Event()
        following = asyncio.create_task(follower.run(3600.0, stop=stop))
        try:
            if transport == "stdio":
                await server.run_stdio_async()
            elif SDK_MAJOR >= 2:
                await server.run_streamable_http_async(host="127.0.0.1", port=port)
            else:
                server.settings.host, server.settings.port = "127.0.0.1", port
                await server.run_streamable_http_async()
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await following


if __name__ == "__main__":
    transport, url, log_key, state, *rest = sys.argv[1:]
    asyncio.run(serve(transport, url, log_key, state, int(rest[0]) if rest else 0))
