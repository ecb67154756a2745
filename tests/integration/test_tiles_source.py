"""``TilesLogSource`` against a tiles directory served by a real aiohttp static server.

Proofs and entries read from tiles must equal the RFC 9162 reference answers
for the same leaves, with one request per 256 entries; every tile the path
between the files and the follower damages (corrupt, stale, of the wrong
width, truncated, oversized) must be refused by its name, with the follower's
state exactly where it was and never taken for a fork. The proxy before the
static server (``tiles_server``) is the network path that damages them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.cli.trust import TILES_AUTO, open_log
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.follower import Follower
from deplog.client.follow.http import HttpLogSource
from deplog.client.follow.source import FetchError, fetch_page
from deplog.client.follow.tiles import TilesLogSource, max_tile_bytes
from deplog.client.follow.trust import ForkError
from deplog.client.model.table import tool_status
from deplog.client.tlog.evidence import INCONSISTENT_PREFIX, read_evidence
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import consistency_path, leaf_hash
from deplog.client.tlog.tiles import EntryTile, HashTile
from tests.builders import ORIGIN, LocalLog, sign_tree, write_tiles
from tests.integration.scripted_authority import Raw, ScriptedAuthority, running
from tests.integration.tiles_server import TamperingProxy, static_server, tampering_proxy

TOOL = "tool:org.acme/t7"
NOW = datetime.now(UTC)


def leaves(count: int, tag: bytes = b"") -> list[bytes]:
    return [b"leaf %d%s" % (i, tag) for i in range(count)]


@pytest.fixture
def local_700(tmp_path: Path) -> LocalLog:
    """A real log of 700 entries: a registration and 699 notices (three bundles and a part)."""
    (tmp_path / "log").mkdir()
    local = LocalLog(tmp_path / "log")
    local.publish_many(699)
    return local


@pytest.fixture
async def tiles(tmp_path: Path, local_700: LocalLog) -> AsyncIterator[TamperingProxy]:
    """``local_700``'s tiles, served statically behind a tampering proxy."""
    local_700.write_tiles(tmp_path / "tiles")
    async with static_server(tmp_path / "tiles") as url, tampering_proxy(url) as proxy:
        yield proxy


