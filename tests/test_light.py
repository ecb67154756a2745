"""The light verifier, rule by rule, against a real authority app on 127.0.0.1: its
verdicts are the guard's, from one checkpoint and per-tool map proofs only."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deplog.authority.http.server import COMPRESS_ABOVE
from deplog.client.cache.guard import Guard, Verdict
from deplog.client.cli.main import main
from deplog.client.follow.follower import Follower
from deplog.client.follow.http import HttpLogSource
from deplog.client.follow.light import LightVerifier
from deplog.client.follow.tiles import TilesLogSource
from deplog.client.follow.trust import ForkError, RollbackError, SuspectedForkError
from deplog.client.model.notice import Envelope, Notice
from deplog.client.tlog.cosignature import cosign, cosigner
from deplog.client.tlog.note import Signer, add_signature_lines, parse_note
from deplog.client.tlog.policy import Policy
from deplog.client.tlog.proofs import ConsistencyProof
from tests.builders import ORIGIN, Clock, LocalLog, make_envelope, notices, serving_log

JSON = {"Content-Type": "application/json"}
SEARCH = "tool:org.acme/search"
GONE = "tool:org.acme/gone"
NEVER = "tool:org.acme/never"


@dataclass
class Served:
    """A real authority app, its URL, and a way to publish to it."""

    url: str
    log: Any
    sequence: int = 0
    sources: list[HttpLogSource] = field(default_factory=list)

    def source(self, kind: type[HttpLogSource] = HttpLogSource) -> HttpLogSource:
        """A source over the app's API (``kind``: a lying one), closed after the test."""
        self.sources.append(kind(self.url))
        return self.sources[-1]

    async def post(self, tool: str = SEARCH, **fields: Any) -> int:
        """Publish one notice by ``acme``; the HTTP status."""
        self.sequence += 1
        envelope = make_envelope(self.log.publisher, self.sequence, tool=tool, **fields)
        return await self.post_envelope(envelope)

    async def post_envelope(self, envelope: Envelope) -> int:
        response = await self.log.client.post(
            "/v1/notices", data=envelope.canonical_bytes(), headers=JSON
        )
        await response.read()
        return int(response.status)

    def light(self, kind: type[HttpLogSource] = HttpLogSource, **kwargs: Any) -> LightVerifier:
        return LightVerifier(self.source(kind), self.log.log_key.verifier(), **kwargs)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async with serving_log(tmp_path, ORIGIN) as log:
        served = Served(str(log.client.make_url("")).rstrip("/"), log)
        yield served
        for source in served.sources:
            await source.close()


def now() -> datetime:
    return datetime.now(UTC)


async def test_a_light_verifier_decides_from_one_checkpoint_and_the_tools_proofs(
    served: Served,
) -> None:
    await served.post(SEARCH)
    await served.post(GONE, action="revoke", reasons=["security"], advisories=["CVE-2026-1234"])
    light = served.light()
    await light.refresh()
    await light.prepare([SEARCH, GONE, NEVER])
    verdicts = {t: light.check(t, "1.0.0", cached_at=now()) for t in (SEARCH, GONE, NEVER)}
    assert {t: (d.verdict, d.reason) for t, d in verdicts.items()} == {
        SEARCH: (Verdict.WARN, "deprecated"),
        GONE: (Verdict.REFUSE, "revoked"),
        NEVER: (Verdict.SERVE, "active"),
    }
    through = verdicts[SEARCH].processed_through
    assert through is not None and through.size == 3


async def test_a_decision_on_the_log_key_alone_carries_the_log_signed_guarantee(
    served: Served,
) -> None:
    light = served.light()
    await light.refresh()
    await light.prepare([SEARCH])
    assert light.check(SEARCH, "1.0.0", cached_at=now()).guarantee == "log_signed"


async def test_nothing_verified_yet_is_unknown_not_synced(served: Served) -> None:
    decision = served.light().check(SEARCH, "1.0.0", cached_at=now())
    assert (decision.verdict, decision.reason) == (Verdict.UNKNOWN, "not_synced")


async def test_preparing_with_nothing_verified_verifies_the_sources_checkpoint_first(
    served: Served,
) -> None:
    light = served.light()
    await light.prepare([SEARCH])
    assert light.check(SEARCH, "1.0.0", cached_at=now()).verdict == Verdict.SERVE


