"""The long crash campaign, run by hand: many SIGKILLs of an authority and of a witness.

    python bench/soak_crash.py [--kills 25] [--publishers 8] [--seed N]

Each kill lands at a random moment under a stream of concurrent submissions
(authority) or add-checkpoint requests (witness). Afterwards it checks, and
prints the figures for: every acknowledged notice in the log exactly once;
every checkpoint any client saw consistent with the final one; the embedded
witness's record never going backwards; every witness cosignature durable and
every later rollback refused. Any violation stops it with an assertion.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deplog.client.tlog.note import Signer
from tests.integration.campaign import authority_campaign, witness_campaign, witness_log
from tests.integration.harness import AuthorityProcess, WitnessProcess


async def run(kills: int, publishers: int, seed: int, tmp: Path) -> None:
    rng = random.Random(seed)
    authority = AuthorityProcess(tmp / "authority")
    authority.init()
    signers = [Signer.generate(f"soak{i}") for i in range(publishers)]
    for signer in signers:
        authority.add_publisher(signer, f"org.{signer.name}")
    started = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        report = await authority_campaign(authority, http, signers, kills, rng)
    print(
        f"authority: {report.kills} kills survived in {time.monotonic() - started:.0f} s; "
        f"{len(report.acknowledged)} acknowledged notices all in the log once "
        f"({report.logged} logged); {len(report.checkpoints)} checkpoints seen by clients, "
        f"all consistent with the final one; embedded witness sizes never decreased "
        f"(last {report.witness_sizes[-1] if report.witness_sizes else 0})"
    )

    publisher = Signer.generate("acme")
    log, signer = witness_log(tmp, publisher)
    witness = WitnessProcess(tmp / "witness", name="soak.witness/w")
    witness.init()
    witness.cli("add-log", "--origin", signer.name, "--key", signer.verifier().vkey())
    started = time.monotonic()
    wreport = await witness_campaign(witness, log, publisher, kills, rng)
    print(
        f"witness: {wreport.kills} kills survived in {time.monotonic() - started:.0f} s; "
        f"{wreport.cosigned} cosignatures returned, none lost; "
        f"{wreport.refused_rollbacks} rollbacks refused after restarts"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--publishers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    print(f"seed {args.seed}")
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(args.kills, args.publishers, args.seed, Path(tmp)))


if __name__ == "__main__":
    main()
