"""The follower recomputes the tool-status map from the entries it verifies: an honest
log's lines match; a signed root its entries do not fold to stops it with proven evidence."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.follower import Follower, SyncFollower
from deplog.client.follow.mapcheck import MapProver
from deplog.client.follow.source import MemoryLogSource
from deplog.client.follow.trust import MapMismatchError
from deplog.client.map.line import MAP_LINE_KEYWORD, map_line, require_map_root
from deplog.client.map.stored import StoredMap
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from deplog.client.tlog.evidence import MAP_MISMATCH, read_evidence
from tests.builders import LocalLog, admitted
from tests.map_formats import write_first_draft_map


def lying(local: LocalLog, line: str) -> MemoryLogSource:
    """The local log's leaves under a checkpoint it signs with ``line`` for its map."""
    published = local.log.published
    assert published is not None
    honest, _ = open_checkpoint(published.note, local.signer.verifier())
    forged = Checkpoint(honest.origin, honest.size, honest.root_hash, (line,))
    leaves = local.log.tree.leaf_data(0, honest.size)
    return MemoryLogSource(sign_checkpoint(forged, local.signer), leaves)


def misfolded_root(local: LocalLog) -> bytes:
    """The map root of the log's entries with its last notice left out of the fold."""
    leaves = local.log.tree.leaf_data(0, local.log.tree.size)
    return VerifiableMap().fold(admitted(leaves[:-1]))


def state_map_root(path: Path) -> bytes:
    return StoredMap(sqlite3.connect(path)).root()


def test_a_follower_keeps_the_map_an_honest_logs_lines_commit_to(
    local: LocalLog, tmp_path: Path
) -> None:
    state = tmp_path / "s.db"
    for _ in range(2):
        local.publish()
        local.publish(tool_id="tool:org.acme/fetch")
        with SyncFollower(local.snapshot(), local.signer.verifier(), state) as follower:
            assert follower.sync().advanced
    published = local.log.published
    assert published is not None
    checkpoint, _ = open_checkpoint(published.note, local.signer.verifier())
    assert state_map_root(state) == require_map_root(checkpoint)


@pytest.mark.parametrize("fault", ["misfolded notice", "random root"])
def test_a_signed_root_the_entries_do_not_fold_to_stops_the_follower_with_evidence(
    local: LocalLog, tmp_path: Path, fault: str
) -> None:
    state, evidence_dir = tmp_path / "s.db", tmp_path / "evidence"
    local.publish()
    with SyncFollower(local.snapshot(), local.signer.verifier(), state) as follower:
        follower.sync()
    local.publish()
    local.publish(tool_id="tool:org.acme/fetch")
    bad = misfolded_root(local) if fault == "misfolded notice" else os.urandom(32)
    source = lying(local, map_line(bad))
    with SyncFollower(source, local.signer.verifier(), state, evidence_dir=evidence_dir) as f:
        with pytest.raises(MapMismatchError) as stopped:
            f.sync()
        assert f.state.size == 2  # nothing of the lying checkpoint was taken
    assert stopped.value.code == ErrorCode.MAP_ROOT_MISMATCH
    evidence = read_evidence(stopped.value.evidence)
    assert stopped.value.evidence.name.startswith("fork-evidence-")
    assert evidence.verify(local.signer.verifier()) == MAP_MISMATCH and evidence.proven


def test_a_lying_first_checkpoint_is_caught_without_a_trusted_one(
    local: LocalLog, tmp_path: Path
) -> None:
    local.publish()
    source = lying(local, map_line(os.urandom(32)))
    follower = SyncFollower(source, local.signer.verifier(), tmp_path / "s.db")
    with follower, pytest.raises(MapMismatchError) as stopped:
        follower.sync()
    assert read_evidence(stopped.value.evidence).verify(local.signer.verifier()) == MAP_MISMATCH


async def test_a_running_follower_ends_on_a_false_map_root(local: LocalLog, tmp_path: Path) -> None:
    local.publish()
    source = lying(local, map_line(misfolded_root(local)))
    async with Follower(source, local.signer.verifier(), tmp_path / "s.db") as follower:
        with pytest.raises(MapMismatchError):
            await asyncio.wait_for(follower.run(0.05), 10)


def test_a_malformed_map_line_is_refused_and_changes_nothing(
    local: LocalLog, tmp_path: Path
) -> None:
    local.publish()
    source = lying(local, f"{MAP_LINE_KEYWORD} not-base64")
    with SyncFollower(source, local.signer.verifier(), tmp_path / "s.db") as follower:
        with pytest.raises(DeplogError) as refused:
            follower.sync()
        assert refused.value.code == ErrorCode.MALFORMED_MAP_LINE
        assert follower.state.size == 0


def test_a_checkpoint_without_a_line_is_not_checked(local: LocalLog, tmp_path: Path) -> None:
    local.publish()
    source = lying(local, "example.com/other-extension 1")
    with SyncFollower(source, local.signer.verifier(), tmp_path / "s.db") as follower:
        assert follower.sync().new_size == 2


def test_a_state_files_map_of_another_record_format_is_dropped_never_extended(
    local: LocalLog, tmp_path: Path
) -> None:
    """A state whose map holds the first draft's records: no proof is made from it, and the
    next advance drops it (rule 5: a map can be folded only from entry 0) instead of
    appending this format's items to those records."""
    state = tmp_path / "s.db"
    local.publish()
    with SyncFollower(local.snapshot(), local.signer.verifier(), state) as follower:
        assert follower.sync().advanced
    published = local.log.published
    assert published is not None
    conn = sqlite3.connect(state)
    write_first_draft_map(conn, local.log.tree.leaf_data(0, published.size))
    conn.close()
    prover = MapProver(state)
    assert prover.prove(published.note, published.size, "tool:org.acme/search") is None
    prover.close()
    local.publish(tool_id="tool:org.acme/fetch")
    with SyncFollower(local.snapshot(), local.signer.verifier(), state) as follower:
        assert follower.sync().advanced
    conn = sqlite3.connect(state)
    tables = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert not tables & {"map_state", "map_record", "map_group", "map_inner", "map_leaf"}
