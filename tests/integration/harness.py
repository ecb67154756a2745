"""Real authority and witness processes on 127.0.0.1 for integration tests.

``AuthorityProcess`` runs ``authority serve`` and ``WitnessProcess`` runs
``witness serve``, each in a subprocess on a free port with real data
directories and real keys, so a test can SIGKILL one and start it again on the
same files; ``map_witness`` is a witness that folds the log's map itself. ``deplog`` and
``authority_command`` run those commands in processes of their own; ``post`` and
``publish`` send notices to a running authority.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from deplog.authority.cli import main as authority_main
from deplog.authority.witness.cli import main as witness_main
from deplog.authority.witness.core import WitnessState
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.keyfile import key_file_name
from deplog.client.tlog.note import Signer, Verifier
from tests.builders import make_envelope

ORIGIN = "test.deplog.example/log"
JSON = {"Content-Type": "application/json"}
STARTUP_TIMEOUT = 30.0
_DB_COMMANDS = frozenset({"init", "serve", "check", "publisher"})
"""The ``authority`` commands that take ``--db`` (the others read only files)."""


@dataclass
class ServiceProcess:
    """A server's files, and its process on a free 127.0.0.1 port when it runs.

    The process's output goes to a file (never a pipe that could fill and
    block it); ``start`` waits for its "serving on <url>" line.
    """

    root: Path
    extra_args: list[str] = field(default_factory=list)
    wrapper: list[str] = field(default_factory=list)
    """A command the server runs under, e.g. ``strace -e inject=...`` (fault injection)."""
    process: subprocess.Popen[bytes] | None = None
    url: str = ""

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def keys(self) -> Path:
        return self.root / "keys"

    @property
    def output(self) -> Path:
        """Everything the server printed, across restarts."""
        return self.root / "server.out"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, port: int = 0) -> str:
        """Start serving (on a free port unless given); returns the base URL once /healthz
        answers."""
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        already = self.output.read_text() if self.output.exists() else ""
        with open(self.output, "a") as out:
            self.process = subprocess.Popen(
                [*self.wrapper, *self.command(), "--port", str(port), *self.extra_args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            printed = self.output.read_text()[len(already) :]
            if "serving on " in printed:
                self.url = self.reached_at(printed.split("serving on ", 1)[1].split()[0])
                break
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}: {printed}")
            time.sleep(0.02)
        else:
            raise RuntimeError("server did not start in time")
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=10) as response:
                assert response.status == 200
        except urllib.error.HTTPError as unhealthy:  # serving, but reporting a problem
            assert unhealthy.code == 503
        return self.url

    def reached_at(self, url: str) -> str:
        """The URL clients use, given the one the server printed (another host's: a relay)."""
        return url

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def _signal(self, signal_number: int) -> None:
        """Signal the server itself, also under a wrapper: strace detaches from its tracee
        on SIGTERM (and the kernel does on SIGKILL) instead of passing the signal on, then
        exits with the tracee's status once the tracee exits."""
        assert self.process is not None
        pid = self.process.pid
        if self.wrapper:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            pid = int(children[0]) if children else pid
        os.kill(pid, signal_number)

    def kill(self) -> None:
        """SIGKILL: no cleanup, no flush, like a power cut for the process."""
        assert self.process is not None
        self._signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process = None

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit status."""
        if self.process is None:
            return 0
        self._signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.process = None
        return code


@dataclass
class AuthorityProcess(ServiceProcess):
    """An authority: ``authority serve`` over its data and keys directories, its log in
    ``data/log.db`` (SQLite) or, with ``db``, in that PostgreSQL database."""

    db: str | None = None
    """``--db``: a ``postgresql://`` URL holding the log; ``init`` migrates it first with
    ``authority migrate``, and every command that reads or writes the log is given it."""

    def _db_args(self) -> list[str]:
        return [] if self.db is None else ["--db", self.db]

    @property
    def db_target(self) -> str:
        """Where the log's rows are: the PostgreSQL URL, or the SQLite file's path."""
        return self.db if self.db is not None else str(self.data / "log.db")

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "deplog.authority.cli",
            "serve",
            "--data",
            str(self.data),
            "--keys",
            str(self.keys),
            *self._db_args(),
        ]

    def init(self) -> None:
        if self.db is not None:
            assert authority_main(["migrate", "--db", self.db]) == 0
        assert (
            authority_main(
                [
                    "init",
                    "--data",
                    str(self.data),
                    "--keys",
                    str(self.keys),
                    "--origin",
                    ORIGIN,
                    *self._db_args(),
                ]
            )
            == 0
        )

    @property
    def log_verifier(self) -> Verifier:
        stem = ORIGIN.replace("/", "_")
        return Verifier.parse((self.keys / f"{stem}.pub").read_text().strip())

    def add_publisher(self, publisher: Signer, namespace: str) -> None:
        code = authority_main(
            [
                "publisher",
                "add",
                publisher.name,
                "--data",
                str(self.data),
                "--keys",
                str(self.keys),
                "--namespace",
                namespace,
                "--key",
                publisher.verifier().vkey(),
                *self._db_args(),
            ]
        )
        assert code == 0

    def add_witness(self, url: str, key: Verifier, *flags: str) -> None:
        """``authority witness add``: the witness at ``url``, with cosigner key ``key``."""
        where = ["--data", str(self.data), "--keys", str(self.keys)]
        assert (
            authority_main(["witness", "add", *where, "--url", url, "--key", key.vkey(), *flags])
            == 0
        )

    def run_cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``authority ARGS`` on this authority's files (and database), in a process."""
        where = ["--data", str(self.data), "--keys", str(self.keys)]
        return authority_command(
            *args, *where, *(self._db_args() if args[0] in _DB_COMMANDS else [])
        )


@dataclass
class WitnessProcess(ServiceProcess):
    """A witness: ``witness serve`` with its own key, trusting the logs it was given."""

    name: str = "witness.test/w1"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "deplog.authority.witness.cli",
            "serve",
            "--data",
            str(self.data),
            "--keys",
            str(self.keys),
            "--host",
            "127.0.0.1",
        ]

    def init(self) -> None:
        assert self.cli("init", "--keys", str(self.keys), "--name", self.name) == 0

    def cli(self, *args: str) -> int:
        return witness_main([args[0], "--data", str(self.data), *args[1:]])

    @property
    def verifier(self) -> Verifier:
        stem = key_file_name(self.name)
        return Verifier.parse_cosigner((self.keys / f"{stem}.pub").read_text().strip())


