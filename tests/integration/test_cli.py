"""The README's walkthrough, command by command, against a real authority."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.attached_faults import needs_strace
from tests.integration.harness import AuthorityProcess, deplog

# Real authority processes; SQLite, and serve --db postgresql://.
pytestmark = [pytest.mark.slow, pytest.mark.both_backends]


def test_publisher_walkthrough_publishes_and_verifies_a_receipt(
    authority: AuthorityProcess, tmp_path: Path
) -> None:
    made = deplog("keygen", "--name", "walker", "--out", "keys", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    vkey = (tmp_path / "keys" / "walker.pub").read_text().strip()
    added = authority.run_cli(
        "publisher", "add", "walker", "--namespace", "org.walker", "--key", vkey
    )
    assert added.returncode == 0, added.stderr
    log_key = authority.log_verifier.vkey()

    published = deplog(
        "publish",
        "--url",
        authority.url,
        "--key",
        "keys/walker.key",
        "--log-key",
        log_key,
        "--tool",
        "tool:org.walker/search",
        "--action",
        "deprecate",
        "--version",
        "1.2.0",
        "--range",
        "1.0.0..1.2.0",
        "--reason",
        "superseded",
        "--replacement",
        "tool:org.walker/search@2.0.0",
        "--sunset-at",
        "2099-06-01T00:00:00Z",
        "--sequence",
        "7",
        "--out",
        "receipts",
        cwd=tmp_path,
    )
    assert published.returncode == 0, published.stderr
    assert "logged at index 2 (verified)" in published.stdout

    verified = deplog(
        "verify-receipt",
        "--log-key",
        log_key,
        "receipts/walker-7.tlog-proof",
        "--envelope",
        "receipts/walker-7.envelope.json",
        cwd=tmp_path,
    )
    assert verified.returncode == 0, verified.stderr
    assert f"ok: entry 2 is in {authority.log_verifier.name} at tree size 3" in verified.stdout


def test_verify_receipt_fails_for_another_entry(
    authority: AuthorityProcess, tmp_path: Path
) -> None:
    deplog("keygen", "--name", "walker", "--out", "keys", cwd=tmp_path)
    vkey = (tmp_path / "keys" / "walker.pub").read_text().strip()
    authority.run_cli("publisher", "add", "walker", "--namespace", "org.walker", "--key", vkey)
    for seq in ("1", "2"):
        done = deplog(
            "publish",
            "--url",
            authority.url,
            "--key",
            "keys/walker.key",
            "--tool",
            "tool:org.walker/search",
            "--action",
            "revoke",
            "--version",
            f"1.0.{seq}",
            "--reason",
            "critical_bug",
            "--sequence",
            seq,
            "--out",
            "receipts",
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
    mismatched = deplog(
        "verify-receipt",
        "--log-key",
        authority.log_verifier.vkey(),
        "receipts/walker-1.tlog-proof",
        "--envelope",
        "receipts/walker-2.envelope.json",
        cwd=tmp_path,
    )
    assert mismatched.returncode == 1
    assert mismatched.stderr.strip() == (
        "deplog: bad_inclusion_proof: the inclusion proof (or receipt) does not lead to the root"
    )


def test_publish_refusal_prints_the_stable_code(
    authority: AuthorityProcess, tmp_path: Path
) -> None:
    deplog("keygen", "--name", "intruder", "--out", "keys", cwd=tmp_path)
    refused = deplog(
        "publish",
        "--url",
        authority.url,
        "--key",
        "keys/intruder.key",
        "--tool",
        "tool:org.acme/search",
        "--action",
        "deprecate",
        "--version",
        "1.0.0",
        "--reason",
        "other",
        cwd=tmp_path,
    )
    assert refused.returncode == 1
    line = refused.stderr.strip()
    assert line.startswith(
        "deplog: refused (401 unknown_publisher): the authority does not know this publisher"
    )
    assert "; the envelope is saved in intruder-" in line
    assert "resubmit" not in line  # a 401 is permanent


def test_check_recomputes_storage_and_list_shows_publishers(
    authority_files: AuthorityProcess,
) -> None:
    checked = authority_files.run_cli("check")
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("ok: 1 leaves")
    listed = authority_files.run_cli("publisher", "list")
    assert listed.returncode == 0 and listed.stdout.startswith("acme (active)\n")
    as_json = authority_files.run_cli("publisher", "list", "--json")
    assert as_json.returncode == 0 and '"publisher": "acme"' in as_json.stdout


def test_serve_refuses_a_second_server_on_the_same_data(
    authority: AuthorityProcess,
) -> None:
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "deplog.authority.cli",
            "serve",
            "--data",
            str(authority.data),
            "--keys",
            str(authority.keys),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert second.returncode == 1
    assert "another authority is already serving" in second.stderr


def test_walkthrough_step_7_a_cache_hands_on_the_proof_of_its_verdict(
    authority: AuthorityProcess, tmp_path: Path
) -> None:
    """Steps 5 and 7: a cache follows, decides with ``check --proof`` and anyone checks
    that proof offline with ``audit status``, as the one the authority serves."""
    deplog("keygen", "--name", "walker", "--out", "keys", cwd=tmp_path)
    vkey = (tmp_path / "keys" / "walker.pub").read_text().strip()
    authority.run_cli("publisher", "add", "walker", "--namespace", "org.walker", "--key", vkey)
    tool, log_key = "tool:org.walker/search", authority.log_verifier.vkey()
    published = deplog(
        "publish", "--url", authority.url, "--key", "keys/walker.key", "--tool", tool,
        "--action", "deprecate", "--version", "1.2.0", "--reason", "superseded",
        "--out", "receipts", cwd=tmp_path,
    )  # fmt: skip
    assert published.returncode == 0, published.stderr
    followed = deplog("follow", authority.url, "--once", "--log-key", log_key, cwd=tmp_path)
    assert followed.returncode == 0, followed.stderr

    checked = deplog("check", tool, "1.2.0", "--proof", "cache.proof.json", cwd=tmp_path)
    audited = deplog(
        "audit", "status", "--log-key", log_key, "cache.proof.json", tool, "1.2.0", cwd=tmp_path
    )
    assert (checked.returncode, checked.stderr) == (0, "")
    assert checked.stdout.startswith(f"serve_with_warning (deprecated): {tool} 1.2.0")
    assert audited.returncode == 0, audited.stderr
    assert audited.stdout.startswith(f"ok: {tool} 1.2.0: deprecated")
    assert " proven (present) by the map " in audited.stdout


@needs_strace
def test_keygen_killed_while_writing_the_key_leaves_no_partial_key(tmp_path: Path) -> None:
    """SIGKILL at the key's first write (``strace -e inject``): no key rather than a
    partial one, and nothing of it readable by others."""
    keygen = [sys.executable, "-m", "deplog.client.cli.main", "keygen", "--name", "walker"]
    strace = ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=write"]
    killed = subprocess.run(
        [*strace, "-e", "inject=write:signal=KILL:when=1", *keygen, "--out", "keys"],
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
    )
    assert killed.returncode != 0
    keys = tmp_path / "keys"
    assert not (keys / "walker.key").exists()
    assert keys.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in keys.iterdir())
    made = deplog("keygen", "--name", "walker", "--out", "keys", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
