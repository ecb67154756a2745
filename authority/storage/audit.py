"""The full storage audit: rehash every stored leaf and subtree hash of a log database.

Start-up checks only the root at the latest checkpoint; this finds what that cannot, such
as a leaf's bytes altered on disk. ``authority check`` and ``serve --verify-on-start`` call
:func:`audit_storage`; a serving authority runs it as its own niced, killable process
(:func:`audit_in_process`), so rehashing never takes the interpreter lock from handlers.

Rules:
  * The database is opened read-only, and a problem names positions only, never data.
  * A PostgreSQL database is named ``-`` on the command line and read from ``$DEPLOG_DB``:
    its password never appears in a process listing.
  * The command shows its progress on stderr, prints ``{"size": n, "problem": str | null}``
    on stdout, and exits 0 when storage is exactly what appends wrote, 1 when it is not, 2
    when the database cannot be audited at all.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from deplog.authority.storage.backends import open_database
from deplog.authority.storage.database import Database
from deplog.authority.storage.tree import StoredHashTree, TreeCorruptError
from deplog.client.plumbing.progress import Progress

DB_ENV = "DEPLOG_DB"
"""Where the command reads a database URL given as ``-`` (a password stays out of argv)."""
EXIT_OK = 0
EXIT_CORRUPT = 1
EXIT_UNREADABLE = 2
NICENESS = 10
"""How much lower than its parent's the command's priority is: it is a background job."""
log = logging.getLogger("deplog.authority")


def audit_storage(
    path: Database | Path | str, progress: Callable[[int, int], None] | None = None
) -> tuple[int, str | None]:
    """Rehash every leaf and subtree of a database: (size, first problem or None)."""
    with contextlib.closing(open_database(path).connect(readonly=True)) as conn:
        try:
            tree = StoredHashTree(conn)
        except TreeCorruptError:
            size = int(conn.execute("SELECT count(*) FROM leaves").fetchone()[0])
            return size, "a subtree hash of the tree's right edge is missing"
        return tree.size, tree.audit(progress)


def lower_priority(pid: int, parent: int) -> None:
    """Run process ``pid`` (0: this one) :data:`NICENESS` below ``parent``'s priority."""
    target = min(19, os.getpriority(os.PRIO_PROCESS, parent) + NICENESS)
    os.setpriority(os.PRIO_PROCESS, pid, target)


async def audit_in_process(db: Database) -> str | None:
    """The problem the audit finds in its own niced process, or None; cancel kills it."""
    target, variables = db.passed_to_child(DB_ENV)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        __name__,
        target,
        env={**os.environ, **variables} if variables else None,
        stdout=asyncio.subprocess.PIPE,
        stderr=None,  # its progress reaches the operator
    )
    with contextlib.suppress(ProcessLookupError):  # it may already have ended
        lower_priority(process.pid, os.getpid())
    try:
        out, _ = await process.communicate()
    except asyncio.CancelledError:
        process.kill()
        await process.wait()
        raise
    if process.returncode not in (EXIT_OK, EXIT_CORRUPT):
        log.warning("the storage audit could not run (exit %s)", process.returncode)
        return None
    problem: str | None = json.loads(out)["problem"]
    return problem


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m deplog.authority.storage.audit <db>``: audit at low priority, print JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m deplog.authority.storage.audit",
        description="Rehash every stored leaf and subtree hash of an authority database.",
    )
    parser.add_argument(
        "db",
        help=f"the log database (data/log.db), or - for the PostgreSQL URL in ${DB_ENV}",
    )
    args = parser.parse_args(argv)
    lower_priority(0, os.getppid())
    target = os.environ.get(DB_ENV, "") if args.db == "-" else args.db
    db = open_database(target)
    try:
        with Progress(f"storage audit of {db.describe()}", unit="leaves") as shown:
            size, problem = audit_storage(db, shown.update)
    except db.errors as err:
        print(f"cannot audit {db.describe()}: {type(err).__name__}", file=sys.stderr)
        return EXIT_UNREADABLE
    try:
        print(json.dumps({"size": size, "problem": problem}), flush=True)
    except BrokenPipeError:
        # The server that asked is gone: no traceback into the log it shared with us.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK if problem is None else EXIT_CORRUPT


if __name__ == "__main__":
    sys.exit(main())
