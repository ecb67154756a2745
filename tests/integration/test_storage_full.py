"""A full database (the operator's size quota) refuses appends with 503 ``storage_full``,
says so in ``/healthz``, and loses nothing."""

from __future__ import annotations

import base64

import aiohttp
import pytest

from deplog.client.model.entries import NoticeEntry, decode_entry
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import ConsistencyProof, verify_consistency
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess

pytestmark = pytest.mark.slow  # a real authority process

JSON = {"Content-Type": "application/json"}
MAX_ATTEMPTS = 3000


async def test_full_database_answers_503_and_recovers_when_space_returns(
    authority_files: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    authority_files.extra_args = ["--max-db-mb", "0.25"]
    authority_files.start()
    acked: list[bytes] = []
    refused = None
    try:
        for seq in range(1, MAX_ATTEMPTS):
            body = make_envelope(publisher, seq).canonical_bytes()
            async with http.post(
                authority_files.url + "/v1/notices", data=body, headers=JSON
            ) as response:
                if response.status == 201:
                    acked.append(body)
                    continue
                refused = (
                    response.status,
                    response.headers.get("Retry-After"),
                    await response.json(),
                )
                break
        assert refused == (503, "1", {"error": "storage_full"})
        async with http.get(authority_files.url + "/healthz") as response:
            assert "storage_full" in (await response.json())["reasons"]
        async with http.get(authority_files.url + "/checkpoint") as response:
            before, _ = open_checkpoint(await response.read(), authority_files.log_verifier)
    finally:
        authority_files.stop()

    authority_files.extra_args = []
    authority_files.start()
    try:
        retry = make_envelope(publisher, MAX_ATTEMPTS).canonical_bytes()
        async with http.post(
            authority_files.url + "/v1/notices", data=retry, headers=JSON
        ) as response:
            assert response.status == 201
        async with http.get(authority_files.url + "/checkpoint") as response:
            after, _ = open_checkpoint(await response.read(), authority_files.log_verifier)
        url = f"{authority_files.url}/v1/proofs/consistency?old={before.size}&new={after.size}"
        async with http.get(url) as response:
            proof = ConsistencyProof.from_json(await response.json())
        verify_consistency(before.size, after.size, before.root_hash, after.root_hash, proof.hashes)
        logged = set()
        for start in range(0, after.size, 1000):
            end = min(after.size, start + 1000)
            async with http.get(f"{authority_files.url}/v1/entries?start={start}&end={end}") as r:
                for leaf in (await r.json())["entries"]:
                    entry = decode_entry(base64.b64decode(leaf))
                    if isinstance(entry, NoticeEntry):
                        logged.add(entry.envelope.canonical_bytes())
        assert len(acked) > 0
        assert set(acked) <= logged
        assert retry in logged
    finally:
        authority_files.stop()
