"""The long syscall fault campaign, run by hand: every fault under the real servers.

    python bench/fault_campaign.py [--rounds 2] [--publishers 4] [--notices 25] [--seed N]

Needs strace and root (a tmpfs is not needed here). For each round it runs,
on a fresh authority each time, every combination of syscall set
(fsync+fdatasync, pwrite64, write), error (EIO, ENOSPC) and timing (once, a
burst, for good) on the log's files and on the embedded witness's files, at
invocation numbers drawn from the seed; the same on a standalone witness's
files (4 x ``--notices`` checkpoints each: a burst counts per thread of its pool);
and the start-up faults (openat EACCES, EPERM, EIO on either database).
CI runs a fixed subset (tests/integration/test_syscall_faults.py).

It prints one row per scenario and the totals: faults injected, acknowledged
notices checked after a restart, lost (must be 0), duplicated (must be 0),
receipts and served checkpoints without the embedded witness's cosignature
(the README promises it), how long until appends succeeded again in the same
process, and how long the restart without the fault took. A start-up row shows
the exit status and the code the operator was told. ``write`` rows inject
nothing: SQLite writes its files with pwrite64, and the table says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import random
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deplog.client.tlog.note import Signer
from tests.integration.campaign import witness_log
from tests.integration.harness import AuthorityProcess, WitnessProcess
from tests.integration.syscall_faults import (
    EMBEDDED_FILES,
    LOG_FILES,
    STRACE,
    SYNCS,
    WITNESS_FILES,
    Fault,
    refused_start,
    run_authority_fault,
    run_witness_fault,
)

SYSCALL_SETS = {"fsync": SYNCS, "pwrite64": ("pwrite64",), "write": ("write",)}
# The invocation (counted per thread by strace) where each fault starts, drawn from these
# ranges: past what start-up does on its own thread (2 syncs and 5 pwrite64s on log.db),
# and low enough that even the short runs under a persistent fault reach it.
FIRST = {
    ("log", "fsync"): (3, 10),
    ("log", "pwrite64"): (20, 40),
    ("embedded witness", "fsync"): (3, 6),
    ("embedded witness", "pwrite64"): (3, 12),
    ("witness", "fsync"): (2, 6),
    ("witness", "pwrite64"): (3, 12),
}
TARGETS = {"log": LOG_FILES, "embedded witness": EMBEDDED_FILES}


def runtime_faults(rng: random.Random, files: dict[str, tuple[str, ...]]) -> list[Fault]:
    faults = []
    for target, paths in files.items():
        for label, syscalls in SYSCALL_SETS.items():
            for error in ("EIO", "ENOSPC"):
                low, high = FIRST.get((target, label), (1, 10))
                first = rng.randint(low, high)
                burst = f"{first}..{first + rng.randint(5, 20)}"
                timings = (("once", str(first)), ("burst", burst), ("for good", f"{first}+"))
                for timing, when in timings:
                    name = f"{target}: {label} {error} {timing} ({when})"
                    faults.append(Fault(name, syscalls, error, when, paths))
    return faults


def row(*cells: object) -> str:
    widths = (52, 8, 8, 5, 5, 10, 10, 9)
    return "  ".join(
        str(c).rjust(w) if i else str(c).ljust(w)
        for i, (c, w) in enumerate(zip(cells, widths, strict=False))
    )


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


async def authority_rounds(
    tmp: Path, rng: random.Random, publishers: int, notices: int
) -> dict[str, float]:
    totals = {"scenarios": 0, "injected": 0, "checked": 0, "lost": 0, "duplicated": 0, "bare": 0}
    worst_recovery = 0.0
    worst_restart = 0.0
    print(
        row(
            "authority scenario",
            "injected",
            "acked",
            "lost",
            "dup",
            "bare rcpt",
            "bare ckpt",
            "recover s",
        )
        + "  restart s"
    )
    for number, fault in enumerate(runtime_faults(rng, TARGETS)):
        authority = AuthorityProcess(tmp / f"authority{number}")
        signers = [Signer.generate(f"pub{n}") for n in range(publishers)]
        with contextlib.redirect_stdout(io.StringIO()):
            authority.init()
            for signer in signers:
                authority.add_publisher(signer, f"org.{signer.name}")
        authority.start()
        authority.stop()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            count = max(1, notices // 3) if fault.persistent else notices
            run = await run_authority_fault(authority, http, signers, fault, count)
        bare = run.receipts_without_cosignature + run.checkpoints_without_cosignature
        print(
            row(
                fault.name,
                run.injected,
                len(run.acknowledged),
                run.lost,
                run.duplicated,
                run.receipts_without_cosignature,
                run.checkpoints_without_cosignature,
                seconds(run.recovered_after),
            )
            + f"  {run.restart_seconds:9.2f}",
            flush=True,
        )
        totals["scenarios"] += 1
        totals["injected"] += run.injected
        totals["checked"] += len(run.acknowledged)
        totals["lost"] += run.lost
        totals["duplicated"] += run.duplicated
        totals["bare"] += bare
        worst_recovery = max(worst_recovery, run.recovered_after or 0.0)
        worst_restart = max(worst_restart, run.restart_seconds)
    totals["worst recovery s"] = worst_recovery
    totals["worst restart s"] = worst_restart
    return totals


async def witness_rounds(tmp: Path, rng: random.Random, checkpoints: int) -> dict[str, float]:
    totals = {"scenarios": 0, "injected": 0, "cosignatures": 0, "lost": 0}
    print()
    print(row("witness scenario", "injected", "cosigned", "lost", "503s", "recovered"))
    for number, fault in enumerate(runtime_faults(rng, {"witness": WITNESS_FILES})):
        publisher = Signer.generate("acme")
        (tmp / f"wlog{number}").mkdir()
        log, signer = witness_log(tmp / f"wlog{number}", publisher)
        witness = WitnessProcess(tmp / f"witness{number}", name="campaign.witness/w")
        with contextlib.redirect_stdout(io.StringIO()):
            witness.init()
            witness.cli("add-log", "--key", signer.verifier().vkey())
        run = await run_witness_fault(witness, log, publisher, fault, checkpoints)
        log.close()
        print(
            row(
                fault.name,
                run.injected,
                len(run.cosigned_sizes),
                run.lost,
                run.refusals[503],
                run.recovered,
            ),
            flush=True,
        )
        totals["scenarios"] += 1
        totals["injected"] += run.injected
        totals["cosignatures"] += len(run.cosigned_sizes)
        totals["lost"] += run.lost
    return totals


def startup_rounds(tmp: Path) -> dict[str, float]:
    authority = AuthorityProcess(tmp / "startup")
    with contextlib.redirect_stdout(io.StringIO()):
        authority.init()
    authority.start()
    authority.stop()
    print()
    print(row("start-up scenario", "exit", "told"))
    scenarios = 0
    for target, paths in TARGETS.items():
        for error in ("EACCES", "EPERM", "EIO"):
            fault = Fault(f"{target}: openat {error} for good", ("openat",), error, "1+", paths)
            refused = refused_start(authority.command(), fault, authority.data)
            told = refused.line.split(": ")[1] if ": " in refused.line else refused.line
            print(row(fault.name, refused.status, told), flush=True)
            scenarios += 1
    return {"scenarios": scenarios}


async def run(rounds: int, publishers: int, notices: int, seed: int) -> None:
    rng = random.Random(seed)
    started = time.monotonic()
    for round_number in range(rounds):
        print(f"\nround {round_number + 1} of {rounds}\n")
        with tempfile.TemporaryDirectory() as name:
            tmp = Path(name)
            authority = await authority_rounds(tmp, rng, publishers, notices)
            witness = await witness_rounds(tmp, rng, notices * 4)
            startup = startup_rounds(tmp)
        print(f"\nauthority: {authority}\nwitness: {witness}\nstart-up: {startup}")
    print(f"\n{time.monotonic() - started:.0f} s in all")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--notices", type=int, default=25, help="per publisher")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    if STRACE is None:
        sys.exit("strace is not installed (apt-get install strace)")
    print(f"seed {args.seed}")
    asyncio.run(run(args.rounds, args.publishers, args.notices, args.seed))


if __name__ == "__main__":
    main()
