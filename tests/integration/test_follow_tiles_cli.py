"""``deplog follow --tiles``: which path the command reads a log through, end to end.

Real servers on 127.0.0.1 (a static tiles server, the tampering proxy, an
authority stand-in for the JSON API), each on a loop of its own thread, since
the command runs its own; what it reads through is seen in what each server
was asked.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deplog.client.cli.main import main
from deplog.client.follow.state import LocalState
from deplog.client.tlog.tiles import EntryTile
from tests.builders import ORIGIN, LocalLog
from tests.integration.scripted_authority import ScriptedAuthority, running
from tests.integration.tiles_server import (
    TamperingProxy,
    in_thread,
    static_server,
    tampering_proxy,
)


@pytest.fixture
def local(tmp_path: Path) -> LocalLog:
    (tmp_path / "log").mkdir()
    local = LocalLog(tmp_path / "log")
    local.publish_many(400)
    local.write_tiles(tmp_path / "tiles")
    return local


@pytest.fixture
def api(local: LocalLog) -> Iterator[ScriptedAuthority]:
    with in_thread(running(ScriptedAuthority(local.snapshot()))) as served:
        yield served


@pytest.fixture
def tiles(tmp_path: Path, local: LocalLog) -> Iterator[TamperingProxy]:
    with (
        in_thread(static_server(tmp_path / "tiles")) as url,
        in_thread(tampering_proxy(url)) as proxy,
    ):
        yield proxy


def follow_once(local: LocalLog, url: str, state: Path, *tiles: str) -> int:
    key = local.signer.verifier().vkey()
    return main(["follow", url, "--once", "--log-key", key, "--state", str(state), *tiles])


def synced_size(state: Path) -> int:
    opened = LocalState(state, ORIGIN)
    try:
        return opened.size
    finally:
        opened.close()


def test_follow_reads_tiles_from_another_host(
    local: LocalLog, api: ScriptedAuthority, tiles: TamperingProxy, tmp_path: Path
) -> None:
    assert follow_once(local, api.url, tmp_path / "s.db", "--tiles", tiles.url) == 0
    assert synced_size(tmp_path / "s.db") == 401
    assert EntryTile(0).path in tiles.requests
    assert api.ranges == []  # no entry came through the JSON API


def test_follow_falls_back_to_the_json_api_on_a_bad_tile(
    local: LocalLog, api: ScriptedAuthority, tiles: TamperingProxy, tmp_path: Path
) -> None:
    tiles.rewrite[EntryTile(0).path] = lambda body: body[:-1] + b"?"
    assert follow_once(local, api.url, tmp_path / "s.db", "--tiles", tiles.url) == 0
    assert synced_size(tmp_path / "s.db") == 401
    assert api.ranges  # the entries came through the JSON API


def test_follow_auto_reads_the_json_api_where_no_tiles_are_served(
    local: LocalLog, api: ScriptedAuthority, tmp_path: Path
) -> None:
    assert follow_once(local, api.url, tmp_path / "s.db") == 0
    assert synced_size(tmp_path / "s.db") == 401
    assert api.ranges


def test_follow_with_tiles_off_reads_the_json_api_though_tiles_are_served(
    local: LocalLog, tiles: TamperingProxy, tmp_path: Path
) -> None:
    """The proxy serves tiles and no JSON API: with tiles off there is nothing to read."""
    assert follow_once(local, tiles.url, tmp_path / "s.db", "--tiles", "off") != 0
    assert not any(path.startswith("tile/") for path in tiles.requests)


def test_follow_refuses_a_tiles_url_that_is_not_http(
    local: LocalLog, api: ScriptedAuthority, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as usage:  # a usage error, as every URL flag's
        follow_once(local, api.url, tmp_path / "s.db", "--tiles", "ftp://cdn/log")
    assert usage.value.code == 2
    assert "argument --tiles: ftp://cdn/log is not a URL" in capsys.readouterr().err
