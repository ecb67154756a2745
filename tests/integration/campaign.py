"""Crash campaigns: real processes SIGKILLed at random moments under load, then checked.

Shared by the short CI tests (tests/integration/test_crash.py) and the long runs
made by hand (bench/soak_crash.py). Every check is an invariant of BRIEF.md
section 6:

* authority: every notice that got a 201 or 200 is in the log exactly once;
  every checkpoint any client received is consistent with the final one; the
  embedded witness's record never goes backwards; every restart succeeds; every
  checkpoint's ``deplog-map/v1`` root is the reference fold of its prefix (a batch
  cut short left no trace in the map, and on SQLite, where batches hold the map's
  rows back, the rows a kill took with it were folded again at the next start:
  ``AuthorityReport.unwritten`` counts the entries each kill left to fold).
* witness: every cosignature it returned is durable (its record after the
  restart is at least that size with that root's successors), and it never
  cosigns anything smaller afterwards.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from deplog.authority.log import Log
from deplog.authority.witness.core import WitnessState
from deplog.authority.witnessing import request_body
from deplog.client.map.line import map_root_of
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.model.entries import NoticeEntry, decode_entry
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import ConsistencyProof, verify_consistency
from tests.builders import admitted, make_envelope, register
from tests.integration.harness import AuthorityProcess, WitnessProcess, embedded_witness_size

JSON = {"Content-Type": "application/json"}


@dataclass
class AuthorityReport:
    """What an authority campaign saw and checked."""

    kills: int = 0
    acknowledged: list[bytes] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    witness_sizes: list[int] = field(default_factory=list)
    logged: int = 0
    unwritten: list[int] = field(default_factory=list)
    """SQLite: the log entries past the map's tables after each kill (``client.map.stored``
    rule *rows held back*: rows held in memory and lost with the process)."""


async def submit_forever(
    http: aiohttp.ClientSession, url: str, signer: Signer, start: int, acked: list[bytes]
) -> None:
    sequence = start
    while True:
        body = make_envelope(signer, sequence).canonical_bytes()
        try:
            async with http.post(url + "/v1/notices", data=body, headers=JSON) as response:
                await response.read()
                if response.status in (200, 201):
                    acked.append(body)
        except (aiohttp.ClientError, TimeoutError):
            return
        sequence += 1


async def _watch(
    http: aiohttp.ClientSession, authority: AuthorityProcess, seen: list[Checkpoint]
) -> None:
    while True:
        try:
            async with http.get(authority.url + "/checkpoint") as response:
                checkpoint, _ = open_checkpoint(await response.read(), authority.log_verifier)
                seen.append(checkpoint)
        except (aiohttp.ClientError, TimeoutError):
            return
        await asyncio.sleep(0.01)


async def authority_campaign(
    authority: AuthorityProcess,
    http: aiohttp.ClientSession,
    signers: list[Signer],
    kills: int,
    rng: random.Random,
) -> AuthorityReport:
    """Kill the authority ``kills`` times under concurrent submissions, then check it all."""
    report = AuthorityReport()
    for kill in range(kills):
        authority.start()
        tasks = [
            asyncio.create_task(
                submit_forever(http, authority.url, s, 1 + kill * 1_000_000, report.acknowledged)
            )
            for s in signers
        ]
        tasks.append(asyncio.create_task(_watch(http, authority, report.checkpoints)))
        await asyncio.sleep(rng.uniform(0.2, 1.0))
        authority.kill()
        report.kills += 1
        for task in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, timeout=30)
        report.witness_sizes.append(embedded_witness_size(authority))
        if authority.db is None:
            report.unwritten.append(_unwritten_map_entries(authority.data / "log.db"))

    authority.start()
    try:
        async with http.get(authority.url + "/checkpoint") as response:
            final, _ = open_checkpoint(await response.read(), authority.log_verifier)
        logged, leaves = [], []
        for start in range(0, final.size, 1000):
            end = min(final.size, start + 1000)
            async with http.get(f"{authority.url}/v1/entries?start={start}&end={end}") as r:
                for leaf in (await r.json())["entries"]:
                    leaves.append(base64.b64decode(leaf))
                    entry = decode_entry(leaves[-1])
                    if isinstance(entry, NoticeEntry):
                        logged.append(entry.envelope.canonical_bytes())
        report.logged = len(logged)
        assert len(logged) == len(set(logged)), "an entry is in the log twice"
        assert set(report.acknowledged) <= set(logged), "an acknowledged notice was lost"
        for seen in {(c.size, c.root_hash): c for c in report.checkpoints}.values():
            url = f"{authority.url}/v1/proofs/consistency?old={seen.size}&new={final.size}"
            async with http.get(url) as response:
                proof = ConsistencyProof.from_json(await response.json())
            verify_consistency(seen.size, final.size, seen.root_hash, final.root_hash, proof.hashes)
        assert report.witness_sizes == sorted(report.witness_sizes), "the witness went back"
        _check_map_roots([*report.checkpoints, final], leaves)
    finally:
        authority.stop()
    return report


def _unwritten_map_entries(path: Path) -> int:
    """Leaves past the map's tables in a killed authority's SQLite file."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        leaves = int(conn.execute("SELECT count(*) FROM leaves").fetchone()[0])
        return leaves - int(conn.execute("SELECT size FROM map_state").fetchone()[0])
    finally:
        conn.close()


