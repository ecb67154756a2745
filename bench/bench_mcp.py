"""MCP: the latency the guard adds to list_tools (100 tools) and to call_tool.

Run by hand (not in CI):  python bench/bench_mcp.py [--tools 100] [--rounds 200]

Starts this file as a real MCP server process over stdio (the installed SDK's
high-level server, ``stamp_tools`` on ``--tools`` tools ``t<i>``), builds a
follower state in-process (tests/builders.py LocalLog) in which every tool's
1.0.0 is deprecated, so half the listed tools (version 1.0.0) get the
deprecation annotation and half (2.0.0) are active, and then times, in the
same run and alternating round by round, a plain ``ClientSession`` and a
``GuardedClientSession`` on two connections to that server: ``list_tools``
(all tools) and ``call_tool`` on an active tool. Reports medians and p99, the
added time (guarded minus plain, medians; noisy on a shared machine, as both
include the SDK's own work and the pipe), and ``filter_only_list``: the
guard's own work on one listing (``guard_listing``), without the wire.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, pct


def serve(tools: int) -> None:
    """The server process: ``tools`` stamped tools over stdio."""
    from deplog.client.mcp.compat import SDK_MAJOR
    from deplog.client.mcp.server import ToolVersion, stamp_tools

    if SDK_MAJOR >= 2:
        from mcp.server.mcpserver import MCPServer as HighLevel
    else:
        from mcp.server.fastmcp import FastMCP as HighLevel
    server = HighLevel("bench", log_level="WARNING")

    def answer(query: str) -> str:
        return query

    identities = {}
    for i in range(tools):
        server.add_tool(answer, name=f"t{i}", description="a tool")
        identities[f"t{i}"] = ToolVersion(f"tool:org.acme/t{i}", "1.0.0" if i % 2 else "2.0.0")
    stamp_tools(server, identities)
    server.run("stdio")


async def measure(tools: int, rounds: int, state: Any) -> dict[str, Any]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    from deplog.client.cache.guard import Guard
    from deplog.client.mcp.compat import SDK_MAJOR
    from deplog.client.mcp.session import GuardedClientSession

    params = StdioServerParameters(
        command=sys.executable, args=[__file__, "--serve", str(tools)], cwd=str(Path.cwd())
    )
    guard = Guard(state)
    async with (
        stdio_client(params) as plain_streams,
        stdio_client(params) as guarded_streams,
        ClientSession(plain_streams[0], plain_streams[1]) as plain,
        GuardedClientSession(guarded_streams[0], guarded_streams[1], guard=guard) as guarded,
    ):
        await plain.initialize()
        await guarded.initialize()
        timings: dict[str, list[float]] = {
            f"{kind}_{op}": [] for kind in ("plain", "guarded") for op in ("list", "call")
        }
        timings["filter_only_list"] = []
        for _ in range(10):  # warm-up: imports, the status cache
            for session in (plain, guarded):
                await session.list_tools()
                await session.call_tool("t0", {"query": "q"})
        for _ in range(rounds):
            for kind, session in (("plain", plain), ("guarded", guarded)):
                started = time.perf_counter()
                listed = await session.list_tools()
                timings[f"{kind}_list"].append(time.perf_counter() - started)
                started = time.perf_counter()
                await session.call_tool("t0", {"query": "q"})
                timings[f"{kind}_call"].append(time.perf_counter() - started)
                assert len(listed.tools) == tools
        raw = await plain.list_tools()
        for _ in range(rounds):  # the guard's own work on one listing, without the wire
            started = time.perf_counter()
            guarded.guard_listing(raw)
            timings["filter_only_list"].append(time.perf_counter() - started)
    out: dict[str, Any] = {"sdk_major": SDK_MAJOR, "tools": tools, "rounds": rounds}
    for name, values in timings.items():
        out[f"{name}_median_us"] = round(median(values) * 1e6, 1)
        out[f"{name}_p99_us"] = round(pct(values, 99) * 1e6, 1)
    for op in ("list", "call"):
        added = median(timings[f"guarded_{op}"]) - median(timings[f"plain_{op}"])
        out[f"added_{op}_median_us"] = round(added * 1e6, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return
    from bench.bench_guard import build_state

    with tempfile.TemporaryDirectory() as tmp:
        state, _ = build_state(Path(tmp), args.tools)  # outside the event loop: it runs its own
        print(json.dumps(asyncio.run(measure(args.tools, args.rounds, state)), indent=2))
        state.close()


if __name__ == "__main__":
    main()
