"""Proofs served while the writer writes the map's held rows in slices (``client.map.stored``
rule *slices*): a real aiohttp server on 127.0.0.1 over a real SQLite log, its map cache's
bounds made small so that slices land between the proofs. Every proof a reader gets
verifies against the checkpoint it carries and shows the reference fold's record at
that checkpoint's size, whether the reader's view was current or a slice came between
(``ViewMoved``: it reads again)."""

from __future__ import annotations

import asyncio
import base64
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from deplog.authority.http.server import _STATE
from deplog.client import verify_tool_status
from deplog.client.map.cache import MapCache
from deplog.client.map.line import require_map_root
from deplog.client.map.proof import MapProof, MapProofDocument, verify_map_proof
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.note import Signer
from tests.builders import admitted, make_envelope, serving_log

JSON = {"Content-Type": "application/json"}
TOOLS = [f"tool:org.acme/t{i}" for i in range(40)]


@pytest.fixture
async def served(
    tmp_path: Path,
) -> AsyncIterator[tuple[TestClient[object, object], Signer, Signer]]:
    async with serving_log(tmp_path, "served.test/log") as served_log:
        cache = served_log.app[_STATE].sequencer.log.map.cache
        assert isinstance(cache, MapCache) and cache.holds
        cache.layer_entries, cache.slice_groups, cache.slice_record_bytes = 80, 2, 100
        yield served_log.client, served_log.publisher, served_log.log_key


@pytest.mark.slow  # 240 appends raced by three readers
async def test_proofs_read_while_slices_are_written_show_the_map_of_their_checkpoint(
    served: tuple[TestClient[object, object], Signer, Signer],
) -> None:
    client, publisher, log_key = served
    cache = client.server.app[_STATE].sequencer.log.map.cache
    assert cache is not None
    appending = True

    async def append(first: int) -> None:
        for seq in range(first, first + 60):
            body = make_envelope(publisher, seq, tool=TOOLS[seq % len(TOOLS)]).canonical_bytes()
            response = await client.post("/v1/notices", data=body, headers=JSON)
            assert response.status == 201, await response.text()

    async def read(seed: int, seen: list[tuple[str, Checkpoint, MapProof]]) -> None:
        rng = random.Random(seed)
        while appending:
            tool_id = rng.choice([*TOOLS, "tool:org.acme/never"])
            response = await client.get(f"/v1/tools/{tool_id}/proof")
            assert response.status == 200, await response.text()
            body = await response.read()
            document = MapProofDocument.parse(body)
            checkpoint, _ = open_checkpoint(document.checkpoint, log_key.verifier())
            verify_tool_status(body, checkpoint, tool_id, "1.0.0", datetime.now(UTC))
            seen.append((tool_id, checkpoint, document.proof))

    seen: list[tuple[str, Checkpoint, MapProof]] = []
    slices = cache.slices
    readers = [asyncio.create_task(read(k, seen)) for k in range(3)]
    await asyncio.gather(*(append(1 + 1000 * k) for k in range(4)))
    appending = False
    await asyncio.gather(*readers)
    assert cache.slices - slices > 5, "slices must have been written while proofs were read"
    size = max(checkpoint.size for _, checkpoint, _ in seen)
    page = await (await client.get(f"/v1/entries?start=0&end={size}")).json()
    leaves = [base64.b64decode(leaf) for leaf in page["entries"]]
    assert len({checkpoint.size for _, checkpoint, _ in seen}) > 5
    for tool_id, checkpoint, proof in seen:
        reference = VerifiableMap()
        reference.fold(admitted(leaves[: checkpoint.size]))
        record = verify_map_proof(require_map_root(checkpoint), tool_id, proof)
        assert record == reference.records.get(tool_id)


@pytest.mark.parametrize("query", ["format=json&format=binary", "format=json&format=json"])
async def test_a_repeated_proof_parameter_is_refused_as_every_api_read_refuses_it(
    tmp_path: Path, query: str
) -> None:
    async with serving_log(tmp_path, "served.test/log") as served_log:
        response = await served_log.client.get(f"/v1/tools/tool:org.acme/t0/proof?{query}")
        assert (response.status, await response.json()) == (400, {"error": "repeated_parameter"})
