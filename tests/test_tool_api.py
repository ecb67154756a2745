"""``GET /v1/tools/{tool_id}``: a tool's status table at the served checkpoint, folded from
its map record there (every notice, however many), its notices in bounded pages; a real
aiohttp server on 127.0.0.1 over a real SQLite log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from deplog.authority.log import Log
from deplog.authority.storage.reader import MAX_NOTICES_PAGE, LogReader
from deplog.client.tlog.note import Signer
from tests.builders import ServedLog, make_envelope, register, serving_log

JSON = {"Content-Type": "application/json"}
TOOL = "tool:org.acme/weather"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[ServedLog]:
    async with serving_log(tmp_path, "tools.test/log") as served_log:
        for sequence in range(1, 4):
            envelope = make_envelope(
                served_log.publisher,
                sequence,
                tool=TOOL,
                affected={"versions": [f"1.0.{sequence}"]},
            )
            response = await served_log.client.post(
                "/v1/notices", data=envelope.canonical_bytes(), headers=JSON
            )
            assert response.status == 201, await response.text()
        yield served_log


async def get(served: ServedLog, path: str) -> tuple[int, Any]:
    response = await served.client.get(path)
    return response.status, await response.json()


async def test_a_tool_no_notice_names_is_200_with_no_rows_and_the_size(served: ServedLog) -> None:
    status, body = await get(served, "/v1/tools/tool:org.acme/none")
    assert status == 200
    assert (body["rows"], body["notices"], body["status"], body["size"]) == ([], [], "active", 4)


async def test_the_table_has_a_row_per_named_version(served: ServedLog) -> None:
    _, body = await get(served, f"/v1/tools/{TOOL}")
    assert [row["covers"] for row in body["rows"]] == ["1.0.1", "1.0.2", "1.0.3"]
    assert body["status"] == "deprecated"


async def test_notices_come_in_pages_with_a_next_cursor(served: ServedLog) -> None:
    _, first = await get(served, f"/v1/tools/{TOOL}?limit=2")
    assert [n["index"] for n in first["notices"]] == [1, 2] and first["next"] == 2
    assert first["notices"][0]["publisher"] == "acme"
    _, rest = await get(served, f"/v1/tools/{TOOL}?after=2&limit=2")
    assert [n["index"] for n in rest["notices"]] == [3] and rest["next"] is None
    assert len(rest["rows"]) == 3  # every page carries the whole table


@pytest.mark.parametrize("query", ["limit=0", f"limit={MAX_NOTICES_PAGE + 1}", "after=-1"])
async def test_a_page_out_of_bounds_is_bad_parameter(served: ServedLog, query: str) -> None:
    assert await get(served, f"/v1/tools/{TOOL}?{query}") == (400, {"error": "bad_parameter"})


@pytest.mark.slow  # 4,097 notices sequenced
def test_the_4097th_notice_a_revoke_decides_the_status(tmp_path: Path) -> None:
    """Past the old 4,096-notice fold: the table comes from every notice in the record."""
    publisher = Signer.generate("acme")
    log = Log(tmp_path / "log.db", Signer.generate("many.test/log"), "many.test/log")
    register(log, publisher)
    for start in range(1, 4097, 512):
        log.sequence(
            [
                make_envelope(publisher, s, tool=TOOL, affected={"versions": [f"1.0.{s}"]})
                for s in range(start, start + 512)
            ]
        )
    every = {"ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}]}]}
    revoke = {"action": "revoke", "reasons": ["other"], "sunset_at": None, "affected": every}
    log.sequence([make_envelope(publisher, 4097, tool=TOOL, **revoke)])
    log.close()
    reader = LogReader(tmp_path / "log.db")
    try:
        size, proof = reader.map_proof(TOOL)
        table = reader.tool(TOOL, size, datetime.now(UTC), proof.record)
    finally:
        reader.close()
    assert table["status"] == "revoked" and len(table["rows"]) == 4097
    assert table["rows"][-1]["covers"] == "every version"
    assert table["rows"][-1]["notices"] == [4097]
