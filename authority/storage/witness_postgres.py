"""The embedded witness's state in the log's PostgreSQL database.

With ``--db postgresql://...`` every authority process is the same embedded witness
(one key, in the shared keys directory), so its record must be one too: the tables
of ``witness.core.WitnessState`` live in the schema ``embedded_witness`` of the
log's database, where the state's compare-and-swap (the same SQL as on SQLite)
orders the processes' requests. Rules:

1. The schema is created on open if missing, in one transaction under an advisory
   lock, so processes starting together do not race on ``CREATE``.
2. Besides the swap, a trigger refuses any update that lowers a record's size or
   time, and any delete: no SQL reaching the table rolls the witness back.
"""

from __future__ import annotations

import psycopg

from deplog.authority.storage import postgres
from deplog.authority.witness.core import WitnessState
from deplog.client.dbapi import Connection

__all__ = ["POSTGRES_DDL", "POSTGRES_SCHEMA", "open_witness_state"]

POSTGRES_SCHEMA = "embedded_witness"
"""The PostgreSQL schema of the embedded witness's state, beside the log's tables."""
POSTGRES_DDL = (
    f"CREATE SCHEMA IF NOT EXISTS {POSTGRES_SCHEMA}",
    f"""CREATE TABLE IF NOT EXISTS {POSTGRES_SCHEMA}.logs (
        origin TEXT PRIMARY KEY,
        vkey TEXT NOT NULL,
        added_at BIGINT NOT NULL
    )""",
    f"""CREATE TABLE IF NOT EXISTS {POSTGRES_SCHEMA}.checkpoints (
        origin TEXT PRIMARY KEY REFERENCES {POSTGRES_SCHEMA}.logs(origin),
        size BIGINT NOT NULL CHECK (size >= 0),
        root BYTEA NOT NULL CHECK (length(root) = 32),
        updated_at BIGINT NOT NULL
    )""",
    f"""CREATE TABLE IF NOT EXISTS {POSTGRES_SCHEMA}.evidence (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        origin TEXT NOT NULL REFERENCES {POSTGRES_SCHEMA}.logs(origin),
        reason TEXT NOT NULL,
        received_at BIGINT NOT NULL,
        body BYTEA NOT NULL,
        digest BYTEA NOT NULL UNIQUE
    )""",
    # The record never moves back, whatever SQL reaches the table (the swap never does).
    f"""CREATE OR REPLACE FUNCTION {POSTGRES_SCHEMA}.no_rollback() RETURNS trigger
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
        ON {POSTGRES_SCHEMA}.checkpoints
        FOR EACH ROW EXECUTE FUNCTION {POSTGRES_SCHEMA}.no_rollback()""",
)
"""The embedded witness's tables (the SQLite file's are ``witness.core._SCHEMA``)."""


def open_witness_state(url: str) -> WitnessState:
    """The embedded witness's state in the database ``url`` (rule 1)."""

    def connect() -> Connection:
        conn = postgres.connect(url, application="deplog-embedded-witness")
        conn.execute(f"SET search_path = {POSTGRES_SCHEMA}")
        return conn

    schema = (f"SELECT pg_advisory_xact_lock(hashtext('{POSTGRES_SCHEMA}'))", *POSTGRES_DDL)
    return WitnessState.over(
        connect, name=POSTGRES_SCHEMA, begin="BEGIN", errors=(psycopg.Error,), schema=schema
    )
