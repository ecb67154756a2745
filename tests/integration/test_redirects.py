"""Redirects against real servers on 127.0.0.1: followed within one origin, refused beyond it.

Every client request goes through ``HttpClient.request`` (``client.follow.http``
rule 6): the JSON API, tiles, the checkpoint stream, ``deplog export``,
``publish`` and ``check --url``. A ``Redirector`` (``redirector.py``) stands
before the log, and another server is another origin: another port, or the
same port named ``localhost`` instead of ``127.0.0.1``, or http behind an https
one. A refused redirect asks nothing of the other origin, which each test
checks on that server's own request list.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path

import aiohttp
import pytest

from deplog.client.cli.main import main
from deplog.client.cli.publish import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from deplog.client.errors import ErrorCode
from deplog.client.follow.follower import Follower
from deplog.client.follow.http import MAX_REDIRECTS, HttpClient, HttpLogSource
from deplog.client.follow.source import FetchError, fetch_page
from deplog.client.follow.tiles import TilesLogSource
from deplog.client.tlog.note import Signer
from deplog.client.tlog.tiles import EntryTile
from tests.builders import LocalLog
from tests.integration.harness import AuthorityProcess
from tests.integration.redirector import (
    MOVED,
    Redirector,
    echo_server,
    https_contexts,
    redirector,
)
from tests.integration.scripted_authority import STREAM, ScriptedAuthority, running
from tests.integration.test_publish_cli import deplog, notice_flags, times_logged, write_key
from tests.integration.tiles_server import in_thread, static_server


@pytest.fixture
def local(tmp_path: Path) -> LocalLog:
    """A real log of 11 entries: a registration and 10 notices, with its tiles written."""
    (tmp_path / "log").mkdir()
    local = LocalLog(tmp_path / "log")
    local.publish_many(10)
    local.write_tiles(tmp_path / "tiles")
    return local


@pytest.fixture
async def api(local: LocalLog) -> AsyncIterator[ScriptedAuthority]:
    async with running(ScriptedAuthority(local.snapshot())) as served:
        yield served


@pytest.fixture
async def front(api: ScriptedAuthority) -> AsyncIterator[Redirector]:
    """A redirecting server before ``api``, on another port (another origin)."""
    async with redirector(api.url) as served:
        yield served


async def refusal(answer: Awaitable[object]) -> FetchError:
    """The ``redirect_refused`` the awaited ``answer`` raises."""
    with pytest.raises(FetchError) as refused:
        await answer
    assert refused.value.code == ErrorCode.REDIRECT_REFUSED
    return refused.value


# --- the JSON API -----------------------------------------------------------------------


async def test_the_json_source_follows_a_redirect_within_its_origin(
    local: LocalLog, api: ScriptedAuthority, front: Redirector
) -> None:
    front.move_to = MOVED
    async with HttpLogSource(front.url) as source:
        assert await source.checkpoint() == await local.snapshot().checkpoint()
        assert await fetch_page(source, 0, 11) == list(await local.snapshot().entries(0, 11))
    assert front.requests[:2] == [("GET", "/checkpoint"), ("GET", "/moved/checkpoint")]
    assert ("GET", "/moved/v1/entries?start=0&end=11") in front.requests


async def test_a_follower_syncs_a_log_moved_within_its_origin(
    local: LocalLog, front: Redirector, tmp_path: Path
) -> None:
    front.move_to, front.move_status = MOVED, 308
    async with Follower(front.url, local.signer.verifier(), tmp_path / "s.db") as follower:
        assert (await follower.sync()).new_size == 11


async def test_a_redirect_to_another_port_is_refused_and_nothing_is_asked_there(
    api: ScriptedAuthority, front: Redirector
) -> None:
    front.move_to = api.url
    async with HttpLogSource(front.url) as source:
        refused = await refusal(source.checkpoint())
    assert str(refused).startswith("redirected to another origin")
    assert api.requests == []


async def test_a_redirect_to_another_host_is_refused_and_nothing_is_asked_there(
    api: ScriptedAuthority, front: Redirector
) -> None:
    front.move_to = api.url.replace("127.0.0.1", "localhost")
    async with HttpLogSource(front.url) as source:
        await refusal(source.consistency(1, 11))
    assert api.requests == []


async def test_the_json_source_follows_an_https_redirect_within_its_origin(
    local: LocalLog, api: ScriptedAuthority, tmp_path: Path
) -> None:
    server, client = https_contexts(tmp_path)
    async with (
        redirector(api.url, tls=server) as tls_front,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client)) as session,
    ):
        tls_front.move_to = MOVED
        async with HttpLogSource(tls_front.url, session=session) as source:
            assert await source.checkpoint() == await local.snapshot().checkpoint()


async def test_a_redirect_from_https_to_http_is_refused_and_nothing_is_asked_there(
    api: ScriptedAuthority, tmp_path: Path
) -> None:
    server, client = https_contexts(tmp_path)
    async with (
        redirector(api.url, tls=server) as tls_front,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client)) as session,
    ):
        tls_front.move_to = api.url  # plain http
        async with HttpLogSource(tls_front.url, session=session) as source:
            refused = await refusal(source.checkpoint())
    assert str(refused).startswith("redirected from https to http")
    assert api.requests == []


async def test_three_redirects_are_followed_and_a_fourth_is_refused(
    local: LocalLog, front: Redirector
) -> None:
    hops = [f"/checkpoint?hop={n}" for n in range(MAX_REDIRECTS + 2)]
    hops[0] = "/checkpoint"
    for here, there in itertools.pairwise(hops):
        front.redirects[here] = (302, there)
    async with HttpLogSource(front.url) as source:
        del front.redirects[hops[MAX_REDIRECTS]]  # the third hop lands
        assert await source.checkpoint() == await local.snapshot().checkpoint()
        front.redirects[hops[MAX_REDIRECTS]] = (302, hops[MAX_REDIRECTS + 1])
        refused = await refusal(source.checkpoint())
    assert str(refused).startswith(f"redirected more than {MAX_REDIRECTS} times")


async def test_a_redirect_loop_ends_after_a_bounded_number_of_requests(front: Redirector) -> None:
    front.redirects["/checkpoint"] = (307, "/checkpoint")
    async with HttpLogSource(front.url) as source:
        await refusal(source.checkpoint())
        assert source.requests == MAX_REDIRECTS + 1
    assert len(front.requests) == MAX_REDIRECTS + 1


async def test_the_checkpoint_stream_refuses_a_redirect_to_another_origin(
    api: ScriptedAuthority, front: Redirector
) -> None:
    front.redirects[STREAM] = (302, api.url + STREAM)
    async with HttpLogSource(front.url) as source:
        await refusal(anext(aiter(source.checkpoints())))
    assert api.requests == []


# --- a POST ------------------------------------------------------------------------------


@pytest.fixture
async def echo_front() -> AsyncIterator[Redirector]:
    async with echo_server() as echo, redirector(echo) as served:
        yield served


async def post(url: str) -> bytes:
    async with (
        HttpClient(5.0, None) as client,
        client.request(url + "/v1/notices", method="POST", data=b"envelope") as response,
    ):
        return await response.read()


@pytest.mark.parametrize("status", [307, 308])
async def test_a_post_is_sent_again_by_a_307_or_308_within_its_origin(
    echo_front: Redirector, status: int
) -> None:
    echo_front.move_to, echo_front.move_status = MOVED, status
    assert await post(echo_front.url) == b"POST: envelope"
    assert echo_front.bodies == [b"envelope", b"envelope"]


@pytest.mark.parametrize("status", [301, 302, 303])
async def test_a_post_redirected_as_a_get_is_refused(echo_front: Redirector, status: int) -> None:
    echo_front.move_to, echo_front.move_status = MOVED, status
    refused = await refusal(post(echo_front.url))
    assert str(refused).startswith("redirected without the request's method and body")
    assert echo_front.requests == [("POST", "/v1/notices")]


async def test_a_post_redirected_to_another_origin_is_refused(echo_front: Redirector) -> None:
    async with echo_server() as elsewhere, redirector(elsewhere) as other:
        echo_front.move_to, echo_front.move_status = other.url, 307
        await refusal(post(echo_front.url))
    assert other.requests == []


# --- tiles -----------------------------------------------------------------------------


@pytest.fixture
async def tiles_front(tmp_path: Path, local: LocalLog) -> AsyncIterator[tuple[Redirector, str]]:
    """A redirecting server before the static tiles; and the static server's own URL."""
    async with static_server(tmp_path / "tiles") as url, redirector(url) as served:
        yield served, url