async def read_all(source: TilesLogSource, size: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < size:
        got += await fetch_page(source, len(got), min(size, len(got) + 1000))
    return got


# --- answers equal the reference ---------------------------------------------------------


@pytest.mark.parametrize("size", [1, 255, 256, 257, 700, 65536 + 300])
async def test_entries_and_proofs_from_tiles_equal_the_reference(
    tmp_path: Path, log_signer: Signer, size: int
) -> None:
    data = leaves(size)
    write_tiles(tmp_path, sign_tree(log_signer, data), data)
    async with static_server(tmp_path) as url, TilesLogSource(url) as source:
        await source.checkpoint()
        assert await read_all(source, size) == data
        hashes = [leaf_hash(leaf) for leaf in data]
        for old in sorted({0, 1, size // 3, size - 1, size}):
            proof = await source.consistency(old, size)
            assert list(proof.hashes) == consistency_path(hashes, old, size)


async def test_a_full_read_makes_one_request_per_256_entries(
    tmp_path: Path, log_signer: Signer
) -> None:
    data = leaves(65536 + 300)
    write_tiles(tmp_path, sign_tree(log_signer, data), data)
    async with static_server(tmp_path) as url, TilesLogSource(url) as source:
        await source.checkpoint()
        await source.consistency(0, len(data))
        await read_all(source, len(data))
        bundles = -(-len(data) // 256)
        # the checkpoint, the bundles, and the partial and level-1 hash tiles
        assert source.requests <= 1 + bundles + 4


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_any_consistency_proof_from_tiles_is_the_reference(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    signer = Signer.generate(ORIGIN)
    size = data.draw(st.integers(1, 1200), label="size")
    old = data.draw(st.integers(0, size), label="old")
    directory = tmp_path_factory.mktemp("tiles")
    logged = leaves(size)
    write_tiles(directory, sign_tree(signer, logged), logged)

    async def prove() -> list[bytes]:
        async with static_server(directory) as url, TilesLogSource(url) as source:
            await source.checkpoint()
            return list((await source.consistency(old, size)).hashes)

    assert asyncio.run(prove()) == consistency_path([leaf_hash(x) for x in logged], old, size)


async def test_a_partial_tile_gone_is_read_from_the_full_tile(
    tmp_path: Path, log_signer: Signer
) -> None:
    """The spec's fallback: a CDN still serves the checkpoint at 300, the origin is at 600
    and removed the partial tiles of 300 whose full tiles now exist."""
    data = leaves(600)
    old_note = sign_tree(log_signer, data[:300])
    write_tiles(tmp_path, old_note, data[:300])
    write_tiles(tmp_path, sign_tree(log_signer, data), data)
    (tmp_path / "checkpoint").write_bytes(old_note)
    for superseded in (HashTile(0, 1, 44), EntryTile(1, 44)):
        (tmp_path / superseded.path).unlink()
    async with static_server(tmp_path) as url, TilesLogSource(url) as source:
        await source.checkpoint()
        assert not (tmp_path / HashTile(0, 1, 44).path).exists()
        assert await read_all(source, 300) == data[:300]
        proof = await source.consistency(100, 300)
        assert list(proof.hashes) == consistency_path([leaf_hash(x) for x in data], 100, 300)


# --- the follower through tiles --------------------------------------------------------------


async def test_full_and_incremental_sync_through_tiles_equal_the_json_api(
    tmp_path: Path, local_700: LocalLog
) -> None:
    local_700.write_tiles(tmp_path / "tiles")
    verifier = local_700.signer.verifier()
    async with (
        static_server(tmp_path / "tiles") as url,
        running(ScriptedAuthority(local_700.snapshot())) as api,
        TilesLogSource(url) as tiles_source,
        HttpLogSource(api.url) as api_source,
        Follower(tiles_source, verifier, tmp_path / "tiles.db") as via_tiles,
        Follower(api_source, verifier, tmp_path / "api.db") as via_api,
    ):
        followers = (via_tiles, via_api)
        for round_ in range(2):
            await via_tiles.sync()
            await via_api.sync()
            assert via_tiles.state.size == via_api.state.size == local_700.log.tree.size
            assert via_tiles.state.root == via_api.state.root
            tables = [tool_status(f.state.tool_status(TOOL)[0], TOOL, NOW) for f in followers]
            assert tables[0].to_json() == tables[1].to_json()
            if round_ == 0:  # then 300 more entries, read incrementally
                local_700.publish_many(300)
                local_700.write_tiles(tmp_path / "tiles")
                api.serve(local_700.snapshot())


def _last_bundle(size: int) -> EntryTile:
    return EntryTile(size // 256, size % 256)


def _corrupt(body: bytes) -> bytes:
    return body[:-1] + bytes([body[-1] ^ 1])


async def refused_leaving_state(
    follower: Follower, proxy: TamperingProxy, expected: ErrorCode
) -> None:
    """The next sync is refused with ``expected``, and the state is exactly as before."""
    before = (follower.state.size, follower.state.root, follower.state.trusted)
    with pytest.raises(DeplogError) as refused:
        await follower.sync()
    assert refused.value.code == expected
    assert (follower.state.size, follower.state.root, follower.state.trusted) == before
    assert follower.counters.suspicions == 0
    proxy.rewrite.clear()
    proxy.raw.clear()
    await follower.sync()  # the same source, honest again, is followed: nothing stuck
    assert follower.state.size == 700


@pytest.fixture
async def following(
    tmp_path: Path, local_700: LocalLog, tiles: TamperingProxy
) -> AsyncIterator[Follower]:
    """A follower of ``local_700`` through the proxy, trusted at size 100 already."""
    verifier = local_700.signer.verifier()
    write_tiles_at = tmp_path / "tiles100"
    published = local_700.log.tree
    write_tiles(
        write_tiles_at,
        sign_tree(local_700.signer, published.leaf_data(0, 100)),
        published.leaf_data(0, 100),
    )
    async with (
        static_server(write_tiles_at) as url,
        TilesLogSource(url) as early,
        Follower(early, verifier, tmp_path / "f.db") as first,
    ):
        await first.sync()
    async with (
        TilesLogSource(tiles.url) as source,
        Follower(source, verifier, tmp_path / "f.db") as follower,
    ):
        assert follower.state.size == 100
        yield follower


async def test_a_larger_tree_whose_tiles_rewrite_the_trusted_one_is_a_proven_fork(
    tmp_path: Path, log_signer: Signer
) -> None:
    """The new tree's own bundles, authenticated by its tiles, rebuild a prefix that is not
    the trusted tree: proven from the static files alone, offline checkable."""
    trusted, forked = leaves(100), leaves(300, b" forked")
    write_tiles(tmp_path / "a", sign_tree(log_signer, trusted), trusted)
    write_tiles(tmp_path / "b", sign_tree(log_signer, forked), forked)
    verifier = log_signer.verifier()
    for directory in ("a", "b"):
        async with (
            static_server(tmp_path / directory) as url,
            TilesLogSource(url) as source,
            Follower(source, verifier, tmp_path / "f.db", evidence_dir=tmp_path / "e") as follower,
        ):
            if directory == "a":
                await follower.sync()
                continue
            with pytest.raises(ForkError) as refused:
                await follower.sync()
            assert follower.state.size == 100
    assert read_evidence(refused.value.evidence).verify(verifier) == INCONSISTENT_PREFIX


async def test_a_corrupt_tile_is_bad_tile_never_a_fork(
    following: Follower, tiles: TamperingProxy
) -> None:
    tiles.rewrite[HashTile(0, 0).path] = _corrupt  # needed by the consistency proof from 100
    await refused_leaving_state(following, tiles, ErrorCode.BAD_TILE)


async def test_a_corrupt_entry_bundle_is_bad_tile(
    following: Follower, tiles: TamperingProxy
) -> None:
    tiles.rewrite[EntryTile(1).path] = _corrupt
    await refused_leaving_state(following, tiles, ErrorCode.BAD_TILE)


async def test_a_stale_tile_from_another_tree_is_bad_tile(
    following: Follower, tiles: TamperingProxy, tmp_path: Path, log_signer: Signer
) -> None:
    """The partial tile a CDN kept from a log rebuilt over the same sizes."""
    stale = tmp_path / "stale"
    other = leaves(700, b" of an older tree")
    write_tiles(stale, sign_tree(log_signer, other), other)
    path = HashTile(0, 2, 188).path
    tiles.rewrite[path] = lambda _: (stale / path).read_bytes()
    await refused_leaving_state(following, tiles, ErrorCode.BAD_TILE)


async def test_a_partial_tile_of_the_wrong_width_is_malformed_tile(
    following: Follower, tiles: TamperingProxy
) -> None:
    tiles.rewrite[HashTile(0, 2, 188).path] = lambda body: body[:-32]
    await refused_leaving_state(following, tiles, ErrorCode.MALFORMED_TILE)


async def test_a_truncated_entry_bundle_is_malformed_bundle(
    following: Follower, tiles: TamperingProxy
) -> None:
    tiles.rewrite[_last_bundle(700).path] = lambda body: body[:-5]
    await refused_leaving_state(following, tiles, ErrorCode.MALFORMED_BUNDLE)


@pytest.mark.parametrize("chunked", [False, True])
async def test_an_oversized_tile_is_response_too_large(
    following: Follower, tiles: TamperingProxy, chunked: bool
) -> None:
    tile = HashTile(1, 0, 2)
    tiles.raw[tile.path] = Raw(b"\0" * (max_tile_bytes(tile) + 1), chunked=chunked)
    await refused_leaving_state(following, tiles, ErrorCode.RESPONSE_TOO_LARGE)


async def test_an_oversized_entry_bundle_is_refused_unread(
    following: Follower, tiles: TamperingProxy
) -> None:
    bundle = EntryTile(1)
    tiles.raw[bundle.path] = Raw(b"", declared_length=max_tile_bytes(bundle) + 1)
    await refused_leaving_state(following, tiles, ErrorCode.RESPONSE_TOO_LARGE)


async def test_a_missing_tile_is_fetch_failed(following: Follower, tiles: TamperingProxy) -> None:
    tiles.raw[_last_bundle(700).path] = Raw(b"", status=404)
    await refused_leaving_state(following, tiles, ErrorCode.FETCH_FAILED)


async def test_a_stalled_tile_is_fetch_failed(local_700: LocalLog, tiles: TamperingProxy) -> None:
    tiles.raw[EntryTile(0).path] = Raw(b"", delay=2.0)
    async with TilesLogSource(tiles.url, timeout=0.5) as source:
        await source.checkpoint()
        with pytest.raises(FetchError) as refused:
            await source.entries(0, 256)
        assert refused.value.code == ErrorCode.FETCH_FAILED


async def test_a_redirect_to_another_scheme_is_refused(tiles: TamperingProxy) -> None:
    tiles.redirect["checkpoint"] = "ftp://127.0.0.1/checkpoint"
    async with TilesLogSource(tiles.url) as source:
        with pytest.raises(FetchError) as refused:
            await source.checkpoint()
        assert refused.value.code == ErrorCode.REDIRECT_REFUSED


# --- the JSON API as the fallback ------------------------------------------------------------


async def test_a_bad_tile_is_retried_through_the_json_api_at_once(
    tmp_path: Path, local_700: LocalLog, tiles: TamperingProxy
) -> None:
    tiles.rewrite[EntryTile(1).path] = _corrupt
    async with (
        running(ScriptedAuthority(local_700.snapshot())) as api,
        TilesLogSource(tiles.url) as source,
        HttpLogSource(api.url) as fallback,
        Follower(source, local_700.signer.verifier(), tmp_path / "f.db", fallback=fallback) as f,
    ):
        result = await f.sync()
        assert (result.old_size, result.new_size) == (0, 700)
        assert f.state.root == local_700.log.tree.root_at(700)
        assert api.ranges  # the entries came through the JSON API


async def test_auto_reads_tiles_where_the_base_url_serves_them(tiles: TamperingProxy) -> None:
    async with open_log(tiles.url, TILES_AUTO, 5.0) as (source, fallback):
        assert isinstance(source, TilesLogSource)
        assert isinstance(fallback, HttpLogSource)


async def test_auto_reads_the_json_api_where_no_tiles_are_served(local_700: LocalLog) -> None:
    async with (
        running(ScriptedAuthority(local_700.snapshot())) as api,
        open_log(api.url, TILES_AUTO, 5.0) as (source, fallback),
    ):
        assert isinstance(source, HttpLogSource)
        assert fallback is None


async def test_tiles_from_another_host_are_read_with_the_json_api_behind(
    tiles: TamperingProxy, local_700: LocalLog
) -> None:
    async with (
        running(ScriptedAuthority(local_700.snapshot())) as api,
        open_log(api.url, tiles.url, 5.0) as (source, fallback),
    ):
        assert isinstance(source, TilesLogSource) and source.url == tiles.url
        assert isinstance(fallback, HttpLogSource) and fallback.url == api.url


async def test_a_stale_copys_older_checkpoint_is_read_past_through_the_json_api(
    tmp_path: Path, local_700: LocalLog
) -> None:
    """A CDN still serving the checkpoint at 100 to a follower trusted at 700."""
    verifier = local_700.signer.verifier()
    tree = local_700.log.tree
    write_tiles(
        tmp_path / "stale",
        sign_tree(local_700.signer, tree.leaf_data(0, 100)),
        tree.leaf_data(0, 100),
    )
    async with running(ScriptedAuthority(local_700.snapshot())) as api:
        async with (
            HttpLogSource(api.url) as direct,
            Follower(direct, verifier, tmp_path / "f.db") as first,
        ):
            await first.sync()
        async with (
            static_server(tmp_path / "stale") as url,
            TilesLogSource(url) as source,
            HttpLogSource(api.url) as fallback,
            Follower(source, verifier, tmp_path / "f.db", fallback=fallback) as follower,
        ):
            again = await follower.sync()  # the tiles' 100 is a rollback: the JSON API's 700
            assert (again.old_size, again.new_size, follower.state.size) == (700, 700, 700)
