"""Tests for client/model/table.py: a tool's status table from its fold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from deplog.client.model.notice import Notice, VersionRange
from deplog.client.model.status import InvalidMark, StatusIndex
from deplog.client.model.table import covers, tool_status, version_row
from tests.builders import TOOL, make_notice, revoke_json, withdraw_json

FEB = datetime(2026, 2, 1, tzinfo=UTC)
DURING = FEB + timedelta(days=1)
SECURITY_RANGE = {"type": "SEMVER", "events": [{"introduced": "1.0.0"}, {"fixed": "2.0.0"}]}


def index_of(*notices: Notice | InvalidMark) -> StatusIndex:
    idx = StatusIndex()
    for i, n in enumerate(notices):
        idx.apply(i, n)
    return idx


def weather(**revoke: Any) -> StatusIndex:
    """The issue's example: 1.0.0-2.0.0 revoked for security, 2.3.1 deprecated."""
    fields: dict[str, Any] = {
        "affected": {"ranges": [SECURITY_RANGE]},
        "advisories": ["CVE-2026-1234", "GHSA-23cf-gh45-mpqr"],
        "message": "remote code execution: upgrade",
        **revoke,
    }
    return index_of(
        Notice.from_json(revoke_json(**fields)),
        make_notice(affected={"versions": ["2.3.1"]}, sunset_at=None, sequence=2),
    )


def rng(*events: tuple[str, str]) -> VersionRange:
    return VersionRange.from_json({"type": "SEMVER", "events": [{k: v} for k, v in events]})


def test_a_range_is_a_row_with_its_versions_in_words() -> None:
    table = tool_status(weather(), TOOL, DURING)
    [version, revoked] = table.rows
    assert (version.version, version.status) == ("2.3.1", "deprecated")
    assert revoked.range is not None and revoked.version is None
    assert revoked.covers == "1.0.0 up to 2.0.0 (not included)"
    assert revoked.status == "revoked" and revoked.decided.notices == (0,)
    assert revoked.decided.advisories == ("CVE-2026-1234", "GHSA-23cf-gh45-mpqr")


def test_the_worst_row_is_the_tools_status() -> None:
    assert tool_status(weather(), TOOL, DURING).status == "revoked"


def test_a_version_row_is_the_lookup() -> None:
    index = weather()
    row = version_row(index, TOOL, "1.5.0", DURING)
    assert row.decided == index.lookup(TOOL, "1.5.0", DURING)
    assert row.message == "remote code execution: upgrade"


def test_a_named_version_inside_a_range_folds_both_notices() -> None:
    index = weather(affected={"ranges": [SECURITY_RANGE], "versions": ["1.2.0"]})
    index.apply(2, make_notice(affected={"versions": ["1.2.0"]}, sequence=3))
    row = next(r for r in tool_status(index, TOOL, DURING).rows if r.version == "1.2.0")
    assert row.status == "revoked" and row.decided.notices == (0, 2)


def test_a_range_row_folds_only_the_notices_carrying_it() -> None:
    index = weather()
    index.apply(2, make_notice(affected={"versions": ["1.5.0"]}, sequence=3))
    [_, _, revoked] = tool_status(index, TOOL, DURING).rows
    assert revoked.decided.notices == (0,)


def test_a_withdrawn_range_is_active_and_names_its_withdraw() -> None:
    index = weather()
    index.apply(2, Notice.from_json(withdraw_json(0, sequence=3)))
    table = tool_status(index, TOOL, DURING)
    assert table.rows[1].status == "active" and table.rows[1].decided.withdrawn == ((0, 2),)
    assert table.status == "deprecated"
    assert [n["withdrawn_by"] for n in table.notices] == [[2], [], []]


def test_a_pending_notice_shows_when_it_takes_effect() -> None:
    later = "2026-03-01T00:00:00Z"
    row = tool_status(weather(effective_at=later), TOOL, DURING).rows[1]
    assert row.status == "active" and row.message is None
    assert row.to_json()["pending"] == [{"index": 0, "effective_at": later}]


def test_an_invalid_entry_makes_every_row_unknown() -> None:
    index = weather()
    index.apply(2, InvalidMark(TOOL, 2))
    table = tool_status(index, TOOL, DURING)
    assert {row.status for row in table.rows} == {"unknown"} and table.invalid == (2,)
    assert table.status == "unknown"


def test_a_tool_named_only_by_an_invalid_entry_is_unknown_with_no_rows() -> None:
    table = tool_status(index_of(InvalidMark(TOOL, 0)), TOOL, DURING)
    assert table.rows == () and table.status == "unknown"


def test_a_tool_no_notice_names_is_active_with_no_rows() -> None:
    table = tool_status(StatusIndex(), TOOL, DURING)
    assert table.to_json() == {
        "tool_id": TOOL,
        "status": "active",
        "last_index": None,
        "rows": [],
        "notices": [],
        "invalid": [],
    }


def test_covers_writes_osv_events_plainly() -> None:
    assert covers(rng(("introduced", "1.0.0"), ("last_affected", "1.0.7"))) == (
        "1.0.0 through 1.0.7"
    )
    assert covers(rng(("introduced", "0"), ("fixed", "2.0.0"))) == "every version below 2.0.0"
    assert covers(rng(("introduced", "2.5.0"))) == "2.5.0 and later"
    assert covers(rng(("introduced", "1.0.0"), ("fixed", "1.1.0"), ("introduced", "3.0.0"))) == (
        "1.0.0 up to 1.1.0 (not included), 3.0.0 and later"
    )


def test_messages_come_from_the_callers_source_when_given() -> None:
    table = tool_status(weather(), TOOL, DURING, messages=lambda i: f"leaf {i}")
    assert [row.message for row in table.rows] == ["leaf 1", "leaf 0"]


def test_a_row_json_has_every_key() -> None:
    row = tool_status(weather(), TOOL, DURING).to_json()["rows"][1]
    assert row["kind"] == "range" and row["version"] is None
    assert row["range"] == SECURITY_RANGE and row["status"] == "revoked"
    assert row["covers"] == "1.0.0 up to 2.0.0 (not included)"
    assert row["message"] == "remote code execution: upgrade"
    assert row["effective_at"] == "2026-02-01T00:00:00Z" and row["pending"] == []
