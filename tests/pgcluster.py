"""A throwaway PostgreSQL cluster for the tests: real ``initdb`` and ``pg_ctl``, no mocks.

Debian's PostgreSQL server binaries live under ``/usr/lib/postgresql/<version>/bin`` (not on
PATH); the newest version found is used. ``initdb`` and the server refuse to run as root, so
as root the cluster's directory is owned by the ``postgres`` user and both run through
``runuser``. The directory is made with ``tempfile`` rather than pytest's ``tmp_path``
(0700 and owned by root, which ``postgres`` cannot enter).

The server listens on 127.0.0.1 on a free port (never 5432, Debian's own cluster) and on a
Unix socket in its directory, with ``fsync=on`` (durability claims are tested against the
real thing) and ``trust`` authentication: a password in a test URL is accepted and ignored,
which lets tests check that a password never reaches a message.

``stop()``/``start()`` stop and restart the same cluster on the same port (the database
outage tests). With ``wrapper`` (``ip netns exec NAME``) the server runs in a network
namespace (tests/integration/netbed.py): its clients, this object's own statements
included, must then connect from inside it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests.builders import unused_port

__all__ = ["PgCluster", "PostgresMissing", "find_postgres_bin"]


class PostgresMissing(RuntimeError):
    """PostgreSQL's server binaries or the psycopg driver are not installed."""


def find_postgres_bin() -> Path:
    """The newest ``/usr/lib/postgresql/*/bin`` holding ``initdb`` and ``pg_ctl``."""
    candidates: list[tuple[int, Path]] = []
    for bindir in Path("/usr/lib/postgresql").glob("*/bin"):
        if (bindir / "initdb").exists() and (bindir / "pg_ctl").exists():
            with contextlib.suppress(ValueError):
                candidates.append((int(bindir.parent.name.split(".")[0]), bindir))
    if not candidates:
        found = shutil.which("initdb")
        if found is not None:
            return Path(found).parent
        raise PostgresMissing(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): "
            "apt-get install -y postgresql"
        )
    return max(candidates)[1]


class PgCluster:
    """One running throwaway cluster; ``create_database()`` hands out fresh empty databases."""

    def __init__(self, wrapper: Sequence[str] = ()) -> None:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise PostgresMissing(
                "the psycopg driver is not installed: pip install -e '.[test]'"
            ) from None
        self.bindir = find_postgres_bin()
        self.as_root = os.geteuid() == 0
        self.wrapper = list(wrapper)
        self.dir = Path(tempfile.mkdtemp(prefix="deplog-pg-"))
        self.data = self.dir / "data"
        self.port = unused_port()
        self.host = "127.0.0.1"
        self._names = itertools.count(1)
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        with open(self.data / "pg_hba.conf", "a") as hba:  # the relays connect from 127.x.y.z
            hba.write("host all all 127.0.0.0/8 trust\n")
        self.start()

    def _run(self, *argv: str) -> None:
        command = list(argv)
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        command = [*self.wrapper, *command]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} failed ({done.returncode}): {done.stderr or done.stdout}"
            )

    @property
    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def start(self) -> None:
        """Start (or restart after ``stop``) the server, waiting until it accepts connections."""
        options = f"-k {self.dir} -h {self.host} -p {self.port} -c fsync=on -c max_connections=200"
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-w",
            "-l",
            str(self.dir / "server.log"),
            "-o",
            options,
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: roll back open transactions; ``immediate``: a crash)."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", "-m", mode, "stop")

    def url(self, dbname: str = "postgres", password: str | None = None) -> str:
        auth = "postgres" if password is None else f"postgres:{password}"
        return f"postgresql://{auth}@{self.host}:{self.port}/{dbname}"

    def admin_execute(self, sql: str) -> None:
        """Run one statement as the superuser on the maintenance database (autocommit)."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def create_database(self, template: str | None = None) -> str:
        """A fresh empty database, or a copy of the database ``template`` (which nobody may
        be connected to); returns its URL."""
        name = f"t{os.getpid()}_{next(self._names)}"
        copy = "" if template is None else f' TEMPLATE "{template}"'
        self.admin_execute(f'CREATE DATABASE "{name}"{copy}')
        return self.url(name)

    def destroy(self) -> None:
        """Stop the server (if running) and remove its directory."""
        try:
            if self.running:
                self.stop("immediate")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
