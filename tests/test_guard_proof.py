"""A cache hands agents the map proof behind its decision: the guard's ``with_proof`` and the
MCP ``_meta`` annotation carry a proof the agent verifies without trusting the cache."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

from deplog.client import verify_tool_status
from deplog.client.cache.guard import Guard, Verdict
from deplog.client.cache.mcp import IDENTITY_KEY, PROOF_KEY, guard_tools_list
from deplog.client.follow.trust import TrustedState
from deplog.client.model import canonical
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from tests.builders import LocalLog

TOOL = "tool:org.acme/search"


def cached_at() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=1)


def agents_checkpoint(trusted: TrustedState, local: LocalLog) -> Checkpoint:
    """The checkpoint an agent verified itself (here: the follower's trusted note)."""
    assert trusted.state.trusted is not None
    return open_checkpoint(trusted.state.trusted.note, local.signer.verifier())[0]


def test_a_decision_carries_a_proof_that_gives_the_same_status(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.publish(affected={"versions": ["1.0.0"]})
    local.sync(trusted)
    decision = Guard(trusted.state).check(TOOL, "1.0.0", cached_at=cached_at(), with_proof=True)
    assert decision.verdict == Verdict.WARN and decision.proof is not None
    checkpoint = agents_checkpoint(trusted, local)
    verified = verify_tool_status(decision.proof, checkpoint, TOOL, "1.0.0", datetime.now(UTC))
    assert decision.status is not None and verified.status == decision.status.status


def test_an_unnamed_tool_gets_a_proof_of_absence(trusted: TrustedState, local: LocalLog) -> None:
    local.publish()
    local.sync(trusted)
    other = "tool:org.acme/other"
    decision = Guard(trusted.state).check(other, "1.0.0", cached_at=cached_at(), with_proof=True)
    assert decision.proof is not None
    assert canonical.loads(decision.proof)["result"] == "absent"
    checkpoint = agents_checkpoint(trusted, local)
    assert verify_tool_status(decision.proof, checkpoint, other, "1.0.0", cached_at()).status == (
        "active"
    )


def test_no_proof_unless_asked(trusted: TrustedState, local: LocalLog) -> None:
    local.publish()
    local.sync(trusted)
    assert Guard(trusted.state).check(TOOL, "1.0.0", cached_at=cached_at()).proof is None


def test_a_state_that_keeps_no_map_gives_no_proof(trusted: TrustedState, local: LocalLog) -> None:
    local.publish()
    local.sync(trusted)
    conn = sqlite3.connect(trusted.state.path)
    conn.execute("DROP TABLE map_state")
    conn.commit()
    conn.close()
    decision = Guard(trusted.state).check(TOOL, "1.0.0", cached_at=cached_at(), with_proof=True)
    assert decision.status is not None and decision.proof is None


def test_the_mcp_annotation_includes_the_proof_of_every_listed_tool(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.publish(affected={"versions": ["1.0.0"]})
    local.sync(trusted)
    tools = [
        {
            "name": name,
            "inputSchema": {"type": "object"},
            "_meta": {IDENTITY_KEY: {"tool_id": TOOL, "version": version}},
        }
        for name, version in (("old", "1.0.0"), ("new", "2.0.0"))
    ]
    guard = Guard(trusted.state)
    listed = guard_tools_list({"tools": tools}, guard, cached_at=cached_at(), with_proof=True)
    checkpoint = agents_checkpoint(trusted, local)
    statuses = []
    for tool in listed["tools"]:
        proof = canonical.dumps(tool["_meta"][PROOF_KEY])  # as the agent re-encodes it
        version = tool["_meta"][IDENTITY_KEY]["version"]
        statuses.append(verify_tool_status(proof, checkpoint, TOOL, version, cached_at()).status)
    assert statuses == ["deprecated", "active"]
    plain = guard_tools_list({"tools": tools}, guard, cached_at=cached_at())
    assert all(PROOF_KEY not in tool["_meta"] for tool in plain["tools"])


def test_a_proof_after_an_advance_is_made_at_the_new_checkpoint(
    trusted: TrustedState, local: LocalLog
) -> None:
    """Proofs are kept per checkpoint and tool: the same guard, asked again after its
    follower advanced, proves the tool at the new checkpoint, with the new status."""
    local.publish(affected={"versions": ["1.0.0"]})
    local.sync(trusted)
    guard = Guard(trusted.state)
    before = guard.check(TOOL, "1.0.0", cached_at=cached_at(), with_proof=True)
    again = guard.check(TOOL, "1.0.0", cached_at=cached_at(), with_proof=True)
    local.publish(action="revoke", reasons=["security"], advisories=["CVE-2026-1234"])
    local.sync(trusted)
    after = guard.check(TOOL, "1.0.0", cached_at=cached_at(), with_proof=True)
    assert before.proof is not None and after.proof is not None
    assert again.proof == before.proof
    assert canonical.loads(after.proof)["checkpoint"] == agents_note(trusted)
    status = verify_tool_status(
        after.proof, agents_checkpoint(trusted, local), TOOL, "1.0.0", datetime.now(UTC)
    )
    assert (after.verdict, status.status) == (Verdict.REFUSE, "revoked")


def agents_note(trusted: TrustedState) -> str:
    assert trusted.state.trusted is not None
    return trusted.state.trusted.note.decode()
