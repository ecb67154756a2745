"""SIGKILL during a stream of submissions loses nothing acknowledged and forks nothing."""

from __future__ import annotations

import asyncio
import base64
import contextlib

import aiohttp

from client.checkpoint import Checkpoint, open_checkpoint
from client.entries import NoticeEntry, decode_entry
from client.note import Signer
from client.proofs import ConsistencyProof, verify_consistency
from tests.integration.harness import AuthorityProcess, make_envelope

KILLS = 3
PUBLISHERS = 4


async def submit_forever(
    http: aiohttp.ClientSession, url: str, signer: Signer, start: int, acked: list[bytes]
) -> None:
    """Post notices one after another, recording each envelope that got 201 or 200."""
    sequence = start
    while True:
        body = make_envelope(signer, sequence).canonical_bytes()
        try:
            async with http.post(
                url + "/v1/notices", data=body, headers={"Content-Type": "application/json"}
            ) as response:
                if response.status in (200, 201):
                    await response.read()
                    acked.append(body)
        except (aiohttp.ClientError, TimeoutError):
            return
        sequence += 1


async def watch_checkpoints(
    http: aiohttp.ClientSession, authority: AuthorityProcess, seen: list[Checkpoint]
) -> None:
    while True:
        try:
            async with http.get(authority.url + "/checkpoint") as response:
                cp, _ = open_checkpoint(await response.read(), authority.log_verifier)
                seen.append(cp)
        except (aiohttp.ClientError, TimeoutError):
            return
        await asyncio.sleep(0.01)


async def logged_envelopes(http: aiohttp.ClientSession, url: str, size: int) -> list[bytes]:
    out: list[bytes] = []
    for start in range(0, size, 1000):
        end = min(size, start + 1000)
        async with http.get(f"{url}/v1/entries?start={start}&end={end}") as response:
            for leaf in (await response.json())["entries"]:
                entry = decode_entry(base64.b64decode(leaf))
                if isinstance(entry, NoticeEntry):
                    out.append(entry.envelope.canonical_bytes())
    return out


async def test_sigkill_loses_no_acknowledged_notice_and_forks_nothing(
    authority_files: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    signers = [Signer.generate(f"crash{i}") for i in range(PUBLISHERS)]
    for signer in signers:
        authority_files.add_publisher(signer, f"org.{signer.name}")
    acked: list[bytes] = []
    seen: list[Checkpoint] = []
    for kill in range(KILLS):
        authority_files.start()
        tasks = [
            asyncio.create_task(
                submit_forever(http, authority_files.url, s, 1 + kill * 100_000, acked)
            )
            for s in signers
        ]
        tasks.append(asyncio.create_task(watch_checkpoints(http, authority_files, seen)))
        await asyncio.sleep(0.6 + 0.3 * kill)
        authority_files.kill()
        for task in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, timeout=30)

    authority_files.start()
    try:
        async with http.get(authority_files.url + "/checkpoint") as response:
            final, _ = open_checkpoint(await response.read(), authority_files.log_verifier)
        logged = await logged_envelopes(http, authority_files.url, final.size)
        assert acked, "the stream must have been acknowledged before the kills"
        print(f"acked={len(acked)} logged={len(logged)} checkpoints seen={len(seen)}")
        assert len(logged) == len(set(logged)), "an entry is in the log twice"
        assert set(acked) <= set(logged), "an acknowledged notice was lost"
        for cp in seen:
            url = f"{authority_files.url}/v1/proofs/consistency?old={cp.size}&new={final.size}"
            async with http.get(url) as response:
                proof = ConsistencyProof.from_json(await response.json())
            verify_consistency(cp.size, final.size, cp.root_hash, final.root_hash, proof.hashes)
    finally:
        authority_files.stop()
