"""An MCP tool server that lies about its tools, for the integration tests, run as its own process.

``python -m tests.integration.mcp_lying_server TRANSPORT AUTHORITY_URL LOG_KEY STATE [PORT]``
runs like ``tests.integration.mcp_tool_server`` (the SDK's high-level server, its own
follower, stdio or streamable HTTP) and lists eight tools. Two are honest: ``search``,
stamped by ``stamp_tools`` with its identity and proof, and ``echo``, with no identity.
The other six say of themselves what a server that wants them called would say, each
with a valid map proof of the identity it claims:

* ``fetch`` lists no identity (a host pins it as ``tool:org.acme/fetch`` 2.0.0);
* ``lookup`` lists itself as ``tool:org.acme/lookup-lite`` (pinned as
  ``tool:org.acme/lookup`` 1.0.0);
* ``summarize`` declares the digest of ``OLD_SCHEMA``, the definition its notice names,
  and lists another schema;
* ``translate`` declares no digest and lists a schema other than ``OLD_SCHEMA``;
* ``measure`` lists a schema with a float in it (its default, 0.5), ``count`` one with an
  integer beyond 2^53 (its default, 2^60): neither has a deplog digest, so both declare none.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import Any

from deplog.client.cache.guard import Guard
from deplog.client.cache.mcp import IDENTITY_KEY, PROOF_KEY, ToolVersion, schema_digest
from deplog.client.mcp.compat import SDK_MAJOR, tool_manager
from deplog.client.mcp.server import stamp_tools
from tests.integration.mcp_tool_server import serve_with

HONEST = {"search": ToolVersion("tool:org.acme/search", "1.0.0")}
PINS = {
    **HONEST,
    "fetch": ToolVersion("tool:org.acme/fetch", "2.0.0"),
    "lookup": ToolVersion("tool:org.acme/lookup", "1.0.0"),
}
"""What a host that knows this server's tools pins."""
OLD_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
"""The definition the notices about ``summarize`` and ``translate`` name by digest."""
CLAIMS: dict[str, tuple[str, str, str | None]] = {
    "lookup": ("tool:org.acme/lookup-lite", "1.0.0", "listed"),
    "summarize": ("tool:org.acme/summarize", "1.0.0", schema_digest(OLD_SCHEMA)),
    "translate": ("tool:org.acme/translate", "1.0.0", None),
    "measure": ("tool:org.acme/measure", "1.0.0", None),
    "count": ("tool:org.acme/count", "1.0.0", None),
}
"""The identity each lying tool declares: tool id, version and the digest it declares
(``"listed"``: its listed schema's, None: none)."""


def build_server() -> Any:
    """The SDK's high-level server with the eight tools."""
    if SDK_MAJOR >= 2:
        from mcp.server.mcpserver import MCPServer as HighLevel
    else:
        from mcp.server.fastmcp import FastMCP as HighLevel
    server = HighLevel("deplog-lying-tools", log_level="WARNING")

    @server.tool()
    def search(query: str) -> str:
        """Search for documents."""
        return f"results for {query}"

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text (no deplog identity)."""
        return text

    @server.tool()
    def fetch(url: str, limit: int = 10) -> str:
        """Fetch a page."""
        return f"fetched {url} ({limit})"

    @server.tool()
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    @server.tool()
    def summarize(text: str, words: int = 50) -> str:
        """Summarize the text."""
        return text[:words]

    @server.tool()
    def translate(text: str, language: str = "en") -> str:
        """Translate the text."""
        return f"{language}: {text}"

    @server.tool()
    def measure(x: float = 0.5) -> str:
        """Measure something."""
        return f"measured {x}"

    @server.tool()
    def count(n: int = 2**60) -> str:
        """Count to n."""
        return f"counted to {n}"

    return server


def lie(server: Any, guard: Guard) -> None:
    """List each tool of ``CLAIMS`` with the identity it claims and that identity's proof
    (``fetch`` is listed with none at all)."""
    manager = tool_manager(server)
    listing = manager.list_tools

    def lying() -> list[Any]:
        tools = listing()
        now = datetime.now(UTC)
        for tool in tools:
            if tool.name not in CLAIMS:
                continue
            tool_id, version, digest = CLAIMS[tool.name]
            claim = {"tool_id": tool_id, "version": version}
            if digest is not None:
                claim["schema_digest"] = (
                    schema_digest(tool.parameters) if digest == "listed" else digest
                )
            meta: dict[str, Any] = {IDENTITY_KEY: claim}
            decision = guard.check(tool_id, version, cached_at=now, with_proof=True)
            if decision.proof is not None:
                meta[PROOF_KEY] = json.loads(decision.proof)
            tool.meta = meta
        return list(tools)

    manager.list_tools = lying


def prepare(guard: Guard) -> Any:
    server = build_server()
    stamp_tools(server, HONEST, proofs=guard)
    lie(server, guard)
    return server


if __name__ == "__main__":
    transport, url, log_key, state, *rest = sys.argv[1:]
    port = int(rest[0]) if rest else 0
    asyncio.run(serve_with(prepare, HONEST, transport, url, log_key, state, port))
