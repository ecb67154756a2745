"""Failover campaigns on PostgreSQL: front-end processes SIGKILLed under load, then checked.

Shared by the CI tests (tests/integration/test_pg_failover.py) and the long runs made by
hand (bench/pg_failover.py, bench/bench_pg.py). The pieces:

* ``FrontEnds``: N ``authority serve --db postgresql://...`` processes over one database,
  one set of keys, each on its own port (kept across restarts, so clients keep their list).
* ``Publishers``: concurrent publishers sending real signed notices over real HTTP to a
  random front-end per request; a 503 or a connection error is retried with the same
  notice (resubmission is idempotent), anything else is recorded as unexpected.
* ``Watchers``: a ``/checkpoint`` poller and a push subscriber per front-end, so every
  checkpoint a client could see is collected.
* ``sequencer_holder``: which front-end's transaction holds the sequencer row lock (or,
  with ``ROUND_HOLDER_QUERY``, the publication-round lock), from ``pg_locks`` and
  ``pg_stat_activity`` (the backend's client port, mapped to the process that owns that
  socket), so a campaign kills or freezes the holder on purpose, not only by chance.
* ``freeze_loop``: SIGSTOP the round lock's holder for a while, then SIGCONT it;
  ``stalls`` gives the longest wait between two 201s around each freeze.

* ``run_under_load``: all of the above around a scenario (``kill_loop`` for the failover
  campaign, a database outage for the outage test), then one last notice so the final
  checkpoint covers every committed leaf, then the final log.

What the clients saw goes into ``log_oracle.Observations``; ``log_oracle.first_violation``
judges it against the final log read back with ``final_log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Any

import aiohttp

from deplog.authority.cli import main as authority_main
from deplog.authority.storage.cluster import ROUND_LOCK
from deplog.client.errors import DeplogError
from deplog.client.follow.http import HttpLogSource
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Signer, Verifier
from deplog.client.tlog.receipt import Receipt
from tests.builders import make_envelope
from tests.integration.harness import ORIGIN, AuthorityProcess
from tests.integration.log_oracle import Ack, Kill, Observations, Seen

JSON = {"Content-Type": "application/json"}
REQUEST_TIMEOUT = 20.0
"""Seconds one POST may take before the publisher counts it as failed and retries."""
RESTART_BOUND = 120.0
"""Seconds a campaign waits for killed front-ends to be back before it gives up."""
RETRY_PAUSE = (0.01, 0.05)
"""Seconds a publisher waits before retrying (uniform in this range)."""


@dataclass
class FrontEnd(AuthorityProcess):
    """One ``authority serve`` process of a cluster: its own data directory and output
    file, the cluster's keys and database."""

    name: str = "front0"
    db: str = ""
    shared_keys: Path | None = None

    @property
    def keys(self) -> Path:
        return self.shared_keys if self.shared_keys is not None else self.root / "keys"

    @property
    def output(self) -> Path:
        return self.root / f"{self.name}.out"

    def command(self) -> list[str]:
        return [*super().command(), *(["--db", self.db] if self.db else [])]

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid


def setup_sqlite(front_ends: FrontEnds, publishers: Sequence[Signer]) -> None:
    """One front-end on its own SQLite log (the single-process authority), for shaking
    the campaign down and as the benchmarks' baseline."""
    (only,) = front_ends.processes
    only.root.mkdir(parents=True, exist_ok=True)
    only.init()
    for signer in publishers:
        only.add_publisher(signer, f"org.{signer.name}")


def setup_database(front_ends: FrontEnds, publishers: Sequence[Signer]) -> None:
    """What the operator runs once: ``authority migrate`` on the database, ``authority
    init`` for every front-end's data directory (one log key, in the shared keys
    directory), and ``publisher add`` for each publisher."""
    assert authority_main(["migrate", "--db", front_ends.db]) == 0
    for process in front_ends.processes:
        process.root.mkdir(parents=True, exist_ok=True)
        common = ["--data", str(process.data), "--keys", str(process.keys), "--db", process.db]
        assert authority_main(["init", *common, "--origin", ORIGIN]) == 0
    first = front_ends.processes[0]
    common = ["--data", str(first.data), "--keys", str(first.keys), "--db", first.db]
    for signer in publishers:
        code = authority_main(
            [
                "publisher",
                "add",
                signer.name,
                *common,
                "--namespace",
                f"org.{signer.name}",
                "--key",
                signer.verifier().vkey(),
            ]
        )
        assert code == 0


