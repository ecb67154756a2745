"""SIGKILL under load: nothing acknowledged is lost, nothing signed is contradicted.

A short campaign for CI; bench/soak_crash.py runs the same campaigns with many
more kills by hand.
"""

from __future__ import annotations

import random
from pathlib import Path

import aiohttp

from deplog.client.tlog.note import Signer
from tests.integration.campaign import authority_campaign, witness_campaign, witness_log
from tests.integration.harness import AuthorityProcess, WitnessProcess

KILLS = 3
PUBLISHERS = 4


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
