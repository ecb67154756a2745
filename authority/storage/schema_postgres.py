"""The log's schema on PostgreSQL: tables, append-only triggers, the order row, versions.

The tables are the SQLite store's with PostgreSQL types (text in ``"C"`` collation, so
ordering is byte order). ``authority migrate --db URL`` creates or upgrades it in one
transaction under an advisory lock; a server refuses a database not at
:data:`CURRENT_VERSION`. Why the order is a row lock: docs/architecture.md, "PostgreSQL:
one order, decided by the database".

What the database itself enforces (not only ``Log``):
  1. ``leaves``, ``nodes``, ``checkpoints``, ``notices``, ``tool_entries`` and ``tools``
     are append-only: UPDATE, DELETE and TRUNCATE raise.
  2. Leaf indices are contiguous: a leaf must be the next index after the largest one.
  3. ``log_head`` (one row) holds the committed log size: it only grows, equals the number
     of leaves, and a transaction that adds leaves must move it (a deferred constraint
     trigger checks at commit).
  4. One root per size (``checkpoints.size`` is the key), never past the committed size.
  5. ``published`` (the served, cosigned note) never moves to a smaller size.

*Embedded witness*: on a shared database every authority process is the same embedded
witness, whose ``WitnessState`` tables live in the schema ``embedded_witness``, created when
it opens (not by ``migrate``); a trigger besides refuses an update that lowers a record's
size or time, and any delete.
"""

from __future__ import annotations

from deplog.client.errors import CLIError
from deplog.client.plumbing.dbapi import Connection

CURRENT_VERSION = 4
EXIT_CONFIG = 78
"""Exit status of a database without the current schema (sysexits ``EX_CONFIG``)."""
_MIGRATE_LOCK = 0x6465706C6F67  # "deplog": serializes concurrent migrations

TAKE_ORDER = "SELECT size FROM log_head WHERE id = 1 FOR UPDATE"
"""The first statement of every write transaction after ``BEGIN``: the log's order (the
row lock) and the committed log size."""
MOVE_HEAD = "UPDATE log_head SET size = ? WHERE id = 1"
"""Records the size a write transaction commits (rule 3)."""