class FrontEnds:
    """``count`` front-ends over one database; each keeps its port across restarts."""

    def __init__(self, root: Path, db: str, count: int, extra_args: Sequence[str] = ()) -> None:
        self.root = root
        self.db = db
        self.processes = [
            FrontEnd(
                root / f"front{n}",
                extra_args=list(extra_args),
                name=f"front{n}",
                db=db or None,  # "": the front-end's own SQLite log
                shared_keys=root / "keys",
            )
            for n in range(count)
        ]
        self.urls: list[str] = []
        self._up: set[int] = set()
        """The front-ends serving: started and answering, not killed since."""
        self.frozen: set[int] = set()
        """The front-ends out of the publishers' rotation: frozen (``freeze_loop``)."""
        self.restarts: list[float] = []
        """Seconds each restart took, until its ``/healthz`` answered."""

    @property
    def log_verifier(self) -> Verifier:
        stem = ORIGIN.replace("/", "_")
        return Verifier.parse((self.root / "keys" / f"{stem}.pub").read_text().strip())

    def start(self) -> list[str]:
        """Start every front-end at once, as an operator starts a fleet."""
        for process in self.processes:
            process.root.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(len(self.processes)) as pool:
            list(pool.map(lambda process: process.start(), self.processes))
        self._up = set(range(len(self.processes)))
        self.urls = [p.url for p in self.processes]
        return self.urls

    def running(self) -> list[int]:
        """The front-ends serving now (a restart in progress is not one of them)."""
        return sorted(self._up)

    def kill(self, n: int) -> None:
        self._up.discard(n)
        self.processes[n].kill()

    def restart(self, n: int) -> None:
        started = time.monotonic()
        self.processes[n].start(self.processes[n].port)
        self.restarts.append(time.monotonic() - started)
        self._up.add(n)

    def stop(self) -> list[int]:
        return [p.stop() for p in self.processes]

    def outputs(self) -> str:
        return "".join(p.output.read_text() for p in self.processes if p.output.exists())


# --- who holds the sequencer lock ---------------------------------------------------------

HOLDER_QUERY = """
SELECT a.client_port
FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE c.relname = 'log_head' AND l.granted AND l.mode = 'RowShareLock'
  AND a.wait_event_type IS DISTINCT FROM 'Lock'
"""
"""Backends whose transaction took ``SELECT ... FOR UPDATE`` on the head row (a
``RowShareLock`` on the table) and are not waiting for the row: the holder."""
ROUND_HOLDER_QUERY = f"""
SELECT a.client_port
FROM pg_locks l
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted
  AND l.classid::bigint = {ROUND_LOCK} AND l.objid::bigint = 0 AND l.objsubid = 2
"""
"""The backend holding the publication-round advisory lock (two-key form: objsubid 2)."""


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    return inodes


