"""An agent checks a guarded ``tools/list`` without trusting the gateway: every listed
deplog tool's proof against checkpoints the agent verifies itself (``verify_listing``), and
``deplog audit tools`` over the same listing saved to a file, with the verdict table's exits.

The listings are what a real gateway guard makes (``guard_tools_list(with_proof=True)`` over
a follower synced with a real log); a misbehaving gateway is that listing tampered with.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deplog.client.cache.guard import Guard, Verdict
from deplog.client.cache.listing_proofs import ListedTool, verify_listing
from deplog.client.cache.mcp import (
    IDENTITY_KEY,
    PROOF_KEY,
    Pins,
    ToolVersion,
    guard_tools_list,
    schema_digest,
)
from deplog.client.cli.main import main
from deplog.client.errors import ErrorCode
from deplog.client.follow.trust import TrustedState
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from deplog.client.tlog.cosignature import cosign, cosigner
from deplog.client.tlog.note import Signer, add_signature_lines, parse_note
from deplog.client.tlog.policy import PolicyError
from tests.builders import LocalLog

SEARCH = "tool:org.acme/search"  # 1.0.0 deprecated, its schema named by digest
GONE = "tool:org.acme/gone"  # 1.0.0 revoked
FRESH = "tool:org.acme/fresh"  # no notice
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}}
OTHER_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def listed(name: str, tool_id: str | None, version: str = "1.0.0") -> dict[str, Any]:
    """An upstream tool as a server lists it, with a deplog identity unless ``tool_id`` is None."""
    tool: dict[str, Any] = {"name": name, "inputSchema": SCHEMA}
    if tool_id is not None:
        tool["_meta"] = {IDENTITY_KEY: {"tool_id": tool_id, "version": version}}
    return tool


@dataclass
class Gateway:
    """A guarded listing as the gateway answers it, what the agent trusts, and the proofs
    the gateway's guard holds (for tampering)."""

    listing: dict[str, Any]
    log_key: Signer
    note: bytes
    guard: Guard

    def verify(self, note: bytes) -> Checkpoint:
        """The agent's trust: the log's key."""
        return open_checkpoint(note, self.log_key.verifier())[0]

    def proof_of(self, tool_id: str) -> dict[str, Any]:
        """The guard's proof for ``tool_id``, as it would put it in ``_meta``."""
        decision = self.guard.check(tool_id, "1.0.0", cached_at=later(), with_proof=True)
        assert decision.proof is not None
        parsed: dict[str, Any] = json.loads(decision.proof)
        return parsed

    def tool(self, name: str) -> dict[str, Any]:
        tool: dict[str, Any] = next(t for t in self.listing["tools"] if t["name"] == name)
        return tool

    def check(self, pins: Pins | None = None, require_pins: bool = False) -> list[ListedTool]:
        return verify_listing(
            self.listing, self.verify, datetime.now(UTC), pins=pins, require_pins=require_pins
        )


def later() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=1)


@pytest.fixture
def gateway(local: LocalLog, trusted: TrustedState) -> Gateway:
    local.publish(tool=SEARCH, schema_digest=schema_digest(SCHEMA))
    local.publish(tool=GONE, action="revoke", reasons=["security"], advisories=["CVE-2026-1234"])
    local.sync(trusted)
    guard = Guard(trusted.state)
    upstream = {
        "tools": [
            listed("search", SEARCH),
            listed("fresh", FRESH),
            listed("gone", GONE),
            listed("plain", None),
        ]
    }
    listing = guard_tools_list(upstream, guard, cached_at=later(), with_proof=True)
    assert trusted.state.trusted is not None
    return Gateway(listing, local.signer, trusted.state.trusted.note, guard)


def verdicts_of(tools: list[ListedTool]) -> dict[str, tuple[Verdict | None, str]]:
    return {tool.name: (tool.verdict, tool.reason) for tool in tools}


# -- the library -----------------------------------------------------------------------------


def test_every_listed_deplog_tool_is_proven_as_the_guard_decided(gateway: Gateway) -> None:
    assert verdicts_of(gateway.check()) == {
        "search": (Verdict.WARN, "deprecated"),
        "fresh": (Verdict.SERVE, "active"),
    }


