"""GET /v1/tools/{tool_id}/proof on a real authority: every proof checks out offline
against the served checkpoint with the client's verifier, in both forms."""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime

import aiohttp
import pytest

from deplog.authority.storage.backends import open_database
from deplog.client import verify_tool_status
from deplog.client.map.line import require_map_root
from deplog.client.map.proof import MapProof, MapProofDocument, verify_map_proof
from deplog.client.map.stored import StoredMap
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.note import Signer
from tests.builders import admitted
from tests.integration.harness import AuthorityProcess, publish
from tests.scrape import sample

# Real authority processes; SQLite, and serve --db postgresql://.
pytestmark = [pytest.mark.slow, pytest.mark.both_backends]

NOW = datetime(2026, 6, 1, tzinfo=UTC)
SEARCH = "tool:org.acme/search"


async def served(http: aiohttp.ClientSession, authority: AuthorityProcess) -> Checkpoint:
    async with http.get(authority.url + "/checkpoint") as response:
        checkpoint, _ = open_checkpoint(await response.read(), authority.log_verifier)
    return checkpoint


async def fetch(
    http: aiohttp.ClientSession, url: str, **kwargs: object
) -> tuple[int, str, int | None, bytes]:
    """(status, content type, Deplog-Checkpoint-Size, body)."""
    async with http.get(url, **kwargs) as response:  # type: ignore[arg-type]
        size = response.headers.get("Deplog-Checkpoint-Size")
        return (
            response.status,
            response.content_type,
            None if size is None else int(size),
            await response.read(),
        )