def _check_map_roots(checkpoints: list[Checkpoint], leaves: list[bytes]) -> None:
    """Every map root signed before and after the kills is the reference fold of its prefix:
    a batch cut short by SIGKILL left no trace in the map."""
    reference, folded = VerifiableMap(), 0
    for checkpoint in sorted(checkpoints, key=lambda c: c.size):
        reference.fold(admitted(leaves[folded : checkpoint.size], folded))
        folded = checkpoint.size
        committed = map_root_of(checkpoint.extensions)
        assert committed == reference.root(), f"map root at size {checkpoint.size} is wrong"


@dataclass
class WitnessReport:
    """What a witness campaign saw and checked."""

    kills: int = 0
    cosigned: int = 0
    refused_rollbacks: int = 0


async def witness_campaign(
    witness: WitnessProcess, log: Log, publisher: Signer, kills: int, rng: random.Random
) -> WitnessReport:
    """Grow ``log`` and submit each checkpoint while killing the witness at random moments."""
    # No keep-alive: a connection must not outlive the process it was made to.
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as http:
        return await _witness_campaign(witness, log, publisher, kills, rng, http)


async def _witness_campaign(
    witness: WitnessProcess,
    log: Log,
    publisher: Signer,
    kills: int,
    rng: random.Random,
    http: aiohttp.ClientSession,
) -> WitnessReport:
    report = WitnessReport()
    witness.start()
    port = witness.port
    sequence = 0
    known = 0  # the witness's recorded size, as far as we know
    acked = 0  # the largest size the witness answered 200 for
    for _ in range(kills):
        deadline = asyncio.get_running_loop().time() + rng.uniform(0.2, 0.8)
        killer = asyncio.create_task(_kill_at(witness, deadline))
        while not killer.done():
            sequence += 1
            log.sequence([make_envelope(publisher, sequence)])
            assert log.published is not None
            try:
                status, body = await add_checkpoint(http, witness, log, known)
                if status == 409 and body.strip().isdigit():
                    known = int(body)
                    status, body = await add_checkpoint(http, witness, log, known)
            except (aiohttp.ClientError, TimeoutError):
                break
            if status == 200:
                known = acked = log.published.size
                report.cosigned += 1
        await killer
        report.kills += 1
        witness.start(port)
        recorded = recorded_size(witness, log.origin)
        assert recorded is not None and recorded >= acked, "an acknowledged cosignature was lost"
        known = recorded
        if recorded > 1:  # a rollback to an earlier checkpoint of the log is refused
            status = await _rollback(http, witness, log, recorded)
            assert status == 400
            assert recorded_size(witness, log.origin) == recorded
            report.refused_rollbacks += 1
    witness.stop()
    return report


async def _kill_at(witness: WitnessProcess, deadline: float) -> None:
    await asyncio.sleep(max(0.0, deadline - asyncio.get_running_loop().time()))
    witness.kill()


def recorded_size(witness: WitnessProcess, origin: str) -> int | None:
    state = WitnessState(witness.data / "witness.db")
    try:
        recorded = state.recorded(origin)
        return None if recorded is None else recorded.size
    finally:
        state.close()


async def add_checkpoint(
    http: aiohttp.ClientSession, witness: WitnessProcess, log: Log, old: int
) -> tuple[int, str]:
    assert log.published is not None
    size = log.published.size
    proof = [] if old in (0, size) else log.tree.consistency_proof(old, size)
    async with http.post(
        witness.url + "/add-checkpoint", data=request_body(old, proof, log.published.note)
    ) as response:
        return response.status, await response.text()


async def _rollback(
    http: aiohttp.ClientSession, witness: WitnessProcess, log: Log, recorded: int
) -> int:
    """Submit the log's own, genuinely signed, smaller checkpoint from the recorded size."""
    from deplog.authority.storage import store

    stored = store.checkpoint_at(log.conn, recorded - 1)
    assert stored is not None
    async with http.post(
        witness.url + "/add-checkpoint", data=request_body(recorded, [], stored.note)
    ) as response:
        await response.read()
        return response.status


def witness_log(tmp: Path, publisher: Signer) -> tuple[Log, Signer]:
    """A fresh in-process log for a witness campaign, with ``publisher`` registered."""
    signer = Signer.generate("campaign.deplog.example/log")
    log = Log(tmp / "campaign-log.db", signer, signer.name)
    register(log, publisher, "org.acme")
    log.publish()
    return log, signer