_V1 = (
    """CREATE TABLE schema_version (
        id integer PRIMARY KEY CHECK (id = 1),
        version integer NOT NULL
    )""",
    """CREATE TABLE leaves (
        idx bigint PRIMARY KEY CHECK (idx >= 0),
        data bytea NOT NULL,
        hash bytea NOT NULL
    )""",
    """CREATE TABLE nodes (
        level integer NOT NULL,
        idx bigint NOT NULL,
        hash bytea NOT NULL,
        PRIMARY KEY (level, idx)
    )""",
    """CREATE TABLE log_head (
        id integer PRIMARY KEY CHECK (id = 1),
        size bigint NOT NULL CHECK (size >= 0)
    )""",
    "INSERT INTO log_head (id, size) VALUES (1, 0)",
    """CREATE TABLE checkpoints (
        size bigint PRIMARY KEY,
        root bytea NOT NULL,
        note bytea NOT NULL,
        signed_at text NOT NULL
    )""",
    """CREATE TABLE notices (
        publisher text COLLATE "C" NOT NULL,
        sequence bigint NOT NULL,
        idx bigint NOT NULL,
        digest bytea NOT NULL,
        PRIMARY KEY (publisher, sequence)
    )""",
    """CREATE TABLE tool_entries (
        tool_id text COLLATE "C" NOT NULL,
        idx bigint NOT NULL,
        PRIMARY KEY (tool_id, idx)
    )""",
    """CREATE TABLE published (
        id integer PRIMARY KEY,
        size bigint NOT NULL,
        note bytea NOT NULL
    )""",
    """CREATE TABLE registry (
        id integer PRIMARY KEY,
        size bigint NOT NULL,
        state text NOT NULL
    )""",
    # The tool-status map (client/map/'s tables).
    """CREATE TABLE map_inner (
        id bytea PRIMARY KEY,
        bit integer NOT NULL,
        left_id bytea NOT NULL,
        left_bits integer NOT NULL,
        left_hash bytea NOT NULL,
        right_id bytea NOT NULL,
        right_bits integer NOT NULL,
        right_hash bytea NOT NULL
    )""",
    """CREATE TABLE map_leaf (
        key bytea PRIMARY KEY,
        value bytea NOT NULL
    )""",
    """CREATE TABLE map_record (
        tool_id text COLLATE "C" PRIMARY KEY,
        record bytea NOT NULL
    )""",
    """CREATE TABLE map_state (
        id integer PRIMARY KEY CHECK (id = 1),
        format integer NOT NULL,
        size bigint NOT NULL,
        root_id bytea,
        root_bits integer,
        root_hash bytea
    )""",
    # SQLite's instr(), so the reader's search runs unchanged.
    """CREATE OR REPLACE FUNCTION instr(haystack text, needle text) RETURNS integer
        LANGUAGE sql IMMUTABLE STRICT AS 'SELECT strpos(haystack, needle)'""",
    # Rule 1.
    """CREATE FUNCTION deplog_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
    END $$""",
    *(
        statement
        for table in ("leaves", "nodes", "checkpoints", "notices", "tool_entries")
        for statement in (
            f"""CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table}
                FOR EACH ROW EXECUTE FUNCTION deplog_append_only()""",
            f"""CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
                FOR EACH STATEMENT EXECUTE FUNCTION deplog_append_only()""",
        )
    ),
    # Rule 2.
    """CREATE FUNCTION deplog_leaf_next() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        expected bigint;
    BEGIN
        SELECT coalesce(max(idx) + 1, 0) INTO expected FROM leaves;
        IF NEW.idx <> expected THEN
            RAISE EXCEPTION 'leaf % is not the next index %', NEW.idx, expected
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER leaves_contiguous BEFORE INSERT ON leaves
        FOR EACH ROW EXECUTE FUNCTION deplog_leaf_next()""",
    # Rule 3.
    """CREATE FUNCTION deplog_head_moves() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        leaves bigint;
    BEGIN
        IF TG_OP <> 'UPDATE' THEN
            RAISE EXCEPTION 'log_head is one row that only moves forward'
                USING ERRCODE = 'restrict_violation';
        END IF;
        SELECT coalesce(max(idx) + 1, 0) INTO leaves FROM leaves;
        IF NEW.id <> OLD.id OR NEW.size < OLD.size OR NEW.size <> leaves THEN
            RAISE EXCEPTION 'log_head size % is not the % committed leaves', NEW.size, leaves
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER log_head_moves BEFORE UPDATE OR DELETE ON log_head
        FOR EACH ROW EXECUTE FUNCTION deplog_head_moves()""",
    """CREATE TRIGGER log_head_no_truncate BEFORE TRUNCATE ON log_head
        FOR EACH STATEMENT EXECUTE FUNCTION deplog_append_only()""",
    """CREATE FUNCTION deplog_leaf_under_head() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.idx >= (SELECT size FROM log_head WHERE id = 1) THEN
            RAISE EXCEPTION 'leaf % committed without moving log_head', NEW.idx
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE CONSTRAINT TRIGGER leaves_under_head AFTER INSERT ON leaves
        DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW EXECUTE FUNCTION deplog_leaf_under_head()""",
    # Rule 4.
    """CREATE FUNCTION deplog_checkpoint_committed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.size > (SELECT size FROM log_head WHERE id = 1) THEN
            RAISE EXCEPTION 'checkpoint of size % beyond the committed log', NEW.size
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER checkpoints_committed BEFORE INSERT ON checkpoints
        FOR EACH ROW EXECUTE FUNCTION deplog_checkpoint_committed()""",
    # Rule 5.
    """CREATE FUNCTION deplog_published_forward() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'UPDATE' OR NEW.size < OLD.size THEN
            RAISE EXCEPTION 'the published checkpoint never moves back'
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER published_forward BEFORE UPDATE OR DELETE ON published
        FOR EACH ROW EXECUTE FUNCTION deplog_published_forward()""",
    """CREATE TRIGGER published_no_truncate BEFORE TRUNCATE ON published
        FOR EACH STATEMENT EXECUTE FUNCTION deplog_append_only()""",
    "INSERT INTO schema_version (id, version) VALUES (1, 1)",
)

_V2 = (
    # The map's inner nodes in groups with their leaves' values (client/map/groups.py,
    # store format 3). Its rows go: the authority folds the map again from the log at
    # start-up, to the same root (only the layout moved), so every line stays true.
    "DROP TABLE map_inner",
    "DROP TABLE map_leaf",
    """CREATE TABLE map_group (
        id bytea PRIMARY KEY,
        nodes bytea NOT NULL
    )""",
    "ALTER TABLE map_state ADD COLUMN root_value bytea",
    "DELETE FROM map_state",
    "DELETE FROM map_record",
)

_V3 = (
    # Publisher entries are found as the gaps between notice indexes (store.py), and
    # entries that fail validation are recorded when the map is folded from the leaves.
    "CREATE INDEX notices_by_idx ON notices (idx)",
    """CREATE TABLE invalid_entries (
        idx bigint PRIMARY KEY,
        code text NOT NULL,
        cause text,
        tool_id text COLLATE "C"
    )""",
    "CREATE INDEX invalid_by_tool ON invalid_entries (tool_id, idx)",
)

