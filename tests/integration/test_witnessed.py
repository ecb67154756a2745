"""An authority with three external witnesses, and clients that enforce a witness policy."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest

from deplog.authority.log import Log
from deplog.client.cache.guard import Guard, Verdict
from deplog.client.follow.follower import Follower
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.cosignature import cosignatures
from deplog.client.tlog.note import Signer, Verifier
from deplog.client.tlog.policy import Policy, PolicyError
from deplog.client.tlog.receipt import Receipt, verify_receipt
from tests.builders import make_envelope, notice_leaf, register
from tests.integration.harness import AuthorityProcess, WitnessProcess

pytestmark = pytest.mark.slow  # real authority and witness processes

JSON = {"Content-Type": "application/json"}
REFRESH = "0.3"  # seconds between re-cosignings, so freshness moves within a test
TOOL = "tool:org.acme/search"


@pytest.fixture
def witnesses(tmp_path: Path, authority_files: AuthorityProcess) -> Iterator[list[WitnessProcess]]:
    """Three running witnesses that trust the authority's log key."""
    started = []
    for n in range(3):
        witness = WitnessProcess(tmp_path / f"witness{n}", name=f"witness.test/w{n}")
        witness.init()
        vkey = authority_files.log_verifier.vkey()
        assert (
            witness.cli("add-log", "--origin", authority_files.log_verifier.name, "--key", vkey)
            == 0
        )
        witness.start()
        started.append(witness)
    yield started
    for witness in started:
        witness.stop()


def configure(authority: AuthorityProcess, witnesses: list[WitnessProcess]) -> None:
    for witness in witnesses:
        authority.add_witness(witness.url, witness.verifier)


@pytest.fixture
def witnessed(
    authority_files: AuthorityProcess, witnesses: list[WitnessProcess]
) -> Iterator[AuthorityProcess]:
    configure(authority_files, witnesses)
    authority_files.extra_args = ["--witness-refresh", REFRESH]
    authority_files.start()
    yield authority_files
    authority_files.stop()


@pytest.fixture
def policy_2_of_3(authority_files: AuthorityProcess, witnesses: list[WitnessProcess]) -> Policy:
    return Policy.k_of_n(authority_files.log_verifier, [w.verifier for w in witnesses], 2)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


async def served_note(http: aiohttp.ClientSession, authority: AuthorityProcess) -> bytes:
    async with http.get(authority.url + "/checkpoint") as response:
        return await response.read()


async def served_size(http: aiohttp.ClientSession, authority: AuthorityProcess) -> int:
    checkpoint, _ = open_checkpoint(await served_note(http, authority), authority.log_verifier)
    return checkpoint.size


