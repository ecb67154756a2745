"""``authority copy --from DB --to DB``: a log moved between SQLite and PostgreSQL, its
bytes and signatures unchanged.

Rules:
  1. The source is read in one snapshot, so a served log is copied as of one moment, and
     never written to.
  2. The target must hold no log; everything is written in one transaction, so a failed
     copy leaves it as it was (a SQLite file it created is removed).
  3. Every row of every table is copied as stored, :data:`CHUNK` rows at a time.
  4. The copy is verified before it is reported done: each table's rows digest the same
     on both sides, the storage audit passes, every checkpoint's note is signed by the log
     key over the tree's own root at its size, and the map's root is the latest's.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from deplog.authority.storage.audit import audit_storage
from deplog.authority.storage.database import Database, reaching
from deplog.authority.storage.tree import StoredHashTree
from deplog.client.errors import CLIError, DeplogError
from deplog.client.map.line import map_root_of
from deplog.client.map.stored import StoredMap
from deplog.client.plumbing.dbapi import Connection
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Verifier

CHUNK = 2048
"""Rows read and written at a time."""

TABLES = (
    ("leaves", ("idx", "data", "hash"), "idx"),
    ("nodes", ("level", "idx", "hash"), "level, idx"),
    ("notices", ("publisher", "sequence", "idx", "digest"), "publisher, sequence"),
    ("tool_entries", ("tool_id", "idx"), "tool_id, idx"),
    ("tools", ("tool_id", "first_idx"), "tool_id"),
    ("registry", ("id", "size", "state"), "id"),
    ("map_group", ("id", "nodes"), "id"),
    ("map_record", ("tool_id", "record"), "tool_id"),
    (
        "map_state",
        ("id", "format", "size", "root_id", "root_bits", "root_hash", "root_value"),
        "id",
    ),
    # After the leaves (and, on PostgreSQL, after the head moved): a checkpoint may only
    # name a committed size.
    ("checkpoints", ("size", "root", "note", "signed_at"), "size"),
    ("published", ("id", "size", "note"), "id"),
)
"""Every table of a log, in the order they are written, with their columns and key."""
_BEFORE_HEAD = [table for table, _, _ in TABLES].index("checkpoints")
"""The tables written before the head moves (``Database.set_head``)."""


@dataclass(frozen=True)
class CopyReport:
    """What was copied: the log's size, its latest checkpoint's size, rows per table."""

    size: int
    checkpoint: int
    rows: dict[str, int]


def _rows(conn: Connection, table: str, columns: tuple[str, ...], key: str) -> Iterator[tuple]:  # type: ignore[type-arg]
    offset = 0
    while True:
        chunk = conn.execute(
            f"SELECT {', '.join(columns)} FROM {table} ORDER BY {key} LIMIT ? OFFSET ?",
            (CHUNK, offset),
        ).fetchall()
        yield from (tuple(row) for row in chunk)
        if len(chunk) < CHUNK:
            return
        offset += CHUNK


def _digest_row(digest: hashlib._Hash, row: tuple) -> None:  # type: ignore[type-arg]
    for value in row:
        if value is None:
            digest.update(b"N")
        elif isinstance(value, bytes | memoryview):
            raw = bytes(value)
            digest.update(b"B%d:" % len(raw) + raw)
        elif isinstance(value, int):
            digest.update(b"I%d;" % value)
        else:
            text = str(value).encode()
            digest.update(b"S%d:" % len(text) + text)


@contextlib.contextmanager
def _read_snapshot(db: Database, conn: Connection) -> Iterator[None]:
    """Rule 1: one read transaction over the whole source."""
    db.begin_read(conn)
    try:
        yield
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _open_target(db: Database) -> Connection:
    """Rule 2: a connection to an empty target, schema in place."""
    conn = db.connect()
    try:
        db.prepare(conn)
        if (
            conn.execute("SELECT count(*) FROM leaves").fetchone()[0]
            or conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
        ):
            raise CLIError(
                f"{db.describe()} already holds a log: copy only into an empty database; "
                "nothing was changed"
            )
    except BaseException:
        conn.close()
        raise
    return conn


def copy_log(
    source: Database,
    target: Database,
    verifier: Verifier,
    progress: Callable[[str], None] = lambda _: None,
) -> CopyReport:
    """Copy the log in ``source`` into the empty ``target`` and verify it (rules 1-4)."""
    if source.describe() == target.describe():
        raise CLIError("--from and --to are the same database")
    created = not target.exists()
    try:
        return _copy(source, target, verifier, progress)
    except BaseException:
        if created:
            target.discard()
        raise


def _copy(
    source: Database, target: Database, verifier: Verifier, progress: Callable[[str], None]
) -> CopyReport:
    if not source.exists():
        raise CLIError(f"{source.describe()} does not exist: nothing to copy")
    if (problem := target.cannot_create()) is not None:
        raise CLIError(f"{problem}: create it, then copy")
    with reaching(source):
        src = source.connect(readonly=True)
    with contextlib.closing(src):
        with reaching(target):
            dst = _open_target(target)
        with contextlib.closing(dst):
            source.require_current(src)
            digests: dict[str, str] = {}
            rows: dict[str, int] = {}
            with _read_snapshot(source, src):
                size = int(src.execute("SELECT count(*) FROM leaves").fetchone()[0])
                target.begin_write(dst)
                try:
                    for number, (table, columns, key) in enumerate(TABLES):
                        if number == _BEFORE_HEAD:
                            target.set_head(dst, size)
                        digests[table], rows[table] = _copy_table(src, table, columns, key, dst)
                        progress(f"{table}: {rows[table]} rows")
                except BaseException:
                    if dst.in_transaction:
                        dst.execute("ROLLBACK")
                    raise
                dst.execute("COMMIT")
    progress("verifying the copy")
    checkpoint = _verify(target, verifier, digests, size)
    return CopyReport(size, checkpoint, rows)


def _copy_table(
    src: Connection,
    table: str,
    columns: tuple[str, ...],
    key: str,
    dst: Connection | None = None,
) -> tuple[str, int]:
    """A table's digest (rule 4) and row count, its rows written to ``dst`` if given."""
    places = ", ".join("?" for _ in columns)
    insert = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({places})"
    digest, count, batch = hashlib.sha256(), 0, []
    for row in _rows(src, table, columns, key):
        _digest_row(digest, row)
        count += 1
        if dst is not None:
            batch.append(row)
            if len(batch) == CHUNK:
                dst.executemany(insert, batch)
                batch = []
    if dst is not None:
        dst.executemany(insert, batch)
    return digest.hexdigest(), count