_V4 = (
    # Each tool id once, with its first leaf index (store.py): what the explorer searches.
    """CREATE TABLE tools (
        tool_id text COLLATE "C" PRIMARY KEY,
        first_idx bigint NOT NULL
    )""",
    "INSERT INTO tools SELECT tool_id, min(idx) FROM tool_entries GROUP BY tool_id",
    """CREATE TRIGGER tools_append_only BEFORE UPDATE OR DELETE ON tools
        FOR EACH ROW EXECUTE FUNCTION deplog_append_only()""",
    """CREATE TRIGGER tools_no_truncate BEFORE TRUNCATE ON tools
        FOR EACH STATEMENT EXECUTE FUNCTION deplog_append_only()""",
)

MIGRATIONS: dict[int, tuple[str, ...]] = {1: _V1, 2: _V2, 3: _V3, 4: _V4}
"""Version -> the statements that bring the schema from version - 1 to it."""


def schema_version(conn: Connection) -> int:
    """The schema's version, 0 for a database without one."""
    row = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
    if not row[0]:
        return 0
    found = conn.execute("SELECT version FROM schema_version WHERE id = 1").fetchone()
    return 0 if found is None else int(found[0])


def migrate(conn: Connection, name: str) -> tuple[int, int]:
    """Bring the schema to :data:`CURRENT_VERSION` in one transaction: (before, after).

    Idempotent (a current schema is left as it is); a schema newer than this software
    is refused, unchanged."""
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATE_LOCK,))
        before = schema_version(conn)
        if before > CURRENT_VERSION:
            raise _newer(name, before, "; nothing was changed")
        for version in range(before + 1, CURRENT_VERSION + 1):
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute("UPDATE schema_version SET version = ? WHERE id = 1", (version,))
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return before, CURRENT_VERSION


def require_current(conn: Connection, name: str) -> None:
    """Refuse (exit 78) a database whose schema is not this software's."""
    version = schema_version(conn)
    if version == CURRENT_VERSION:
        return
    if version == 0:
        problem = "has no deplog schema"
    elif version < CURRENT_VERSION:
        problem = f"has schema version {version}, this authority needs {CURRENT_VERSION}"
    else:
        raise _newer(name, version)
    raise CLIError(f"{name} {problem}: run 'authority migrate --db URL' first", EXIT_CONFIG)


def _newer(name: str, version: int, then: str = "") -> CLIError:
    return CLIError(
        f"{name} has schema version {version}, newer than this authority's {CURRENT_VERSION}: "
        f"upgrade deplog{then}",
        EXIT_CONFIG,
    )


EMBEDDED_WITNESS_SCHEMA = "embedded_witness"
"""The schema of the embedded witness's state, beside the log's tables (*Embedded witness*)."""
EMBEDDED_WITNESS_DDL = (
    f"SELECT pg_advisory_xact_lock(hashtext('{EMBEDDED_WITNESS_SCHEMA}'))",
    f"CREATE SCHEMA IF NOT EXISTS {EMBEDDED_WITNESS_SCHEMA}",
    f"""CREATE TABLE IF NOT EXISTS {EMBEDDED_WITNESS_SCHEMA}.logs (
        origin TEXT PRIMARY KEY,
        vkey TEXT NOT NULL,
        added_at BIGINT NOT NULL
    )""",
    f"""CREATE TABLE IF NOT EXISTS {EMBEDDED_WITNESS_SCHEMA}.checkpoints (
        origin TEXT PRIMARY KEY REFERENCES {EMBEDDED_WITNESS_SCHEMA}.logs(origin),
        size BIGINT NOT NULL CHECK (size >= 0),
        root BYTEA NOT NULL CHECK (length(root) = 32),
        updated_at BIGINT NOT NULL
    )""",
    f"""CREATE TABLE IF NOT EXISTS {EMBEDDED_WITNESS_SCHEMA}.evidence (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        origin TEXT NOT NULL REFERENCES {EMBEDDED_WITNESS_SCHEMA}.logs(origin),
        reason TEXT NOT NULL,
        received_at BIGINT NOT NULL,
        body BYTEA NOT NULL,
        digest BYTEA NOT NULL UNIQUE
    )""",
    # The record never moves back, whatever SQL reaches the table (the swap never does).
    f"""CREATE OR REPLACE FUNCTION {EMBEDDED_WITNESS_SCHEMA}.no_rollback() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' THEN
                RAISE EXCEPTION 'a witness record is never deleted';
            END IF;
            IF NEW.size < OLD.size OR NEW.updated_at < OLD.updated_at THEN
                RAISE EXCEPTION 'a witness record never moves back';
            END IF;
            RETURN NEW;
        END $$""",
    f"""CREATE OR REPLACE TRIGGER no_rollback BEFORE UPDATE OR DELETE
        ON {EMBEDDED_WITNESS_SCHEMA}.checkpoints
        FOR EACH ROW EXECUTE FUNCTION {EMBEDDED_WITNESS_SCHEMA}.no_rollback()""",
)
"""The embedded witness's tables, created under the first statement's lock when it opens."""
