"""Power loss: every crash state a power cut could leave starts cleanly and loses nothing.

The model's rules are specified first on small hand-made operation sequences;
then a real authority is recorded under strace and a bounded, seeded sample of
its crash states is rebuilt and started (bench/power_loss.py explores all of
them, for longer recordings). strace is required: missing, the campaign fails
under CI=true and is skipped, loudly, elsewhere.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from deplog.client.tlog.note import Signer
from tests.integration.crash_states import (
    DIRECTORY,
    SECTOR,
    CrashState,
    Create,
    FileOp,
    Snapshot,
    Sync,
    Unlink,
    Write,
    crash_points,
    explore,
    materialize,
)
from tests.integration.powerloss import Campaign, Tally, check_state, record, sample
from tests.integration.syscall_trace import parse_trace

BATCHES = 2
PER_BATCH = 3
STATES = 40

EMPTY = Snapshot({"db": 0}, {0: b""})


def written(data: bytes, offset: int = 0) -> Write:
    return Write(0, offset, data)


def test_a_write_followed_by_its_sync_survives_every_later_crash() -> None:
    ops: list[FileOp] = [written(b"acked"), Sync(0), written(b"XX", 5), Sync(0)]
    states = [s for s in explore(EMPTY, ops) if s.point >= 2]
    assert states and all(s.files["db"].startswith(b"acked") for s in states)


def test_an_unsynced_write_may_or_may_not_reach_the_disk() -> None:
    ops: list[FileOp] = [written(b"acked"), Sync(0), written(b"later", 5)]
    contents = {s.files["db"] for s in explore(EMPTY, ops)}
    assert {b"acked", b"ackedlater"} <= contents


def test_unsynced_writes_reach_the_disk_in_any_order() -> None:
    ops: list[FileOp] = [written(b"a"), written(b"b", 1), Sync(0)]
    contents = {s.files["db"] for s in explore(EMPTY, ops) if s.point == 2}
    assert {b"", b"a", b"ab", b"\0b"} <= contents


def test_a_torn_write_keeps_whole_sectors_only() -> None:
    ops = [written(b"x" * 4 * SECTOR)]
    torn = [s.files["db"] for s in explore(EMPTY, ops) if s.kind.endswith("torn")]
    assert torn == [b"x" * 2 * SECTOR]


def test_a_growing_write_may_leave_its_length_without_its_data() -> None:
    ops = [written(b"page")]
    zeroed = [s.files["db"] for s in explore(EMPTY, ops) if "without data" in s.kind]
    assert zeroed == [b"\0\0\0\0"]


def test_a_created_file_needs_a_directory_sync_to_survive() -> None:
    ops: list[FileOp] = [Create("wal", 1), Write(1, 0, b"frame"), Sync(1)]
    assert "wal" not in materialize(EMPTY, ops, len(ops), set())
    synced: list[FileOp] = [*ops, Sync(DIRECTORY)]
    assert materialize(EMPTY, synced, len(synced), set())["wal"] == b"frame"


def test_an_unsynced_unlink_may_be_undone_by_the_crash() -> None:
    snapshot = Snapshot({"wal": 0}, {0: b"frames"})
    ops = [Unlink("wal")]
    names = {tuple(s.files) for s in explore(snapshot, ops)}
    assert names == {("wal",), ()}


def test_crash_points_are_before_each_sync_and_at_the_end() -> None:
    assert crash_points([written(b"a"), Sync(0), written(b"b")]) == [1, 3]


def test_the_trace_places_an_fsync_where_it_returned_and_a_send_where_it_began(
    tmp_path: Path,
) -> None:
    data = str(tmp_path).encode().hex()
    path = "".join(f"\\x{data[i : i + 2]}" for i in range(0, len(data), 2))
    db = path + "\\x2f\\x64\\x62"
    trace = "\n".join(
        [
            f'7 pwrite64(3<{db}>, "\\x61\\x62", 2, 0) = 2',
            f"7 fdatasync(3<{db}> <unfinished ...>",
            '8 sendto(5<socket:[1]>, "\\x6f\\x6b", 2, 0, NULL, 0) = 2',
            "7 <... fdatasync resumed>) = 0",
            f'7 pwrite64(3<{db}>, "\\x63", 1, 2) = 1',
        ]
    )
    recording = parse_trace(trace, tmp_path, EMPTY)
    assert recording.ops == [written(b"ab"), Sync(0), written(b"c", 2)]
    assert recording.sends == [(1, b"ok")]


def test_a_call_its_process_was_killed_in_is_left_out(tmp_path: Path) -> None:
    """strace prints ``= ?`` for a call that never returned (the process was killed in it):
    its effect is unknown and nothing waited on it."""
    data = str(tmp_path).encode().hex()
    db = "".join(f"\\x{data[i : i + 2]}" for i in range(0, len(data), 2)) + "\\x2f\\x64\\x62"
    trace = "\n".join(
        [
            f'7 pwrite64(3<{db}>, "\\x61", 1, 0) = 1',
            '9 openat(AT_FDCWD</>, "\\x2f\\x78", O_RDONLY|O_CLOEXEC) = ?',
            "9 +++ killed by SIGKILL +++",
            f'8 pwrite64(3<{db}>, "\\x62", 1, 1 <unfinished ...>',
            "8 <... pwrite64 resumed>) = ?",
            f"7 fdatasync(3<{db}>) = ?",
        ]
    )
    assert parse_trace(trace, tmp_path, EMPTY).ops == [written(b"a")]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    """One recording of a real authority, shared by the campaign's tests."""
    if shutil.which("strace") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("strace is required in CI (apt-get install -y strace)")
        pytest.skip("SKIPPED LOUDLY: strace is not installed; power-loss states not explored")
    root = tmp_path_factory.mktemp("power") / "recorded"
    return record(root, Signer.generate("acme"), BATCHES, PER_BATCH)