async def test_a_present_tools_json_proof_verifies_against_the_served_checkpoint(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    await publish(http, authority.url, publisher, 1)
    checkpoint = await served(http, authority)
    status, kind, size, body = await fetch(http, f"{authority.url}/v1/tools/{SEARCH}/proof")
    assert (status, kind, size) == (200, "application/json", checkpoint.size)
    document = MapProofDocument.parse(body)
    assert document.proof.result == "present"
    opened, _ = open_checkpoint(document.checkpoint, authority.log_verifier)
    assert opened == checkpoint
    assert verify_tool_status(body, checkpoint, SEARCH, "1.0.0", NOW).status == "deprecated"
    assert verify_tool_status(body, checkpoint, SEARCH, "2.0.0", NOW).status == "active"


async def test_the_binary_form_is_served_by_query_or_by_accept(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    await publish(http, authority.url, publisher, 1)
    checkpoint = await served(http, authority)
    url = f"{authority.url}/v1/tools/{SEARCH}/proof"
    by_query = await fetch(http, url + "?format=binary")
    by_accept = await fetch(http, url, headers={"Accept": "application/octet-stream"})
    assert by_query == by_accept
    status, kind, size, body = by_query
    assert (status, kind, size) == (200, "application/octet-stream", checkpoint.size)
    assert MapProof.from_binary(body).result == "present"
    assert verify_tool_status(body, checkpoint, SEARCH, "1.0.0", NOW).status == "deprecated"


async def test_an_absent_tool_is_proved_active(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    await publish(http, authority.url, publisher, 1)
    checkpoint = await served(http, authority)
    tool = "tool:org.acme/never-named"
    _, _, _, body = await fetch(http, f"{authority.url}/v1/tools/{tool}/proof?format=binary")
    assert MapProof.from_binary(body).result == "absent"
    assert verify_tool_status(body, checkpoint, tool, "1.0.0", NOW).status == "active"


async def test_a_log_without_notices_proves_the_empty_map(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    checkpoint = await served(http, authority)
    _, _, size, body = await fetch(http, f"{authority.url}/v1/tools/{SEARCH}/proof")
    assert size == checkpoint.size
    assert MapProofDocument.parse(body).proof.result == "empty"
    assert verify_tool_status(body, checkpoint, SEARCH, "1.0.0", NOW).status == "active"
    assert len(require_map_root(checkpoint)) == 32


async def test_a_tool_named_proof_keeps_its_status_route_and_has_a_proof_of_its_own(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    tool = "tool:org.acme/proof"
    await publish(http, authority.url, publisher, 1, tool_id=tool)
    checkpoint = await served(http, authority)
    async with http.get(f"{authority.url}/v1/tools/{tool}") as response:
        assert response.status == 200
        assert (await response.json())["tool_id"] == tool
    _, _, _, body = await fetch(http, f"{authority.url}/v1/tools/{tool}/proof")
    assert MapProofDocument.parse(body).tool_id == tool
    assert verify_tool_status(body, checkpoint, tool, "1.0.0", NOW).status == "deprecated"


async def test_bad_tool_ids_and_formats_are_refused_with_their_codes(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    base = f"{authority.url}/v1/tools"
    for url, code in (
        (f"{base}/tool:org.acme/Search/proof", "bad_tool_id"),
        (f"{base}/tool:org.acme/search/proof?format=xml", "bad_parameter"),
    ):
        async with http.get(url) as response:
            assert response.status == 400
            assert await response.json() == {"error": code}


async def test_proofs_read_while_appends_race_on_each_show_the_map_of_their_checkpoint(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    """Proof reads racing batches (and, on SQLite, the writer's rows held in memory and
    written meanwhile): every answer verifies against the checkpoint it carries, and its
    record is the reference fold's at that checkpoint's size."""
    tools = [f"tool:org.acme/t{i}" for i in range(6)]
    appending = True

    async def append(first: int) -> None:
        for seq in range(first, first + 40):
            await publish(http, authority.url, publisher, seq, tool=tools[seq % len(tools)])

    async def read(seen: list[tuple[str, Checkpoint, MapProof]]) -> None:
        turn = 0
        while appending or turn < 4:
            tool_id = [*tools, "tool:org.acme/never"][turn % (len(tools) + 1)]
            turn += 1
            async with http.get(f"{authority.url}/v1/tools/{tool_id}/proof") as response:
                assert response.status == 200
                document = MapProofDocument.parse(await response.read())
            checkpoint, _ = open_checkpoint(document.checkpoint, authority.log_verifier)
            verify_tool_status(document.encode(), checkpoint, tool_id, "1.0.0", NOW)
            seen.append((tool_id, checkpoint, document.proof))

    seen: list[tuple[str, Checkpoint, MapProof]] = []
    readers = [asyncio.create_task(read(seen)) for _ in range(2)]
    await asyncio.gather(*(append(1 + 1000 * k) for k in range(4)))
    appending = False
    await asyncio.gather(*readers)
    final = await served(http, authority)
    async with http.get(f"{authority.url}/v1/entries?start=0&end={final.size}") as response:
        leaves = [base64.b64decode(leaf) for leaf in (await response.json())["entries"]]
    sizes = sorted({checkpoint.size for _, checkpoint, _ in seen})
    assert len(sizes) > 3, "the reads must have seen the log grow"
    assert sizes[-1] == final.size
    for tool_id, checkpoint, proof in seen:
        reference = VerifiableMap()
        reference.fold(admitted(leaves[: checkpoint.size]))
        record = verify_map_proof(require_map_root(checkpoint), tool_id, proof)
        assert record == reference.records.get(tool_id)


async def test_an_idle_authority_writes_the_map_rows_it_held_and_its_metrics_say_so(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    """On SQLite a batch's map rows are held in memory (``client.map.stored`` rule *rows
    held back*); once no submission comes, the sequencer writes them (on PostgreSQL every
    batch does): the tables are then at the served size, and ``/metrics`` counts no entry
    held and no failed write."""
    for seq in (1, 2, 3):
        await publish(http, authority.url, publisher, seq)
    checkpoint = await served(http, authority)
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        async with http.get(authority.url + "/metrics") as response:
            text = await response.text()
        if sample(text, "deplog_map_unwritten_entries") == 0:
            break
        assert asyncio.get_running_loop().time() < deadline, "the held rows were never written"
        await asyncio.sleep(0.02)
    assert sample(text, "deplog_map_flush_failures_total") == 0
    conn = open_database(authority.db_target).connect(readonly=True)
    try:
        stored = StoredMap(conn)
        assert (stored.size(), stored.root()) == (checkpoint.size, require_map_root(checkpoint))
    finally:
        conn.close()