def test_a_proven_tool_carries_its_status_and_checkpoint(gateway: Gateway) -> None:
    [search, _] = gateway.check()
    assert search.status is not None and search.checkpoint is not None
    assert (search.status.status, search.status.schema_digest) == (
        "deprecated",
        schema_digest(SCHEMA),
    )
    assert search.checkpoint == gateway.verify(gateway.note)


def test_each_distinct_checkpoint_is_verified_once(gateway: Gateway) -> None:
    calls: list[bytes] = []

    def counting(note: bytes) -> Checkpoint:
        calls.append(note)
        return gateway.verify(note)

    verify_listing(gateway.listing, counting, datetime.now(UTC))
    assert calls == [gateway.note]


def test_a_tool_listed_without_a_proof_is_unknown(gateway: Gateway) -> None:
    del gateway.tool("fresh")["_meta"][PROOF_KEY]
    assert verdicts_of(gateway.check())["fresh"] == (Verdict.UNKNOWN, "no_proof")


def test_an_identity_that_is_no_tool_id_is_unknown(gateway: Gateway) -> None:
    gateway.tool("fresh")["_meta"][IDENTITY_KEY]["tool_id"] = "fresh"
    assert verdicts_of(gateway.check())["fresh"] == (Verdict.UNKNOWN, "bad_identifier")


def test_a_revoked_tool_a_gateway_lists_is_proven_refused(gateway: Gateway) -> None:
    gone = listed("gone", GONE)
    gone["_meta"][PROOF_KEY] = gateway.proof_of(GONE)
    gateway.listing["tools"].append(gone)
    [*_, checked] = gateway.check()
    assert (checked.verdict, checked.reason) == (Verdict.REFUSE, "revoked")
    assert checked.status is not None and checked.status.advisories == ("CVE-2026-1234",)


def test_a_definition_other_than_the_notices_name_is_a_schema_mismatch(gateway: Gateway) -> None:
    gateway.tool("search")["inputSchema"] = OTHER_SCHEMA  # declaring no digest
    assert verdicts_of(gateway.check())["search"] == (Verdict.REFUSE, "schema_mismatch")


def test_a_declared_digest_never_stands_in_for_the_listed_schemas(gateway: Gateway) -> None:
    """The gateway lists OTHER_SCHEMA and declares the digest the notice names: refused for
    the declaration itself, which once let the definition pass as the notice's."""
    gateway.tool("search")["inputSchema"] = OTHER_SCHEMA
    gateway.tool("search")["_meta"][IDENTITY_KEY]["schema_digest"] = schema_digest(SCHEMA)
    assert verdicts_of(gateway.check())["search"] == (Verdict.REFUSE, "schema_digest_mismatch")


def test_a_declared_digest_of_the_listed_schema_is_accepted(gateway: Gateway) -> None:
    gateway.tool("search")["_meta"][IDENTITY_KEY]["schema_digest"] = schema_digest(SCHEMA)
    assert verdicts_of(gateway.check())["search"] == (Verdict.WARN, "deprecated")


@pytest.mark.parametrize(
    "schema",
    [None, "object", {"type": "object", "maximum": 0.5}, {"type": "object", "maximum": 2**60}],
    ids=["missing", "not_an_object", "float", "beyond_2_53"],
)
def test_a_listed_schema_without_a_digest_is_refused_whatever_is_declared(
    gateway: Gateway, schema: object
) -> None:
    search = gateway.tool("search")
    search["inputSchema"] = schema
    search["_meta"][IDENTITY_KEY]["schema_digest"] = schema_digest(SCHEMA)  # no fallback
    assert verdicts_of(gateway.check())["search"] == (Verdict.REFUSE, "schema_undigestable")


def test_a_pinned_tool_listed_as_pinned_is_proven(gateway: Gateway) -> None:
    pins = {"search": ToolVersion(SEARCH, "1.0.0")}
    assert verdicts_of(gateway.check(pins=pins))["search"] == (Verdict.WARN, "deprecated")


def test_a_pinned_tool_listed_without_an_identity_is_refused_identity_missing(
    gateway: Gateway,
) -> None:
    del gateway.tool("search")["_meta"][IDENTITY_KEY]
    tools = gateway.check(pins={"search": ToolVersion(SEARCH, "1.0.0")})
    assert verdicts_of(tools)["search"] == (Verdict.REFUSE, "identity_missing")


