"""Many front-ends on one PostgreSQL log, killed under load, and the database itself stopped.

Real processes, real cluster, real signed notices over real HTTP; the verdict is the
oracle's (log_oracle.py, rules 1-6: every acknowledged notice in the final log exactly once
and proven by inclusion, no size with two roots, every checkpoint a client saw consistent
with the final one, appends resumed after every kill within a bound).

* The campaign: 3 front-ends, 20 publishers, 15 SIGKILLs (about half aimed at the process
  whose transaction holds the sequencer row, found in ``pg_locks``), each restarted.
  bench/pg_failover.py runs the long one (>= 50 kills) by hand.
* The freeze: the holder of the publication-round lock SIGSTOPped 3 times for 4 s: the
  others acknowledge again within 2 s (``storage/cluster.py`` rule 5).
* A start cut short: the database stopped while a front-end starts is one line, exit 69.
* The outage: the cluster stopped with ``pg_ctl stop -m immediate`` under load and started
  again: every answer in between is 503 ``storage_unavailable`` (or, for a notice committed
  just before the stop, ``embedded_witness_unavailable``), no process dies or prints a
  traceback, nothing acknowledged is lost, and appends resume by themselves.

PostgreSQL comes from the ``pg_cluster`` fixture: missing, these tests skip loudly, and
under CI=true they fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from deplog.authority.storage.cluster import ROUND_LOCK
from deplog.client.tlog.note import Signer
from tests.integration.log_oracle import first_violation, resume_gaps
from tests.integration.pg_campaign import (
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

pytestmark = pytest.mark.slow  # PostgreSQL failover, real processes

RESUME_BOUND = 20.0
"""Seconds within which appends must resume after a kill (2 shared cores in CI; the
figures measured are in BENCHMARKS.md)."""
OUTAGE = 4.0
"""Seconds the database stays down in the outage test."""
RECOVERY_BOUND = 30.0
"""Seconds within which appends must resume after the database is back."""
FREEZE = 4.0
"""Seconds the round lock's holder stays frozen (SIGSTOP) in the freeze test."""
STALL_BOUND = 2.0
"""Seconds the other front-ends may go without a 201 while it is frozen."""


@pytest.fixture
def signers() -> list[Signer]:
    return [Signer.generate(f"fo{n}") for n in range(20)]


@pytest.fixture
def front_ends(tmp_path: Path, pg_url: str, signers: list[Signer]) -> Iterator[FrontEnds]:
    """Three front-ends over one fresh database with the publishers registered."""
    cluster = FrontEnds(tmp_path, pg_url, 3)
    with contextlib.redirect_stdout(io.StringIO()):
        setup_database(cluster, signers)
    cluster.start()
    yield cluster
    cluster.stop()


