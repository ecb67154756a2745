"""A real authority writes its tiles directory and serves it under the same paths.

The tests of how tiles are served (cache headers, ETag, malformed and absent paths) run
on both backends; on PostgreSQL the tiles come from the database, not a directory, so
the tests of the directory itself are SQLite's.

Every tile is fetched over HTTP, compared with the file the authority wrote, and
read by ``SpecReader`` (tests/test_tiles.py, written from the spec alone), which
rebuilds the root of the served checkpoint and the proofs the JSON API serves.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from deplog.authority.http.server import TILE_CACHE
from deplog.client.cli.trust import TILES_AUTO, open_log
from deplog.client.follow.follower import Follower
from deplog.client.follow.http import HttpLogSource
from deplog.client.follow.tiles import TilesLogSource
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess
from tests.test_tiles import SpecReader

pytestmark = pytest.mark.slow  # real authority processes

JSON = {"Content-Type": "application/json"}


def tiles_dir(authority: AuthorityProcess) -> Path:
    return authority.data / "tiles"


def tile_paths(root: Path) -> list[str]:
    """Every tile file of the directory, by its path under the log's prefix."""
    return sorted(
        Path(directory, name).relative_to(root).as_posix()
        for directory, _, names in os.walk(root / "tile")
        for name in names
    )


async def publish(
    http: aiohttp.ClientSession, url: str, publisher: Signer, first: int, count: int
) -> None:
    async def one(sequence: int) -> None:
        body = make_envelope(publisher, sequence).canonical_bytes()
        async with http.post(url + "/v1/notices", data=body, headers=JSON) as response:
            assert response.status == 201, await response.text()

    await asyncio.gather(*(one(s) for s in range(first, first + count)))


async def served_checkpoint(
    http: aiohttp.ClientSession, authority: AuthorityProcess
) -> tuple[Checkpoint, bytes]:
    async with http.get(authority.url + "/checkpoint") as response:
        note = await response.read()
    checkpoint, _ = open_checkpoint(note, authority.log_verifier)
    return checkpoint, note