def test_a_pinned_tool_listed_as_another_tool_is_refused_identity_mismatch(
    gateway: Gateway,
) -> None:
    """``fresh`` carries a valid proof of ``FRESH``, active: the host pinned it as ``GONE``."""
    tools = gateway.check(pins={"fresh": ToolVersion(GONE, "1.0.0")})
    assert verdicts_of(tools)["fresh"] == (Verdict.REFUSE, "identity_mismatch")
    assert next(t for t in tools if t.name == "fresh").tool_id == GONE


def test_requiring_pins_refuses_every_unpinned_tool(gateway: Gateway) -> None:
    tools = gateway.check(pins={"search": ToolVersion(SEARCH, "1.0.0")}, require_pins=True)
    assert verdicts_of(tools) == {
        "search": (Verdict.WARN, "deprecated"),
        "fresh": (Verdict.REFUSE, "not_pinned"),
        "plain": (Verdict.REFUSE, "not_pinned"),
    }


def test_a_proof_moved_to_another_tool_fails(gateway: Gateway) -> None:
    search_proof = gateway.tool("search")["_meta"][PROOF_KEY]
    gateway.tool("fresh")["_meta"][PROOF_KEY] = search_proof
    fresh = next(t for t in gateway.check() if t.name == "fresh")
    assert (fresh.verdict, fresh.failure) == (None, ErrorCode.BAD_MAP_PROOF)


def test_a_tampered_record_fails(gateway: Gateway) -> None:
    proof = gateway.tool("search")["_meta"][PROOF_KEY]
    record = bytearray(base64.b64decode(proof["record"]))
    record[-1] ^= 1
    proof["record"] = base64.b64encode(record).decode()
    search = gateway.check()[0]
    assert search.verdict is None and search.failure in (
        ErrorCode.BAD_MAP_PROOF,
        ErrorCode.MALFORMED_MAP_RECORD,
        ErrorCode.MALFORMED_MAP_PROOF,
    )


def test_a_proof_that_is_no_proof_document_fails_malformed(gateway: Gateway) -> None:
    gateway.tool("search")["_meta"][PROOF_KEY] = {"type": "something else"}
    search = gateway.check()[0]
    assert (search.verdict, search.failure) == (None, ErrorCode.MALFORMED_MAP_PROOF)


@pytest.mark.parametrize("member", ["checkpoint", "tool_id", "record"])
def test_a_lone_surrogate_in_a_proof_fails_malformed(gateway: Gateway, member: str) -> None:
    """JSON can escape what UTF-8 cannot carry (``"\\ud800"``): refused, never raised."""
    gateway.tool("search")["_meta"][PROOF_KEY][member] = "\ud800"
    search = gateway.check()[0]
    assert (search.verdict, search.failure) == (None, ErrorCode.MALFORMED_MAP_PROOF)


def test_a_checkpoint_signed_by_another_log_fails_every_tool(gateway: Gateway) -> None:
    stranger = Signer.generate(gateway.log_key.name)

    def verify(note: bytes) -> Checkpoint:
        return open_checkpoint(note, stranger.verifier())[0]

    tools = verify_listing(gateway.listing, verify, datetime.now(UTC))
    assert [t.verdict for t in tools] == [None, None]
    assert {t.failure for t in tools} == {tools[0].failure} and tools[0].failure is not None


def test_a_checkpoint_refused_as_stale_makes_its_tools_stale(gateway: Gateway) -> None:
    def too_old(note: bytes) -> Checkpoint:
        raise PolicyError(ErrorCode.STALE_CHECKPOINT, "too old")

    tools = verify_listing(gateway.listing, too_old, datetime.now(UTC))
    assert verdicts_of(tools) == {
        "search": (Verdict.STALE, "checkpoint_stale"),
        "fresh": (Verdict.STALE, "checkpoint_stale"),
    }


def test_a_result_without_a_tool_list_has_no_tools(gateway: Gateway) -> None:
    assert verify_listing({"tools": "none"}, gateway.verify, datetime.now(UTC)) == []