async def test_the_tiles_source_follows_a_redirect_within_its_origin(
    local: LocalLog, tiles_front: tuple[Redirector, str]
) -> None:
    front, _ = tiles_front
    front.move_to = MOVED
    async with TilesLogSource(front.url) as source:
        await source.checkpoint()
        assert await fetch_page(source, 0, 11) == list(await local.snapshot().entries(0, 11))
    assert ("GET", f"{MOVED}/{EntryTile(0, 11).path}") in front.requests


async def test_the_tiles_source_refuses_a_redirect_to_another_origin(
    tiles_front: tuple[Redirector, str],
) -> None:
    front, static_url = tiles_front
    front.move_to = static_url
    async with TilesLogSource(front.url) as source:
        await refusal(source.checkpoint())


async def test_a_follower_whose_tiles_redirect_elsewhere_syncs_through_the_json_api(
    local: LocalLog, api: ScriptedAuthority, tiles_front: tuple[Redirector, str], tmp_path: Path
) -> None:
    front, static_url = tiles_front
    bundle = EntryTile(0, 11).path
    front.redirects[f"/{bundle}"] = (302, f"{static_url}/{bundle}")
    async with (
        TilesLogSource(front.url) as source,
        HttpLogSource(api.url) as fallback,
        Follower(source, local.signer.verifier(), tmp_path / "s.db", fallback=fallback) as f,
    ):
        assert (await f.sync()).new_size == 11
    assert api.ranges  # the entries came through the JSON API