def _local_port_inodes() -> dict[int, set[str]]:
    """Local TCP port -> the inodes of the sockets bound to it, for every IPv4 and IPv6 TCP
    socket. A port can have several: Linux reuses an ephemeral port for connections to
    other destinations, and a closed connection lingers in TIME_WAIT with inode 0 (no
    socket left), which is skipped."""
    ports: dict[int, set[str]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if fields[9] != "0":
                    ports.setdefault(int(fields[1].rsplit(":", 1)[1], 16), set()).add(fields[9])
    return ports


def sequencer_holder(
    conn: Any, pids: Sequence[int | None], query: str = HOLDER_QUERY
) -> int | None:
    """The position in ``pids`` of the process whose transaction holds the sequencer row
    lock (or the lock ``query`` finds) now, or None (nobody holds it, or the holder is not
    one of ``pids``). ``conn`` is a psycopg connection in autocommit mode; the processes
    connect over TCP."""
    ports = [row[0] for row in conn.execute(query).fetchall() if row[0] is not None]
    if not ports:
        return None
    by_port = _local_port_inodes()
    wanted = set().union(*(by_port.get(p, set()) for p in ports))
    for n, pid in enumerate(pids):
        if pid is not None and wanted & _socket_inodes(pid):
            return n
    return None


# --- load ------------------------------------------------------------------------------------


@dataclass
class Load:
    """What the publishers and watchers counted besides the oracle's observations."""

    observations: Observations = field(default_factory=Observations)
    outcomes: Counter[str] = field(default_factory=Counter)
    """Every answer by kind: "201", "200", "503 storage_unavailable", "connection"..."""
    unexpected: list[str] = field(default_factory=list)
    """Answers no failover may cause (anything but 200, 201, 503 or a lost connection)."""
    timeline: list[tuple[float, str]] = field(default_factory=list)
    """(time, outcome) of every answer, for the outage test's windows."""
    freezes: list[tuple[float, float]] = field(default_factory=list)
    """(SIGSTOP, SIGCONT) times of every freeze that caught the round lock held."""

    def record(self, outcome: str) -> None:
        self.outcomes[outcome] += 1
        self.timeline.append((time.monotonic(), outcome))


def _code(body: bytes) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        return str(json.loads(body).get("error"))
    return "?"


async def publish(
    http: aiohttp.ClientSession,
    urls: Callable[[], Sequence[str]],
    signer: Signer,
    sequences: Sequence[int],
    load: Load,
    stop: asyncio.Event,
    rng: random.Random,
    give_up: float = 60.0,
) -> None:
    """Submit ``sequences`` in order (until ``stop``), each to a random front-end (an empty
    URL is one out of rotation, as a load balancer takes out a frozen one), each
    retried with the same bytes on a 503 or a lost connection until acknowledged; after
    ``stop`` the notice in hand is still retried for ``give_up`` seconds."""
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    for sequence in sequences:
        if stop.is_set():
            return
        body = make_envelope(signer, sequence).canonical_bytes()
        stopped_at: float | None = None
        while True:
            n = rng.choice([n for n, url in enumerate(urls()) if url])
            try:
                async with http.post(
                    urls()[n] + "/v1/notices", data=body, headers=JSON, timeout=timeout
                ) as response:
                    payload = await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError, OSError):
                load.record("connection")
            else:
                if status in (200, 201):
                    load.record(str(status))
                    now = time.monotonic()
                    load.observations.acks.append(Ack(body, payload, status, now, n))
                    with contextlib.suppress(DeplogError):
                        note = Receipt.parse(payload).checkpoint
                        load.observations.seen.append(Seen(note, "receipt", now, n))
                    break
                outcome = f"{status} {_code(payload)}"
                load.record(outcome)
                if status != 503:
                    load.unexpected.append(f"{signer.name}/{sequence} at front{n}: {outcome}")
                    break
            if stop.is_set():
                stopped_at = stopped_at or time.monotonic()
                if time.monotonic() - stopped_at > give_up:
                    return
            await asyncio.sleep(rng.uniform(*RETRY_PAUSE))


async def poll_checkpoints(
    http: aiohttp.ClientSession, url: str, n: int, load: Load, stop: asyncio.Event
) -> None:
    """``GET /checkpoint`` every 50 ms; each new note goes to the observations."""
    last = b""
    while not stop.is_set():
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
            async with http.get(url + "/checkpoint", timeout=aiohttp.ClientTimeout(5)) as r:
                note = await r.read()
                if r.status == 200 and note != last:
                    load.observations.seen.append(Seen(note, "poll", time.monotonic(), n))
                    last = note
        await asyncio.sleep(0.05)


