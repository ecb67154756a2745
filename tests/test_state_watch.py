"""A follower state watched by path: missing, unusable, late, deleted or replaced.

Real state files written by a real ``LocalState`` and follower sync; the clock
is the only thing injected (the look interval)."""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from deplog.client.cache.guard import Guard, Verdict
from deplog.client.follow.state import LocalState, StateError
from deplog.client.follow.trust import TrustedState
from deplog.client.follow.watch import LOOK_INTERVAL, PROBLEMS, StateProblem, WatchedState
from tests.builders import ORIGIN, Clock, LocalLog

TOOL = "tool:org.acme/search"


def later() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=60)


def follow(local: LocalLog, path: Path) -> LocalState:
    """A follower's state at ``path``, synced to ``local``'s latest checkpoint."""
    state = LocalState(path, ORIGIN)
    local.sync(TrustedState(state, local.signer.verifier()))
    return state


def watch(path: Path) -> WatchedState:
    """A watch that looks at the path on every read."""
    return WatchedState(path, interval=0)


def problem_of(watched: WatchedState) -> StateProblem:
    problem = watched.problem()
    assert problem is not None
    assert problem.code in PROBLEMS
    return problem


def test_a_missing_state_names_its_path_and_the_command_to_run(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    watched = watch(path)
    assert watched.trusted is None
    problem = problem_of(watched)
    assert problem.code == "missing"
    assert str(path) in problem.message and "deplog follow URL" in problem.message
    decision = Guard(watched).check(TOOL, "1.0.0", cached_at=later())
    assert (decision.verdict, decision.reason) == (Verdict.UNKNOWN, "not_synced")


def test_a_state_that_appears_later_is_decided_from(tmp_path: Path, local: LocalLog) -> None:
    path = tmp_path / "state.db"
    watched = watch(path)
    guard = Guard(watched)
    assert guard.check(TOOL, "1.0.0", cached_at=later()).reason == "not_synced"
    follow(local, path).close()
    assert guard.check(TOOL, "1.0.0", cached_at=later()).verdict == Verdict.SERVE
    assert watched.problem() is None


def test_the_path_is_looked_at_once_per_interval(tmp_path: Path, local: LocalLog) -> None:
    path = tmp_path / "state.db"
    clock = Clock(now=1000.0)
    watched = WatchedState(path, clock=clock)
    assert problem_of(watched).code == "missing"
    follow(local, path).close()
    clock.now += LOOK_INTERVAL / 2
    assert watched.trusted is None  # not looked at again yet
    clock.now += LOOK_INTERVAL / 2
    assert watched.trusted is not None


def test_a_directory_where_the_state_should_be_is_not_a_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.mkdir()
    problem = problem_of(watch(path))
    assert problem.code == "not_a_file"
    assert f"{path} is a directory" in problem.message


def test_a_file_that_is_not_a_database_is_not_a_state(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_text("not a database, but long enough to have a header\n" * 4)
    problem = problem_of(watch(path))
    assert problem.code == "not_a_state"
    assert str(path) in problem.message


def test_another_sqlite_database_is_not_a_state(tmp_path: Path) -> None:
    path = tmp_path / "gateway.db"
    other = sqlite3.connect(path)
    other.execute("CREATE TABLE tools (name TEXT)")
    other.commit()
    other.close()
    assert problem_of(watch(path)).code == "not_a_state"


def test_an_empty_file_is_a_state_being_created(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.touch()
    assert problem_of(watch(path)).code == "no_checkpoint"


def test_a_state_without_a_verified_checkpoint_names_the_first_sync(
    trusted: TrustedState,
) -> None:
    watched = watch(trusted.state.path)
    assert watched.trusted is None
    problem = problem_of(watched)
    assert problem.code == "no_checkpoint"
    assert "first sync" in problem.message


def test_a_deleted_state_is_missing_at_the_next_look_not_at_the_freshness_bound(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.sync(trusted)
    watched = watch(trusted.state.path)
    guard = Guard(watched)
    assert guard.check(TOOL, "1.0.0", cached_at=later()).verdict == Verdict.SERVE
    trusted.state.path.unlink()  # the follower still has it open
    assert guard.check(TOOL, "1.0.0", cached_at=later()).reason == "not_synced"
    assert problem_of(watched).code == "missing"
    with pytest.raises(StateError):
        watched.tool_status(TOOL)


def replace_state(path: Path, replacement: Path) -> None:
    """Move ``replacement`` (a closed state) over ``path``, with its WAL files (an
    operator's restore: a -wal left beside another database would be read into it)."""
    os.replace(replacement, path)
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def test_a_replaced_state_is_read_afresh(tmp_path: Path, local: LocalLog) -> None:
    path = tmp_path / "state.db"
    follow(local, path).close()
    watched = watch(path)
    guard = Guard(watched)
    assert guard.check(TOOL, "1.0.0", cached_at=later()).verdict == Verdict.SERVE
    local.publish(action="revoke", reasons=["other"], affected={"versions": ["1.0.0"]})
    follow(local, tmp_path / "restored.db").close()
    replace_state(path, tmp_path / "restored.db")
    assert guard.check(TOOL, "1.0.0", cached_at=later()).reason == "revoked"


def test_a_state_replaced_by_another_log_s_is_refused(tmp_path: Path, local: LocalLog) -> None:
    path = tmp_path / "state.db"
    follow(local, path).close()
    watched = watch(path)
    assert watched.trusted is not None
    follow(local, tmp_path / "other.db").close()
    other = sqlite3.connect(tmp_path / "other.db")
    other.execute("UPDATE trusted SET origin = 'other.example/log'")
    other.commit()
    other.close()
    replace_state(path, tmp_path / "other.db")
    assert watched.trusted is None
    assert problem_of(watched).code == "another_log"


def test_each_transition_is_heard_once(tmp_path: Path, local: LocalLog) -> None:
    path = tmp_path / "state.db"
    heard: list[str | None] = []
    watched = WatchedState(
        path, interval=0, on_change=lambda p: heard.append(None if p is None else p.code)
    )
    for _ in range(3):
        assert watched.trusted is None
    state = follow(local, path)
    for _ in range(3):
        assert watched.trusted is not None
    path.unlink()
    for _ in range(3):
        assert watched.trusted is None
    state.close()
    assert heard == ["missing", None, "missing"]