async def test_a_pushed_checkpoint_refreshes_the_verifier_without_waiting_for_a_poll(
    served: Served,
) -> None:
    light = served.light()
    stop = asyncio.Event()
    running = asyncio.create_task(light.run(interval=3600, stop=stop))
    try:
        async with asyncio.timeout(10):
            while light.trusted is None:
                await asyncio.sleep(0.01)
            while light.trusted.size < 2:  # a post before the stream is open goes unseen
                await served.post(SEARCH)
                await asyncio.sleep(0.5)
    finally:
        stop.set()
        await running


async def test_an_unexpected_failure_of_a_refresh_is_counted_and_the_loop_goes_on(
    served: Served,
) -> None:
    light = served.light()
    real = light.source.checkpoint
    calls = 0

    async def failing_once() -> bytes:  # a fault injected into the real source, once
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("injected")
        return await real()

    light.source.checkpoint = failing_once  # type: ignore[method-assign]
    stop = asyncio.Event()
    running = asyncio.create_task(light.run(interval=0.05, stop=stop))
    try:
        async with asyncio.timeout(10):
            while light.trusted is None:
                await asyncio.sleep(0.01)
    finally:
        stop.set()
        await running
    assert light.failures == {"refresh: RuntimeError": 1}


async def test_a_tool_never_prepared_is_unknown_not_synced(served: Served) -> None:
    light = served.light()
    await light.refresh()
    decision = light.check(SEARCH, "1.0.0", cached_at=now())
    assert (decision.verdict, decision.reason) == (Verdict.UNKNOWN, "not_synced")


async def test_a_checkpoint_older_than_the_freshness_bound_makes_the_verdict_stale(
    served: Served,
) -> None:
    clock = Clock()
    light = served.light(clock=clock, freshness=timedelta(seconds=60))
    await light.refresh()
    await light.prepare([SEARCH])
    clock.now += 61
    decision = light.check(SEARCH, "1.0.0", cached_at=now())
    assert (decision.verdict, decision.reason) == (Verdict.STALE, "checkpoint_stale")


async def test_a_copy_fetched_before_the_notice_was_verified_is_stale(served: Served) -> None:
    light = served.light()
    await light.refresh()
    before = now() - timedelta(seconds=1)
    await served.post(SEARCH)
    await light.refresh()
    await light.prepare([SEARCH])
    decision = light.check(SEARCH, "1.0.0", cached_at=before)
    assert (decision.verdict, decision.reason) == (Verdict.STALE, "cache_predates_notice")


async def test_a_proof_made_at_a_newer_checkpoint_moves_the_verifier_there_first(
    served: Served,
) -> None:
    light = served.light()
    await light.refresh()
    await served.post(SEARCH)
    await light.prepare([SEARCH])
    assert light.trusted is not None and light.trusted.size == 2
    assert light.check(SEARCH, "1.0.0", cached_at=now()).verdict == Verdict.WARN


async def test_proofs_are_kept_until_the_checkpoint_moves(served: Served) -> None:
    source = served.source()
    light = LightVerifier(source, served.log.log_key.verifier())
    await light.refresh()
    await light.prepare([SEARCH])
    asked = source.requests
    await light.prepare([SEARCH])
    assert source.requests == asked
    await served.post(SEARCH)
    assert await light.refresh()
    await light.prepare([SEARCH])
    assert source.requests == asked + 3  # checkpoint, consistency proof, the proof again


async def proof_answer(served: Served, tool: str, encoding: str) -> tuple[Any, bytes]:
    """The headers and decoded body of ``tool``'s binary map proof, asked with ``encoding``."""
    path = f"/v1/tools/{tool}/proof?format=binary"
    response = await served.log.client.get(path, headers={"Accept-Encoding": encoding})
    return response.headers, await response.read()


async def test_a_map_proof_over_512_bytes_travels_compressed_and_decodes_to_the_same_bytes(
    served: Served,
) -> None:
    for minor in range(20):
        assert await served.post(SEARCH, affected={"versions": [f"1.{minor}.0"]}) == 201
    plain_headers, plain = await proof_answer(served, SEARCH, "identity")
    headers, body = await proof_answer(served, SEARCH, "gzip, deflate")
    assert len(plain) > COMPRESS_ABOVE and "Content-Encoding" not in plain_headers
    assert headers["Content-Encoding"] in ("gzip", "deflate") and body == plain
    assert int(headers["Content-Length"]) < len(plain) and headers["Vary"] == "Accept-Encoding"


