"""The guard's verdicts: one behaviour per test, over real verified state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from deplog.client.cache.guard import Guard, Verdict
from deplog.client.follow.trust import TrustedState
from deplog.client.model.table import tool_status
from tests.builders import Clock, LocalLog

TOOL = "tool:org.acme/search"
PAST = "2026-01-01T00:00:00Z"
FUTURE = "2099-01-01T00:00:00Z"
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


@pytest.fixture
def guard(trusted: TrustedState, clock: Clock) -> Guard:
    return Guard(trusted.state, clock=clock)


def long_ago() -> datetime:
    return datetime(2000, 1, 1, tzinfo=UTC)


def just_now() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=1)


def test_nothing_synced_means_unknown(guard: Guard) -> None:
    decision = guard.check(TOOL, "1.0.0", cached_at=just_now())
    assert (decision.verdict, decision.reason) == (Verdict.UNKNOWN, "not_synced")
    assert decision.processed_through is None


def test_a_tool_without_notices_is_served(
    local: LocalLog, trusted: TrustedState, guard: Guard
) -> None:
    local.sync(trusted)
    decision = guard.check(TOOL, "1.0.0", cached_at=long_ago())
    assert (decision.verdict, decision.reason) == (Verdict.SERVE, "active")
    assert decision.may_serve


def test_every_decision_names_the_signed_checkpoint_it_was_made_at(
    local: LocalLog, trusted: TrustedState, guard: Guard
) -> None:
    local.sync(trusted)
    through = guard.check(TOOL, "1.0.0", cached_at=just_now()).processed_through
    assert through is not None
    assert through.size == 1
    assert through.checkpoint.encode() == local.log.published.note  # type: ignore[union-attr]


def test_deprecated_version_is_served_with_a_warning(
    local: LocalLog, trusted: TrustedState, guard: Guard
) -> None:
    index = local.publish(effective_at=PAST, sunset_at=FUTURE)
    local.sync(trusted)
    decision = guard.check(TOOL, "1.0.0", cached_at=just_now())
    assert (decision.verdict, decision.reason) == (Verdict.WARN, "deprecated")
    assert decision.status is not None and decision.status.notices == (index,)


def test_version_past_its_sunset_is_refused(
    local: LocalLog, trusted: TrustedState, guard: Guard
) -> None:
    local.publish(effective_at=PAST, sunset_at="2026-02-01T00:00:00Z")
    local.sync(trusted)
    decision = guard.check(TOOL, "1.0.0", cached_at=just_now())
    assert (decision.verdict, decision.reason) == (Verdict.REFUSE, "sunset")


def test_revoked_version_is_refused(local: LocalLog, trusted: TrustedState, guard: Guard) -> None:
    local.publish(action="revoke", reasons=["security"], advisories=["CVE-2026-1234"])
    local.sync(trusted)
    decision = guard.check(TOOL, "1.0.0", cached_at=just_now())
    assert (decision.verdict, decision.reason) == (Verdict.REFUSE, "revoked")
    assert not decision.may_serve


def test_revocation_effective_in_the_future_still_serves(
    local: LocalLog, trusted: TrustedState, guard: Guard
) -> None:
    local.publish(action="revoke", reasons=["policy"], effective_at=FUTURE)
    local.sync(trusted)
    decision = guard.check(TOOL, "1.0.0", cached_at=just_now())
    assert decision.verdict == Verdict.SERVE
    assert decision.status is not None and decision.status.pending


def test_range_covers_versions_inside_and_not_the_fixed_one(
    local: LocalLog, trusted: TrustedState, guard: Guard
) -> None:
    local.publish(
        action="revoke",
        reasons=["critical_bug"],
        affected={
            "ranges": [{"type": "SEMVER", "events": [{"introduced": "1.0.0"}, {"fixed": "1.4.0"}]}]
        },
    )
    local.sync(trusted)
    inside = guard.check(TOOL, "1.3.9-rc.1", cached_at=just_now())
    fixed = guard.check(TOOL, "1.4.0", cached_at=just_now())
    assert (inside.verdict, fixed.verdict) == (Verdict.REFUSE, Verdict.SERVE)


def test_withdrawn_revocation_serves_again(
    local: LocalLog, trusted: TrustedState, guard: Guard
) -> None:
    revoked = local.publish(action="revoke", reasons=["other"])
    local.publish(action="withdraw", withdraws=revoked, affected=None)
    local.sync(trusted)
    assert guard.check(TOOL, "1.0.0", cached_at=just_now()).verdict == Verdict.SERVE


def test_cached_definition_with_another_digest_is_refused(
    local: LocalLog, trusted: TrustedState, guard: Guard
) -> None:
    local.publish(schema_digest=DIGEST_A)
    local.sync(trusted)
    mismatch = guard.check(TOOL, "1.0.0", cached_at=just_now(), schema_digest=DIGEST_B)
    match = guard.check(TOOL, "1.0.0", cached_at=just_now(), schema_digest=DIGEST_A)
    assert (mismatch.verdict, mismatch.reason) == (Verdict.REFUSE, "schema_mismatch")
    assert match.verdict == Verdict.WARN


def test_cache_entry_older_than_the_latest_notice_is_stale(
    local: LocalLog, trusted: TrustedState, guard: Guard
) -> None:
    local.publish(affected={"versions": ["1.0.0"]}, sunset_at=FUTURE)
    local.sync(trusted)
    decision = guard.check(TOOL, "1.0.0", cached_at=long_ago())
    assert (decision.verdict, decision.reason) == (Verdict.STALE, "cache_predates_notice")


def test_a_notice_about_another_version_leaves_a_cache_entry_fresh(
    local: LocalLog, trusted: TrustedState, guard: Guard
) -> None:
    local.publish(affected={"versions": ["2.0.0"]})
    local.sync(trusted)
    assert guard.check(TOOL, "1.0.0", cached_at=long_ago()).verdict == Verdict.SERVE


def test_stale_checkpoint_is_never_served_and_a_sync_recovers(
    local: LocalLog, trusted: TrustedState, guard: Guard, clock: Clock
) -> None:
    local.sync(trusted)
    clock.now += timedelta(minutes=5, seconds=1).total_seconds()
    decision = guard.check(TOOL, "1.0.0", cached_at=just_now())
    assert (decision.verdict, decision.reason) == (Verdict.STALE, "checkpoint_stale")
    clock.now = datetime.now(UTC).timestamp()
    local.sync(trusted)  # nothing new, but verified again
    assert guard.check(TOOL, "1.0.0", cached_at=just_now()).verdict == Verdict.SERVE


def test_freshness_bound_is_configurable(
    trusted: TrustedState, local: LocalLog, clock: Clock
) -> None:
    local.sync(trusted)
    strict = Guard(trusted.state, freshness=timedelta(seconds=10), clock=clock)
    clock.now += 11
    assert strict.check(TOOL, "1.0.0", cached_at=just_now()).reason == "checkpoint_stale"


@pytest.mark.parametrize(("tool_id", "version"), [("search", "1.0.0"), (TOOL, "1.0")])
def test_malformed_identifiers_need_a_live_lookup(
    local: LocalLog, trusted: TrustedState, guard: Guard, tool_id: str, version: str
) -> None:
    local.sync(trusted)
    decision = guard.check(tool_id, version, cached_at=just_now())
    assert (decision.verdict, decision.reason) == (Verdict.UNKNOWN, "bad_identifier")


def test_same_name_in_another_namespace_is_not_affected(
    local: LocalLog, trusted: TrustedState, guard: Guard
) -> None:
    local.publish(action="revoke", reasons=["other"])
    local.sync(trusted)
    other = guard.check("tool:org.other/search", "1.0.0", cached_at=just_now())
    assert other.verdict == Verdict.SERVE


def test_a_remembered_status_changes_when_the_sunset_passes(
    local: LocalLog, trusted: TrustedState, clock: Clock
) -> None:
    local.publish(sunset_at="2030-01-01T00:00:00Z")
    local.sync(trusted)
    guard = Guard(trusted.state, freshness=timedelta(days=36500), clock=clock)
    clock.now = datetime(2029, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    assert guard.check(TOOL, "1.0.0", cached_at=just_now()).verdict == Verdict.WARN
    clock.now += 2
    assert guard.check(TOOL, "1.0.0", cached_at=just_now()).reason == "sunset"


def test_a_remembered_status_changes_after_an_advance(
    local: LocalLog, trusted: TrustedState, guard: Guard
) -> None:
    local.sync(trusted)
    assert guard.check(TOOL, "1.0.0", cached_at=just_now()).verdict == Verdict.SERVE
    local.publish(action="revoke", reasons=["other"])
    local.sync(trusted)
    assert guard.check(TOOL, "1.0.0", cached_at=just_now()).reason == "revoked"


def test_an_advance_in_progress_is_invisible_to_the_guard(
    local: LocalLog, trusted: TrustedState, guard: Guard
) -> None:
    """Staged entries are verified one by one but trusted only as a whole, at commit."""
    local.sync(trusted)
    old = trusted.state.size
    local.publish(action="revoke", reasons=["other"])
    published = local.log.published
    assert published is not None
    candidate = trusted.check_checkpoint(published.note)
    with trusted.advance(candidate) as session:
        session.add(local.log.tree.leaf_data(old, published.size))
        assert guard.check(TOOL, "1.0.0", cached_at=just_now()).verdict == Verdict.SERVE
        session.finish()
    assert guard.check(TOOL, "1.0.0", cached_at=just_now()).reason == "revoked"


def test_reports_do_not_see_an_advance_in_progress(local: LocalLog, trusted: TrustedState) -> None:
    local.sync(trusted)
    old = trusted.state.size
    local.publish(tool="tool:org.acme/brand-new")
    published = local.log.published
    assert published is not None
    with trusted.advance(trusted.check_checkpoint(published.note)) as session:
        session.add(local.log.tree.leaf_data(old, published.size))
        assert trusted.state.notice_at(old) is None
        index = trusted.state.tool_status_at("tool:org.acme/brand-new", published.size)
        assert not tool_status(index, "tool:org.acme/brand-new", datetime.now(UTC)).notices
        session.finish()
    assert trusted.state.notice_at(old) is not None
