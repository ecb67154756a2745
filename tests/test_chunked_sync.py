"""A long advance in proven chunks (client/follow/state.py invariants 1 to 3, trust.py
rules 5 and 6, the map beside the chunks: mapcheck rule 1), and the memory budget of the
folded statuses.

A sync is cut short by a source that stops answering after some pages (what a
kill or a lost network does to a sync); the state must then hold proven
progress that no read sees, and the next sync must resume from it and end
exactly where a sync never interrupted ends. Real keys, a real authority log,
real SQLite files; the source is the log's own leaves and proofs, in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from deplog.client.errors import ErrorCode
from deplog.client.follow.reader import StateReader
from deplog.client.follow.source import FetchError, MemoryLogSource, OnProgress, sync_step
from deplog.client.follow.state import LocalState, status_budget
from deplog.client.follow.trust import Advanced, MapMismatchError, TrustedState
from deplog.client.map.line import map_line, require_map_root
from deplog.client.map.stored import StoredMap
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.model.table import tool_status
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from deplog.client.tlog.evidence import MAP_MISMATCH, read_evidence
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import ConsistencyProof, TreeMismatchError
from tests.builders import ORIGIN, LocalLog, admitted
from tests.dbrows import follower_state as stored

ENTRIES = 60
"""Notices in the log (after acme's registration), over TOOLS tools."""
TOOLS = 3
PAGE = 5
CHUNK = 10
NOW = datetime(2027, 1, 1, tzinfo=UTC)


def tool(k: int) -> str:
    return f"tool:org.acme/t{k % TOOLS}"


@pytest.fixture
def log(local: LocalLog) -> MemoryLogSource:
    """The honest log: acme's registration, then ENTRIES notices over TOOLS tools."""
    for k in range(ENTRIES):
        local.publish(tool=tool(k))
    return MemoryLogSource(local.snapshot().note, local.snapshot().leaves, page_size=PAGE)


class Interrupted(MemoryLogSource):
    """The honest log, except that it stops answering at entry ``stop_at``, or serves
    ``tampered`` there instead, or a wrong consistency proof to every chunk."""

    def __init__(
        self,
        log: MemoryLogSource,
        *,
        stop_at: int | None = None,
        tampered: bytes | None = None,
        bad_proofs: bool = False,
    ) -> None:
        super().__init__(log.note, log.leaves, page_size=log.page_size)
        self.stop_at = stop_at
        self.tampered = tampered
        self.bad_proofs = bad_proofs

    async def entries(self, start: int, end: int) -> Sequence[bytes]:
        leaves = list(await super().entries(start, end))
        if self.stop_at is not None and start <= self.stop_at < start + len(leaves):
            if self.tampered is None:
                raise FetchError(message="the network went away")
            leaves[self.stop_at - start] = self.tampered
        return leaves

    async def consistency(self, old: int, new: int) -> ConsistencyProof:
        proof = await super().consistency(old, new)
        if self.bad_proofs and old > 1:  # the trusted state's own step stays honest
            return ConsistencyProof(old, new, tuple(bytes(32) for _ in proof.hashes))
        return proof


def sync(
    trusted: TrustedState, source: MemoryLogSource, on_progress: OnProgress | None = None
) -> Advanced | None:
    return asyncio.run(sync_step(source, trusted, chunk_size=CHUNK, on_progress=on_progress))


@pytest.fixture
def clean(tmp_path: Path, local: LocalLog, log: MemoryLogSource) -> dict[str, object]:
    """The state file of a sync of the whole log that nothing interrupted."""
    state = LocalState(tmp_path / "clean.db", ORIGIN)
    try:
        sync(TrustedState(state, local.signer.verifier()), log)
    finally:
        state.close()
    return stored(tmp_path / "clean.db")


def reads(state: LocalState) -> tuple[object, ...]:
    """Everything a guard or a report can see of the state."""
    return (
        state.size,
        state.root,
        tuple(state.notice_at(i) for i in range(ENTRIES + 2)),
        tuple(
            tool_status(state.tool_status_at(tool(k), ENTRIES + 2), tool(k), NOW).to_json()
            for k in range(TOOLS)
        ),
    )


def test_an_interrupted_sync_keeps_proven_chunks_that_no_read_sees(
    trusted: TrustedState, log: MemoryLogSource
) -> None:
    before = reads(trusted.state)
    with pytest.raises(FetchError):
        sync(trusted, Interrupted(log, stop_at=37))
    pending = trusted.state.pending()
    assert pending is not None and pending.frontier.size == 30  # the last whole chunk
    assert pending.note == log.note
    assert reads(trusted.state) == before  # nothing is processed through anything yet
    assert trusted.state.trusted is None


def test_the_next_sync_resumes_and_ends_as_a_clean_one(
    trusted: TrustedState, log: MemoryLogSource, clean: dict[str, object]
) -> None:
    with pytest.raises(FetchError):
        sync(trusted, Interrupted(log, stop_at=37))
    done: list[tuple[int, int]] = []
    advanced = sync(trusted, log, on_progress=lambda d, t: done.append((d, t)))
    left = ENTRIES + 1 - 30  # from the stored chunk on, not from 0
    assert done[0] == (PAGE, left)
    assert done[-1] == (left, left)
    assert stored(trusted.state.path) == clean
    assert advanced is not None
    assert (advanced.old_size, advanced.new_size) == (0, ENTRIES + 1)


def test_a_tampered_entry_in_a_later_chunk_refuses_the_target_and_is_never_read(
    trusted: TrustedState, log: MemoryLogSource, clean: dict[str, object]
) -> None:
    before = reads(trusted.state)
    forged = log.leaves[3].replace(b"org.acme/t", b"org.acme/x", 1)  # signature no longer holds
    with pytest.raises(TreeMismatchError) as caught:  # not the signed tree's entry
        sync(trusted, Interrupted(log, stop_at=45, tampered=forged))
    assert caught.value.code == "entries_root_mismatch"
    assert trusted.state.size == 0 and reads(trusted.state) == before
    assert trusted.state.invalid_entries() == (0, [])  # judged invalid, then dropped with it
    pending = trusted.state.pending()
    assert pending is not None and pending.frontier.size == 40  # the tampered chunk is gone

    sync(trusted, log)
    assert stored(trusted.state.path) == clean


def test_a_chunk_not_proven_part_of_the_target_is_never_committed(
    trusted: TrustedState, log: MemoryLogSource
) -> None:
    with pytest.raises(TreeMismatchError) as caught:
        sync(trusted, Interrupted(log, bad_proofs=True))
    assert caught.value.code == "entries_root_mismatch"
    assert trusted.state.pending() is None
    assert stored(trusted.state.path)["notices"] == []


def test_an_interrupted_sync_resumes_before_a_newer_checkpoint_is_taken(
    trusted: TrustedState, local: LocalLog, log: MemoryLogSource, tmp_path: Path
) -> None:
    """The stored target is finished first (its own checks), then the step to the newer."""
    with pytest.raises(FetchError):
        sync(trusted, Interrupted(log, stop_at=25))
    local.publish(tool=tool(1))
    local.publish(tool=tool(2))
    newer = local.snapshot()
    advanced = sync(trusted, newer)
    assert trusted.state.size == ENTRIES + 3 and trusted.state.pending() is None
    assert advanced is not None and advanced.old_size == 0

    state = LocalState(tmp_path / "clean-newer.db", ORIGIN)
    try:
        sync(TrustedState(state, local.signer.verifier()), newer)
    finally:
        state.close()
    assert stored(trusted.state.path) == stored(tmp_path / "clean-newer.db")


# -- the map beside the chunks ----------------------------------------------------------------


def lying(log: MemoryLogSource, local: LocalLog, root: bytes) -> MemoryLogSource:
    """The honest log's entries and tree under a checkpoint that signs ``root`` as its map."""
    honest, _ = open_checkpoint(log.note, local.signer.verifier())
    forged = Checkpoint(honest.origin, honest.size, honest.root_hash, (map_line(root),))
    return MemoryLogSource(sign_checkpoint(forged, local.signer), log.leaves, page_size=PAGE)


def test_a_committed_chunk_holds_the_map_through_its_last_entry(
    trusted: TrustedState, log: MemoryLogSource
) -> None:
    with pytest.raises(FetchError):
        sync(trusted, Interrupted(log, stop_at=37))
    with contextlib.closing(sqlite3.connect(trusted.state.path)) as conn:
        assert StoredMap(conn).size() == 30
        assert StoredMap(conn).root() == VerifiableMap().fold(admitted(log.leaves[:30]))


def test_a_resumed_sync_folds_on_from_the_stored_map_and_its_root_matches(
    trusted: TrustedState, local: LocalLog, log: MemoryLogSource
) -> None:
    with pytest.raises(FetchError):
        sync(trusted, Interrupted(log, stop_at=37))
    advanced = sync(trusted, log)  # no map_root_mismatch: the map went on from entry 30
    assert advanced is not None and trusted.state.size == ENTRIES + 1
    signed, _ = open_checkpoint(log.note, local.signer.verifier())
    with contextlib.closing(sqlite3.connect(trusted.state.path)) as conn:
        assert StoredMap(conn).root() == require_map_root(signed)


def test_a_false_map_root_is_still_caught_after_a_resume(
    trusted: TrustedState, local: LocalLog, log: MemoryLogSource, tmp_path: Path
) -> None:
    """The chunks before the kill hold a true map, the lie is in the signed root; the
    resumed advance still folds every entry and refuses it, taking nothing."""
    false_root = VerifiableMap().fold(admitted(log.leaves[:-1]))  # the last notice left out
    source = lying(log, local, false_root)
    with pytest.raises(FetchError):
        sync(trusted, Interrupted(source, stop_at=37))
    assert trusted.state.pending() is not None
    trusted.evidence_dir = tmp_path / "evidence"
    with pytest.raises(MapMismatchError) as stopped:
        sync(trusted, source)
    assert stopped.value.code == ErrorCode.MAP_ROOT_MISMATCH
    assert read_evidence(stopped.value.evidence).verify(local.signer.verifier()) == MAP_MISMATCH
    assert trusted.state.size == 0 and trusted.state.trusted is None


def test_a_refused_chunk_rolls_back_its_map_rows(
    trusted: TrustedState, log: MemoryLogSource
) -> None:
    forged = log.leaves[3].replace(b"org.acme/t", b"org.acme/x", 1)
    with pytest.raises(TreeMismatchError):
        sync(trusted, Interrupted(log, stop_at=45, tampered=forged))
    with contextlib.closing(sqlite3.connect(trusted.state.path)) as conn:
        assert StoredMap(conn).size() == 40  # the proven chunks', not the refused one's
        assert StoredMap(conn).root() == VerifiableMap().fold(admitted(log.leaves[:40]))


# -- the memory budget ------------------------------------------------------------------------


@pytest.fixture
def synced_state(tmp_path: Path, local: LocalLog, log: MemoryLogSource) -> Iterator[Path]:
    state = LocalState(tmp_path / "synced.db", ORIGIN)
    sync(TrustedState(state, local.signer.verifier()), log)
    state.close()
    yield tmp_path / "synced.db"


def test_the_budget_is_counted_in_notices_of_about_1500_bytes() -> None:
    assert status_budget(32) == 32 * 2**20 // 1500
    with pytest.raises(ValueError):
        status_budget(0)


def test_folds_within_the_budget_are_kept(synced_state: Path) -> None:
    state = LocalState(synced_state, ORIGIN, memory_mib=1)
    try:
        assert state.tool_status(tool(0)) is state.tool_status(tool(0))
    finally:
        state.close()


def test_a_tool_with_more_notices_than_the_budget_is_folded_per_question(
    synced_state: Path,
) -> None:
    state = LocalState(synced_state, ORIGIN, memory_mib=ENTRIES * 1500 / TOOLS / 2 / 2**20)
    try:
        assert state.status_budget < ENTRIES // TOOLS
        first, second = state.tool_status(tool(0)), state.tool_status(tool(0))
        assert first is not second
        assert tool_status(first[0], tool(0), NOW) == tool_status(second[0], tool(0), NOW)
    finally:
        state.close()


def test_the_least_recently_used_fold_leaves_first(synced_state: Path) -> None:
    per_tool = ENTRIES // TOOLS
    state = LocalState(synced_state, ORIGIN, memory_mib=2 * per_tool * 1500 / 2**20)
    try:
        assert state.status_budget == 2 * per_tool
        zero, one = state.tool_status(tool(0)), state.tool_status(tool(1))
        state.tool_status(tool(0))  # used again: tool 1 is now the oldest
        state.tool_status(tool(2))  # over budget: tool 1 leaves
        assert state.tool_status(tool(0)) is zero
        assert state.tool_status(tool(1)) is not one
    finally:
        state.close()


def test_after_an_advance_a_kept_fold_holds_the_new_notices(
    tmp_path: Path, local: LocalLog, log: MemoryLogSource
) -> None:
    state = LocalState(tmp_path / "kept.db", ORIGIN)
    trusted = TrustedState(state, local.signer.verifier())
    try:
        sync(trusted, log)
        kept = state.tool_status(tool(0))
        added = local.publish(tool=tool(0), action="revoke", reasons=["other"])
        sync(trusted, local.snapshot())
        after = state.tool_status(tool(0))
        assert after is not kept and added in after[1]
        fresh = state.tool_status_at(tool(0), state.size)
        assert tool_status(after[0], tool(0), NOW) == tool_status(fresh, tool(0), NOW)
        assert after[0].lookup(tool(0), "1.0.0", NOW).status == "revoked"
    finally:
        state.close()


def test_progress_toward_a_target_the_policy_no_longer_accepts_is_dropped(
    tmp_path: Path, local: LocalLog, log: MemoryLogSource, clean: dict[str, object]
) -> None:
    """Another log key now: the stored target fails step 1, so its progress goes, unread."""
    path = tmp_path / "rekeyed.db"
    state = LocalState(path, ORIGIN)
    try:
        with pytest.raises(FetchError):
            sync(TrustedState(state, local.signer.verifier()), Interrupted(log, stop_at=37))
        assert state.pending() is not None
        other = TrustedState(state, Signer.generate(ORIGIN).verifier())
        assert other.resume() is None
        assert state.pending() is None
        assert stored(path)["notices"] == [] and stored(path)["sequences"] == []
        sync(TrustedState(state, local.signer.verifier()), log)  # the honest key, from 0
    finally:
        state.close()
    assert stored(path) == clean


def test_a_worker_reading_the_file_never_sees_an_unfinished_advance(
    trusted: TrustedState, log: MemoryLogSource
) -> None:
    with pytest.raises(FetchError):
        sync(trusted, Interrupted(log, stop_at=37))
    reader = StateReader(trusted.state.path)
    try:
        assert reader.trusted is None
        assert all(reader.tool_status(tool(k))[1] == {} for k in range(TOOLS))
    finally:
        reader.close()