async def test_the_checkpoint_file_is_the_note_get_checkpoint_serves(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    await publish(http, authority.url, publisher, 1, 3)
    checkpoint, note = await served_checkpoint(http, authority)
    assert checkpoint.size == 4
    assert (tiles_dir(authority) / "checkpoint").read_bytes() == note


async def test_every_served_tile_is_the_file_and_the_spec_reader_rebuilds_the_tree(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    await publish(http, authority.url, publisher, 1, 300)
    checkpoint, _ = await served_checkpoint(http, authority)
    served = {}
    for path in tile_paths(tiles_dir(authority)):
        async with http.get(f"{authority.url}/{path}") as response:
            assert response.status == 200
            served[path] = await response.read()
        assert served[path] == (tiles_dir(authority) / path).read_bytes()
    reader = SpecReader(served, checkpoint.size)
    reader.check()
    assert reader.root() == checkpoint.root_hash
    for index in (0, 255, 256, checkpoint.size - 1):
        query = f"index={index}&size={checkpoint.size}"
        async with http.get(f"{authority.url}/v1/proofs/inclusion?{query}") as response:
            proof = [base64.b64decode(h) for h in (await response.json())["proof"]]
        assert proof == reader.inclusion(index)
    async with http.get(f"{authority.url}/v1/proofs/consistency?old=7&new={checkpoint.size}") as r:
        assert [base64.b64decode(h) for h in (await r.json())["proof"]] == reader.consistency(7)


@pytest.mark.both_backends
async def test_full_and_partial_tiles_are_cached_for_a_year(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    await publish(http, authority.url, publisher, 1, 256)  # 257 leaves with the registration
    for path in ["tile/0/000", "tile/0/001.p/1", "tile/entries/000", "tile/entries/001.p/1"]:
        async with http.get(f"{authority.url}/{path}") as response:
            assert response.status == 200
            assert response.headers["Cache-Control"] == TILE_CACHE
            assert response.headers["Content-Type"] == "application/octet-stream"
            assert "ETag" in response.headers
            if authority.db is None and "entries" in path:  # a file's, sent as one
                assert "Last-Modified" in response.headers


@pytest.mark.both_backends
async def test_a_hash_tiles_etag_is_the_digest_of_its_bytes_on_every_process(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    await publish(http, authority.url, publisher, 1, 3)
    async with http.get(f"{authority.url}/tile/0/000.p/4") as response:
        body = await response.read()
        assert response.headers["ETag"] == f'"{hashlib.sha256(body).hexdigest()[:32]}"'


async def test_a_hash_tile_once_served_is_answered_from_memory(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    """Tiles never change, so a held one outlives its file (a partial tile, removed)."""
    await publish(http, authority.url, publisher, 1, 3)
    url = f"{authority.url}/tile/0/000.p/4"
    async with http.get(url) as response:
        body = await response.read()
    (tiles_dir(authority) / "tile/0/000.p/4").unlink()
    async with http.get(url) as response:
        assert response.status == 200
        assert await response.read() == body


@pytest.mark.both_backends
async def test_a_hash_tile_the_directory_does_not_hold_is_404(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{authority.url}/tile/0/000.p/9") as response:
        assert response.status == 404
        assert await response.json() == {"error": "not_found"}


@pytest.mark.both_backends
async def test_a_tile_is_revalidated_by_its_etag(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    url = f"{authority.url}/tile/0/000.p/1"
    async with http.get(url) as response:
        etag = response.headers["ETag"]
    async with http.get(url, headers={"If-None-Match": etag}) as response:
        assert response.status == 304
        assert await response.read() == b""


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "path",
    [
        "/tile/0/1",
        "/tile/0/000.p/256",
        "/tile/0/x000/001",
        "/tile/8/000",
        "/tile/entries/000.p/0",
        "/tile/%2e%2e/%2e%2e/config.json",
        "/tile/0/..%2F..%2Fconfig.json",
        "/tile/0/000/",
    ],
)
async def test_a_malformed_tile_path_is_400_and_reads_nothing(
    authority: AuthorityProcess, http: aiohttp.ClientSession, path: str
) -> None:
    async with http.get(URL(authority.url + path, encoded=True)) as response:
        assert response.status == 400
        assert await response.json() == {"error": "malformed_tile_path"}


@pytest.mark.both_backends
async def test_a_tile_the_tree_does_not_have_is_404(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    for path in ("/tile/0/000", "/tile/0/000.p/2", "/tile/entries/001.p/1"):
        async with http.get(authority.url + path) as response:
            assert response.status == 404
            assert await response.json() == {"error": "not_found"}


async def test_a_restart_serves_the_same_checkpoint_file(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    await publish(http, authority.url, publisher, 1, 2)
    authority.stop()
    authority.start()
    _, note = await served_checkpoint(http, authority)
    assert (tiles_dir(authority) / "checkpoint").read_bytes() == note


async def test_without_tiles_no_directory_is_written_or_served(
    authority_files: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    authority_files.extra_args.append("--no-tiles")
    authority_files.start()
    try:
        async with http.get(authority_files.url + "/tile/0/000.p/1") as response:
            assert response.status == 404
        assert not tiles_dir(authority_files).exists()
    finally:
        authority_files.stop()


async def test_a_follower_reads_the_authoritys_own_tiles_to_the_json_apis_state(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """The writer's tiles through the client's reader (``--tiles auto`` picks them)."""
    verifier = authority.log_verifier
    async with (
        open_log(authority.url, TILES_AUTO, 10.0) as (source, fallback),
        Follower(source, verifier, tmp_path / "tiles.db", fallback=fallback) as via_tiles,
        HttpLogSource(authority.url) as api,
        Follower(api, verifier, tmp_path / "api.db") as via_api,
    ):
        assert isinstance(source, TilesLogSource)
        for first, count in ((1, 300), (301, 20)):  # a full sync, then an incremental one
            await publish(http, authority.url, publisher, first, count)
            await via_tiles.sync()
            await via_api.sync()
            assert via_tiles.state.size == via_api.state.size == first + count
            assert via_tiles.state.root == via_api.state.root
        assert source.requests > 0
