"""The PostgreSQL URL's password kept off the command line: ``$DEPLOG_DB``, ``--db-file``,
libpq's password and service files, and a warning when ``--db`` holds one.

Real ``authority`` processes on the session's cluster. Its authentication is ``trust``
(tests/pgcluster.py), so the libpq file tests add one role that must give a password
(``scram-sha-256`` in ``pg_hba.conf``, first match) and own a database of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.pgcluster import PgCluster

pytestmark = pytest.mark.slow  # PostgreSQL, real processes

ROLE, PASSWORD = "deplog_pw", "s3cret-pw"


def authority(
    *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``authority ARGS`` in its own process, with ``env`` added to the environment."""
    return subprocess.run(
        [sys.executable, "-m", "deplog.authority.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_migrate_reads_the_url_from_deplog_db(pg_url: str) -> None:
    done = authority("migrate", env={"DEPLOG_DB": pg_url})
    assert done.returncode == 0, done.stderr
    assert "schema version" in done.stdout


def test_init_reads_the_url_from_a_db_file_only_its_owner_can_read(
    pg_url: str, tmp_path: Path
) -> None:
    db_file = tmp_path / "db.url"
    db_file.write_text(pg_url + "\n")
    db_file.chmod(0o600)
    assert authority("migrate", "--db-file", db_file).returncode == 0
    done = authority(
        "init", "--data", tmp_path / "data", "--keys", tmp_path / "keys", "--db-file", db_file
    )
    assert done.returncode == 0, done.stderr
    assert pg_url not in done.stdout + done.stderr


def test_a_db_file_others_can_read_is_refused_in_one_line(pg_url: str, tmp_path: Path) -> None:
    db_file = tmp_path / "db.url"
    db_file.write_text(pg_url + "\n")
    db_file.chmod(0o640)
    done = authority("migrate", "--db-file", db_file)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "chmod 600" in done.stderr, done.stderr
    assert pg_url not in done.stderr


def test_a_password_in_db_is_warned_of_once(pg_url: str) -> None:
    parts = urlsplit(pg_url)
    with_password = parts._replace(netloc=f"postgres:{PASSWORD}@{parts.hostname}:{parts.port}")
    done = authority("migrate", "--db", with_password.geturl())
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("warning: the --db URL holds a password") == 1, done.stderr
    assert PASSWORD not in done.stdout + done.stderr


def test_no_warning_without_a_password(pg_url: str) -> None:
    done = authority("migrate", "--db", pg_url)
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr


@pytest.fixture
def own_database(pg_cluster: PgCluster, pg_url: str) -> Iterator[str]:
    """``pg_url``'s database owned by a role that must give a password; its URL without it."""
    import psycopg

    hba = pg_cluster.data / "pg_hba.conf"
    line = f"host all {ROLE} 127.0.0.1/32 scram-sha-256\n"
    if line not in hba.read_text():
        hba.write_text(line + hba.read_text())
    dbname = urlsplit(pg_url).path.lstrip("/")
    with psycopg.connect(pg_cluster.url(), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone() is None:
            conn.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")  # type: ignore[arg-type]
        conn.execute(f'ALTER DATABASE "{dbname}" OWNER TO {ROLE}')  # type: ignore[arg-type]
        conn.execute("SELECT pg_reload_conf()")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"ALTER SCHEMA public OWNER TO {ROLE}")  # type: ignore[arg-type]
    yield f"postgresql://{ROLE}@{pg_cluster.host}:{pg_cluster.port}/{dbname}"


def test_a_url_without_its_password_is_refused_in_one_line(
    own_database: str, tmp_path: Path
) -> None:
    done = authority("migrate", "--db", own_database, env={"PGPASSFILE": str(tmp_path / "no")})
    assert done.returncode == 69, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr


def test_the_password_comes_from_libpqs_password_file(own_database: str, tmp_path: Path) -> None:
    parts = urlsplit(own_database)
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"{parts.hostname}:{parts.port}:*:{ROLE}:{PASSWORD}\n")
    passfile.chmod(0o600)
    done = authority("migrate", "--db", own_database, env={"PGPASSFILE": str(passfile)})
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr


def test_a_service_name_is_resolved_from_libpqs_service_file(
    own_database: str, tmp_path: Path
) -> None:
    parts = urlsplit(own_database)
    services = tmp_path / "pg_service.conf"
    services.write_text(
        f"[deplog]\nhost={parts.hostname}\nport={parts.port}\n"
        f"dbname={parts.path.lstrip('/')}\nuser={ROLE}\npassword={PASSWORD}\n"
    )
    services.chmod(0o600)
    done = authority(
        "migrate", "--db", "postgresql:///?service=deplog", env={"PGSERVICEFILE": str(services)}
    )
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
