"""The light verifier against real processes: an authority whose publication quorum is a
map-verifying witness (``witness serve --verify-map``), and a tampering proxy between
them and the verifier that alters proofs, records, map lines, consistency proofs and
checkpoints (rollback, fork, stale). Each is refused with the light state unchanged, in
memory and on disk; and on a random log its verdicts are the full guard's."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deplog.authority.log import Log
from deplog.client.cache.guard import Guard, Verdict
from deplog.client.errors import DeplogError
from deplog.client.follow.follower import Follower
from deplog.client.follow.http import HttpLogSource
from deplog.client.follow.light import LightVerifier
from deplog.client.follow.trust import ForkError, RollbackError, SuspectedForkError
from deplog.client.model.notice import Envelope, Notice
from deplog.client.tlog.keyfile import load_signer
from deplog.client.tlog.policy import Policy, PolicyError
from tests.builders import make_envelope, notices, register
from tests.integration.harness import (
    ORIGIN,
    AuthorityProcess,
    ServiceProcess,
    WitnessProcess,
)

pytestmark = pytest.mark.slow  # an authority, a map-verifying witness and a proxy process

JSON = {"Content-Type": "application/json"}
SEARCH = "tool:org.acme/search"
GONE = "tool:org.acme/gone"
FRESHNESS = timedelta(seconds=4)


@dataclass
class ProxyProcess(ServiceProcess):
    """``tests.integration.tampering_proxy`` in front of ``upstream``."""

    upstream: str = ""

    def command(self) -> list[str]:
        return [sys.executable, "-m", "tests.integration.tampering_proxy", self.upstream]


@dataclass
class Stack:
    authority: AuthorityProcess
    witness: WitnessProcess
    proxy: ProxyProcess
    http: aiohttp.ClientSession
    publisher: Any
    directory: Path
    sequence: int = 0
    sources: list[HttpLogSource] = dataclasses.field(default_factory=list)

    async def post(self, tool: str = SEARCH, **fields: Any) -> None:
        self.sequence += 1
        envelope = make_envelope(self.publisher, self.sequence, tool=tool, **fields)
        await self.post_envelope(envelope)

    async def post_envelope(self, envelope: Envelope) -> int:
        url = self.authority.url + "/v1/notices"
        async with self.http.post(url, data=envelope.canonical_bytes(), headers=JSON) as r:
            return r.status

    async def tamper(self, mode: str, note: bytes = b"") -> None:
        async with self.http.post(f"{self.proxy.url}/_tamper?mode={mode}", data=note) as r:
            assert r.status == 200

    def policy(self, *, map_quorum: bool = True) -> Policy:
        """The log key and the map-verifying witness, a quorum of it (and a map quorum)."""
        policy = Policy.k_of_n(self.authority.log_verifier, [self.witness.verifier], 1)
        return dataclasses.replace(policy, map_quorum="+quorum" if map_quorum else None)

    def light(self, name: str = "light", **kwargs: Any) -> LightVerifier:
        """A light verifier through the proxy, persisting its note in ``name``."""
        kwargs.setdefault("freshness", FRESHNESS)
        trust = kwargs.pop("trust", None) or self.policy()
        self.sources.append(HttpLogSource(self.proxy.url))
        return LightVerifier(
            self.sources[-1],
            trust,
            state=self.directory / name,
            evidence_dir=self.directory / "evidence",
            **kwargs,
        )


@pytest.fixture
def processes(
    authority_files: AuthorityProcess, tmp_path: Path, free_port: int
) -> Iterator[tuple[AuthorityProcess, WitnessProcess, ProxyProcess]]:
    """A map-verifying witness as the authority's publication quorum, re-cosigning each
    second, and the proxy in front of the authority."""
    authority = authority_files
    witness = WitnessProcess(
        tmp_path / "map-witness",
        name="map.witness.test/light",
        extra_args=["--verify-map", f"http://127.0.0.1:{free_port}"],
    )
    witness.init()
    key = authority.log_verifier
    assert witness.cli("add-log", "--origin", key.name, "--key", key.vkey()) == 0
    witness.start()
    authority.add_witness(witness.url, witness.verifier)
    authority.extra_args = ["--publication-quorum", "1", "--witness-refresh", "1"]
    authority.start(free_port)
    proxy = ProxyProcess(tmp_path / "proxy", upstream=authority.url)
    proxy.root.mkdir()
    try:
        proxy.start()
        yield authority, witness, proxy
    finally:
        proxy.stop()
        authority.stop()
        witness.stop()


@pytest.fixture
async def stack(
    processes: tuple[AuthorityProcess, WitnessProcess, ProxyProcess],
    http: aiohttp.ClientSession,
    publisher: Any,
    tmp_path: Path,
) -> AsyncIterator[Stack]:
    authority, witness, proxy = processes
    stack = Stack(authority, witness, proxy, http, publisher, tmp_path)
    await cosigned_by_the_witness(stack)
    yield stack
    for source in stack.sources:
        await source.close()


async def cosigned_by_the_witness(stack: Stack, seconds: float = 30.0) -> None:
    """Wait until the served checkpoint carries the map witness's cosignature: the first
    one, made at start-up, is published before the witness is asked."""
    policy = stack.policy()
    deadline = time.monotonic() + seconds
    while True:
        async with stack.http.get(stack.authority.url + "/checkpoint") as response:
            note = await response.read()
        try:
            policy.verify(note, now=time.time(), max_age=None)
            return
        except PolicyError:
            if time.monotonic() > deadline:
                pytest.fail("the map witness never cosigned the authority's checkpoint")
            await asyncio.sleep(0.1)


async def joined(stack: Stack, light: LightVerifier) -> None:
    await light.refresh()
    await light.prepare([SEARCH, GONE])


def unchanged(light: LightVerifier, before: Any, path: Path) -> None:
    assert light.trusted is before
    assert before is not None and path.read_bytes() == before.note


async def test_an_honest_path_gives_map_witnessed_verdicts(stack: Stack) -> None:
    await stack.post(GONE, action="revoke", reasons=["security"], advisories=["CVE-2026-1234"])
    light = stack.light()
    await joined(stack, light)
    decision = light.check(GONE, "1.0.0", cached_at=datetime.now(UTC))
    assert (decision.verdict, decision.reason) == (Verdict.REFUSE, "revoked")
    assert decision.guarantee == "map_witnessed"


@pytest.mark.parametrize("mode", ["proof", "record"])
async def test_an_altered_map_proof_is_refused_and_changes_nothing(stack: Stack, mode: str) -> None:
    await stack.post(SEARCH)
    await stack.post(GONE)
    light = stack.light()
    await light.refresh()
    before = light.trusted
    await stack.tamper(mode)
    await light.prepare([SEARCH])
    decision = light.check(SEARCH, "1.0.0", cached_at=datetime.now(UTC))
    assert decision.verdict == Verdict.UNKNOWN
    assert decision.reason in ("bad_map_proof", "malformed_map_record")
    unchanged(light, before, stack.directory / "light")


async def test_an_altered_map_line_is_refused_and_changes_nothing(stack: Stack) -> None:
    light = stack.light()
    await joined(stack, light)
    before = light.trusted
    await stack.post(SEARCH)
    await stack.tamper("map_line")
    with pytest.raises(DeplogError):
        await light.refresh()
    unchanged(light, before, stack.directory / "light")


async def test_an_altered_consistency_proof_is_a_suspicion_that_changes_nothing(
    stack: Stack,
) -> None:
    await stack.post(SEARCH)
    light = stack.light()
    await joined(stack, light)
    before = light.trusted
    await stack.post(GONE)
    await stack.post(SEARCH)
    await stack.tamper("consistency")
    with pytest.raises(SuspectedForkError):
        await light.refresh()
    unchanged(light, before, stack.directory / "light")


async def test_a_rolled_back_checkpoint_is_refused_and_changes_nothing(stack: Stack) -> None:
    light = stack.light()
    await light.refresh()
    older = light.trusted
    assert older is not None
    await stack.post(SEARCH)
    await light.refresh()
    before = light.trusted
    await stack.tamper("note", older.note)
    with pytest.raises(RollbackError):
        await light.refresh()
    unchanged(light, before, stack.directory / "light")
    restarted = stack.light()  # the file is the floor
    with pytest.raises(RollbackError):
        await restarted.refresh()


async def test_a_forked_checkpoint_is_proven_fork_evidence_and_changes_nothing(
    stack: Stack,
) -> None:
    await stack.post(SEARCH)
    light = stack.light(trust=stack.authority.log_verifier)  # what the log alone signs
    await light.refresh()
    before = light.trusted
    assert before is not None
    log_key = load_signer(stack.authority.keys, ORIGIN.replace("/", "_"))
    other = Log(stack.directory / "fork.db", log_key, ORIGIN)  # the same key, other entries
    register(other, stack.publisher, "org.acme")
    other.sequence([make_envelope(stack.publisher, 1, tool="tool:org.acme/other")])
    assert other.published is not None and other.published.size == before.size
    await stack.tamper("note", other.published.note)
    with pytest.raises(ForkError) as refused:
        await light.refresh()
    assert refused.value.evidence.exists()
    unchanged(light, before, stack.directory / "light")


async def test_a_stale_checkpoint_is_refused_and_its_verdicts_go_stale(stack: Stack) -> None:
    light = stack.light()
    await joined(stack, light)
    stale = light.trusted
    assert stale is not None
    await asyncio.sleep(2.5)  # the witness re-cosigns each second
    await light.refresh()
    before = light.trusted
    assert before is not None and before.verified_at > stale.verified_at
    await stack.tamper("note", stale.note)
    assert not await light.refresh()
    unchanged(light, before, stack.directory / "light")
    await asyncio.sleep(FRESHNESS.total_seconds())
    assert not await light.refresh()  # still served the old one: nothing moves
    decision = light.check(SEARCH, "1.0.0", cached_at=datetime.now(UTC))
    assert (decision.verdict, decision.reason) == (Verdict.STALE, "checkpoint_stale")


# -- verdicts equal the full guard's, for every tool of a random log ----------------------

_TOOLS = tuple(f"tool:org.acme/r{i}" for i in range(4))


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(drawn=st.lists(st.tuples(notices(), st.sampled_from(_TOOLS)), min_size=1, max_size=10))
async def test_verdicts_equal_the_full_guards_for_every_tool_of_a_random_log(
    stack: Stack, drawn: list[tuple[dict[str, Any], str]]
) -> None:
    versions = {"1.0.0", "0.0.1"}
    for fields, tool in drawn:
        stack.sequence += 1
        notice = dict(fields, tool_id=tool, publisher="acme", sequence=stack.sequence)
        if fields["action"] == "withdraw":
            notice["withdraws"] = fields["withdraws"] % (stack.sequence + 1)
        versions.update(fields.get("affected", {}).get("versions", ()))
        envelope = Envelope.sign(Notice.from_json(notice), stack.publisher)
        await stack.post_envelope(envelope)
    with tempfile.TemporaryDirectory() as directory:
        async with Follower(
            stack.authority.url, stack.authority.log_verifier, Path(directory) / "state.db"
        ) as follower:
            await follower.sync()
            light = stack.light(name=f"{stack.sequence}.note", trust=stack.authority.log_verifier)
            await light.refresh()
            await light.prepare(_TOOLS)
            assert light.trusted is not None and follower.state.trusted is not None
            assert light.trusted.size == follower.state.trusted.size
            clock = light.clock
            guard = Guard(follower.state, freshness=FRESHNESS, clock=clock)
            cached_at = datetime.now(UTC)
            for tool in _TOOLS:
                for version in sorted(versions):
                    for digest in (None, "sha256:" + "a" * 64):
                        full = guard.check(tool, version, cached_at=cached_at, schema_digest=digest)
                        lit = light.check(tool, version, cached_at=cached_at, schema_digest=digest)
                        assert (lit.verdict, lit.reason, lit.status) == (
                            full.verdict,
                            full.reason,
                            full.status,
                        ), (tool, version, digest)
