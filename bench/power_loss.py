"""The long power-loss campaign, run by hand: every crash state of a longer recording.

    python bench/power_loss.py [--batches 6] [--per-batch 4] [--limit 0] [--workers 2]
                               [--fill-wal]

Records a real ``authority serve`` under strace while it appends ``batches``
rounds of ``per-batch`` concurrent notices, enumerates every distinct crash
state of the model in tests/integration/crash_states.py (``--limit`` samples,
0 = all), starts a real authority on each and prints the figures: states
explored, starts, refusals, acknowledged notices checked, lost (must be 0),
signed checkpoints contradicted (must be 0), embedded witness regressions
(must be 0), and any problem with the state that showed it. Exits 1 on any
problem. ``--fill-wal`` first fills the log's WAL to just short of SQLite's automatic
checkpoint, so the recording crosses it. Needs strace.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deplog.client.tlog.note import Signer
from tests.integration.crash_states import CrashState, crash_points, explore
from tests.integration.powerloss import Outcome, Tally, check_state, record, sample


def _family(kind: str) -> str:
    """The kind of choice a state came from: prefix, drop-one, one-alone, torn, or zeros."""
    if kind.startswith("prefix"):
        return "prefix"
    if kind.endswith("torn"):
        return "torn"
    if kind.endswith("without data"):
        return "length without data"
    return "all but one" if kind.startswith("without") else "one alone"


def run(args: argparse.Namespace, tmp: Path) -> Tally:
    started = time.monotonic()
    campaign = record(
        tmp / "recorded",
        Signer.generate("acme"),
        args.batches,
        args.per_batch,
        fill_wal=args.fill_wal,
    )
    acknowledged = sum(1 for s in campaign.sent if s.acknowledged)
    print(
        f"recorded {len(campaign.ops)} file operations, {len(crash_points(campaign.ops))} "
        f"crash points, {acknowledged} receipts, {len(campaign.sent)} signed checkpoints sent "
        f"in {time.monotonic() - started:.1f} s"
    )
    states = list(explore(campaign.snapshot, campaign.ops))
    kinds = Counter(_family(s.kind) for s in states)
    print(f"{len(states)} distinct crash states: {dict(kinds)}")
    if args.limit:
        states = sample(states, args.limit, random.Random(args.seed))

    def check(numbered: tuple[int, CrashState]) -> tuple[CrashState, Outcome]:
        number, state = numbered
        work = tmp / f"state{number}"
        try:
            return state, check_state(campaign, state, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    tally = Tally()
    started = time.monotonic()
    with ThreadPoolExecutor(args.workers) as pool:
        for state, outcome in pool.map(check, enumerate(states)):
            tally.add(state, outcome)
            if tally.states % 50 == 0:
                print(f"  {tally.states}/{len(states)} checked", flush=True)
    elapsed = time.monotonic() - started
    print(f"checked in {elapsed:.0f} s ({elapsed / max(1, tally.states):.2f} s per state)")
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--per-batch", type=int, default=4)
    parser.add_argument("--limit", type=int, default=0, help="sample this many states; 0: all")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--fill-wal",
        action="store_true",
        help="start near SQLite's automatic checkpoint, so the recording holds one",
    )
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    if shutil.which("strace") is None:
        sys.exit("strace is required: apt-get install -y strace")
    print(f"seed {args.seed}")
    with tempfile.TemporaryDirectory() as tmp:
        tally = run(args, Path(tmp))
    print("\n".join(tally.lines()))
    sys.exit(1 if tally.problems else 0)


if __name__ == "__main__":
    main()
