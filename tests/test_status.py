"""Tests for client/status.py: tool status as a fold of notices."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deplog.client.model.notice import Notice, NoticeError
from deplog.client.model.semver import SemverError
from deplog.client.model.status import StatusError, StatusIndex
from tests.builders import TOOL, make_notice, revoke_json, withdraw_json

FEB = datetime(2026, 2, 1, tzinfo=UTC)  # effective_at of the default notice
JUNE = datetime(2026, 6, 1, tzinfo=UTC)  # its sunset_at
BEFORE, DURING, AFTER = FEB - timedelta(days=1), FEB + timedelta(days=1), JUNE + timedelta(days=1)


def index_of(*notices: Notice) -> StatusIndex:
    idx = StatusIndex()
    for i, n in enumerate(notices):
        idx.apply(i, n)
    return idx


def revoke(**kw: Any) -> Notice:
    return Notice.from_json(revoke_json(**kw))


def withdraw(target: int, **kw: Any) -> Notice:
    return Notice.from_json(withdraw_json(target, **kw))


def test_unknown_tool_is_active() -> None:
    s = StatusIndex().lookup(TOOL, "1.0.0", DURING)
    assert s.status == "active" and s.notices == () and s.effective_at is None


def test_unaffected_version_is_active() -> None:
    assert index_of(make_notice()).lookup(TOOL, "2.0.0", DURING).status == "active"


def test_deprecated_after_effective() -> None:
    s = index_of(make_notice()).lookup(TOOL, "1.0.0", DURING)
    assert s.status == "deprecated"
    assert s.notices == (0,) and s.effective_at == FEB and s.sunset_at == JUNE
    assert s.reasons == ("superseded",)


def test_future_notice_is_pending_and_changes_nothing() -> None:
    s = index_of(make_notice()).lookup(TOOL, "1.0.0", BEFORE)
    assert s.status == "active" and s.pending == (0,) and s.notices == ()


def test_sunset_after_sunset_at() -> None:
    s = index_of(make_notice()).lookup(TOOL, "1.0.0", AFTER)
    assert s.status == "sunset" and s.sunset_at == JUNE


def test_sunset_at_exact_instant() -> None:
    assert index_of(make_notice()).lookup(TOOL, "1.0.0", JUNE).status == "sunset"


def test_revoked_wins_over_sunset_and_deprecated() -> None:
    idx = index_of(make_notice(), revoke(effective_at="2026-03-01T00:00:00Z"))
    s = idx.lookup(TOOL, "1.0.0", AFTER)
    assert s.status == "revoked"
    assert s.notices == (0, 1)
    assert s.effective_at == datetime(2026, 3, 1, tzinfo=UTC)
    assert s.advisories == ("CVE-2026-1234",)
    assert s.reasons == ("superseded", "security")


def test_future_revoke_does_not_revoke_yet() -> None:
    idx = index_of(make_notice(), revoke(effective_at="2026-03-01T00:00:00Z"))
    s = idx.lookup(TOOL, "1.0.0", DURING)
    assert s.status == "deprecated" and s.pending == (1,)


def test_withdraw_restores_previous_state() -> None:
    idx = index_of(make_notice(), revoke(), withdraw(1))
    s = idx.lookup(TOOL, "1.0.0", DURING)
    assert s.status == "deprecated"
    assert s.notices == (0,) and s.withdrawn == ((1, 2),)


def test_withdraw_of_only_notice_makes_version_active() -> None:
    s = index_of(make_notice(), withdraw(0)).lookup(TOOL, "1.0.0", AFTER)
    assert s.status == "active" and s.withdrawn == ((0, 1),)


def test_future_withdraw_is_pending() -> None:
    idx = index_of(revoke(), withdraw(0, effective_at="2026-05-01T00:00:00Z"))
    s = idx.lookup(TOOL, "1.0.0", DURING)
    assert s.status == "revoked" and s.pending == (1,)
    assert idx.lookup(TOOL, "1.0.0", AFTER).status == "active"


def test_replacement_and_digest_come_from_latest_notice() -> None:
    first = make_notice(replacement={"tool_id": TOOL, "version": "2.0.0"})
    second = make_notice(
        sequence=2,
        replacement={"tool_id": TOOL, "version": "3.0.0"},
        schema_digest="sha256:" + "0" * 64,
    )
    s = index_of(first, second).lookup(TOOL, "1.0.0", DURING)
    assert s.replacement is not None and str(s.replacement.version) == "3.0.0"
    assert s.schema_digest == "sha256:" + "0" * 64


def test_range_notice_applies_by_precedence() -> None:
    n = make_notice(
        affected={
            "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "2.0.0"}]}]
        }
    )
    idx = index_of(n)
    assert idx.lookup(TOOL, "1.9.9+b", DURING).status == "deprecated"
    assert idx.lookup(TOOL, "2.0.0", DURING).status == "active"


def test_tools_are_scoped_by_namespace() -> None:
    idx = index_of(make_notice())
    assert idx.lookup("tool:com.other/search", "1.0.0", DURING).status == "active"


def test_lookup_refuses_bad_input() -> None:
    idx = index_of(make_notice())
    with pytest.raises(NoticeError) as e:
        idx.lookup("search", "1.0.0", DURING)
    assert e.value.code == "bad_tool_id"
    with pytest.raises(SemverError) as e:
        idx.lookup(TOOL, "1.0", DURING)
    assert e.value.code == "bad_version"


def test_lookup_refuses_naive_time() -> None:
    with pytest.raises(ValueError):
        index_of(make_notice()).lookup(TOOL, "1.0.0", datetime(2026, 1, 1))


def test_apply_refuses_out_of_order_index() -> None:
    idx = index_of(make_notice())
    with pytest.raises(StatusError) as e:
        idx.apply(0, make_notice(sequence=2))
    assert e.value.code == "index_not_increasing"


@pytest.mark.parametrize(
    "notices",
    [
        [withdraw(0)],  # nothing to withdraw
        [make_notice(), withdraw(0, publisher="other")],
        [make_notice(), withdraw(0, tool_id="tool:org.example/other")],
        [make_notice(), withdraw(0), withdraw(1)],  # a withdraw is not a target
    ],
)
def test_apply_refuses_a_withdraw_of_an_unknown_target(notices: list[Notice]) -> None:
    idx = index_of(*notices[:-1])
    with pytest.raises(StatusError) as e:
        idx.apply(len(notices) - 1, notices[-1])
    assert e.value.code == "unknown_withdraw_target"


def test_last_index_tracks_every_touch() -> None:
    idx = StatusIndex()
    assert idx.last_index(TOOL) is None
    idx.apply(3, make_notice())
    idx.apply(7, make_notice(tool_id="tool:org.example/other"))
    idx.apply(9, withdraw(3))
    assert idx.last_index(TOOL) == 9
    assert idx.last_index("tool:org.example/other") == 7


def test_version_status_json_has_every_key() -> None:
    j = index_of(make_notice()).lookup(TOOL, "1.0.0", DURING).to_json()
    assert j["status"] == "deprecated"
    assert j["effective_at"] == "2026-02-01T00:00:00Z"
    assert j["sunset_at"] == "2026-06-01T00:00:00Z"
    assert j["replacement"] is None and j["withdrawn"] == []


def test_lookup_cost_is_per_tool() -> None:
    idx = StatusIndex()
    for i in range(2000):
        idx.apply(i, make_notice(tool_id=f"tool:org.example/t{i}"))
    assert len(idx._tools) == 2000
    assert idx.lookup("tool:org.example/t5", "1.0.0", DURING).notices == (5,)