def _verify(target: Database, verifier: Verifier, digests: dict[str, str], size: int) -> int:
    """Rule 4; the latest checkpoint's size."""
    with contextlib.closing(target.connect(readonly=True)) as conn:
        for table, columns, key in TABLES:
            if _copy_table(conn, table, columns, key)[0] != digests[table]:
                raise CLIError(f"the copy's {table} differ from the source's: copy again")
        audited, problem = audit_storage(target)
        if problem is not None or audited != size:
            raise CLIError(f"the copy fails the storage audit ({problem}): copy again")
        tree = StoredHashTree(conn)
        latest = 0
        map_root = None
        for checkpoint_size, root, note in conn.execute(
            "SELECT size, root, note FROM checkpoints ORDER BY size"
        ).fetchall():
            try:
                checkpoint, _ = open_checkpoint(bytes(note), verifier)
            except DeplogError as err:
                raise CLIError(
                    f"checkpoint {checkpoint_size} of the copy does not verify with the log "
                    f"key ({err.code}): is this the log's data directory (--keys)?"
                ) from None
            if (checkpoint.size, checkpoint.root_hash) != (checkpoint_size, bytes(root)):
                raise CLIError(f"checkpoint {checkpoint_size} of the copy disagrees with its note")
            if checkpoint_size and tree.root_at(int(checkpoint_size)) != bytes(root):
                raise CLIError(f"the copy's tree has another root at size {checkpoint_size}")
            latest, map_root = int(checkpoint_size), map_root_of(checkpoint.extensions)
        state = conn.execute("SELECT size, root_hash FROM map_state WHERE id = 1").fetchone()
        at_latest = map_root is not None and state is not None and int(state[0]) == latest
        if at_latest and StoredMap(conn).root() != map_root:
            raise CLIError("the copy's map root differs from its latest checkpoint's")
        return latest