async def follow_push(
    http: aiohttp.ClientSession, url: str, n: int, load: Load, stop: asyncio.Event
) -> None:
    """Subscribe to the push stream, resubscribing whenever it ends (the process died)."""
    source = HttpLogSource(url, session=http)
    while not stop.is_set():
        with contextlib.suppress(DeplogError, aiohttp.ClientError, OSError):
            async for note in source.checkpoints():
                load.observations.seen.append(Seen(note, "push", time.monotonic(), n))
                if stop.is_set():
                    return
        await asyncio.sleep(0.1)


async def final_log(
    http: aiohttp.ClientSession, url: str, log_verifier: Verifier
) -> tuple[bytes, list[bytes]]:
    """The served checkpoint note of ``url`` and every leaf up to its size."""
    source = HttpLogSource(url, session=http)
    note = await source.checkpoint()
    checkpoint, _ = open_checkpoint(note, log_verifier)
    leaves: list[bytes] = []
    while len(leaves) < checkpoint.size:
        leaves.extend(await source.entries(len(leaves), checkpoint.size))
    return note, leaves


# --- the campaign ----------------------------------------------------------------------------


@dataclass
class CampaignConfig:
    kills: int = 15
    publishers: int = 20
    interval: tuple[float, float] = (1.0, 3.0)
    """Seconds between kills (uniform)."""
    down: tuple[float, float] = (0.2, 1.0)
    """Seconds a killed front-end stays down before its restart begins (uniform)."""
    sequencer_share: float = 0.5
    """Share of kills aimed at the sequencer lock's holder (the rest hit a random process)."""
    seed: int = 0