async def test_a_map_proof_of_512_bytes_or_less_travels_as_is(served: Served) -> None:
    await served.post(SEARCH)
    headers, body = await proof_answer(served, SEARCH, "gzip, deflate")
    assert len(body) <= COMPRESS_ABOVE and "Content-Encoding" not in headers


class LyingProofs(HttpLogSource):
    """The authority's API with the last byte of every map proof (a sibling) changed."""

    async def map_proof(self, tool_id: str) -> tuple[int, bytes]:
        size, proof = await super().map_proof(tool_id)
        return size, proof[:-1] + bytes([proof[-1] ^ 1])


async def test_a_proof_that_does_not_verify_makes_the_tool_unknown_with_its_code(
    served: Served,
) -> None:
    await served.post(SEARCH)
    await served.post(GONE)  # two tools: the proof has a sibling
    light = served.light(LyingProofs)
    await light.refresh()
    trusted = light.trusted
    await light.prepare([SEARCH])
    decision = light.check(SEARCH, "1.0.0", cached_at=now())
    assert (decision.verdict, decision.reason) == (Verdict.UNKNOWN, "bad_map_proof")
    assert light.trusted is trusted


class LyingConsistency(HttpLogSource):
    """The authority's API with every consistency proof's first hash changed."""

    async def consistency(self, old: int, new: int) -> ConsistencyProof:
        proof = await super().consistency(old, new)
        return ConsistencyProof(old, new, (bytes(32), *proof.hashes[1:]))


async def test_a_failing_consistency_proof_is_a_suspicion_that_changes_nothing(
    served: Served, tmp_path: Path
) -> None:
    light = served.light(LyingConsistency, evidence_dir=tmp_path)
    await light.refresh()
    trusted = light.trusted
    for _ in range(3):
        await served.post(SEARCH)
    with pytest.raises(SuspectedForkError):
        await light.refresh()
    assert light.trusted is trusted


async def test_a_smaller_checkpoint_is_a_rollback_that_changes_nothing(served: Served) -> None:
    light = served.light()
    await light.refresh()
    older = light.trusted
    assert older is not None
    await served.post(SEARCH)
    await light.refresh()
    trusted = light.trusted
    with pytest.raises(RollbackError):
        await light.refresh(older.note)
    assert light.trusted is trusted


async def test_another_root_at_the_trusted_size_is_a_proven_fork(
    served: Served, tmp_path: Path
) -> None:
    await served.post(SEARCH)
    light = served.light(evidence_dir=tmp_path / "evidence")
    await light.refresh()
    trusted = light.trusted
    (tmp_path / "other").mkdir()
    other = LocalLog(tmp_path / "other", signer=served.log.log_key)  # the same key, other entries
    other.publish(tool="tool:org.acme/other")
    assert other.log.published is not None
    with pytest.raises(ForkError) as refused:
        await light.refresh(other.log.published.note)
    assert refused.value.evidence.exists()
    assert light.trusted is trusted


async def test_the_persisted_note_is_the_trust_floor_after_a_restart(
    served: Served, tmp_path: Path
) -> None:
    path = tmp_path / "light.note"
    light = served.light(state=path)
    await light.refresh()
    older = light.trusted
    assert older is not None
    await served.post(SEARCH)
    await light.refresh()
    restarted = served.light(state=path)
    assert restarted.trusted is not None and restarted.trusted.size == 2
    with pytest.raises(RollbackError):
        await restarted.refresh(older.note)
    assert path.read_bytes() == restarted.trusted.note


WITNESS = cosigner(Signer.generate("w.witness.example"))


def witnessed(note: bytes, at: float) -> bytes:
    """``note`` cosigned by ``WITNESS`` (a full-body Ed25519 cosignature) at ``at``."""
    return add_signature_lines(note, cosign(parse_note(note)[0], WITNESS, int(at)))


def witness_policy(served: Served, *, map_quorum: bool) -> Policy:
    policy = Policy.k_of_n(served.log.log_key.verifier(), [WITNESS.verifier()], 1)
    return dataclasses.replace(policy, map_quorum="+quorum" if map_quorum else None)


async def test_a_same_size_note_with_an_older_quorum_changes_nothing(served: Served) -> None:
    note = await served.source().checkpoint()
    light = LightVerifier(served.source(), witness_policy(served, map_quorum=False))
    await light.refresh(witnessed(note, time.time()))
    trusted = light.trusted
    assert not await light.refresh(witnessed(note, time.time() - 100))
    assert light.trusted is trusted


