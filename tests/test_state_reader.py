"""A worker's read-only view of the follower's state file."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

from deplog.client.cache.guard import SNAPSHOT_ATTEMPTS, Guard, Verdict
from deplog.client.errors import ErrorCode
from deplog.client.follow.reader import StateReader
from deplog.client.follow.state import StateError
from deplog.client.follow.trust import TrustedState
from deplog.client.model.status import StatusIndex
from tests.builders import LocalLog

TOOL = "tool:org.acme/search"


def later() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=60)


def test_a_reader_sees_each_advance_the_follower_commits(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.sync(trusted)
    reader = StateReader(trusted.state.path)
    guard = Guard(reader)
    assert guard.check(TOOL, "1.0.0", cached_at=later()).verdict == Verdict.SERVE
    local.publish(action="revoke", reasons=["other"], affected={"versions": ["1.0.0"]})
    local.sync(trusted)
    decision = guard.check(TOOL, "1.0.0", cached_at=later())
    assert (decision.verdict, decision.reason) == (Verdict.REFUSE, "revoked")
    assert decision.processed_through is not None
    assert decision.processed_through.size == trusted.state.size
    reader.close()


def test_freshness_is_the_follower_s_verified_time(trusted: TrustedState, local: LocalLog) -> None:
    local.sync(trusted)
    reader = StateReader(trusted.state.path)
    assert reader.trusted is not None and trusted.state.trusted is not None
    assert reader.trusted.verified_at == trusted.state.trusted.verified_at
    verified = reader.trusted.verified_at.timestamp()
    guard = Guard(reader, freshness=timedelta(seconds=10), clock=lambda: verified + 11)
    assert guard.check(TOOL, "1.0.0", cached_at=later()).reason == "checkpoint_stale"
    reader.close()


def test_a_reader_cannot_write_the_state(trusted: TrustedState, local: LocalLog) -> None:
    local.sync(trusted)
    reader = StateReader(trusted.state.path)
    with pytest.raises(sqlite3.OperationalError):
        reader._conn.execute("DELETE FROM notices")
    reader.close()


def test_a_reader_before_the_first_sync_decides_unknown(trusted: TrustedState) -> None:
    reader = StateReader(trusted.state.path)
    assert Guard(reader).check(TOOL, "1.0.0", cached_at=later()).reason == "not_synced"
    reader.close()


def test_no_state_file_is_a_stable_error(tmp_path: object) -> None:
    with pytest.raises(StateError) as raised:
        StateReader(f"{tmp_path}/absent.db")
    assert raised.value.code == ErrorCode.NO_STATE


class _FollowerCommitsDuringTheFold(StateReader):
    """A real reader whose fold runs just after the real follower committed ``commits``
    more advances: the interleaving of a worker's two reads with the follower's writes."""

    def __init__(self, trusted: TrustedState, local: LocalLog, commits: int) -> None:
        super().__init__(trusted.state.path)
        self._follower, self._local, self.commits = trusted, local, commits

    def tool_status(self, tool_id: str) -> tuple[StatusIndex, dict[int, float]]:
        if self.commits:
            self.commits -= 1
            self._local.publish(
                action="deprecate", reasons=["other"], affected={"versions": ["2.0.0"]}
            )
            self._local.sync(self._follower)
        return super().tool_status(tool_id)


def test_a_verdict_is_never_labelled_with_a_checkpoint_it_was_not_made_at(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.sync(trusted)
    local.publish(action="revoke", reasons=["other"], affected={"versions": ["1.0.0"]})
    reader = _FollowerCommitsDuringTheFold(trusted, local, commits=1)
    before = trusted.state.size  # the revoke is published, not yet followed
    decision = Guard(reader).check(TOOL, "1.0.0", cached_at=later())
    assert (decision.verdict, decision.reason) == (Verdict.REFUSE, "revoked")
    assert decision.processed_through is not None
    assert decision.processed_through.size == trusted.state.size > before
    reader.close()


def test_a_state_that_advances_under_every_read_is_stale_not_guessed(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.sync(trusted)
    reader = _FollowerCommitsDuringTheFold(trusted, local, commits=SNAPSHOT_ATTEMPTS)
    decision = Guard(reader).check(TOOL, "1.0.0", cached_at=later())
    assert (decision.verdict, decision.reason) == (Verdict.STALE, "state_advancing")
    assert decision.processed_through is None
    reader.close()
