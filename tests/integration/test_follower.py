"""A follower and guard against a real authority on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest

from deplog.client.cache.guard import Guard, Verdict
from deplog.client.follow.follower import Follower, SyncFollower
from deplog.client.follow.state import LocalState
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import JSON, AuthorityProcess, deplog, publish

pytestmark = pytest.mark.slow  # real authority processes

TOOL = "tool:org.acme/search"


def now() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=1)


async def test_guard_answers_from_notices_published_over_http(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    url = authority.url
    await publish(
        http, url, publisher, 1, affected={"versions": ["1.0.0"]}, sunset_at="2099-01-01T00:00:00Z"
    )
    revoked = await publish(
        http,
        url,
        publisher,
        2,
        action="revoke",
        reasons=["other"],
        affected={
            "ranges": [
                {"type": "SEMVER", "events": [{"introduced": "2.0.0"}, {"last_affected": "2.3.0"}]}
            ]
        },
    )
    await publish(
        http,
        url,
        publisher,
        3,
        action="revoke",
        reasons=["other"],
        affected={"versions": ["3.0.0"]},
        effective_at="2099-01-01T00:00:00Z",
    )
    await publish(
        http, url, publisher, 4, affected={"versions": ["4.0.0"]}, sunset_at="2026-02-01T00:00:00Z"
    )
    await publish(
        http,
        url,
        publisher,
        5,
        action="revoke",
        reasons=["other"],
        affected={"versions": ["5.0.0"]},
    )
    await publish(http, url, publisher, 6, action="withdraw", withdraws=revoked + 3, affected=None)

    async with Follower(url, authority.log_verifier, tmp_path / "state.db") as follower:
        result = await follower.sync()
        assert (result.old_size, result.new_size) == (0, 7)
        guard = Guard(follower.state)

        def verdict(version: str) -> tuple[Verdict, str]:
            decision = guard.check(TOOL, version, cached_at=now())
            return decision.verdict, decision.reason

        assert verdict("1.0.0") == (Verdict.WARN, "deprecated")
        assert verdict("2.1.0") == (Verdict.REFUSE, "revoked")
        assert verdict("2.3.1") == (Verdict.SERVE, "active")
        assert verdict("3.0.0") == (Verdict.SERVE, "active")  # effective in 2099
        assert verdict("4.0.0") == (Verdict.REFUSE, "sunset")
        assert verdict("5.0.0") == (Verdict.SERVE, "active")  # its revocation was withdrawn


async def test_follower_resumes_from_its_stored_checkpoint(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    state = tmp_path / "state.db"
    await publish(http, authority.url, publisher, 1)
    async with Follower(authority.url, authority.log_verifier, state) as follower:
        assert (await follower.sync()).new_size == 2
    await publish(http, authority.url, publisher, 2)
    async with Follower(authority.url, authority.log_verifier, state) as follower:
        result = await follower.sync()
    assert (result.old_size, result.new_size, result.tools) == (2, 3, frozenset({TOOL}))


async def test_guard_goes_stale_without_syncs_and_recovers_after_one(
    authority: AuthorityProcess, tmp_path: Path
) -> None:
    async with Follower(authority.url, authority.log_verifier, tmp_path / "s.db") as follower:
        await follower.sync()
        guard = Guard(follower.state, freshness=timedelta(seconds=1))
        assert guard.check(TOOL, "1.0.0", cached_at=now()).verdict == Verdict.SERVE
        await asyncio.sleep(1.2)
        assert guard.check(TOOL, "1.0.0", cached_at=now()).reason == "checkpoint_stale"
        await follower.sync()
        assert guard.check(TOOL, "1.0.0", cached_at=now()).verdict == Verdict.SERVE


def test_sync_follower_works_without_an_event_loop(
    authority: AuthorityProcess, tmp_path: Path
) -> None:
    with SyncFollower(authority.url, authority.log_verifier, tmp_path / "s.db") as follower:
        assert follower.sync().new_size == 1
        assert follower.state.size == 1


# A follower in its own process that reports each verified page on stdout, so
# the test can kill it at a known point in the middle of an advance.
FOLLOW_REPORTING_PAGES = textwrap.dedent("""
    import asyncio, sys
    from deplog.client.follow.follower import Follower
    from deplog.client.tlog.note import Verifier
    from deplog.client.follow.trust import AdvanceSession
    verify_page = AdvanceSession.add
    def add_and_report(session, leaves, now=None):
        verify_page(session, leaves, now)
        print("page", session.next_index, flush=True)
    AdvanceSession.add = add_and_report
    async def main():
        async with Follower(sys.argv[1], Verifier.parse(sys.argv[2]), sys.argv[3],
                            page_size=1) as follower:
            await follower.sync()
        print("finished", flush=True)
    asyncio.run(main())