async def test_a_map_quorum_in_the_policy_gives_the_map_witnessed_guarantee(
    served: Served,
) -> None:
    note = await served.source().checkpoint()
    light = LightVerifier(served.source(), witness_policy(served, map_quorum=True))
    await light.refresh(witnessed(note, time.time()))
    await light.prepare([SEARCH])
    assert light.check(SEARCH, "1.0.0", cached_at=now()).guarantee == "map_witnessed"


def test_a_tiles_source_needs_the_proofs_of_another() -> None:
    key = Signer.generate(ORIGIN).verifier()
    with pytest.raises(ValueError, match="serves no map proofs"):
        LightVerifier(TilesLogSource("http://127.0.0.1:1"), key)


# -- the verdicts are the guard's, for every tool of a random log -------------------------

_TOOLS = tuple(f"tool:org.acme/t{i}" for i in range(4))
_DIGESTS = (None, "sha256:" + "a" * 64)


def _as_acmes(drawn: dict[str, Any], tool: str, sequence: int, indexes: list[int]) -> Notice:
    """A drawn notice made ``acme``'s, about ``tool``, withdrawing an earlier index."""
    fields = dict(drawn, tool_id=tool, publisher="acme", sequence=sequence)
    if drawn["action"] == "withdraw":
        fields["withdraws"] = indexes[drawn["withdraws"] % len(indexes)] if indexes else 0
    return Notice.from_json(fields)


async def _verdicts_agree(directory: Path, drawn: list[tuple[dict[str, Any], int]]) -> None:
    async with serving_log(directory, ORIGIN) as log:
        served = Served(str(log.client.make_url("")).rstrip("/"), log)
        indexes: list[int] = []
        versions = {"1.0.0", "0.0.1"}
        for number, (fields, tool) in enumerate(drawn, start=1):
            notice = _as_acmes(fields, _TOOLS[tool], number, indexes)
            versions.update(fields.get("affected", {}).get("versions", ()))
            if await served.post_envelope(Envelope.sign(notice, log.publisher)) == 201:
                indexes.append(len(indexes) + 1)
        clock = Clock()
        follower = Follower(served.url, log.log_key.verifier(), directory / "state.db")
        async with follower:
            await follower.sync()
            light = served.light(clock=clock)
            await light.refresh()
            assert light.trusted is not None
            assert light.trusted.note == follower.state.trusted.note  # type: ignore[union-attr]
            await light.prepare(_TOOLS)
            await served.sources[0].close()
            guard = Guard(follower.state, clock=clock)
            cached_at = datetime.now(UTC)
            for tool in _TOOLS:
                for version in sorted(versions):
                    for digest in _DIGESTS:
                        full = guard.check(tool, version, cached_at=cached_at, schema_digest=digest)
                        lit = light.check(tool, version, cached_at=cached_at, schema_digest=digest)
                        assert (lit.verdict, lit.reason, lit.status) == (
                            full.verdict,
                            full.reason,
                            full.status,
                        ), (tool, version, digest)


_LOGS = st.lists(st.tuples(notices(), st.integers(0, len(_TOOLS) - 1)), min_size=1, max_size=12)


@pytest.mark.slow  # an authority app per example: about a second each
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=_LOGS)
def test_verdicts_equal_the_full_guards_for_every_tool_of_a_random_log(
    drawn: list[tuple[dict[str, Any], int]],
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_verdicts_agree(Path(directory), drawn))


# -- deplog check --light ---------------------------------------------------------------


async def test_deplog_check_light_answers_without_a_state_file_with_checks_exit_statuses(
    served: Served,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    await served.post(GONE, action="revoke", reasons=["security"], advisories=["CVE-2026-1234"])
    key = served.log.log_key.verifier().vkey()

    async def check(tool: str) -> tuple[int, dict[str, Any]]:
        argv = ["check", tool, "1.0.0", "--light", "--url", served.url, "--log-key", key]
        status = await asyncio.to_thread(main, [*argv, "--json"])
        return status, json.loads(capsys.readouterr().out)

    assert (await check(GONE))[0] == 5
    status, answer = await check(SEARCH)
    assert (status, answer["verdict"], answer["guarantee"]) == (0, "serve", "log_signed")
    assert not list((tmp_path / "cwd").iterdir())


def test_deplog_check_light_without_url_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check", SEARCH, "1.0.0", "--light", "--log-key", "x"]) == 2
    assert "--url" in capsys.readouterr().err