def test_a_proven_tool_is_a_guard_decision_at_its_checkpoint(gateway: Gateway) -> None:
    [search, _] = gateway.check()
    verified_at = datetime.now(UTC)
    decision = search.decision(verified_at)
    assert (decision.verdict, decision.reason, decision.status) == (
        Verdict.WARN,
        "deprecated",
        search.status,
    )
    assert decision.processed_through is not None
    assert decision.processed_through.checkpoint == gateway.note.decode()
    assert (decision.processed_through.size, decision.processed_through.verified_at) == (
        gateway.verify(gateway.note).size,
        verified_at,
    )


def test_a_failed_tool_is_an_unknown_decision_named_by_its_code(gateway: Gateway) -> None:
    gateway.tool("fresh")["_meta"][PROOF_KEY]["tool_id"] = SEARCH
    decision = gateway.check()[1].decision(datetime.now(UTC))
    assert (decision.verdict, decision.reason, decision.processed_through) == (
        Verdict.UNKNOWN,
        "bad_map_proof",
        None,
    )


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["\ud800", "ok\udfff"]),  # JSON escapes UTF-8 cannot carry
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=json_values, key=st.sampled_from(["type", "checkpoint", "tool_id", "path", "x"]))
def test_any_value_as_a_proof_or_in_one_is_refused_never_raised(
    gateway: Gateway, value: Any, key: str
) -> None:
    listing = copy.deepcopy(gateway.listing)
    fresh = next(t for t in listing["tools"] if t["name"] == "fresh")
    proof = copy.deepcopy(fresh["_meta"][PROOF_KEY])
    proof[key] = value
    for bad in (value, proof):
        fresh["_meta"][PROOF_KEY] = bad
        [_, checked] = verify_listing(listing, gateway.verify, datetime.now(UTC))
        assert checked.verdict is None or checked.verdict == Verdict.SERVE
        assert (checked.verdict is None) == (checked.failure is not None)


# -- deplog audit tools ----------------------------------------------------------------------

Audited = Callable[..., tuple[int, str, str]]


