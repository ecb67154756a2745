"""Many machines on one: network namespaces joined by veth links, with delay and partitions.

The test bed of the multi-host campaigns (tests/integration/test_netbed.py, and
bench/netbed_campaign.py by hand). Five hosts, each a network namespace with its own
loopback, addresses and routes, none of them touching the machine's own network:

    pg  -- PostgreSQL, and a delay relay per front-end (``delay_relay.py``)
    fe0, fe1, fe2 -- an ``authority serve`` each, behind a delay relay for its clients
    cl  -- publishers, followers and probes: the thread ``NetBed.run`` runs in

``pg`` and ``feN`` share the link ``10.77.N.0/24`` (``.1`` on pg, ``.2`` on feN), ``feN`` and
``cl`` the link ``10.78.N.0/24`` (``.1`` on feN, ``.2`` on cl). A front-end reaches the
database at ``10.77.N.1:6432``, the relay there, which connects to PostgreSQL on pg's own
loopback from ``127.0.1.N+1``: ``pg_stat_activity.client_addr`` names the front-end. Clients
reach a front-end at ``10.78.N.1:80``, its relay, in front of the authority on feN's
loopback. Every relay delays what crosses it by the bed's one-way ``delay`` (this kernel has
no netem). ``cut(N)`` takes pg's end of the link to feN down: packets between them vanish,
as when a switch fails, and neither side is told; ``heal(N)`` brings it back.

A thread joins a namespace with ``setns(2)`` (``in_namespace``): the sockets it and the threads
it starts open belong to that namespace, so a test runs its clients in ``cl`` and its
database statements in ``pg`` without a process per host. Needs root and iproute2.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import io
import itertools
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from deplog.client.errors import DeplogError
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Signer, Verifier
from deplog.client.tlog.receipt import Receipt
from tests.integration.log_oracle import Ack, Observations
from tests.integration.pg_campaign import (
    HOLDER_QUERY,
    ROUND_HOLDER_QUERY,
    CampaignConfig,
    FrontEnd,
    FrontEnds,
    Load,
    freeze_loop,
    kill_loop,
    run_under_load,
    setup_database,
)
from tests.pgcluster import PgCluster

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
AUTHORITY_PORT = 8080
"""The port each authority listens on, on its own host's loopback."""
RELAY_PORT = 6432
"""The port of the database relays on pg."""
FRONT_PORT = 80
"""The port clients reach a front-end at (its relay)."""


class NetBedMissing(RuntimeError):
    """Not root, or no iproute2: network namespaces cannot be made."""


def _ip(*argv: str) -> None:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(argv)} failed: {done.stderr.strip()}")


