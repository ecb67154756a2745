"""A real authority on 127.0.0.1: publish, receipts, checkpoints, proofs and reads."""

from __future__ import annotations

import asyncio
import base64

import aiohttp
import pytest

from deplog.client.model.entries import NoticeEntry, decode_entry
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import (
    ConsistencyProof,
    InclusionProof,
    leaf_hash,
    root_from_leaf_hashes,
    verify_consistency,
    verify_inclusion,
)
from deplog.client.tlog.receipt import Receipt, verify_receipt
from tests.builders import make_envelope, notice_leaf
from tests.dbrows import table_rows
from tests.integration.harness import AuthorityProcess, post, wait_for_checkpoint
from tests.scrape import names, sample

# Real authority processes; SQLite, and serve --db postgresql://.
pytestmark = [pytest.mark.slow, pytest.mark.both_backends]


async def checkpoint(http: aiohttp.ClientSession, authority: AuthorityProcess) -> Checkpoint:
    async with http.get(authority.url + "/checkpoint") as response:
        cp, _ = open_checkpoint(await response.read(), authority.log_verifier)
        return cp


async def test_publish_returns_a_receipt_that_verifies_offline(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    envelope = make_envelope(publisher, 1)
    status, body = await post(http, authority.url, envelope.canonical_bytes())
    assert status == 201
    receipt = Receipt.parse(body)
    cp = verify_receipt(receipt, notice_leaf(envelope), authority.log_verifier)
    assert cp.size == receipt.index + 1


async def test_identical_resubmission_returns_200_and_the_same_index(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    body = make_envelope(publisher, 1).canonical_bytes()
    first_status, first = await post(http, authority.url, body)
    again_status, again = await post(http, authority.url, body)
    assert (first_status, again_status) == (201, 200)
    assert Receipt.parse(first).index == Receipt.parse(again).index
    assert (await checkpoint(http, authority)).size == Receipt.parse(first).index + 1


async def test_checkpoint_is_signed_text_that_is_never_cached(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    async with http.get(authority.url + "/checkpoint") as response:
        assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
        assert response.headers["Cache-Control"] == "no-cache"
        cp, note = open_checkpoint(await response.read(), authority.log_verifier)
    assert cp.origin == authority.log_verifier.name
    assert cp.size == 1  # the publisher registration
    assert [s.name for s in note.signatures] == [cp.origin]


async def test_concurrent_submissions_from_20_publishers_are_each_logged_once(
    authority_files: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    signers = [Signer.generate(f"pub{i}") for i in range(20)]
    for signer in signers:
        authority_files.add_publisher(signer, f"org.{signer.name}")
    authority_files.start()
    try:
        envelopes = [make_envelope(s, seq) for s in signers for seq in range(1, 11)]
        results = await asyncio.gather(
            *(post(http, authority_files.url, e.canonical_bytes()) for e in envelopes)
        )
        assert [status for status, _ in results] == [201] * 200
        indexes = [Receipt.parse(body).index for _, body in results]
        assert len(set(indexes)) == 200
        cp = await checkpoint(http, authority_files)
        assert cp.size == 21 + 200  # acme and 20 more registrations
        logged = []
        async with http.get(
            authority_files.url + f"/v1/entries?start=21&end={cp.size}"
        ) as response:
            leaves = [base64.b64decode(e) for e in (await response.json())["entries"]]
        for leaf in leaves:
            entry = decode_entry(leaf)
            assert isinstance(entry, NoticeEntry)
            logged.append(entry.envelope.canonical_bytes())
        assert sorted(logged) == sorted(e.canonical_bytes() for e in envelopes)
        for envelope, (_, body) in zip(envelopes, results, strict=True):
            verify_receipt(
                Receipt.parse(body),
                notice_leaf(envelope),
                authority_files.log_verifier,
            )
    finally:
        authority_files.stop()


async def test_proofs_and_entries_verify_against_served_checkpoints(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    sizes = []
    for seq in range(1, 8):
        status, _ = await post(http, authority.url, make_envelope(publisher, seq).canonical_bytes())
        assert status == 201
        sizes.append(await checkpoint(http, authority))
    latest = sizes[-1]
    async with http.get(authority.url + f"/v1/entries?start=0&end={latest.size}") as response:
        leaves = [base64.b64decode(e) for e in (await response.json())["entries"]]
    hashes = [leaf_hash(leaf) for leaf in leaves]
    assert root_from_leaf_hashes(hashes) == latest.root_hash
    for index in range(latest.size):
        url = f"{authority.url}/v1/proofs/inclusion?index={index}&size={latest.size}"
        async with http.get(url) as response:
            proof = InclusionProof.from_json(await response.json())
        assert proof.leaf_hash == hashes[index]
        verify_inclusion(hashes[index], index, latest.size, proof.hashes, latest.root_hash)
    for old in sizes[:-1]:
        url = f"{authority.url}/v1/proofs/consistency?old={old.size}&new={latest.size}"
        async with http.get(url) as response:
            proof_c = ConsistencyProof.from_json(await response.json())
        verify_consistency(old.size, latest.size, old.root_hash, latest.root_hash, proof_c.hashes)


async def test_tool_status_lists_the_notices_behind_it(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    envelope = make_envelope(
        publisher, 1, action="revoke", reasons=["security"], advisories=["CVE-2026-1234"]
    )
    status, body = await post(http, authority.url, envelope.canonical_bytes())
    assert status == 201
    index = Receipt.parse(body).index
    async with http.get(authority.url + "/v1/tools/tool:org.acme/search") as response:
        assert response.status == 200
        described = await response.json()
    [version] = described["rows"]
    assert (version["version"], version["status"]) == ("1.0.0", "revoked")
    assert version["notices"] == [index] and described["status"] == "revoked"


async def test_publishers_health_and_metrics_are_served(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    async with http.get(authority.url + "/v1/publishers") as response:
        publishers = await response.json()
    assert "acme" in str(publishers)
    async with http.get(authority.url + "/healthz") as response:
        assert (await response.json())["status"] == "ok"
    async with http.get(authority.url + "/metrics") as response:
        text = await response.text()
    assert sample(text, "deplog_entries") == 1.0
    healthz = sample(text, "deplog_http_requests_total", method="GET", route="/healthz", code="200")
    assert healthz is not None and healthz >= 1


async def test_checkpoint_reads_are_counted_apart_from_the_request_metrics(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    async def scrape() -> str:
        async with http.get(authority.url + "/metrics") as response:
            return await response.text()

    before = sample(await scrape(), "deplog_checkpoint_requests_total")
    for _ in range(3):
        async with http.get(authority.url + "/checkpoint") as response:
            assert response.status == 200
    text = await scrape()
    assert before is not None
    assert sample(text, "deplog_checkpoint_requests_total") == before + 3
    assert 'route="/checkpoint"' not in text  # the hot path stays out of the per-route series


async def test_metrics_include_the_process_and_runtime_collectors(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    async with http.get(authority.url + "/metrics") as response:
        assert response.content_type == "text/plain"
        scraped = names(await response.text())
    assert {"process_cpu_seconds_total", "process_open_fds", "python_info"} <= scraped
    assert "python_gc_collections_total" in scraped


async def test_publisher_added_while_serving_is_served_by_the_running_authority(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    """On SQLite the command appends through the server's admin socket, so the served
    checkpoint covers it when the command returns; on PostgreSQL it appends through the
    database, and its NOTIFY deplog_signed makes the server publish it at once."""
    newcomer = Signer.generate("newcomer")
    # the command runs its own event loop (the admin socket's client): not on this one
    await asyncio.to_thread(authority.add_publisher, newcomer, "org.newcomer")
    if authority.db is None:
        assert (await checkpoint(http, authority)).size == 2
    else:
        await wait_for_checkpoint(http, authority, 2)
    async with http.get(authority.url + "/v1/publishers") as response:
        assert "newcomer" in str(await response.json())


async def test_a_notice_acknowledged_before_a_sigkill_is_replayed_idempotently_after_restart(
    authority_files: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    """The publisher never saw the 201 (say): it resubmits the same envelope to the
    restarted authority and gets the original index with 200, and nothing is stored twice."""
    envelope = make_envelope(publisher, 1)
    body = envelope.canonical_bytes()
    authority_files.start()
    status, first = await post(http, authority_files.url, body)
    assert status == 201
    authority_files.kill()
    authority_files.start()
    try:
        served = await checkpoint(http, authority_files)
        rows = table_rows(authority_files.db_target)
        again_status, again = await post(http, authority_files.url, body)
        assert again_status == 200
        assert Receipt.parse(again).index == Receipt.parse(first).index
        verify_receipt(Receipt.parse(again), notice_leaf(envelope), authority_files.log_verifier)
        after = await checkpoint(http, authority_files)
        assert (after.size, after.root_hash) == (served.size, served.root_hash)
        assert served.size == 2  # acme's registration and the notice, once
        assert table_rows(authority_files.db_target) == rows
    finally:
        authority_files.stop()