@pytest.mark.slow  # a real authority under strace, its crash states started
def test_every_explored_power_cut_starts_cleanly_and_loses_nothing(
    campaign: Campaign, tmp_path: Path
) -> None:
    assert sum(1 for s in campaign.sent if s.acknowledged) == BATCHES * PER_BATCH
    states = sample(list(explore(campaign.snapshot, campaign.ops)), STATES, random.Random(12))
    tally = Tally()
    for number, state in enumerate(states):
        tally.add(state, check_state(campaign, state, tmp_path / f"state{number}"))
        shutil.rmtree(tmp_path / f"state{number}")
    report = "\n".join(tally.lines())
    assert tally.states == STATES, report
    assert tally.acknowledged_checked > 0, report
    assert tally.problems == [], report
    assert (tally.lost, tally.second_roots, tally.witness_regressions) == (0, 0, 0), report


@pytest.mark.slow  # a real authority under strace, its crash states started
def test_the_checks_catch_a_disk_that_ignored_every_fsync(
    campaign: Campaign, tmp_path: Path
) -> None:
    """Without its fsyncs nothing recorded is durable: the state left is the snapshot, and
    the checks must report every acknowledged notice lost, every signed checkpoint
    contradicted once the log grows again, and the embedded witness gone back."""
    unsynced = [op for op in campaign.ops if not isinstance(op, Sync)]
    files = materialize(campaign.snapshot, unsynced, len(unsynced), set())
    state = CrashState(len(campaign.ops), "every fsync ignored", files)
    outcome = check_state(campaign, state, tmp_path / "state")
    signed = {(s.checkpoint.size, s.checkpoint.root_hash) for s in campaign.sent}
    assert outcome.started
    assert outcome.lost == BATCHES * PER_BATCH
    assert outcome.second_roots == len(signed)
    assert outcome.witness_regressions == 1
