"""A tool author's server stamps identities and, with a guard, each tool's map proof
(``stamp_tools(..., proofs=guard)``): the SDK's own high-level server, in process."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from deplog.client.cache.guard import Guard, Verdict
from deplog.client.cache.listing_proofs import verify_listing
from deplog.client.cache.mcp import IDENTITY_KEY, PROOF_KEY
from deplog.client.follow.trust import TrustedState
from deplog.client.mcp.compat import tool_manager
from deplog.client.mcp.server import stamp_tools
from deplog.client.tlog.checkpoint import open_checkpoint
from tests.builders import LocalLog
from tests.integration.mcp_tool_server import IDENTITIES, build_server


class Clock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def listing(server: Any) -> dict[str, Any]:
    """What the server lists, in the wire form an agent receives."""
    return {
        "tools": [
            {"name": t.name, "inputSchema": t.parameters, "_meta": t.meta}
            for t in tool_manager(server).list_tools()
        ]
    }


def test_a_server_stamps_proofs_an_agent_verifies_with_the_log_key(
    local: LocalLog, trusted: TrustedState
) -> None:
    local.publish(tool="tool:org.acme/fetch", affected={"versions": ["2.0.0"]})
    local.sync(trusted)
    server = build_server()
    stamp_tools(server, IDENTITIES, proofs=Guard(trusted.state))
    listed = listing(server)

    def verify(note: bytes) -> Any:
        return open_checkpoint(note, local.signer.verifier())[0]

    checked = verify_listing(listed, verify, datetime.now(UTC))
    assert [(t.name, t.verdict, t.reason) for t in checked] == [
        ("search", Verdict.SERVE, "active"),
        ("fetch", Verdict.WARN, "deprecated"),
    ]
    echo = next(t for t in listed["tools"] if t["name"] == "echo")
    assert not (echo["_meta"] or {})


def test_a_stale_guard_stamps_no_proof_and_takes_back_the_last_one(
    local: LocalLog, trusted: TrustedState
) -> None:
    local.publish()
    local.sync(trusted)
    clock = Clock()
    server = build_server()
    stamp_tools(server, IDENTITIES, proofs=Guard(trusted.state, clock=clock))
    fresh = {t["name"]: t["_meta"] for t in listing(server)["tools"]}
    clock.offset = 3600.0  # the server's follower stopped: its state is an hour old
    stale = {t["name"]: t["_meta"] for t in listing(server)["tools"]}
    assert PROOF_KEY in fresh["search"] and PROOF_KEY not in stale["search"]
    assert stale["search"][IDENTITY_KEY] == fresh["search"][IDENTITY_KEY]


def test_without_a_guard_only_identities_are_stamped() -> None:
    server = build_server()
    stamp_tools(server, IDENTITIES)
    search = next(t for t in listing(server)["tools"] if t["name"] == "search")
    assert set(search["_meta"]) == {IDENTITY_KEY}