@contextlib.contextmanager
def map_witness(directory: Path, authority: AuthorityProcess) -> Iterator[WitnessProcess]:
    """``witness serve --verify-map`` for ``authority``'s log, named ``map.witness.test/w``:
    it fetches the log's entries and folds the map itself before it cosigns. Started;
    stopped after."""
    witness = WitnessProcess(
        directory, name="map.witness.test/w", extra_args=["--verify-map", authority.url]
    )
    witness.init()
    assert witness.cli("add-log", "--key", authority.log_verifier.vkey()) == 0
    witness.start()
    try:
        yield witness
    finally:
        witness.stop()


def deplog(
    *args: str | Path, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``deplog ARGS`` in a process of its own (in ``cwd``): its status and output."""
    return _run("deplog.client.cli.main", args, cwd, timeout)


def authority_command(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``authority ARGS`` in a process of its own: its status and output."""
    return _run("deplog.authority.cli", args, None, timeout)


def _run(
    module: str, args: tuple[str | Path, ...], cwd: Path | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )


async def post(http: aiohttp.ClientSession, url: str, body: bytes) -> tuple[int, bytes]:
    """``body`` POSTed to the authority at ``url`` (``/v1/notices``): the status, the answer."""
    async with http.post(url + "/v1/notices", data=body, headers=JSON) as response:
        return response.status, await response.read()


async def publish(
    http: aiohttp.ClientSession, url: str, publisher: Signer, sequence: int, **fields: object
) -> int:
    """A notice by ``publisher`` (``make_envelope``) logged by the authority at ``url``: its
    index."""
    body = make_envelope(publisher, sequence, **fields).canonical_bytes()
    async with http.post(url + "/v1/notices", data=body, headers=JSON) as response:
        assert response.status == 201, await response.text()
        return int(response.headers["Deplog-Index"])


def embedded_witness_size(authority: AuthorityProcess) -> int:
    """The size the authority's embedded witness recorded (its database is shared safely:
    WAL)."""
    state = WitnessState(authority.data / "embedded-witness.db")
    try:
        recorded = state.recorded(authority.log_verifier.name)
        return 0 if recorded is None else recorded.size
    finally:
        state.close()


async def wait_for_push_subscribers(
    http: aiohttp.ClientSession, url: str, count: int, timeout: float = 30.0
) -> None:
    """Waits until the authority at ``url`` streams checkpoints to ``count`` subscribers
    (its ``deplog_push_subscribers`` gauge), so a test publishes only once push is up."""
    wanted = f"deplog_push_subscribers {float(count)}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async with http.get(url + "/metrics") as response:
            if wanted in (await response.text()).splitlines():
                return
        await asyncio.sleep(0.02)
    raise AssertionError(f"fewer than {count} push subscribers after {timeout} s")


async def wait_for_checkpoint(
    http: aiohttp.ClientSession, authority: AuthorityProcess, size: int, timeout: float = 30.0
) -> bytes:
    """The served checkpoint once it covers ``size`` entries. An admin command on
    PostgreSQL appends through the database, not through the server: the server serves
    the new checkpoint once it learns it (NOTIFY, or its poll), shortly after the command
    returned."""
    deadline = time.monotonic() + timeout
    while True:
        async with http.get(authority.url + "/checkpoint") as response:
            body = await response.read()
        if open_checkpoint(body, authority.log_verifier)[0].size >= size:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"the served checkpoint did not reach size {size} in {timeout} s")
        await asyncio.sleep(0.05)
