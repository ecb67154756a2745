"""SIGKILL under load: nothing acknowledged is lost, nothing signed is contradicted.

The tiles directory too: killed while it writes tiles, the authority leaves a
directory whose checkpoint file never names a missing or wrong tile (checked by
``SpecReader``, the spec-only reader of tests/test_tiles.py, while the load runs
and after each kill), and a restart completes it.

A short campaign for CI; bench/soak_crash.py runs the same campaigns with many
more kills by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import Iterator, Mapping
from pathlib import Path

import aiohttp
import pytest

from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Signer, Verifier
from tests.integration.campaign import (
    authority_campaign,
    submit_forever,
    witness_campaign,
    witness_log,
)
from tests.integration.harness import AuthorityProcess, WitnessProcess
from tests.test_tiles import SpecReader

pytestmark = pytest.mark.slow  # crash campaigns: processes killed under load

KILLS = 3
PUBLISHERS = 4


@pytest.mark.both_backends
async def test_authority_killed_under_load_loses_nothing_and_forks_nothing(
    authority_files: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    signers = [Signer.generate(f"crash{i}") for i in range(PUBLISHERS)]
    for signer in signers:
        authority_files.add_publisher(signer, f"org.{signer.name}")
    report = await authority_campaign(authority_files, http, signers, KILLS, random.Random(1))
    assert report.kills == KILLS
    assert report.acknowledged, "the stream must have been acknowledged before the kills"
    assert report.logged >= len(report.acknowledged)
    if authority_files.db is None:  # SQLite: kills under load took held map rows with them
        assert len(report.unwritten) == KILLS and max(report.unwritten) > 0


async def test_witness_killed_during_add_checkpoint_keeps_every_cosignature(
    tmp_path: Path,
) -> None:
    publisher = Signer.generate("acme")
    log, signer = witness_log(tmp_path, publisher)
    witness = WitnessProcess(tmp_path / "witness", name="crash.witness/w")
    witness.init()
    assert witness.cli("add-log", "--origin", signer.name, "--key", signer.verifier().vkey()) == 0
    report = await witness_campaign(witness, log, publisher, KILLS, random.Random(2))
    assert report.kills == KILLS
    assert report.cosigned > 0
    assert report.refused_rollbacks == KILLS


class TileFiles(Mapping[str, bytes]):
    """A tiles directory as the spec reader's files, each read when it is asked for."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __getitem__(self, path: str) -> bytes:
        try:
            return (self.root / path).read_bytes()
        except FileNotFoundError:
            raise KeyError(f"the checkpoint file names {path}, which is missing") from None

    def __iter__(self) -> Iterator[str]:
        raise NotImplementedError("the reader only asks for the paths the spec names")

    def __len__(self) -> int:
        raise NotImplementedError("the reader only asks for the paths the spec names")


def check_tiles(root: Path, verifier: Verifier) -> int:
    """Every tile the checkpoint file's tree has is there and hashes to its root; its size."""
    checkpoint, _ = open_checkpoint((root / "checkpoint").read_bytes(), verifier)
    reader = SpecReader(TileFiles(root), checkpoint.size)
    reader.check()
    assert reader.root() == checkpoint.root_hash
    return checkpoint.size


async def _check_tiles_forever(root: Path, verifier: Verifier, sizes: list[int]) -> None:
    while True:
        sizes.append(await asyncio.to_thread(check_tiles, root, verifier))
        await asyncio.sleep(0.02)


def temporary_files(root: Path) -> list[str]:
    return [name for _, _, names in os.walk(root) for name in names if name.startswith(".")]


async def test_authority_killed_while_writing_tiles_leaves_a_directory_a_restart_completes(
    authority_files: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    signers = [Signer.generate(f"tiles{i}") for i in range(4 * PUBLISHERS)]
    for signer in signers:
        authority_files.add_publisher(signer, f"org.{signer.name}")
    root, verifier = authority_files.data / "tiles", authority_files.log_verifier
    rng, sizes = random.Random(3), []
    for kill in range(KILLS):
        authority_files.start()
        acked: list[bytes] = []
        load = [
            asyncio.create_task(
                submit_forever(http, authority_files.url, s, 1 + kill * 10**6, acked)
            )
            for s in signers
        ]
        checker = asyncio.create_task(_check_tiles_forever(root, verifier, sizes))
        await asyncio.sleep(rng.uniform(1.0, 2.0))
        authority_files.kill()
        for task in load:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, timeout=30)
        checker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await checker  # a failed check raises here
        assert acked, "the load must have been acknowledged before the kill"
        sizes.append(check_tiles(root, verifier))  # the directory as the kill left it
    authority_files.start()
    try:
        async with http.get(authority_files.url + "/checkpoint") as response:
            served = await response.read()
        assert (root / "checkpoint").read_bytes() == served
        assert check_tiles(root, verifier) == open_checkpoint(served, verifier)[0].size
        assert temporary_files(root) == []
    finally:
        authority_files.stop()
    assert sizes == sorted(sizes) and sizes[-1] > 256, "the checks must have seen tiles grow"