@pytest.fixture
def audited(gateway: Gateway, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Audited:
    """``deplog audit tools [--log-key KEY] FLAGS... LISTING`` over the gateway's listing as
    it stands when called (or ``listing``): exit status, stdout, stderr."""

    def run(*flags: str | Path, listing: Path | str | None = None, log_key: bool = True) -> Any:
        if listing is None:
            listing = tmp_path / "listing.json"
            listing.write_text(json.dumps(gateway.listing))
        trust = ["--log-key", gateway.log_key.verifier().vkey()] if log_key else []
        status = main(["audit", "tools", *trust, *map(str, flags), str(listing)])
        out, err = capsys.readouterr()
        return status, out, err

    return run


def test_audit_tools_proves_a_gateways_listing(audited: Audited) -> None:
    status, out, err = audited()
    lines = out.splitlines()
    assert (status, err) == (0, "")
    assert lines[0] == (
        "ok: 2 deplog tools proven servable (1 deprecated); 1 listed tool without a deplog identity"
    )
    assert lines[1].startswith(f"  serve_with_warning search: {SEARCH} 1.0.0: deprecated")
    assert lines[2] == f"  serve fresh: {FRESH} 1.0.0: active"
    assert lines[3].startswith("  at ") and " by the map " in lines[3]


def test_audit_tools_json_names_every_tool_and_the_checkpoint(
    audited: Audited, gateway: Gateway
) -> None:
    status, out, _ = audited("--json")
    shape = json.loads(out)
    checkpoint = gateway.verify(gateway.note)
    assert (status, shape["ok"], shape["without_identity"]) == (0, True, 1)
    assert [(t["name"], t["verdict"], t["reason"]) for t in shape["tools"]] == [
        ("search", "serve_with_warning", "deprecated"),
        ("fresh", "serve", "active"),
    ]
    assert shape["tools"][0]["checkpoint_size"] == checkpoint.size
    [proven_at] = shape["checkpoints"]
    assert proven_at["size"] == checkpoint.size
    assert f"deplog-map/v1 {proven_at['map_root']}" in checkpoint.extensions


def test_audit_tools_reads_a_json_rpc_response(
    audited: Audited, gateway: Gateway, tmp_path: Path
) -> None:
    response = tmp_path / "response.json"
    response.write_text(json.dumps({"jsonrpc": "2.0", "id": 7, "result": gateway.listing}))
    assert audited(listing=response)[0] == 0


def test_audit_tools_reads_a_listing_in_pages(
    audited: Audited, gateway: Gateway, tmp_path: Path
) -> None:
    tools = gateway.listing["tools"]
    pages = [tmp_path / "page1.json", tmp_path / "page2.json"]
    pages[0].write_text(json.dumps({"tools": tools[:1], "nextCursor": "2"}))
    pages[1].write_text(json.dumps({"jsonrpc": "2.0", "id": 2, "result": {"tools": tools[1:]}}))
    status, out, _ = audited("--json", pages[0], listing=pages[1])
    shape = json.loads(out)
    assert status == 0
    assert [t["name"] for t in shape["tools"]] == ["search", "fresh"]
    assert (shape["without_identity"], len(shape["checkpoints"])) == (1, 1)


def test_audit_tools_takes_standard_input_once(audited: Audited) -> None:
    status, out, err = audited("-", listing="-")
    assert (status, out) == (2, "")
    assert "standard input (-) can be given once" in err


def test_audit_tools_reads_standard_input(
    audited: Audited, gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(json.dumps(gateway.listing).encode()))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert audited(listing="-")[0] == 0


def test_audit_tools_exits_refuse_for_a_listed_revoked_tool(
    audited: Audited, gateway: Gateway
) -> None:
    gone = listed("gone", GONE)
    gone["_meta"][PROOF_KEY] = gateway.proof_of(GONE)
    gateway.listing["tools"].append(gone)
    status, out, _ = audited()
    assert status == 5
    assert out.splitlines()[0] == (
        "refused: 1 of 3 deplog tools proven refused, yet listed (a guarding gateway drops "
        "them); 1 listed tool without a deplog identity"
    )
    assert f"  refuse gone: {GONE} 1.0.0: revoked" in out


def test_audit_tools_exits_unknown_for_a_tool_without_a_proof(
    audited: Audited, gateway: Gateway
) -> None:
    del gateway.tool("fresh")["_meta"][PROOF_KEY]
    status, out, _ = audited()
    assert status == 7
    assert out.splitlines()[0].startswith("not proven: 1 of 2 deplog tools with no proof")
    assert f"  unknown fresh: {FRESH} 1.0.0: no_proof" in out


def test_audit_tools_fails_on_a_tampered_proof_whatever_else_it_finds(
    audited: Audited, gateway: Gateway
) -> None:
    del gateway.tool("search")["_meta"][PROOF_KEY]  # unknown (7) loses to a failure (1)
    gateway.tool("fresh")["_meta"][PROOF_KEY]["tool_id"] = SEARCH
    status, out, _ = audited()
    assert status == 1
    assert out.startswith("failed: 1 of 2 deplog tools with a proof that does not verify;")
    assert f"  failed fresh: {FRESH} 1.0.0: bad_map_proof" in out


def test_audit_tools_fails_under_another_log_key(audited: Audited, gateway: Gateway) -> None:
    stranger = Signer.generate(gateway.log_key.name).verifier().vkey()
    status, out, _ = audited("--log-key", stranger, log_key=False)
    assert status == 1
    assert out.startswith("failed: 2 of 2 deplog tools with a proof that does not verify;")
    assert f"  failed fresh: {FRESH} 1.0.0: unverified_note" in out


def test_audit_tools_with_another_checkpoint_given_fails_mismatch(
    audited: Audited, gateway: Gateway, local: LocalLog, trusted: TrustedState, tmp_path: Path
) -> None:
    local.publish(tool=FRESH)  # the log moves on; the listing's proofs stay at the old size
    newer = tmp_path / "newer"
    assert local.log.published is not None
    newer.write_bytes(local.log.published.note)
    status, out, _ = audited("--checkpoint", newer)
    assert status == 1
    assert "map_checkpoint_mismatch" in out


def test_audit_tools_with_the_proofs_checkpoint_given_passes(
    audited: Audited, gateway: Gateway, tmp_path: Path
) -> None:
    given_note = tmp_path / "checkpoint"
    given_note.write_bytes(gateway.note)
    assert audited("--checkpoint", given_note)[0] == 0


def witnessed(gateway: Gateway, tmp_path: Path, at: int) -> Path:
    """The listing with every proof's checkpoint cosigned by witness ``w`` at ``at``, and a
    policy requiring ``w`` written beside it; returns the policy."""
    witness = cosigner(Signer.generate("w.witness.example"))
    cosigned = add_signature_lines(
        gateway.note, cosign(parse_note(gateway.note)[0], witness, at)
    ).decode()
    for tool in gateway.listing["tools"]:
        if PROOF_KEY in tool.get("_meta", {}):
            tool["_meta"][PROOF_KEY]["checkpoint"] = cosigned
    policy = tmp_path / "policy"
    policy.write_text(
        f"log {gateway.log_key.verifier().vkey()}\n"
        f"witness w {witness.verifier().vkey()}\nquorum w\n"
    )
    return policy


@pytest.mark.parametrize(
    ("cosigned_ago", "exit_status", "said"),
    [
        (10, 0, "; quorum met at "),
        (600, 6, "stale: 2 of 2 deplog tools proven at a checkpoint older than --max-age"),
    ],
)
def test_audit_tools_under_a_policy_is_fresh_or_stale_by_the_quorums_time(
    audited: Audited,
    gateway: Gateway,
    tmp_path: Path,
    cosigned_ago: int,
    exit_status: int,
    said: str,
) -> None:
    policy = witnessed(gateway, tmp_path, int(datetime.now(UTC).timestamp()) - cosigned_ago)
    status, out, _ = audited("--policy", policy, "--max-age", "60", log_key=False)
    assert (status, said in out) == (exit_status, True)


def test_audit_tools_max_age_without_a_policy_is_a_usage_error(audited: Audited) -> None:
    status, out, err = audited("--max-age", "60")
    assert (status, out) == (2, "")
    assert "--max-age needs --policy" in err


@pytest.mark.parametrize(
    "content", [b"not json", b"\xff\xfe", b"[1, 2]", b'{"tools": 3}', b"[" * 100_000]
)
def test_audit_tools_refuses_what_is_no_listing_in_one_line(
    audited: Audited, tmp_path: Path, content: bytes
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    status, out, err = audited(listing=bad)
    assert (status, out) == (1, "")
    assert err.splitlines() == ["deplog audit tools: malformed_json: not a tools/list result"]


def test_audit_tools_names_a_missing_file(audited: Audited, tmp_path: Path) -> None:
    status, out, err = audited(listing=tmp_path / "nowhere.json")
    assert (status, out) == (2, "")
    assert len(err.splitlines()) == 1 and "nowhere.json" in err


def test_audit_tools_escapes_a_hostile_name_into_one_line(
    audited: Audited, gateway: Gateway
) -> None:
    fresh = gateway.tool("fresh")
    del fresh["_meta"][PROOF_KEY]
    fresh["name"] = "fresh\n  serve evil: forged" + "x" * 500
    status, out, _ = audited()
    [line] = [line for line in out.splitlines() if "fresh" in line]
    assert status == 7
    assert line.startswith("  unknown fresh\\x0a  serve evil: forged")
    assert line.endswith(f"...: {FRESH} 1.0.0: no_proof")
    assert not any(line.startswith("  serve evil") for line in out.splitlines())


def test_audit_tools_over_a_listing_of_no_deplog_tool_says_so(
    audited: Audited, tmp_path: Path
) -> None:
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"tools": [listed("plain", None), listed("other", None)]}))
    status, out, _ = audited(listing=plain)
    assert (status, out) == (
        0,
        "ok: no deplog tool listed; 2 listed tools without a deplog identity\n",
    )


def test_audit_tools_under_a_checkpoint_without_a_map_line_fails_its_tools(
    audited: Audited, gateway: Gateway, tmp_path: Path
) -> None:
    """A log that signs no ``deplog-map/v1`` line proves no status: every proof made at it
    fails (``missing_map_line``), and the report still prints."""
    text, _ = parse_note(gateway.note)
    body = Checkpoint.from_text(text)
    bare = Checkpoint(body.origin, body.size, body.root_hash, ())
    note = sign_checkpoint(bare, gateway.log_key).decode()
    for tool in gateway.listing["tools"]:
        if PROOF_KEY in tool.get("_meta", {}):
            tool["_meta"][PROOF_KEY]["checkpoint"] = note
    status, out, _ = audited()
    assert status == 1
    assert f"  failed fresh: {FRESH} 1.0.0: missing_map_line" in out
    assert ", by no map (no valid deplog-map/v1 line) of " in out