def test_the_sequencer_lock_holder_is_found_in_pg_locks(tmp_path: Path, pg_url: str) -> None:
    """The campaign's aim: a process holding ``log_head`` FOR UPDATE over TCP is named,
    one waiting behind it is not, and the waiter is named once the holder dies."""
    with contextlib.redirect_stdout(io.StringIO()):
        setup_database(FrontEnds(tmp_path, pg_url, 1), [])
    import psycopg

    hold = (
        "import psycopg, sys, time\n"
        "conn = psycopg.connect(sys.argv[1])\n"
        "conn.execute('SELECT size FROM log_head WHERE id = 1 FOR UPDATE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    )
    first = subprocess.Popen([sys.executable, "-c", hold, pg_url], stdout=subprocess.PIPE)
    second = None
    try:
        assert first.stdout is not None and first.stdout.readline() == b"locked\n"
        second = subprocess.Popen([sys.executable, "-c", hold, pg_url], stdout=subprocess.PIPE)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not _waiting(conn):
                time.sleep(0.02)
            assert sequencer_holder(conn, [second.pid, first.pid]) == 1
            first.kill()
            first.wait()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and sequencer_holder(conn, [second.pid]) is None:
                time.sleep(0.02)
            assert sequencer_holder(conn, [second.pid, first.pid]) == 0
    finally:
        for process in (first, second):
            if process is not None:
                process.kill()
                process.wait()


def _waiting(conn: Any) -> bool:
    query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    return bool(conn.execute(query).fetchone()[0])


async def test_front_ends_killed_under_load_lose_nothing_and_never_fork(
    front_ends: FrontEnds, pg_url: str, signers: list[Signer]
) -> None:
    import psycopg

    config = CampaignConfig(kills=15, publishers=len(signers), seed=17)
    with psycopg.connect(pg_url, autocommit=True) as conn:

        def holder() -> int | None:
            return sequencer_holder(conn, [p.pid for p in front_ends.processes])

        load, note, leaves = await run_campaign(front_ends, signers, config, holder)
    observations = load.observations
    gaps = [gap for gap in resume_gaps(observations) if gap is not None]
    print(
        f"{len(observations.kills)} kills ({sum(1 for k in observations.kills if k.sequencer)} "
        f"of the sequencer's holder); failover max {max(gaps, default=0):.2f} s; "
        f"restarts max {max(front_ends.restarts, default=0):.2f} s; {dict(load.outcomes)}"
    )
    verdict = first_violation(observations, note, leaves, front_ends.log_verifier, RESUME_BOUND)
    assert verdict is None, verdict
    assert load.unexpected == []
    assert len(observations.kills) == 15
    assert any(kill.sequencer for kill in observations.kills), "no kill hit the sequencer"
    assert len(observations.acks) >= 100 and len(leaves) >= len(observations.acks)
    printed = front_ends.outputs()
    assert "Traceback" not in printed, printed[max(0, printed.find("Traceback") - 300) :][:3000]


async def test_a_database_outage_is_503_storage_unavailable_and_appends_resume(
    tmp_path: Path, signers: list[Signer]
) -> None:
    """Its own cluster: the session's stays up for the other tests."""
    cluster = PgCluster()
    try:
        db = cluster.create_database()
        front_ends = FrontEnds(tmp_path, db, 2)
        with contextlib.redirect_stdout(io.StringIO()):
            setup_database(front_ends, signers)
        front_ends.start()
        window: dict[str, float] = {}

        async def outage(load: Load) -> None:
            await _until(lambda: load.outcomes["201"] >= 50, 60)
            window["stopped"] = time.monotonic()
            await asyncio.to_thread(cluster.stop, "immediate")
            await asyncio.sleep(OUTAGE)
            window["starting"] = time.monotonic()
            await asyncio.to_thread(cluster.start)
            window["started"] = time.monotonic()
            before = load.outcomes["201"]
            await _until(lambda: load.outcomes["201"] > before + 20, RECOVERY_BOUND + 10)

        try:
            load, note, leaves = await run_under_load(front_ends, signers, outage)
        finally:
            exits = [p.process.poll() if p.process else "gone" for p in front_ends.processes]
            front_ends.stop()
    finally:
        cluster.destroy()

    assert exits == [None, None], "a front-end died during the outage"
    verdict = first_violation(load.observations, note, leaves, front_ends.log_verifier)
    assert verdict is None, verdict
    assert load.unexpected == []
    resumed = min(t for t, o in load.timeline if o == "201" and t > window["started"])
    during = {o for t, o in load.timeline if window["stopped"] + 0.5 < t < resumed}
    # A notice committed just before the stop can still be waiting for its cosignature,
    # which the embedded witness (its record in the same database) cannot give: that
    # append fails closed with its own code, the notice already durable (docs/operators.md).
    assert during <= {
        "503 storage_unavailable",
        "503 embedded_witness_unavailable",
        "200",
        "201",
    }, during
    refused = [t for t, o in load.timeline if o == "503 storage_unavailable"]
    assert len(refused) >= 20
    assert resumed - window["started"] < RECOVERY_BOUND
    printed = front_ends.outputs()
    assert "Traceback" not in printed, printed[max(0, printed.find("Traceback") - 300) :][:3000]
    print(
        f"outage {window['starting'] - window['stopped']:.1f} s: {len(refused)} 503s; "
        f"appends resumed {resumed - window['started']:.2f} s after the database was back"
    )


async def _until(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s")
        await asyncio.sleep(0.05)


async def test_freezing_the_round_lock_holder_stalls_acknowledgements_under_two_seconds(
    front_ends: FrontEnds, pg_url: str, signers: list[Signer]
) -> None:
    """The frozen process is out of the publishers' rotation, as a load balancer's health
    check takes it out; the others must keep acknowledging, and no size gets two roots."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:

        def holder() -> int | None:
            pids = [p.pid for p in front_ends.processes]
            return sequencer_holder(conn, pids, ROUND_HOLDER_QUERY)

        async def freezes(load: Load) -> None:
            await freeze_loop(front_ends, 3, FREEZE, load, holder)

        load, note, leaves = await run_under_load(front_ends, signers, freezes)
    found = stalls(load)
    print(f"longest waits for a 201 around {FREEZE} s freezes: {found}")
    verdict = first_violation(load.observations, note, leaves, front_ends.log_verifier)
    assert verdict is None, verdict
    assert load.unexpected == []
    assert len(found) == 3 and max(found) < STALL_BOUND
    printed = front_ends.outputs()
    assert "Traceback" not in printed, printed[max(0, printed.find("Traceback") - 300) :][:3000]


def test_the_database_lost_while_serve_starts_is_one_line_and_exit_69(tmp_path: Path) -> None:
    """Its own cluster, stopped while a starting front-end waits in ``Cluster.prepare``
    (its lock held here): the window where a traceback and exit 1 came out."""
    import psycopg

    cluster = PgCluster()
    try:
        db = cluster.create_database()
        front_ends = FrontEnds(tmp_path, db, 1)
        with contextlib.redirect_stdout(io.StringIO()):
            setup_database(front_ends, [])
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("SELECT pg_advisory_lock(%s, 1)", (ROUND_LOCK,))
            command = [*front_ends.processes[0].command(), "--port", "0"]
            serve = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 30
            while not _waiting(conn) and time.monotonic() < deadline:
                time.sleep(0.05)
            cluster.stop("immediate")
        _, stderr = serve.communicate(timeout=60)
    finally:
        cluster.destroy()
    assert serve.returncode == 69, stderr
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith("authority: storage_unavailable: cannot use the database ")