def enter(namespace: str) -> None:
    """Move the calling thread into the network namespace ``namespace``."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {namespace} failed")
    finally:
        os.close(fd)


def in_namespace(namespace: str, work: Callable[[], T]) -> T:
    """``work()`` run on a thread of its own inside ``namespace``; its result or exception."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            enter(namespace)
            outcome.append(work())
        except BaseException as err:  # handed to the caller
            failure.append(err)

    thread = threading.Thread(target=run, name=f"netns-{namespace}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def _remove(host: str) -> None:
    """Kill what runs on ``host`` and remove it."""
    pids = subprocess.run(
        ["ip", "netns", "pids", host], capture_output=True, text=True, check=False
    ).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    subprocess.run(["ip", "netns", "del", host], capture_output=True, check=False)


def _remove_orphans() -> None:
    """Remove the hosts of beds whose process is gone (killed before it could clean up)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    for line in listed.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(r"dl(\d+)(pg|cl|fe\d)", name)
        if match and not Path(f"/proc/{match[1]}").exists():
            _remove(name)


@dataclass
class NetFrontEnd(FrontEnd):
    """A front-end on host ``feN``: started inside it, reached through its relay."""

    address: str = ""
    """Where clients reach it: its relay, ``10.78.N.1:80``."""

    def start(self, port: int = 0) -> str:
        return super().start(AUTHORITY_PORT)

    def reached_at(self, url: str) -> str:
        return f"http://{self.address}"

    def _signal(self, signal_number: int) -> None:
        """``ip netns exec`` execs the server: its pid is the server's (its children, if
        any, are the server's own)."""
        assert self.process is not None
        os.kill(self.process.pid, signal_number)

    @property
    def port(self) -> int:
        return AUTHORITY_PORT


class NetBed:
    """The five hosts, their links and relays, PostgreSQL on ``pg`` (see the module)."""

    def __init__(self, root: Path, delay: float = 0.0, loss: float = 0.0) -> None:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            raise NetBedMissing(
                "network namespaces need root and iproute2: apt-get install iproute2"
            )
        self.root = root
        self.delay = delay
        self.loss = loss
        self.prefix = f"dl{os.getpid()}"
        self.fronts = [f"{self.prefix}fe{n}" for n in range(3)]
        self.pg = f"{self.prefix}pg"
        self.clients = f"{self.prefix}cl"
        self.hosts = [self.pg, *self.fronts, self.clients]
        self.relays: list[subprocess.Popen[bytes]] = []
        self.cluster: PgCluster | None = None

    # --- hosts and links ---------------------------------------------------------------

    def __enter__(self) -> NetBed:
        _remove_orphans()
        try:
            for host in self.hosts:
                _ip("netns", "add", host)
                _ip("-n", host, "link", "set", "lo", "up")
            for n, front in enumerate(self.fronts):
                self._link(self.pg, f"fe{n}", f"10.77.{n}.1", front, "db", f"10.77.{n}.2")
                self._link(front, "web", f"10.78.{n}.1", self.clients, f"fe{n}", f"10.78.{n}.2")
            self.cluster = PgCluster(wrapper=self.wrap(self.pg))
            routes = [
                f"10.77.{n}.1:{RELAY_PORT}=127.0.0.1:{self.cluster.port}@127.0.1.{n + 1}"
                for n in range(len(self.fronts))
            ]
            self._relay(self.pg, routes)
            for n, front in enumerate(self.fronts):
                self._relay(front, [f"10.78.{n}.1:{FRONT_PORT}=127.0.0.1:{AUTHORITY_PORT}"])
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for relay in self.relays:
            relay.kill()
            relay.wait()
        if self.cluster is not None:
            self.cluster.destroy()
        for host in self.hosts:
            _remove(host)

    @staticmethod
    def wrap(host: str) -> list[str]:
        """The command prefix that runs a program on ``host``."""
        return ["ip", "netns", "exec", host]

    @staticmethod
    def _link(a: str, a_end: str, a_addr: str, b: str, b_end: str, b_addr: str) -> None:
        _ip("link", "add", a_end, "netns", a, "type", "veth", "peer", "name", b_end, "netns", b)
        for host, end, addr in ((a, a_end, a_addr), (b, b_end, b_addr)):
            _ip("-n", host, "addr", "add", f"{addr}/24", "dev", end)
            _ip("-n", host, "link", "set", end, "up")

    def _relay(self, host: str, routes: list[str]) -> None:
        argv = [sys.executable, "-m", "tests.integration.delay_relay", "--delay", str(self.delay)]
        argv += ["--loss", str(self.loss), "--seed", str(len(self.relays))]
        for route in routes:
            argv += ["--route", route]
        relay = subprocess.Popen([*self.wrap(host), *argv], stdout=subprocess.PIPE)
        self.relays.append(relay)
        assert relay.stdout is not None
        if relay.stdout.readline() != b"relaying\n":
            raise RuntimeError(f"the relay on {host} did not start")

    def cut(self, n: int) -> None:
        """Partition front-end ``n`` from PostgreSQL (silently: packets vanish)."""
        _ip("-n", self.pg, "link", "set", f"fe{n}", "down")

    def heal(self, n: int) -> None:
        _ip("-n", self.pg, "link", "set", f"fe{n}", "up")

    # --- what runs on the hosts --------------------------------------------------------

    def front_ends(self, root: Path, signers: Sequence[Signer]) -> FrontEnds:
        """Three front-ends, one per ``feN``, over a fresh database set up from ``pg``
        (``pg_campaign.setup_database``), each then reaching it through its own relay."""
        assert self.cluster is not None
        db = in_namespace(self.pg, self.cluster.create_database)
        cluster = FrontEnds(root, db, len(self.fronts))
        cluster.processes = [
            NetFrontEnd(
                process.root,
                extra_args=process.extra_args,
                wrapper=self.wrap(self.fronts[n]),
                name=process.name,
                db=db,
                shared_keys=process.shared_keys,
                address=f"10.78.{n}.1:{FRONT_PORT}",
            )
            for n, process in enumerate(cluster.processes)
        ]
        with contextlib.redirect_stdout(io.StringIO()):
            in_namespace(self.pg, lambda: setup_database(cluster, signers))
        name = db.rsplit("/", 1)[1]
        for n, process in enumerate(cluster.processes):
            process.db = f"postgresql://postgres@10.77.{n}.1:{RELAY_PORT}/{name}"
        return cluster

    def database_connection(self) -> Any:
        """An autocommit psycopg connection to the database server, opened from ``pg`` (the
        socket stays there, whichever thread uses it)."""
        import psycopg

        assert self.cluster is not None
        url = self.cluster.url()
        return in_namespace(self.pg, lambda: psycopg.connect(url, autocommit=True))

    def run(self, work: Callable[[], T]) -> T:
        """``work()`` on the clients' host."""
        return in_namespace(self.clients, work)


def holder(conn: Any, query: str) -> int | None:
    """The front-end whose connection holds the lock ``query`` finds (``pg_campaign``'s
    queries), named by the relay address it came through (``127.0.1.N+1``), or None."""
    by_address = query.replace("SELECT a.client_port", "SELECT host(a.client_addr)")
    for (address,) in conn.execute(by_address).fetchall():
        if address and address.startswith("127.0.1."):
            return int(address.rsplit(".", 1)[1]) - 1
    return None


# --- the campaign ----------------------------------------------------------------------------


@dataclass
class NetCampaign:
    """What ``run_net_campaign`` does to the bed under load, in this order."""

    quiet: int = 20
    """201s before the first fault (``quiet_gap`` and ``propagation`` are measured there)."""
    kills: int = 1
    """Front-ends SIGKILLed and restarted (``pg_campaign.kill_loop``)."""
    freezes: int = 1
    freeze_seconds: float = 4.0
    """Round-lock holders SIGSTOPped, out of the rotation meanwhile (``freeze_loop``)."""
    partitions: int = 1
    partition_seconds: tuple[float, float] = (6.0, 6.0)
    """A front-end cut off from PostgreSQL, for seconds drawn in this range."""
    outages: int = 1
    outage_seconds: float = 5.0
    """PostgreSQL cut off from every front-end."""
    restarts: int = 0
    """PostgreSQL stopped (``immediate``: a crash) and started again."""
    seed: int = 0


@dataclass
class Cut:
    """One partition: who was cut off, and what their ``/healthz`` said of it."""

    front_ends: list[int]
    seconds: float
    said_degraded: list[float | None] = field(default_factory=list)
    """Per front-end: seconds from the cut until ``/healthz`` said ``storage_unavailable``
    and ``can.append`` false (None: never, within the cut)."""
    said_ok: list[float | None] = field(default_factory=list)
    """Per front-end: seconds from the heal until ``/healthz`` said ``ok`` again."""
    others_acknowledged: int = 0
    """201s from the front-ends not cut off, during the cut."""


async def _health(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError, ValueError):
        async with http.get(url + "/healthz", timeout=aiohttp.ClientTimeout(2)) as response:
            report: dict[str, Any] = await response.json(content_type=None)
            return report
    return {}


def _cut_off(report: dict[str, Any]) -> bool:
    can = report.get("can", {})
    return "storage_unavailable" in report.get("reasons", []) and can.get("append") is False


async def _until_said(
    http: aiohttp.ClientSession, url: str, said: Callable[[dict[str, Any]], bool], bound: float
) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < bound:
        if said(await _health(http, url)):
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    return None


async def _partition(
    bed: NetBed,
    front_ends: FrontEnds,
    load: Load,
    http: aiohttp.ClientSession,
    cut_off: list[int],
    seconds: float,
) -> Cut:
    """Cut ``cut_off`` from PostgreSQL for ``seconds``: each leaves the rotation once its
    ``/healthz`` says it is cut off (as a load balancer's check takes it out; never the
    last one), and comes back once it says ``ok``."""
    cut = Cut(cut_off, seconds)
    urls = [front_ends.urls[n] for n in cut_off]
    acks_before = len(load.observations.acks)
    started = time.monotonic()
    for n in cut_off:
        await asyncio.to_thread(bed.cut, n)

    async def watch(n: int, url: str) -> float | None:
        said = await _until_said(http, url, _cut_off, seconds)
        if said is not None and len(front_ends.frozen) + 1 < len(front_ends.processes):
            front_ends.frozen.add(n)  # a balancer with no healthy front-end tries them all
        return said

    cut.said_degraded = list(await asyncio.gather(*map(watch, cut_off, urls)))
    await asyncio.sleep(max(0.0, seconds - (time.monotonic() - started)))
    cut.others_acknowledged = sum(
        1
        for ack in load.observations.acks[acks_before:]
        if ack.status == 201 and ack.process not in cut_off
    )
    for n in cut_off:
        await asyncio.to_thread(bed.heal, n)

    async def back(n: int, url: str) -> float | None:
        said = await _until_said(http, url, lambda r: r.get("status") == "ok", 60)
        front_ends.frozen.discard(n)
        return said

    cut.said_ok = list(await asyncio.gather(*map(back, cut_off, urls)))
    return cut


async def _until_acknowledged(load: Load, more: int, bound: float) -> None:
    target = load.outcomes["201"] + more
    deadline = time.monotonic() + bound
    while load.outcomes["201"] < target:
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {more} acknowledgements in {bound} s")
        await asyncio.sleep(0.05)


async def run_net_campaign(
    bed: NetBed, front_ends: FrontEnds, signers: Sequence[Signer], config: NetCampaign
) -> tuple[Load, bytes, list[bytes], list[Cut]]:
    """``run_under_load`` on the bed with ``config``'s faults; call it on ``cl`` (``run``).
    Returns the load, the final note and leaves, and what each partition looked like."""
    rng = random.Random(config.seed)
    conn = bed.database_connection()
    cuts: list[Cut] = []

    def sequencer() -> int | None:
        return holder(conn, HOLDER_QUERY)

    def round_lock() -> int | None:
        return holder(conn, ROUND_HOLDER_QUERY)

    async def scenario(load: Load) -> None:
        await _until_acknowledged(load, config.quiet, 600)
        kills = CampaignConfig(kills=config.kills, seed=config.seed)
        await kill_loop(front_ends, kills, load, rng, sequencer)
        await freeze_loop(front_ends, config.freezes, config.freeze_seconds, load, round_lock)
        async with aiohttp.ClientSession() as http:
            for _ in range(config.partitions):
                await _until_acknowledged(load, 10, 120)
                victim = [rng.randrange(len(front_ends.processes))]
                seconds = rng.uniform(*config.partition_seconds)
                cuts.append(await _partition(bed, front_ends, load, http, victim, seconds))
            everyone = list(range(len(front_ends.processes)))
            for _ in range(config.outages):
                await _until_acknowledged(load, 10, 120)
                cuts.append(
                    await _partition(bed, front_ends, load, http, everyone, config.outage_seconds)
                )
        assert bed.cluster is not None
        for _ in range(config.restarts):
            await _until_acknowledged(load, 10, 120)
            await asyncio.to_thread(bed.cluster.stop, "immediate")
            await asyncio.sleep(2.0)
            await asyncio.to_thread(bed.cluster.start)
        await _until_acknowledged(load, 10, 120)

    try:
        load, note, leaves = await run_under_load(front_ends, signers, scenario)
    finally:
        conn.close()
    return load, note, leaves, cuts


def _quiet_acks(observations: Observations) -> list[Ack]:
    """The 201s before the first fault (the first kill)."""
    first = min((kill.at for kill in observations.kills), default=float("inf"))
    return [ack for ack in observations.acks if ack.status == 201 and ack.at < first]


def quiet_gap(load: Load) -> float:
    """The longest wait between two 201s before the first fault: what a stall is measured
    against when every append takes many round trips."""
    created = sorted(ack.at for ack in _quiet_acks(load.observations))
    return max((b - a for a, b in itertools.pairwise(created)), default=0.0)


def propagation(observations: Observations, log_verifier: Verifier) -> list[float]:
    """For each 201 before the first fault: seconds until every other front-end was seen
    serving a checkpoint at least as large as its receipt's (polls and pushes)."""
    seen: dict[int, list[tuple[float, int]]] = {}
    for one in observations.seen:
        with contextlib.suppress(DeplogError):
            size = open_checkpoint(one.note, log_verifier)[0].size
            seen.setdefault(one.process, []).append((one.at, size))
    delays = []
    for ack in _quiet_acks(observations):
        size = open_checkpoint(Receipt.parse(ack.receipt).checkpoint, log_verifier)[0].size
        waits = [
            min(
                (at - ack.at for at, served in times if served >= size and at >= ack.at),
                default=None,
            )
            for process, times in seen.items()
            if process != ack.process
        ]
        if waits and all(wait is not None for wait in waits):
            delays.append(max(w for w in waits if w is not None))
    return delays