async def kill_loop(
    front_ends: FrontEnds,
    config: CampaignConfig,
    load: Load,
    rng: random.Random,
    holder: Callable[[], int | None] | None,
) -> None:
    """SIGKILL a front-end every few seconds, never the last one running, and restart it."""
    restarts: list[asyncio.Task[None]] = []

    async def restart_later(n: int) -> None:
        await asyncio.sleep(rng.uniform(*config.down))
        await asyncio.to_thread(front_ends.restart, n)

    for _ in range(config.kills):
        deadline = time.monotonic() + RESTART_BOUND
        while len(front_ends.running()) < min(2, len(front_ends.processes)):
            for task in restarts:
                if task.done() and task.exception() is not None:
                    raise AssertionError(f"a restart failed: {task.exception()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"fewer than 2 front-ends up for {RESTART_BOUND} s")
            await asyncio.sleep(0.05)
        await asyncio.sleep(rng.uniform(*config.interval))
        victim: int | None = None
        held: bool | None = None
        if holder is not None and rng.random() < config.sequencer_share:
            # Signal the holder as soon as it is seen: a batch holds the row for about
            # 10 ms, so another look before the signal would mostly see it released.
            deadline = time.monotonic() + 2.0
            while victim is None and time.monotonic() < deadline:
                found = await asyncio.to_thread(holder)
                if found is not None and found in front_ends.running():
                    victim, held = found, True
                else:
                    await asyncio.sleep(0.002)
        if victim is None:
            victim = rng.choice(front_ends.running())
            held = None if holder is None else await asyncio.to_thread(holder) == victim
        front_ends.kill(victim)
        load.observations.kills.append(Kill(time.monotonic(), victim, held))
        restarts.append(asyncio.create_task(restart_later(victim)))
    await asyncio.gather(*restarts)


async def freeze_loop(
    front_ends: FrontEnds,
    freezes: int,
    seconds: float,
    load: Load,
    holder: Callable[[], int | None],
) -> None:
    """Freeze the round lock's holder for ``seconds``, ``freezes`` times, out of the
    publishers' rotation meanwhile; a freeze counts only if the frozen process still holds
    the lock (a round lasts milliseconds)."""
    for _ in range(freezes * 20):
        if len(load.freezes) >= freezes:
            return
        await asyncio.sleep(1.0)
        deadline = time.monotonic() + 5.0
        victim = None
        while victim is None and time.monotonic() < deadline:
            victim = await asyncio.to_thread(holder)
        pid = None if victim is None else front_ends.processes[victim].pid
        if pid is None:
            continue
        os.kill(pid, signal.SIGSTOP)
        front_ends.frozen.add(victim)
        stopped = time.monotonic()
        try:
            if await asyncio.to_thread(holder) != victim:
                continue
            await asyncio.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
            front_ends.frozen.discard(victim)
        load.freezes.append((stopped, time.monotonic()))


def stalls(load: Load) -> list[float]:
    """For each freeze: the longest time without a 201 between the last 201 before it
    and the first after it."""
    created = sorted(ack.at for ack in load.observations.acks if ack.status == 201)
    found = []
    for stopped, resumed in load.freezes:
        before = [t for t in created if t <= stopped][-1:] or [stopped]
        during = [t for t in created if stopped < t <= resumed]
        after = [t for t in created if t > resumed][:1] or [resumed]
        times = [*before, *during, *after]
        found.append(max(b - a for a, b in itertools.pairwise(times)))
    return found


async def run_campaign(
    front_ends: FrontEnds,
    signers: Sequence[Signer],
    config: CampaignConfig,
    holder: Callable[[], int | None] | None = None,
) -> tuple[Load, bytes, list[bytes]]:
    """``run_under_load`` with ``kill_loop`` as the scenario."""
    rng = random.Random(config.seed)

    async def kills(load: Load) -> None:
        await kill_loop(front_ends, config, load, rng, holder)

    return await run_under_load(front_ends, signers, kills)


async def run_under_load(
    front_ends: FrontEnds,
    signers: Sequence[Signer],
    scenario: Callable[[Load], Awaitable[None]],
) -> tuple[Load, bytes, list[bytes]]:
    """Publish from every signer and watch every front-end while ``scenario`` runs; then
    publish once more (so the final checkpoint covers every committed leaf, a killed
    batch's included), wait until every front-end serves at least every size a client
    saw, and read the final log back. Returns the load, the final note and its leaves."""
    load = Load()
    stop = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        urls = list(front_ends.urls)

        def rotation() -> list[str]:
            return ["" if n in front_ends.frozen else url for n, url in enumerate(urls)]

        tasks = [
            asyncio.create_task(
                publish(http, rotation, s, range(1, 10**9), load, stop, random.Random(k))
            )
            for k, s in enumerate(signers)
        ]
        watchers = []
        for n, url in enumerate(urls):
            watchers.append(asyncio.create_task(poll_checkpoints(http, url, n, load, stop)))
            watchers.append(asyncio.create_task(follow_push(http, url, n, load, stop)))
        try:
            await scenario(load)
        finally:
            stop.set()
            await asyncio.wait(tasks, timeout=90)
            for task in [*tasks, *watchers]:
                task.cancel()
            await asyncio.gather(*tasks, *watchers, return_exceptions=True)
        await publish(http, lambda: urls, signers[0], [10**9], load, asyncio.Event(), Random())
        largest = max(_sizes(load.observations.seen, front_ends.log_verifier), default=0)
        behind = []
        for n, url in enumerate(urls):
            if not await serves_at_least(http, url, largest, front_ends.log_verifier):
                load.unexpected.append(f"front{n} never served size {largest}")
                behind.append(n)
        ahead = [n for n in range(len(urls)) if n not in behind] or [0]
        note, leaves = await final_log(http, urls[ahead[0]], front_ends.log_verifier)
    return load, note, leaves


def _sizes(seen: Sequence[Seen], log_verifier: Verifier) -> list[int]:
    """The sizes of the seen checkpoints that verify (the oracle judges the others)."""
    sizes = []
    for one in seen:
        with contextlib.suppress(DeplogError):
            sizes.append(open_checkpoint(one.note, log_verifier)[0].size)
    return sizes


async def serves_at_least(
    http: aiohttp.ClientSession, url: str, size: int, log_verifier: Verifier, wait: float = 30.0
) -> bool:
    """Whether ``url`` serves a checkpoint of at least ``size`` within ``wait`` seconds (a
    front-end learns other processes' checkpoints from the database)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError, DeplogError):
            async with http.get(url + "/checkpoint") as response:
                checkpoint, _ = open_checkpoint(await response.read(), log_verifier)
                if checkpoint.size >= size:
                    return True
        await asyncio.sleep(0.05)
    return False