""")


async def test_follower_killed_mid_sync_resumes_from_a_consistent_state(
    authority_files: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    authority_files.start()
    try:
        url = authority_files.url
        await asyncio.gather(*(publish(http, url, publisher, seq) for seq in range(1, 301)))
        state = tmp_path / "state.db"
        vkey = authority_files.log_verifier.vkey()
        child = subprocess.Popen(
            [sys.executable, "-c", FOLLOW_REPORTING_PAGES, url, vkey, str(state)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        while child.stdout.readline().strip() != "page 150":
            pass  # half the entries are verified and staged, none committed
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()

        reopened = LocalState(state, authority_files.log_verifier.name)
        assert reopened.size == 0 and reopened.trusted is None  # nothing partial survived
        reopened.close()
        async with Follower(url, authority_files.log_verifier, state) as follower:
            assert (await follower.sync()).new_size == 301
    finally:
        authority_files.stop()


def test_follow_and_status_commands(
    authority: AuthorityProcess, publisher: Signer, tmp_path: Path
) -> None:
    import urllib.request

    body = make_envelope(publisher, 1, action="revoke", reasons=["other"]).canonical_bytes()
    request = urllib.request.Request(authority.url + "/v1/notices", data=body, headers=JSON)
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201

    key = authority.log_verifier.vkey()
    followed = deplog("follow", authority.url, "--log-key", key, "--once", cwd=tmp_path)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.strip() == f"trusted {authority.log_verifier.name} at size 2"
    status = deplog("status", TOOL, "1.0.0", "--json", cwd=tmp_path)
    assert status.returncode == 5, status.stderr  # revoked: a script must refuse it
    shown = json.loads(status.stdout)
    assert (shown["status"], shown["notices"]) == ("revoked", [1])
    assert shown["processed_through"]["size"] == 2


async def test_following_an_authority_started_over_into_the_old_state_is_another_logs(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """``rm -rf data keys`` and a fresh start under the same origin, on the same URL: the
    old state is named as another log's (exit 2, the key it was built for, the fix), never
    a suspected fork to retry, and no evidence is written; the fix it names works."""
    cache = tmp_path / "cache"
    cache.mkdir()
    key_file = authority.keys / f"{authority.log_verifier.name.replace('/', '_')}.pub"

    def follow(state: str) -> subprocess.CompletedProcess[str]:
        return deplog(
            "follow", authority.url, "--once", "--log-key", key_file, "--state", state, cwd=cache
        )

    await publish(http, authority.url, publisher, 1)
    assert follow("deplog-state.db").returncode == 0
    old_key, url = authority.log_verifier.vkey(), authority.url
    authority.stop()
    shutil.rmtree(authority.data)
    shutil.rmtree(authority.keys)
    authority.init()  # the same origin, a new log key
    authority.add_publisher(publisher, "org.acme")
    assert authority.start(authority.port) == url
    async with aiohttp.ClientSession() as fresh:  # no connection kept to the old process
        for sequence in (1, 2):  # a longer log: without the recorded key, a suspected fork
            await publish(fresh, authority.url, publisher, sequence)
    assert authority.log_verifier.vkey() != old_key

    refused = follow("deplog-state.db")
    assert refused.returncode == 2
    assert refused.stderr == (
        f"deplog: --state: state_for_another_log: deplog-state.db was built for the log key "
        f"{old_key}, not for the log key given (an authority started over with new keys is "
        "another log, not a fork of the old one); follow into a new --state FILE, or delete "
        "deplog-state.db to start over\n"
    )
    assert sorted(path.name for path in cache.iterdir()) == ["deplog-state.db"]  # no evidence
    assert follow("new-state.db").returncode == 0
    (cache / "deplog-state.db").unlink()
    assert follow("deplog-state.db").stdout.startswith("trusted ")
