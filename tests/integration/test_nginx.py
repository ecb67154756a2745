"""Debian's nginx, run with the shipped deploy/nginx.conf, in front of a real authority.

nginx serves the tiles directory (``/tile/``, ``/checkpoint``) as static files and
proxies the rest; a follower runs through it end to end (publish, follow, revoke,
follow again, the guard refuses), every tile and the checkpoint it serves are the
authority's bytes with the authority's cache headers, and a tile altered on disk
behind it is refused by the client's tile verification.

nginx is an apt package that CI installs (.ci/run): without it this module skips
loudly, and under CI=true it fails instead, so CI can never skip it.

The configuration is the shipped file with only its two marked values and its
listen line substituted (each must occur exactly once, so a change to the file
that this test would not exercise fails here), inside the minimal main context an
unprivileged foreground nginx needs (pid, temp paths and logs in the test's
directory). As root, nginx's workers would run as ``nobody``, who cannot enter
pytest's 0700 temporary directories, so the workers stay root there.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from multidict import CIMultiDict

from deplog.authority.http.server import TILE_CACHE
from deplog.client.cache.guard import Guard, Verdict
from deplog.client.follow.follower import Follower
from deplog.client.follow.state import LocalState
from deplog.client.follow.tiles import TilesLogSource
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Signer
from deplog.client.tlog.tiles import (
    EntryTile,
    HashTile,
    TileError,
    entry_bundle_tiles,
    verify_entry_bundle,
)
from tests.integration.harness import AuthorityProcess, deplog, publish
from tests.test_tiles import flip

SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"
NGINX = shutil.which("nginx") or next(
    (path for path in ("/usr/sbin/nginx",) if os.access(path, os.X_OK)), None
)
pytestmark = [pytest.mark.slow]  # real nginx and authority processes
if NGINX is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("nginx is missing: CI must install it (.ci/run) and run this module")
    pytestmark.append(
        pytest.mark.skip(
            reason="NGINX IS NOT INSTALLED: the nginx tests did not run (apt-get install -y nginx)"
        )
    )

TOOL = "tool:org.acme/search"
MAIN_CONTEXT = """\
worker_processes 1;
{user}
pid {run}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {run}/client_body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fastcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
{server}
}}
"""


def derived_config(authority: AuthorityProcess, run: Path, port: int) -> str:
    """The shipped server block for this authority and port, in a main context of its own."""
    shipped = SHIPPED.read_text()
    upstream = authority.url.removeprefix("http://")
    for old, new in (
        ("server 127.0.0.1:7460;", f"server {upstream};"),
        ("root /var/lib/deplog/tiles;", f"root {authority.data / 'tiles'};"),
        ("listen 80;", f"listen 127.0.0.1:{port};"),
    ):
        assert shipped.count(old) == 1, f"deploy/nginx.conf no longer has {old!r} once"
        shipped = shipped.replace(old, new)
    user = "user root;" if os.geteuid() == 0 else ""
    return MAIN_CONTEXT.format(user=user, run=run, server=shipped)


@dataclass
class Nginx:
    url: str
    process: subprocess.Popen[bytes]


@pytest.fixture
def nginx(authority: AuthorityProcess, tmp_path: Path, free_port: int) -> Iterator[Nginx]:
    with running_nginx(authority, tmp_path, free_port) as served:
        yield served


@contextlib.contextmanager
def running_nginx(
    authority: AuthorityProcess, tmp_path: Path, free_port: int, http_context: str = ""
) -> Iterator[Nginx]:
    """nginx with the derived configuration, ``http_context`` added to its http block."""
    assert NGINX is not None
    run = tmp_path / "nginx"
    run.mkdir()
    config = derived_config(authority, run, free_port)
    (run / "nginx.conf").write_text(config.replace("http {", "http {\n" + http_context, 1))
    with open(run / "nginx.out", "wb") as out:
        process = subprocess.Popen(
            [NGINX, "-p", f"{run}/", "-c", "nginx.conf", "-g", "daemon off;"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{free_port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            assert process.poll() is None, (run / "nginx.out").read_text()
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, (run / "nginx.out").read_text()
                time.sleep(0.05)
        yield Nginx(url, process)
    finally:
        process.terminate()
        process.wait(timeout=10)


async def get(http: aiohttp.ClientSession, url: str) -> tuple[int, bytes, CIMultiDict[str]]:
    async with http.get(url) as response:
        return response.status, await response.read(), response.headers.copy()


def tile_paths(root: Path) -> list[str]:
    return sorted(
        Path(directory, name).relative_to(root).as_posix()
        for directory, _, names in os.walk(root / "tile")
        for name in names
    )


# How `deplog follow` reads the log through nginx: its static tiles (found at the
# base URL by `--tiles auto`, the default), or the proxied JSON API alone.
FOLLOW_MODES: dict[str, list[str]] = {"tiles": [], "json-api": ["--tiles", "off"]}


def follow(url: str, authority: AuthorityProcess, state: Path, mode: list[str]) -> str:
    return run_follow(url, authority, state, mode).stdout.strip()


def run_follow(
    url: str, authority: AuthorityProcess, state: Path, mode: list[str]
) -> subprocess.CompletedProcess[str]:
    key = authority.log_verifier.vkey()
    done = deplog("follow", url, "--once", "--log-key", key, "--state", state, *mode)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("mode", FOLLOW_MODES.values(), ids=FOLLOW_MODES.keys())
async def test_a_follower_through_nginx_sees_a_revocation_and_the_guard_refuses(
    nginx: Nginx,
    authority: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    mode: list[str],
) -> None:
    state = tmp_path / "state.db"
    await publish(http, nginx.url, publisher, 1, affected={"versions": ["1.0.0", "1.1.0"]})
    name = authority.log_verifier.name
    assert follow(nginx.url, authority, state, mode) == f"trusted {name} at size 2"
    await publish(
        http,
        nginx.url,
        publisher,
        2,
        action="revoke",
        reasons=["other"],
        affected={"versions": ["1.1.0"]},
    )
    assert follow(nginx.url, authority, state, mode) == f"trusted {name} at size 3"
    local = LocalState(state, name)
    try:
        decision = Guard(local).check(TOOL, "1.1.0", cached_at=datetime.now(UTC) + timedelta(1))
    finally:
        local.close()
    assert (decision.verdict, decision.reason) == (Verdict.REFUSE, "revoked")


async def test_nginx_serves_the_authoritys_tiles_and_checkpoint_with_its_headers(
    nginx: Nginx, authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    for sequence in range(1, 300):
        await publish(http, nginx.url, publisher, sequence)
    root = authority.data / "tiles"
    status, note, headers = await get(http, nginx.url + "/checkpoint")
    assert status == 200 and note == (await get(http, authority.url + "/checkpoint"))[1]
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert headers["Cache-Control"] == "no-cache"
    assert open_checkpoint(note, authority.log_verifier)[0].size == 300
    paths = tile_paths(root)
    assert "tile/0/000" in paths and "tile/entries/001.p/44" in paths
    for path in paths:
        status, body, headers = await get(http, f"{nginx.url}/{path}")
        assert status == 200 and body == (root / path).read_bytes()
        assert body == (await get(http, f"{authority.url}/{path}"))[1]
        assert headers["Content-Type"] == "application/octet-stream"
        assert headers["Cache-Control"] == TILE_CACHE
        assert "Last-Modified" in headers


async def test_a_tiles_follower_reads_gzip_encoded_tiles_through_nginx_without_refusing_them(
    authority: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    free_port: int,
) -> None:
    """A compressing CDN: a gzip-encoded hash tile is longer (Content-Length) than the 8,192
    bytes it decodes to; the bound holds on the decoded bytes, so no fallback is needed."""
    await asyncio.gather(*(publish(http, authority.url, publisher, n) for n in range(1, 300)))
    root = authority.data / "tiles"
    for path in tile_paths(root):  # what a CDN holds: each tile compressed, its length known
        (root / f"{path}.gz").write_bytes(gzip.compress((root / path).read_bytes(), mtime=0))
    gzipped = "gzip on; gzip_static on; gzip_types application/octet-stream;"
    with running_nginx(authority, tmp_path, free_port, gzipped) as proxy:
        async with http.get(f"{proxy.url}/tile/0/000", headers={"Accept-Encoding": "gzip"}) as r:
            assert r.headers["Content-Encoding"] == "gzip"
            assert int(r.headers["Content-Length"]) > 8192 == len(await r.read())
        async with (
            TilesLogSource(proxy.url) as source,
            Follower(source, authority.log_verifier, tmp_path / "state.db") as follower,
        ):
            assert (await follower.sync()).new_size == 300


async def test_nginx_revalidates_by_etag_and_serves_no_temporary_file(
    nginx: Nginx, authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    _, _, headers = await get(http, nginx.url + "/checkpoint")
    async with http.get(
        nginx.url + "/checkpoint", headers={"If-None-Match": headers["ETag"]}
    ) as response:
        assert response.status == 304
    torn = authority.data / "tiles" / "tile" / "0" / ".000.p.abc.tmp"
    torn.write_bytes(b"half a tile")
    assert (await get(http, nginx.url + "/tile/0/.000.p.abc.tmp"))[0] == 404


async def test_the_push_stream_passes_through_nginx_unbuffered(
    nginx: Nginx, authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    async with http.get(nginx.url + "/v1/checkpoints/stream") as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        first = await response.content.readuntil(b"\n\n")
    assert first.startswith(b"event: checkpoint\ndata: " + authority.log_verifier.name.encode())


async def test_a_tile_altered_behind_nginx_is_refused_by_the_client(
    nginx: Nginx, authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    await publish(http, nginx.url, publisher, 1)
    _, note, _ = await get(http, nginx.url + "/checkpoint")
    checkpoint, _ = open_checkpoint(note, authority.log_verifier)
    bundle = EntryTile(0, checkpoint.size)
    level0 = authority.data / "tiles" / HashTile(0, 0, checkpoint.size).path
    level0.write_bytes(flip(level0.read_bytes(), 40))
    fetched = {}
    for tile in entry_bundle_tiles(bundle, checkpoint.size):
        fetched[tile] = (await get(http, f"{nginx.url}/{tile.path}"))[1]
    _, data, _ = await get(http, f"{nginx.url}/{bundle.path}")
    with pytest.raises(TileError) as refused:
        verify_entry_bundle(
            bundle, data, checkpoint.size, checkpoint.root_hash, fetched.__getitem__
        )
    assert refused.value.code == "bad_tile"


async def test_a_follower_reading_an_altered_bundle_falls_back_to_the_api_unpoisoned(
    nginx: Nginx,
    authority: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    for sequence in (1, 2):
        await publish(http, nginx.url, publisher, sequence)
    _, note, _ = await get(http, nginx.url + "/checkpoint")
    checkpoint, _ = open_checkpoint(note, authority.log_verifier)
    bundle = authority.data / "tiles" / EntryTile(0, checkpoint.size).path
    bundle.write_bytes(flip(bundle.read_bytes(), 10))
    state = tmp_path / "state.db"
    name = authority.log_verifier.name
    done = run_follow(nginx.url, authority, state, [])
    assert done.stdout.strip() == f"trusted {name} at size {checkpoint.size}"
    assert "sync via the log source failed: bad_tile; retrying via the fallback" in done.stderr
    local = LocalState(state, name)
    try:
        root = local.root
        kept = [local.notice_at(index) for index in (1, 2)]
    finally:
        local.close()
    assert root == checkpoint.root_hash
    assert [notice.sequence for notice in kept if notice is not None] == [1, 2]


async def test_metrics_is_closed_behind_nginx(nginx: Nginx, http: aiohttp.ClientSession) -> None:
    assert (await get(http, nginx.url + "/metrics"))[0] == 403


def test_behind_nginx_each_client_address_has_its_own_rate(
    authority_files: AuthorityProcess, tmp_path: Path, free_port: int
) -> None:
    authority_files.extra_args = ["--trusted-proxy", "127.0.0.1/32", "--rate-per-address", "1/1"]
    authority_files.start()
    try:
        with running_nginx(authority_files, tmp_path, free_port):

            def status(source: str) -> bytes:
                with socket.create_connection(
                    ("127.0.0.1", free_port), timeout=10, source_address=(source, 0)
                ) as sock:
                    sock.sendall(
                        b"POST /v1/notices HTTP/1.1\r\nHost: x\r\nContent-Type: "
                        b"application/json\r\nContent-Length: 2\r\n\r\n{}"
                    )
                    return sock.recv(4096).split(b" ")[1]

            assert [status("127.0.0.2"), status("127.0.0.2")] == [b"400", b"429"]
            assert status("127.0.0.3") == b"400"
    finally:
        authority_files.stop()
