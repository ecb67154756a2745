"""The failover campaign across hosts, run by hand: kills, freezes, partitions, WAN delay.

    python bench/netbed_campaign.py [--delays 0 0.02 0.05] [--loss P] [--kills 10]
        [--freezes 3] [--partitions 3] [--partition-seconds 5 30] [--outages 2]
        [--restarts 2] [--quiet 300] [--seed N]

For each one-way delay, a fresh test bed (tests/integration/netbed.py: PostgreSQL, three
front-ends and the clients on five network namespaces, the delay on every link, and with
``--loss`` that share of chunks a retransmission late), 20
publishers, and the campaign: ``--kills`` SIGKILLs (half at the sequencer's holder),
``--freezes`` freezes of the round lock's holder, ``--partitions`` front-ends cut off from
PostgreSQL for ``--partition-seconds``, ``--outages`` cuts of PostgreSQL from everyone (5 s),
``--restarts`` crashes of PostgreSQL. The delay 0 run is the same-run baseline.

Printed per delay: a lone publisher's POST -> 201 before the campaign (p50, 10 notices);
failover (last 201 before a kill to the first after) p50/max; the longest wait for a 201
around each freeze, beside the longest between two 201s before any fault; propagation (a
201 on one front-end until every other serves a checkpoint that large, over the ``--quiet``
201s before the first fault) p50/p99; for each
cut, how long the cut-off front-ends took to say so on ``/healthz`` and to say ``ok`` after;
the answers; the oracle's verdict. Exits 1 on any violation. Needs root, iproute2 and
PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, pct
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.log_oracle import first_violation, resume_gaps
from tests.integration.netbed import NetBed, NetCampaign, propagation, quiet_gap, run_net_campaign
from tests.integration.pg_campaign import JSON, FrontEnds, stalls


async def lone_publisher(front_ends: FrontEnds, signer: Signer, count: int = 10) -> list[float]:
    """Seconds from POST to 201 for ``count`` notices in turn, nothing else running."""
    took = []
    async with aiohttp.ClientSession() as http:
        for sequence in range(1, count + 1):
            body = make_envelope(signer, sequence).canonical_bytes()
            started = time.monotonic()
            async with http.post(front_ends.urls[0] + "/v1/notices", data=body, headers=JSON) as r:
                assert r.status == 201, r.status
            took.append(time.monotonic() - started)
    return took


def one_delay(root: Path, delay: float, loss: float, config: NetCampaign) -> int:
    signers = [Signer.generate(f"nb{n}") for n in range(21)]
    with NetBed(root, delay=delay, loss=loss) as bed:
        front_ends = bed.front_ends(root / "front-ends", signers)
        bed.run(front_ends.start)
        try:
            lone = bed.run(lambda: asyncio.run(lone_publisher(front_ends, signers[20])))
            started = time.monotonic()
            load, note, leaves, cuts = bed.run(
                lambda: asyncio.run(run_net_campaign(bed, front_ends, signers[:20], config))
            )
        finally:
            bed.run(front_ends.stop)
    observations = load.observations
    gaps = [g for g in resume_gaps(observations) if g is not None] or [0.0]
    spread = propagation(observations, front_ends.log_verifier) or [0.0]
    verdict = first_violation(observations, note, leaves, front_ends.log_verifier, 60.0)
    print(f"\n== one-way delay {delay * 1000:.0f} ms: {time.monotonic() - started:.0f} s")
    print(f"lone publisher POST -> 201: p50 {median(lone):.3f} s, max {max(lone):.3f} s")
    print(
        f"failover over {len(observations.kills)} kills: "
        f"p50 {median(gaps):.2f} s, max {max(gaps):.2f} s"
    )
    print(
        f"freezes: longest wait for a 201 {', '.join(f'{s:.2f}' for s in stalls(load))} s "
        f"(before any fault: {quiet_gap(load):.2f} s)"
    )
    print(
        f"propagation over {len(spread)} acks: "
        f"p50 {median(spread):.3f} s, p99 {pct(spread, 99):.3f} s"
    )
    for cut in cuts:
        said = ", ".join("never" if s is None else f"{s:.1f}" for s in cut.said_degraded)
        back = ", ".join("never" if s is None else f"{s:.1f}" for s in cut.said_ok)
        print(
            f"cut {cut.front_ends} for {cut.seconds:.1f} s: said so after {said} s, ok "
            f"{back} s after the heal; {cut.others_acknowledged} 201s from the others meanwhile"
        )
    print("answers:", dict(sorted(load.outcomes.items())))
    print(f"{len(observations.acks)} acknowledged, {len(leaves)} leaves in the final log")
    tracebacks = front_ends.outputs().count("Traceback")
    print(f"tracebacks: {tracebacks}; oracle: {verdict or 'no violation (rules 1-6)'}")
    return 1 if verdict or load.unexpected or tracebacks else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delays", type=float, nargs="+", default=[0.0, 0.02, 0.05])
    parser.add_argument("--loss", type=float, default=0.0)
    parser.add_argument("--quiet", type=int, default=300, help="201s before the first fault")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--freezes", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--partition-seconds", type=float, nargs=2, default=[5.0, 30.0])
    parser.add_argument("--outages", type=int, default=2)
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    print(f"seed {args.seed}")
    config = NetCampaign(
        quiet=args.quiet,
        kills=args.kills,
        freezes=args.freezes,
        partitions=args.partitions,
        partition_seconds=tuple(args.partition_seconds),
        outages=args.outages,
        restarts=args.restarts,
        seed=args.seed,
    )
    code = 0
    for delay in args.delays:
        with tempfile.TemporaryDirectory() as tmp:
            code |= one_delay(Path(tmp), delay, args.loss, config)
    sys.exit(code)


if __name__ == "__main__":
    main()