async def eventually(condition: Callable[[], object], timeout: float = 10.0) -> None:
    """Poll an async or sync condition until it is truthy, failing after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def cosigners(note: bytes, witnesses: list[Verifier]) -> set[str]:
    return {c.name for c in cosignatures(note, witnesses)}


@pytest.mark.both_backends
async def test_served_checkpoints_carry_every_witness_cosignature(
    witnessed: AuthorityProcess,
    witnesses: list[WitnessProcess],
    publisher: Signer,
    http: aiohttp.ClientSession,
) -> None:
    body = make_envelope(publisher, 1).canonical_bytes()
    async with http.post(witnessed.url + "/v1/notices", data=body, headers=JSON) as response:
        assert response.status == 201
    keys = [w.verifier for w in witnesses]

    async def all_three() -> bool:
        note = await served_note(http, witnessed)
        checkpoint, _ = open_checkpoint(note, witnessed.log_verifier)
        return checkpoint.size == 2 and cosigners(note, keys) == {v.name for v in keys}

    await eventually(all_three)


async def test_receipts_carry_the_embedded_witness_cosignature(
    witnessed: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    envelope = make_envelope(publisher, 1)
    async with http.post(
        witnessed.url + "/v1/notices", data=envelope.canonical_bytes(), headers=JSON
    ) as response:
        receipt = Receipt.parse(await response.read())
    verify_receipt(receipt, notice_leaf(envelope), witnessed.log_verifier)
    embedded = Verifier.parse_cosigner(
        (witnessed.keys / "test.deplog.example_log-witness.pub").read_text().strip()
    )
    policy = Policy.k_of_n(witnessed.log_verifier, [embedded], 1)
    verified = policy.verify(receipt.checkpoint, now=time.time(), max_age=60)
    assert verified.checkpoint.size == receipt.index + 1


async def test_a_2_of_3_client_goes_stale_without_two_witnesses_and_recovers(
    witnessed: AuthorityProcess,
    witnesses: list[WitnessProcess],
    policy_2_of_3: Policy,
    tmp_path: Path,
) -> None:
    freshness = timedelta(seconds=3)
    async with Follower(witnessed.url, policy_2_of_3, tmp_path / "state.db") as follower:
        guard = Guard(follower.state, freshness=freshness)

        async def verdict() -> Verdict:
            await follower.sync()
            return guard.check(TOOL, "1.0.0", cached_at=datetime.now(UTC)).verdict

        await eventually(lambda: verdict())
        assert await verdict() == Verdict.SERVE
        ports = [w.port for w in witnesses[:2]]
        for witness in witnesses[:2]:
            witness.stop()
        await eventually(lambda: _is(verdict(), Verdict.STALE), timeout=15)
        for witness, port in zip(witnesses[:2], ports, strict=True):
            witness.start(port)
        await eventually(lambda: _is(verdict(), Verdict.SERVE), timeout=15)


async def _is(verdict: object, expected: Verdict) -> bool:
    assert asyncio.iscoroutine(verdict)
    return bool(await verdict == expected)


async def test_a_policy_quorum_the_log_cannot_meet_is_refused(
    witnessed: AuthorityProcess, tmp_path: Path
) -> None:
    strangers = [
        Signer.generate(f"stranger.test/w{n}").with_sig_type(0x04).verifier() for n in range(2)
    ]
    policy = Policy.k_of_n(witnessed.log_verifier, strangers, 1)
    async with Follower(witnessed.url, policy, tmp_path / "state.db") as follower:
        with pytest.raises(PolicyError) as refused:
            await follower.sync()
        assert refused.value.code == "quorum_not_met"
        assert follower.state.trusted is None


@pytest.mark.both_backends
async def test_publication_quorum_withholds_receipts_until_witnesses_cosign(
    authority_files: AuthorityProcess,
    witnesses: list[WitnessProcess],
    publisher: Signer,
    http: aiohttp.ClientSession,
) -> None:
    configure(authority_files, witnesses)
    ports = [w.port for w in witnesses[:2]]
    for witness in witnesses[:2]:
        witness.stop()
    authority_files.extra_args = ["--publication-quorum", "2", "--witness-timeout", "1"]
    authority_files.start()
    try:
        before = await served_size(http, authority_files)
        body = make_envelope(publisher, 1).canonical_bytes()
        async with http.post(
            authority_files.url + "/v1/notices", data=body, headers=JSON
        ) as response:
            assert response.status == 503
            assert await response.json() == {"error": "witness_quorum_unavailable"}
        assert await served_size(http, authority_files) == before  # withheld
        for witness, port in zip(witnesses[:2], ports, strict=True):
            witness.start(port)
        async with http.post(
            authority_files.url + "/v1/notices", data=body, headers=JSON
        ) as response:
            assert response.status == 200  # it was logged; now it is published too
            receipt = Receipt.parse(await response.read())
        keys = [w.verifier for w in witnesses]
        assert len(cosigners(receipt.checkpoint, keys)) >= 2
    finally:
        authority_files.stop()


async def test_a_missed_quorum_is_degraded_health_until_the_refresh_loop_publishes(
    authority_files: AuthorityProcess,
    witnesses: list[WitnessProcess],
    publisher: Signer,
    http: aiohttp.ClientSession,
) -> None:
    configure(authority_files, witnesses)
    ports = [w.port for w in witnesses[:2]]
    for witness in witnesses[:2]:
        witness.stop()
    authority_files.extra_args = [
        *("--publication-quorum", "2", "--witness-timeout", "1", "--witness-refresh", REFRESH)
    ]
    authority_files.start()
    try:
        url = authority_files.url
        before = await served_size(http, authority_files)
        body = make_envelope(publisher, 1).canonical_bytes()
        async with http.post(url + "/v1/notices", data=body, headers=JSON) as response:
            assert response.status == 503
        async with http.get(url + "/healthz") as response:
            assert response.status == 503
            assert (await response.json())["reasons"] == ["witness_quorum_unavailable"]
        for witness, port in zip(witnesses[:2], ports, strict=True):
            witness.start(port)

        async def healthy() -> bool:
            async with http.get(url + "/healthz") as response:
                return response.status == 200

        await eventually(healthy, timeout=15)  # no append needed: the refresh loop publishes
        assert await served_size(http, authority_files) == before + 1
    finally:
        authority_files.stop()


async def test_metrics_show_each_witness_lag(
    witnessed: AuthorityProcess, witnesses: list[WitnessProcess], http: aiohttp.ClientSession
) -> None:
    async def all_listed() -> bool:
        async with http.get(witnessed.url + "/metrics") as response:
            text = await response.text()
        return all(
            f'deplog_witness_lag_entries{{witness="{w.name}"}} 0.0' in text for w in witnesses
        )

    await eventually(all_listed)


async def test_a_second_authority_with_the_same_key_is_refused_as_a_fork(
    witnesses: list[WitnessProcess],
    authority_files: AuthorityProcess,
    tmp_path: Path,
    publisher: Signer,
    http: aiohttp.ClientSession,
) -> None:
    """Two logs signed by one key: the witness cosigns one history and refuses the other."""
    from deplog.client.tlog.keyfile import load_signer

    signer = load_signer(authority_files.keys, "test.deplog.example_log")
    honest = Log(tmp_path / "honest.db", signer, signer.name)
    forked = Log(tmp_path / "forked.db", signer, signer.name)
    for log, namespace in ((honest, "org.acme"), (forked, "org.evil")):
        register(log, publisher, namespace)
        log.publish()
    witness = witnesses[0]

    async def add(log: Log, old: int) -> tuple[int, str]:
        assert log.published is not None
        proof = (
            []
            if old in (0, log.published.size)
            else log.tree.consistency_proof(old, log.published.size)
        )
        from deplog.authority.witnessing import request_body

        async with http.post(
            witness.url + "/add-checkpoint", data=request_body(old, proof, log.published.note)
        ) as response:
            return response.status, await response.text()

    assert (await add(honest, 0))[0] == 200
    assert (await add(forked, 1))[0] == 409  # same size, another root
    forked.sequence([make_envelope(publisher, 1, tool="tool:org.evil/x")])
    assert (await add(forked, 1))[0] == 422  # its proof cannot start from the honest tree
    honest.sequence([make_envelope(publisher, 1)])
    assert (await add(honest, 1))[0] == 200  # the witness still follows the honest log
