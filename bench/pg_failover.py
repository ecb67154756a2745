"""The long failover campaign on PostgreSQL, run by hand: front-ends SIGKILLed under load.

    python bench/pg_failover.py [--kills 60] [--front-ends 3] [--publishers 30] [--seed N]
    python bench/pg_failover.py --freezes 10 [--freeze-seconds 6] [--freeze-head]

Starts a throwaway PostgreSQL cluster (tests/pgcluster.py), ``--front-ends`` authority
processes on one database, and ``--publishers`` concurrent publishers (real signed
notices, a random front-end per request, a 503 or lost connection retried with the same
notice). Every 1 to 3 seconds it SIGKILLs a front-end (half the kills aimed at the one
whose transaction holds the sequencer lock, found in ``pg_locks``) and restarts it.
Afterwards the oracle (tests/integration/log_oracle.py) checks the final log: every
acknowledged notice in it exactly once and proven by inclusion, no size with two roots,
every checkpoint a client saw consistent with the final one, appends resumed after every
kill within ``--resume-bound`` seconds. CI runs a shorter campaign
(tests/integration/test_pg_failover.py).

With ``--freezes`` it SIGSTOPs the holder of the publication-round lock (``--freeze-head``:
of the ``log_head`` row) instead, for ``--freeze-seconds`` each time, out of the
publishers' rotation meanwhile, and prints the longest wait for a 201 around each freeze.

It prints the outcome counts, the kills (how many hit the sequencer's holder), the
failover time (last 201 before a kill to the first 201 after) p50/p99/max, the restart
times, and the oracle's verdict; it exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import itertools
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, pct
from deplog.client.tlog.note import Signer
from tests.integration.log_oracle import Observations, first_violation, resume_gaps
from tests.integration.pg_campaign import (
    HOLDER_QUERY,
    ROUND_HOLDER_QUERY,
    CampaignConfig,
    FrontEnds,
    Load,
    freeze_loop,
    run_campaign,
    run_under_load,
    sequencer_holder,
    setup_database,
    stalls,
)
from tests.pgcluster import PgCluster


def failover_figures(observations: Observations) -> str:
    """p50/p99/max of the resume gaps, in seconds, beside the same run's gaps between
    consecutive 201s (what a client waits between appends without any kill)."""
    known = [g for g in resume_gaps(observations) if g is not None]
    if not known:
        return "no failover measured"
    created = sorted(ack.at for ack in observations.acks if ack.status == 201)
    steps = [b - a for a, b in itertools.pairwise(created)] or [0.0]
    return (
        f"failover (last 201 before a kill to the first after) over {len(known)} kills: "
        f"p50 {median(known):.3f} s, p99 {pct(known, 99):.3f} s, max {max(known):.3f} s; "
        f"between consecutive 201s in the same run: p99 {pct(steps, 99):.3f} s, "
        f"max {max(steps):.3f} s"
    )


async def campaign(
    tmp: Path,
    cluster: PgCluster,
    front_end_count: int,
    config: CampaignConfig,
    bound: float,
    freezes: tuple[int, float] = (0, 0.0),
    freeze_head: bool = False,
) -> int:
    import psycopg

    db = cluster.create_database()
    signers = [Signer.generate(f"fo{n}") for n in range(config.publishers)]
    front_ends = FrontEnds(tmp, db, front_end_count)
    with contextlib.redirect_stdout(io.StringIO()):
        setup_database(front_ends, signers)
    front_ends.start()
    started = time.monotonic()
    with psycopg.connect(db, autocommit=True) as conn:

        def holder() -> int | None:
            return sequencer_holder(conn, [p.pid for p in front_ends.processes])

        def lock_holder() -> int | None:
            query = HOLDER_QUERY if freeze_head else ROUND_HOLDER_QUERY
            return sequencer_holder(conn, [p.pid for p in front_ends.processes], query)

        async def freeze(load: Load) -> None:
            await freeze_loop(front_ends, *freezes, load, lock_holder)

        try:
            if freezes[0]:
                load, note, leaves = await run_under_load(front_ends, signers, freeze)
            else:
                load, note, leaves = await run_campaign(front_ends, signers, config, holder)
        finally:
            front_ends.stop()
    elapsed = time.monotonic() - started
    observations = load.observations
    verdict = first_violation(observations, note, leaves, front_ends.log_verifier, bound)
    on_holder = sum(1 for k in observations.kills if k.sequencer)
    print(f"{len(observations.kills)} kills in {elapsed:.0f} s, {on_holder} of the sequencer")
    print("answers:", dict(sorted(load.outcomes.items())))
    print(
        f"{len(observations.acks)} acknowledged, {len(leaves)} leaves in the final log, "
        f"{len(observations.seen)} checkpoints seen by clients"
    )
    if freezes[0]:
        found = stalls(load)
        print(
            f"{len(found)} freezes of the {'log_head' if freeze_head else 'round'} lock's "
            f"holder, {freezes[1]:.0f} s each: "
            f"longest wait for a 201 p50 {median(found or [0]):.2f} s, "
            f"max {max(found, default=0):.2f} s"
        )
    else:
        print(failover_figures(observations))
        restarts = front_ends.restarts
        print(f"restarts: p50 {median(restarts):.2f} s, max {max(restarts):.2f} s")
    for line in load.unexpected[:10]:
        print("UNEXPECTED:", line)
    tracebacks = front_ends.outputs().count("Traceback")
    print(f"tracebacks in the front-ends' output: {tracebacks}")
    print("oracle:", verdict or "no violation (rules 1-6)")
    return 1 if verdict or load.unexpected or tracebacks else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=60)
    parser.add_argument("--front-ends", type=int, default=3)
    parser.add_argument("--publishers", type=int, default=30)
    parser.add_argument("--resume-bound", type=float, default=15.0, help="seconds")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--freezes", type=int, default=0, help="freeze instead of kill")
    parser.add_argument("--freeze-seconds", type=float, default=6.0)
    parser.add_argument("--freeze-head", action="store_true", help="the log_head row's holder")
    args = parser.parse_args()
    print(f"seed {args.seed}")
    config = CampaignConfig(kills=args.kills, publishers=args.publishers, seed=args.seed)
    cluster = PgCluster()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            code = asyncio.run(
                campaign(
                    Path(tmp),
                    cluster,
                    args.front_ends,
                    config,
                    args.resume_bound,
                    (args.freezes, args.freeze_seconds),
                    args.freeze_head,
                )
            )
    finally:
        cluster.destroy()
    sys.exit(code)


if __name__ == "__main__":
    main()
