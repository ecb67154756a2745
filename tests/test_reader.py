"""The read side (``LogReader``) gives the same answers on both backends: proofs that the
client's verifiers accept, hash-checked entries, tool search in byte order (PostgreSQL's
``"C"`` collation is SQLite's order), growth points, tool status, map proofs, publishers."""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from deplog.authority.log import Log
from deplog.authority.storage.reader import LogReader
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import leaf_hash, verify_consistency, verify_inclusion
from tests.builders import make_envelope, register
from tests.conftest import Backend

ORIGIN = "reader.deplog.example/log"
TOOLS = ("tool:org.acme/a-z", "tool:org.acme/ab", "tool:org.acme/a_c", "tool:org.acme/a.b")


@pytest.fixture
def reader(backend: Backend) -> LogReader:
    signer = Signer.generate(ORIGIN)
    publisher = Signer.generate("acme")
    log = Log(backend.db, signer, ORIGIN)
    register(log, publisher)
    for sequence in range(1, 9):
        log.sequence([make_envelope(publisher, sequence, tool=TOOLS[sequence % len(TOOLS)])])
    log.close()
    return LogReader(backend.db)


def test_proofs_verify_against_the_stored_roots(reader: LogReader) -> None:
    roots = {
        int(size): bytes(root)
        for size, root in reader.conn.execute("SELECT size, root FROM checkpoints").fetchall()
    }
    assert sorted(roots) == [0, *range(1, 10)]  # the empty log's, then one per append
    for index in range(9):
        proof = reader.inclusion(index, 9)
        verify_inclusion(proof.leaf_hash, index, 9, proof.hashes, roots[9])
    for old in range(2, 9):
        verify_consistency(old, 9, roots[old], roots[9], reader.consistency(old, 9).hashes)


def test_entries_are_the_stored_leaves_hash_checked(reader: LogReader) -> None:
    entries = reader.entries(0, 9)
    assert [leaf_hash(e) for e in entries] == [reader.inclusion(i, 9).leaf_hash for i in range(9)]
    assert [i for i, _ in reader.recent_entries(9, 3)] == [8, 7, 6]


FIRST = {TOOLS[1]: 1, TOOLS[2]: 2, TOOLS[3]: 3, TOOLS[0]: 4}
"""Each tool's first leaf index in ``reader``'s log (index 0 registers the publisher)."""


def test_the_log_keeps_each_tool_id_once_with_its_first_index(reader: LogReader) -> None:
    rows = reader.conn.execute("SELECT tool_id, first_idx FROM tools").fetchall()
    assert {str(tool): int(first) for tool, first in rows} == FIRST
    assert len(rows) == len(FIRST)


def test_a_sqlite_log_from_before_the_tools_table_gets_it_filled_at_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    signer, publisher = Signer.generate(ORIGIN), Signer.generate("acme")
    log = Log(path, signer, ORIGIN)
    register(log, publisher)
    for sequence in range(1, 9):
        log.sequence([make_envelope(publisher, sequence, tool=TOOLS[sequence % len(TOOLS)])])
    log.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("DROP TABLE tools")
        conn.commit()
    Log(path, signer, ORIGIN).close()
    reader = LogReader(path)
    try:
        rows = reader.conn.execute("SELECT tool_id, first_idx FROM tools").fetchall()
        assert {str(tool): int(first) for tool, first in rows} == FIRST
    finally:
        reader.close()


def test_tool_search_is_in_byte_order_by_prefix_and_by_substring(reader: LogReader) -> None:
    assert reader.search_tools("tool:org.acme/", 9, 0, 10) == sorted(TOOLS)
    assert reader.search_tools("tool:org.acme/", 9, 1, 2) == sorted(TOOLS)[1:3]
    assert reader.search_tools("a_", 9, 0, 10) == ["tool:org.acme/a_c"]  # no LIKE wildcards
    assert reader.search_tools("%", 9, 0, 10) == []
    assert reader.search_tools("tool:org.acme/a-z", 4, 0, 10) == []  # its notices: 4 and 8


def test_growth_tool_status_map_proof_and_publishers(reader: LogReader) -> None:
    assert [size for size, _ in reader.growth(9, 3)] == [3, 6, 9]
    size, proof = reader.map_proof("tool:org.acme/ab")
    assert size == 9 and proof is not None
    status = reader.tool("tool:org.acme/ab", 9, datetime.now(UTC), proof.record)
    assert status["size"] == 9 and status["status"] == "deprecated"
    [publisher] = reader.publishers()["publishers"]
    assert publisher["publisher"] == "acme"


def test_a_tools_notices_come_in_pages_each_with_its_publisher_and_a_next_cursor(
    reader: LogReader,
) -> None:
    _, proof = reader.map_proof("tool:org.acme/ab")
    first = reader.tool("tool:org.acme/ab", 9, datetime.now(UTC), proof.record, limit=1)
    [notice] = first["notices"]
    assert notice["publisher"] == "acme" and first["next"] == notice["index"]
    rest = reader.tool("tool:org.acme/ab", 9, datetime.now(UTC), proof.record, first["next"])
    assert [n["index"] for n in rest["notices"]] > [notice["index"]] and rest["next"] is None


def test_a_tool_no_entry_names_is_an_empty_table_at_the_size(reader: LogReader) -> None:
    status = reader.tool("tool:org.acme/none", 9, datetime.now(UTC), None)
    assert (status["size"], status["rows"], status["notices"], status["next"]) == (9, [], [], None)
