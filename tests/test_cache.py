"""The guarded cache: guard on every hit, precise eviction on every verified advance."""

from __future__ import annotations

import pytest

from deplog.client.cache.guard import Guard
from deplog.client.cache.guarded_cache import GuardedCache
from deplog.client.follow.trust import TrustedState
from tests.builders import Clock, LocalLog

ACME = "tool:org.acme/search"
OTHER = "tool:org.other/search"  # the same name in another publisher's namespace


@pytest.fixture
def evictions() -> list[tuple[tuple[str, str], str]]:
    return []


@pytest.fixture
def synced(trusted: TrustedState, local: LocalLog) -> TrustedState:
    """The follower state after one verified sync of ``local``."""
    local.sync(trusted)
    return trusted


@pytest.fixture
def cache(synced: TrustedState, evictions: list[tuple[tuple[str, str], str]]) -> GuardedCache[str]:
    cache: GuardedCache[str] = GuardedCache(
        Guard(synced.state), on_evict=lambda key, why: evictions.append((key, why))
    )
    for tool in (ACME, OTHER):
        for version in ("1.0.0", "2.0.0"):
            cache.put(tool, version, f"{tool}@{version}")
    return cache


def advance(local: LocalLog, trusted: TrustedState, **notice: object):  # type: ignore[no-untyped-def]
    local.publish(**notice)
    advanced = local.sync(trusted)
    assert advanced is not None
    return advanced


def test_a_hit_with_nothing_against_it_is_served(cache: GuardedCache[str]) -> None:
    hit = cache.get(ACME, "1.0.0")
    assert hit.served and hit.value == f"{ACME}@1.0.0"


def test_a_miss_is_a_miss(cache: GuardedCache[str]) -> None:
    assert not cache.get(ACME, "9.9.9").served


def test_an_advance_evicts_exactly_the_changed_key(
    cache: GuardedCache[str],
    local: LocalLog,
    trusted: TrustedState,
    evictions: list[tuple[tuple[str, str], str]],
) -> None:
    advanced = advance(
        local, trusted, action="revoke", reasons=["other"], affected={"versions": ["1.0.0"]}
    )
    evicted = cache.invalidate(advanced.changes)
    assert evicted == [(ACME, "1.0.0")]
    assert evictions == [((ACME, "1.0.0"), "status_changed")]
    assert cache.get(OTHER, "1.0.0").served and cache.get(ACME, "2.0.0").served


def test_a_range_notice_evicts_every_cached_version_it_covers(
    cache: GuardedCache[str], local: LocalLog, trusted: TrustedState
) -> None:
    advanced = advance(
        local,
        trusted,
        action="revoke",
        reasons=["other"],
        affected={
            "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "3.0.0"}]}]
        },
    )
    assert sorted(cache.invalidate(advanced.changes)) == [(ACME, "1.0.0"), (ACME, "2.0.0")]


def test_a_withdrawal_evicts_the_keys_it_restores(
    cache: GuardedCache[str], local: LocalLog, trusted: TrustedState
) -> None:
    revoked = local.publish(action="revoke", reasons=["other"])
    local.sync(trusted)
    cache.put(ACME, "1.0.0", "refetched")
    advanced = advance(local, trusted, action="withdraw", withdraws=revoked, affected=None)
    assert cache.invalidate(advanced.changes) == [(ACME, "1.0.0")]


def test_a_notice_that_changes_no_cached_status_evicts_nothing(
    cache: GuardedCache[str], local: LocalLog, trusted: TrustedState
) -> None:
    advanced = advance(local, trusted, affected={"versions": ["7.0.0"]})
    assert cache.invalidate(advanced.changes) == []
    assert [c.versions for c in advanced.changes] == [frozenset({"7.0.0"})]


def test_a_revoked_entry_is_refused_and_dropped_on_the_next_hit(
    cache: GuardedCache[str], local: LocalLog, trusted: TrustedState
) -> None:
    advance(local, trusted, action="revoke", reasons=["other"])
    hit = cache.get(ACME, "1.0.0")
    assert not hit.served and hit.decision is not None and hit.decision.reason == "revoked"
    assert (ACME, "1.0.0") not in list(cache)


def test_entries_expire_after_their_ttl(synced: TrustedState) -> None:
    clock = Clock()
    cache: GuardedCache[str] = GuardedCache(Guard(synced.state), ttl=60, clock=clock)
    cache.put(ACME, "1.0.0", "x")
    clock.now += 61
    assert not cache.get(ACME, "1.0.0").served
    assert len(cache) == 0


def test_capacity_evicts_the_least_recently_used(synced: TrustedState) -> None:
    cache: GuardedCache[str] = GuardedCache(Guard(synced.state), max_entries=2)
    cache.put(ACME, "1.0.0", "a")
    cache.put(ACME, "2.0.0", "b")
    cache.get(ACME, "1.0.0")
    cache.put(ACME, "3.0.0", "c")
    assert sorted(cache) == [(ACME, "1.0.0"), (ACME, "3.0.0")]
