"""The stored publisher registry is trusted only as far as the log's own registry entries
make it: an edited row is refused at start and by ``authority check`` (exit 65, naming
it), so a map proof signed by this log can never show a revoked key's notices as valid."""

from __future__ import annotations

import json
import sqlite3

import pytest

from deplog.client.tlog.note import Signer
from tests.integration.harness import AuthorityProcess, authority_command

pytestmark = pytest.mark.slow


def unrevoke_in_the_snapshot(authority: AuthorityProcess) -> None:
    """What an intruder with the database file would do: mark every revoked key active
    again in the ``registry`` row, leaving the log's entries as they are."""
    conn = sqlite3.connect(authority.data / "log.db")
    try:
        (state,) = conn.execute("SELECT state FROM registry WHERE id = 1").fetchone()
        snapshot = json.loads(state)
        for publisher in snapshot["publishers"]:
            for key in publisher["keys"]:
                key["revoked_at"] = None
                key["status"] = "active"
        conn.execute("UPDATE registry SET state = ? WHERE id = 1", (json.dumps(snapshot),))
        conn.commit()
    finally:
        conn.close()


@pytest.fixture
def revoked(authority_files: AuthorityProcess, publisher: Signer) -> AuthorityProcess:
    """acme registered, then its key revoked: both are entries of the log."""
    second = Signer.generate("acme")
    authority = authority_files
    added = authority.run_cli("publisher", "add-key", "acme", "--key", second.verifier().vkey())
    assert added.returncode == 0, added.stderr
    revoke = authority.run_cli(
        "publisher", "revoke-key", "acme", "--key", publisher.verifier().vkey()
    )
    assert revoke.returncode == 0, revoke.stderr
    return authority


def test_an_authority_with_an_edited_registry_refuses_to_start_naming_it(
    revoked: AuthorityProcess,
) -> None:
    unrevoke_in_the_snapshot(revoked)
    served = authority_command(
        "serve", "--data", str(revoked.data), "--keys", str(revoked.keys), "--port", "0"
    )
    assert served.returncode == 65, served.stderr
    assert "registry_mismatch" in served.stderr
    assert str(revoked.data / "log.db") in served.stderr
    assert "Traceback" not in served.stderr


def test_authority_check_refuses_an_edited_registry(revoked: AuthorityProcess) -> None:
    unrevoke_in_the_snapshot(revoked)
    checked = revoked.run_cli("check")
    assert checked.returncode == 65, checked.stderr
    assert "registry_mismatch" in checked.stderr and "Traceback" not in checked.stderr


def test_an_untouched_registry_starts_and_checks(revoked: AuthorityProcess) -> None:
    assert revoked.run_cli("check").returncode == 0
    revoked.start()
    assert revoked.stop() == 0
