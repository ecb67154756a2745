"""GET /v1/tools/{tool_id}/proof while the map is one batch ahead of the served checkpoint:
a real authority whose publication quorum needs its one external witness, stopped. The
proof waits for the publication at most ``--map-proof-wait``, then answers 503
``map_not_published``; a publication within the bound answers the waiting request with a
proof at the new size that the client's verifier accepts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest

from deplog.client import verify_tool_status
from deplog.client.map.proof import MapProofDocument
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.cosignature import cosignatures
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess, WitnessProcess

pytestmark = pytest.mark.slow  # real authority processes

JSON = {"Content-Type": "application/json"}
NOW = datetime(2026, 6, 1, tzinfo=UTC)
SEARCH = "tool:org.acme/search"


@pytest.fixture
def held(tmp_path: Path, authority_files: AuthorityProcess) -> Iterator[WitnessProcess]:
    """The authority's only external witness, configured and then stopped: with
    ``--publication-quorum 1`` nothing newer than the served checkpoint is published."""
    witness = WitnessProcess(tmp_path / "witness", name="witness.test/held")
    witness.init()
    verifier = authority_files.log_verifier
    assert witness.cli("add-log", "--origin", verifier.name, "--key", verifier.vkey()) == 0
    witness.start()
    authority_files.add_witness(witness.url, witness.verifier)
    witness.stop()
    yield witness
    witness.stop()


def start(authority: AuthorityProcess, wait: float) -> None:
    authority.extra_args = [
        *("--publication-quorum", "1", "--witness-timeout", "1"),
        *("--witness-refresh", "0.3", "--map-proof-wait", str(wait)),
    ]
    authority.start()


async def served(http: aiohttp.ClientSession, authority: AuthorityProcess) -> Checkpoint:
    async with http.get(authority.url + "/checkpoint") as response:
        checkpoint, _ = open_checkpoint(await response.read(), authority.log_verifier)
    return checkpoint


async def append_unpublished(
    http: aiohttp.ClientSession, authority: AuthorityProcess, publisher: Signer
) -> None:
    """A notice the log commits (the map moves past the served size) but cannot publish."""
    body = make_envelope(publisher, 1, tool=SEARCH).canonical_bytes()
    async with http.post(authority.url + "/v1/notices", data=body, headers=JSON) as response:
        assert response.status == 503
        assert await response.json() == {"error": "witness_quorum_unavailable"}


async def waiting(http: aiohttp.ClientSession, authority: AuthorityProcess) -> float:
    async with http.get(authority.url + "/metrics") as response:
        for line in (await response.text()).splitlines():
            if line.startswith("deplog_map_proofs_waiting "):
                return float(line.split()[1])
    raise AssertionError("no deplog_map_proofs_waiting gauge")


async def test_a_proof_while_publication_is_held_answers_map_not_published_after_the_bound(
    authority_files: AuthorityProcess,
    held: WitnessProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
) -> None:
    start(authority_files, wait=1.0)
    try:
        before = await served(http, authority_files)
        await append_unpublished(http, authority_files, publisher)
        began = time.monotonic()
        async with http.get(f"{authority_files.url}/v1/tools/{SEARCH}/proof") as response:
            assert response.status == 503
            assert await response.json() == {"error": "map_not_published"}
            assert response.headers["Retry-After"] == "1"
        assert time.monotonic() - began >= 1.0  # it waited out the bound first
        assert await waiting(http, authority_files) == 0
        assert (await served(http, authority_files)).size == before.size  # still held
    finally:
        authority_files.stop()


async def test_a_waiting_proof_is_answered_at_the_new_size_once_publication_resumes(
    authority_files: AuthorityProcess,
    held: WitnessProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
) -> None:
    start(authority_files, wait=60.0)
    try:
        before = await served(http, authority_files)
        await append_unpublished(http, authority_files, publisher)
        url = f"{authority_files.url}/v1/tools/{SEARCH}/proof"

        async def get() -> tuple[int, int, bytes]:
            async with http.get(url) as response:
                size = int(response.headers.get("Deplog-Checkpoint-Size", "-1"))
                return response.status, size, await response.read()

        request = asyncio.create_task(get())
        deadline = time.monotonic() + 30
        while await waiting(http, authority_files) < 1:  # the request is held, not answered
            assert not request.done() and time.monotonic() < deadline
            await asyncio.sleep(0.05)
        held.start(held.port)  # the refresh loop now publishes the committed batch
        status, size, body = await asyncio.wait_for(request, 60)
        assert (status, size) == (200, before.size + 1)
        checkpoint = await served(http, authority_files)
        assert checkpoint.size == size
        note = MapProofDocument.parse(body).checkpoint
        opened, _ = open_checkpoint(note, authority_files.log_verifier)
        assert opened == checkpoint
        assert [c.name for c in cosignatures(note, [held.verifier])] == [held.name]
        assert verify_tool_status(body, checkpoint, SEARCH, "1.0.0", NOW).status == "deprecated"
    finally:
        authority_files.stop()