# --- the deplog command ------------------------------------------------------------------


@pytest.fixture
def threaded(local: LocalLog) -> Iterator[tuple[ScriptedAuthority, Redirector]]:
    """``api`` and a redirector before it, each on a loop of its own thread (the command
    runs its own)."""
    with (
        in_thread(running(ScriptedAuthority(local.snapshot()))) as served,
        in_thread(redirector(served.url)) as served_front,
    ):
        yield served, served_front


def test_follow_once_names_a_refused_redirect_and_what_to_do(
    local: LocalLog,
    threaded: tuple[ScriptedAuthority, Redirector],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    served, served_front = threaded
    served_front.move_to = served.url
    key = local.signer.verifier().vkey()
    state = tmp_path / "s.db"
    argv = ["follow", served_front.url, "--once", "--log-key", key, "--state", str(state)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("deplog: redirect_refused: the server redirected to another origin")
    assert "give the URL it redirects to directly" in err
    assert not state.exists()
    assert served.requests == []


def test_follow_without_once_does_not_wait_out_a_refused_redirect(
    local: LocalLog, threaded: tuple[ScriptedAuthority, Redirector], tmp_path: Path
) -> None:
    """The long-running mode retries an unreachable authority until it answers; a refused
    redirect is the URL's to fix, so it ends the command at once instead."""
    served, served_front = threaded
    served_front.move_to = served.url
    key = local.signer.verifier().vkey()
    argv = ["follow", served_front.url, "--log-key", key, "--state", str(tmp_path / "s.db")]
    exits: list[int] = []
    command = threading.Thread(target=lambda: exits.append(main(argv)), daemon=True)
    command.start()
    command.join(30)
    assert exits == [1]


def test_export_names_a_refused_redirect(
    threaded: tuple[ScriptedAuthority, Redirector],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    served, served_front = threaded
    served_front.move_to = served.url
    assert main(["export", served_front.url, "--out", str(tmp_path / "copy")]) == 1
    assert capsys.readouterr().err == (
        "deplog export: redirect_refused: redirected to another origin, not followed: "
        "give the URL it leads to\n"
    )
    assert served.requests == []


def test_check_with_url_says_it_skipped_a_refused_redirect_and_keeps_its_verdict(
    local: LocalLog,
    threaded: tuple[ScriptedAuthority, Redirector],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    served, served_front = threaded
    state = str(tmp_path / "s.db")
    key = local.signer.verifier().vkey()
    assert main(["follow", served.url, "--once", "--log-key", key, "--state", state]) == 0
    served_front.move_to = served.url.replace("127.0.0.1", "localhost")
    capsys.readouterr()
    check = ["check", "tool:org.acme/t1", "1.0.0", "--state", state]
    assert main([*check, "--url", served_front.url]) == main(check)
    err = capsys.readouterr().err
    assert err.startswith("deplog: warning: --url: redirect_refused: ")
    assert err.endswith("the state was not compared with it\n")


# --- deplog publish, against a real authority --------------------------------------------


@pytest.fixture
def publish_dir(tmp_path: Path, publisher: Signer) -> Path:
    work = tmp_path / "publisher"
    write_key(work / "keys", publisher)
    return work


@pytest.fixture
def authority_front(authority: AuthorityProcess) -> Iterator[Redirector]:
    with in_thread(redirector(authority.url)) as served:
        yield served


@pytest.mark.slow  # a real authority process
def test_publish_through_a_307_within_the_origin_is_logged_once(
    authority: AuthorityProcess, authority_front: Redirector, publish_dir: Path
) -> None:
    authority_front.move_to, authority_front.move_status = MOVED, 307
    run = deplog("publish", "--url", authority_front.url, *notice_flags(), cwd=publish_dir)
    assert run.code == EXIT_OK, run.stderr
    [envelope] = [p for p in (publish_dir / "out").glob("*.envelope.json") if not p.is_symlink()]
    assert times_logged(authority, envelope) == 1


@pytest.mark.slow  # a real authority process
def test_publish_redirected_to_another_origin_logs_nothing_and_keeps_the_envelope(
    authority: AuthorityProcess, authority_front: Redirector, publish_dir: Path
) -> None:
    authority_front.move_to, authority_front.move_status = authority.url, 307
    run = deplog("publish", "--url", authority_front.url, *notice_flags(), cwd=publish_dir)
    assert run.code == EXIT_REFUSED
    assert run.stderr.startswith("deplog: not logged: redirect_refused: ")
    [envelope] = (publish_dir / "out").glob("*.envelope.json")
    assert f"the envelope is saved in {Path('out') / envelope.name}" in run.stderr
    assert times_logged(authority, envelope) == 0


@pytest.mark.slow  # a real authority process
def test_publish_with_a_log_key_refuses_a_redirecting_url_before_signing(
    authority: AuthorityProcess, authority_front: Redirector, publish_dir: Path
) -> None:
    authority_front.move_to = authority.url
    log_key = authority.log_verifier.vkey()
    run = deplog(
        "publish",
        "--url",
        authority_front.url,
        "--log-key",
        log_key,
        *notice_flags(),
        cwd=publish_dir,
    )
    assert run.code == EXIT_USAGE
    assert run.stderr.startswith("deplog: --url: redirect_refused: ")
    assert run.stderr.rstrip().endswith("nothing was signed or sent")
    assert list((publish_dir / "out").glob("*")) == []
    assert all(method == "GET" for method, _ in authority_front.requests)
