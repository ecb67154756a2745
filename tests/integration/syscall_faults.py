"""Syscall fault injection: real servers under ``strace -e inject``, driven and then checked.

Shared by the CI module (tests/integration/test_syscall_faults.py) and the
by-hand campaign (bench/fault_campaign.py). A :class:`Fault` makes chosen
syscalls (fsync, fdatasync, pwrite64, write, openat) fail with EIO or ENOSPC
on chosen files only (``strace -P``), once, in a burst or for good; strace
counts invocations per syscall and per thread (``when=``), and the log's
writes all come from its sequencer thread, the embedded witness's from its own.

What a run checks afterwards (BRIEF.md section 6, issue 12):

* every notice acknowledged (201 or 200) is in the log exactly once after a
  restart without the fault: no acknowledgement without a durable notice;
* every receipt and every served checkpoint carries the embedded witness's
  cosignature (the promise of docs/operators.md, "What a receipt promises");
* after a transient fault, appends succeed again in the same process;
* while appends fail, ``/healthz`` does not say ``ok``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from deplog.authority.log import Log
from deplog.client.errors import DeplogError
from deplog.client.model.entries import NoticeEntry, decode_entry
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.cosignature import cosignatures
from deplog.client.tlog.note import Signer, Verifier
from deplog.client.tlog.receipt import Receipt
from tests.builders import make_envelope
from tests.integration.campaign import add_checkpoint, recorded_size
from tests.integration.harness import AuthorityProcess, WitnessProcess

JSON = {"Content-Type": "application/json"}
STRACE = shutil.which("strace")
LOG_FILES = ("log.db", "log.db-wal")
EMBEDDED_FILES = ("embedded-witness.db", "embedded-witness.db-wal")
WITNESS_FILES = ("witness.db", "witness.db-wal")
SYNCS = ("fsync", "fdatasync")
RETRIES = 20
"""Times a client resubmits a refused notice before giving up on it."""


@dataclass(frozen=True)
class Fault:
    """One injection: ``syscalls`` fail with ``error`` at invocations ``when`` on ``files``.

    ``when`` is strace's ``first[..last][+[step]]``: ``"3"`` once, ``"3..12"`` a
    burst, ``"3+"`` for good.
    """

    name: str
    syscalls: tuple[str, ...]
    error: str
    when: str
    files: tuple[str, ...]

    @property
    def persistent(self) -> bool:
        return self.when.endswith("+") and ".." not in self.when

    def strace(self, data: Path, trace_file: Path) -> list[str]:
        """The strace command line the server runs under."""
        assert STRACE is not None
        paths = [arg for name in self.files for arg in ("-P", str(data.absolute() / name))]
        syscalls = ",".join(self.syscalls)
        return [
            STRACE,
            "-f",
            "-qq",
            "--seccomp-bpf",
            "-o",
            str(trace_file),
            *paths,
            "-e",
            f"trace={syscalls}",
            "-e",
            f"inject={syscalls}:error={self.error}:when={self.when}",
        ]


def injected(trace_file: Path) -> int:
    """How many faults strace injected, from its trace."""
    if not trace_file.exists():
        return 0
    return trace_file.read_text(errors="replace").count("(INJECTED)")


def embedded_witness_key(authority: AuthorityProcess) -> Verifier:
    stem = authority.log_verifier.name.replace("/", "_") + "-witness"
    return Verifier.parse_cosigner((authority.keys / f"{stem}.pub").read_text().strip())


def is_cosigned(note: bytes, witness: Verifier) -> bool:
    """Whether a signed checkpoint carries a valid cosignature by ``witness``."""
    try:
        return bool(cosignatures(note, [witness]))
    except DeplogError:
        return False


@dataclass
class FaultRun:
    """What one authority run under a fault saw, and what the restart found."""

    fault: Fault
    injected: int = 0
    acknowledged: list[bytes] = field(default_factory=list)
    refusals: Counter[str] = field(default_factory=Counter)
    receipts_without_cosignature: int = 0
    checkpoints_served: int = 0
    checkpoints_without_cosignature: int = 0
    health_while_failing: Counter[str] = field(default_factory=Counter)
    first_failure: float | None = None
    recovered_after: float | None = None
    last_append_ok: bool = False
    stop_status: int | None = None
    restart_seconds: float = 0.0
    logged: list[bytes] = field(default_factory=list)
    served_after_restart_cosigned: bool = False

    @property
    def lost(self) -> int:
        """Acknowledged notices missing from the log after the restart."""
        return len(set(self.acknowledged) - set(self.logged))

    @property
    def duplicated(self) -> int:
        return len(self.logged) - len(set(self.logged))


class _Client:
    """Publishers submitting in turn, each resubmitting a refused notice like a real client."""

    def __init__(
        self, http: aiohttp.ClientSession, authority: AuthorityProcess, run: FaultRun
    ) -> None:
        self.http = http
        self.authority = authority
        self.run = run
        self.witness = embedded_witness_key(authority)

    def _failed(self) -> None:
        if self.run.first_failure is None:
            self.run.first_failure = time.monotonic()
        self.run.last_append_ok = False

    def _succeeded(self) -> None:
        run = self.run
        if run.first_failure is not None and run.recovered_after is None:
            run.recovered_after = time.monotonic() - run.first_failure
        run.last_append_ok = True

    async def publish(self, signer: Signer, first: int, count: int) -> None:
        for sequence in range(first, first + count):
            body = make_envelope(signer, sequence).canonical_bytes()
            for _ in range(RETRIES):
                if await self._submit(body):
                    break
                await asyncio.sleep(0.02)

    async def _submit(self, body: bytes) -> bool:
        async with self.http.post(
            self.authority.url + "/v1/notices", data=body, headers=JSON
        ) as response:
            answer = await response.read()
            if response.status in (200, 201):
                self.run.acknowledged.append(body)
                if is_cosigned(Receipt.parse(answer).checkpoint, self.witness):
                    self._succeeded()
                else:
                    self.run.receipts_without_cosignature += 1
                    self._failed()
                return True
        code = _error_code(answer, response.status)
        self.run.refusals[code] += 1
        self._failed()
        if code in ("storage_unavailable", "storage_corrupt"):
            self.run.health_while_failing[await self._health()] += 1
        return False

    async def _health(self) -> str:
        async with self.http.get(self.authority.url + "/healthz") as response:
            try:
                return str((await response.json())["status"])
            except (ValueError, KeyError, TypeError, aiohttp.ContentTypeError):
                return f"http {response.status}"

    async def watch(self) -> None:
        """Poll the served checkpoint; count those without the embedded cosignature."""
        while True:
            async with self.http.get(self.authority.url + "/checkpoint") as response:
                note = await response.read()
            self.run.checkpoints_served += 1
            if not is_cosigned(note, self.witness):
                self.run.checkpoints_without_cosignature += 1
            await asyncio.sleep(0.01)


def _error_code(body: bytes, status: int) -> str:
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return f"http {status}"


async def run_authority_fault(
    authority: AuthorityProcess,
    http: aiohttp.ClientSession,
    signers: list[Signer],
    fault: Fault,
    per_publisher: int,
    round_number: int = 0,
) -> FaultRun:
    """Serve under ``fault`` while ``signers`` publish, then restart without it and check."""
    run = FaultRun(fault)
    trace_file = authority.root / f"strace-{round_number}.txt"
    authority.wrapper = fault.strace(authority.data, trace_file)
    authority.start()
    client = _Client(http, authority, run)
    watcher = asyncio.create_task(client.watch())
    try:
        first = 1 + round_number * 1_000_000
        await asyncio.gather(*(client.publish(s, first, per_publisher) for s in signers))
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
            await watcher
        run.stop_status = authority.stop()
        authority.wrapper = []
    run.injected = injected(trace_file)
    started = time.monotonic()
    authority.start()
    run.restart_seconds = time.monotonic() - started
    try:
        async with http.get(authority.url + "/checkpoint") as response:
            note = await response.read()
        run.served_after_restart_cosigned = is_cosigned(note, client.witness)
        run.logged = await logged_notices(http, authority, note)
    finally:
        authority.stop()
    return run


async def logged_notices(
    http: aiohttp.ClientSession, authority: AuthorityProcess, note: bytes
) -> list[bytes]:
    """Every notice envelope in the log up to the served checkpoint, in log order."""
    checkpoint, _ = open_checkpoint(note, authority.log_verifier)
    logged = []
    for start in range(0, checkpoint.size, 1000):
        end = min(checkpoint.size, start + 1000)
        async with http.get(f"{authority.url}/v1/entries?start={start}&end={end}") as response:
            for leaf in (await response.json())["entries"]:
                entry = decode_entry(base64.b64decode(leaf))
                if isinstance(entry, NoticeEntry):
                    logged.append(entry.envelope.canonical_bytes())
    return logged


@dataclass(frozen=True)
class RefusedStart:
    """How a server that could not start ended: its exit status and its last line."""

    status: int
    line: str


def refused_start(
    command: list[str], fault: Fault, data: Path, timeout: float = 60
) -> RefusedStart:
    """Run a server command under ``fault``; it must exit on its own (not start serving)."""
    trace_file = data.parent / "strace-start.txt"
    done = subprocess.run(
        [*fault.strace(data, trace_file), *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return RefusedStart(done.returncode, lines[-1] if lines else "")


@dataclass
class WitnessFaultRun:
    """What a standalone witness under a fault answered, and what it had after a restart."""

    fault: Fault
    injected: int = 0
    cosigned_sizes: list[int] = field(default_factory=list)
    refusals: Counter[int] = field(default_factory=Counter)
    recorded_after_restart: int | None = None
    recovered: bool = False

    @property
    def lost(self) -> int:
        """Cosignatures returned for sizes above what the witness recorded durably."""
        recorded = self.recorded_after_restart or 0
        return sum(1 for size in self.cosigned_sizes if size > recorded)


async def run_witness_fault(
    witness: WitnessProcess, log: Log, publisher: Signer, fault: Fault, checkpoints: int
) -> WitnessFaultRun:
    """Submit ``checkpoints`` growing checkpoints of ``log`` to a witness under ``fault``."""
    run = WitnessFaultRun(fault)
    trace_file = witness.root / "strace.txt"
    witness.wrapper = fault.strace(witness.data, trace_file)
    witness.start()
    known = recorded_size(witness, log.origin) or 0
    sequence = log.tree.size * 1000
    connector = aiohttp.TCPConnector(force_close=True)
    try:
        async with aiohttp.ClientSession(connector=connector) as http:
            for _ in range(checkpoints):
                sequence += 1
                log.sequence([make_envelope(publisher, sequence)])
                assert log.published is not None
                status, body = await add_checkpoint(http, witness, log, known)
                if status == 409 and body.strip().isdigit():
                    known = int(body)
                    status, body = await add_checkpoint(http, witness, log, known)
                if status == 200:
                    known = log.published.size
                    run.cosigned_sizes.append(known)
                    run.recovered = True
                else:
                    run.refusals[status] += 1
                    run.recovered = False
    finally:
        witness.stop()
        witness.wrapper = []
    run.injected = injected(trace_file)
    run.recorded_after_restart = recorded_size(witness, log.origin)
    return run
