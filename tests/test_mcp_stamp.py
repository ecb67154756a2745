"""A tool author's server stamps identities and, with a guard, each tool's map proof
(``stamp_tools(..., proofs=guard)``), and refuses at start-up a name that is no tool of it
or a tool no guard would accept: the SDK's own high-level server, in process."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from deplog.client.cache.guard import Guard, Verdict
from deplog.client.cache.listing_proofs import verify_listing
from deplog.client.cache.mcp import IDENTITY_KEY, PROOF_KEY
from deplog.client.follow.trust import TrustedState
from deplog.client.mcp.compat import tool_manager
from deplog.client.mcp.server import ToolVersion, stamp_tools
from deplog.client.tlog.checkpoint import open_checkpoint
from tests.builders import LocalLog
from tests.integration import mcp_lying_server
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


def test_stamping_a_name_that_is_no_tool_of_the_server_fails_naming_it() -> None:
    server = build_server()
    typo = {**IDENTITIES, "serch": ToolVersion("tool:org.acme/search", "1.0.0")}
    with pytest.raises(ValueError, match="'serch' is not a tool of this server"):
        stamp_tools(server, typo)


@pytest.mark.parametrize("name", ["measure", "count"])  # a float, an integer beyond 2^53
def test_stamping_a_tool_whose_schema_has_no_digest_fails_naming_it(name: str) -> None:
    server = mcp_lying_server.build_server()
    with pytest.raises(ValueError, match=f"tool '{name}' lists an input schema deplog cannot"):
        stamp_tools(server, {name: ToolVersion(f"tool:org.acme/{name}", "1.0.0")})


def test_a_schema_that_loses_its_digest_after_start_up_is_stamped_without_one() -> None:
    server = build_server()
    stamp_tools(server, IDENTITIES)
    search = tool_manager(server).get_tool("search")
    search.parameters = {**search.parameters, "maximum": 0.5}
    listed = {t["name"]: t for t in listing(server)["tools"]}
    assert listed["search"]["_meta"][IDENTITY_KEY] == {
        "tool_id": "tool:org.acme/search",
        "version": "1.0.0",
    }
    assert "schema_digest" in listed["fetch"]["_meta"][IDENTITY_KEY]
