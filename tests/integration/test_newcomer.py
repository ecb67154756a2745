"""A newcomer walks every ``deplog`` subcommand into its error paths, against a real authority.

Each case asserts what issue 11 asks of them all: no traceback, an exit status from the
exit statuses of docs/deplog-command.md, and the flag or file at fault named in the one
line on stderr.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from deplog.client.tlog.keyfile import create_signer
from deplog.client.tlog.note import Signer
from tests.doctext import ROOT, exit_statuses
from tests.integration.harness import AuthorityProcess, deplog

pytestmark = pytest.mark.slow  # real authority processes

DOCUMENTED_EXITS = exit_statuses(ROOT / "docs" / "deplog-command.md", "## Exit statuses")
"""Every exit status docs/deplog-command.md documents for deplog, read from its table."""


@pytest.fixture
def publisher(tmp_path: Path) -> Signer:
    """``acme``'s key, on disk in ``keys/`` as ``deplog keygen`` writes it."""
    return create_signer(tmp_path / "keys", "acme", "acme")


@pytest.fixture
def log_key_file(authority: AuthorityProcess, tmp_path: Path) -> str:
    (tmp_path / "log.pub").write_text(authority.log_verifier.vkey() + "\n")
    return "log.pub"


def _publish(authority: AuthorityProcess, *flags: str) -> list[str]:
    return ["publish", "--url", authority.url, "--key", "keys/acme.key", *flags]


def _cases(authority: AuthorityProcess) -> list[tuple[list[str], int, list[str]]]:
    """(argv, exit status, what the message must name) for each error path."""
    url = authority.url
    other_key = Signer.generate(authority.log_verifier.name).verifier().vkey()
    deprecate = f"publish --url {url} --key keys/acme.key --tool tool:org.acme/search"
    no_state = ["deplog-state.db", "deplog follow"]
    cases = [
        ("keygen --name org.acme/pub", 2, ["--name", "lower-case letters"]),
        (
            f"publish --url {url} --key keys/acme.pub --tool tool:org.acme/search "
            "--action deprecate --version 1.0.0 --reason other",
            2,
            ["--key", "keys/acme.pub", "private key"],
        ),
        (f"{deprecate} --action deprecate --version 1.0.0 --reason old", 2, ["--reason", "old"]),
        (f"{deprecate} --action deprecate --reason other", 2, ["missing_field", "--version"]),
        (
            f"{deprecate} --action deprecate --version 1.0.0 --reason other --withdraws 1",
            2,
            ["field_not_allowed", "--withdraws"],
        ),
        (
            f"{deprecate} --action revoke --version 1.0.0 --reason security",
            2,
            ["advisory_required", "--advisory"],
        ),
        ("status tool:org.acme/search", 1, no_state),
        ("check tool:org.acme/search 1.0.0", 1, no_state),
        ("inventory check inventory.json", 1, no_state),
        ("inventory diff inventory.json --from cp --to cp --log-key log.pub", 1, no_state),
        ("inventory check nowhere.json", 2, ["nowhere.json"]),
        (
            f"follow {url} --once --log-key {other_key} --state s.db",
            1,
            ["unverified_note", "--log-key"],
        ),
        (
            "follow http://127.0.0.1:9 --once --log-key log.pub --state s.db",
            1,
            ["fetch_failed", "no usable answer from the authority (connection refused"],
        ),
        (f"follow {url} --once --log-key log.pub --state .", 2, ["--state"]),
        (f"follow {url} --once --log-key nope", 2, ["--log-key", "bad_key"]),
        (f"export {url} --out inventory.json", 1, ["inventory.json"]),
        ("audit replay nowhere --log-key log.pub", 2, ["nowhere/checkpoint"]),
        ("verify-receipt --log-key log.pub gone.tlog-proof", 2, ["gone.tlog-proof"]),
        (
            f"monitor {url} --namespace org.acme --key-id xyz --log-key log.pub --once",
            2,
            ["--key-id"],
        ),
    ]
    return [
        (["keygen", "--name", "Bad Name"], 2, ["--name", "publisher id"]),
        *((line.split(), status, named) for line, status, named in cases),
    ]


def test_every_error_path_is_one_line_with_a_documented_exit_naming_the_culprit(
    authority: AuthorityProcess, publisher: Signer, log_key_file: str, tmp_path: Path
) -> None:
    (tmp_path / "inventory.json").write_text(
        '[{"tool_id": "tool:org.acme/search", "version": "1.0.0"}]'
    )
    with urllib.request.urlopen(authority.url + "/checkpoint") as answer:
        (tmp_path / "cp").write_bytes(answer.read())
    for argv, status, named in _cases(authority):
        before = sorted(p.name for p in tmp_path.iterdir())
        run = deplog(*argv, cwd=tmp_path)
        shown = f"{argv}: {run.returncode} {run.stderr!r}"
        assert "Traceback" not in run.stderr, shown
        assert run.returncode == status and status in DOCUMENTED_EXITS, shown
        assert all(word in run.stderr for word in named), shown
        if argv[0] != "publish":  # a refused publish keeps nothing either, but writes no state
            created = set(sorted(p.name for p in tmp_path.iterdir())) - set(before)
            assert not created, f"{shown} created {created}"


def test_a_newcomer_follows_checks_and_is_warned_when_behind(
    authority: AuthorityProcess, publisher: Signer, log_key_file: str, tmp_path: Path
) -> None:
    followed = deplog("follow", authority.url, "--once", "--log-key", log_key_file, cwd=tmp_path)
    assert followed.returncode == 0, followed.stderr
    assert "verifying entries:" in followed.stderr  # plain progress lines off a terminal
    published = deplog(
        *_publish(authority, "--tool", "tool:org.acme/search", "--action", "revoke"),
        *("--version", "1.0.0", "--reason", "other", "--log-key", log_key_file, "--json"),
        cwd=tmp_path,
    )
    assert published.returncode == 0, published.stderr
    receipt = json.loads(published.stdout)
    assert receipt["result"] == "logged" and receipt["verified"] is True

    behind = deplog("check", "tool:org.acme/search", "1.0.0", "--url", authority.url, cwd=tmp_path)
    assert behind.returncode == 0 and behind.stdout.startswith("serve (active)")
    assert "deplog: warning: the local state is at size 1 but the authority serves size 2" in (
        behind.stderr
    )
    once = deplog(
        "follow", authority.url, "--once", "--json", "--log-key", log_key_file, cwd=tmp_path
    )
    assert once.returncode == 0, once.stderr
    step = json.loads(once.stdout)
    assert (step["old_size"], step["new_size"], step["tools_changed"]) == (
        1,
        2,
        ["tool:org.acme/search"],
    )
    refused = deplog("check", "tool:org.acme/search", "1.0.0", "--url", authority.url, cwd=tmp_path)
    assert refused.returncode == 5 and refused.stderr == ""
    status = deplog("status", "tool:org.acme/search", cwd=tmp_path)
    assert status.returncode == 5 and "1.0.0: revoked" in status.stdout


def _read_line(process: subprocess.Popen[str], seconds: float) -> str:
    """The process's next stdout line, or a failure after ``seconds`` (never a hang)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], seconds)
    assert ready, f"no output within {seconds} s"
    return process.stdout.readline()


def test_follow_waits_for_an_authority_that_is_down_at_start(
    authority_files: AuthorityProcess, tmp_path: Path, free_port: int
) -> None:
    key = authority_files.log_verifier.vkey()
    argv = f"follow http://127.0.0.1:{free_port} --log-key {key} --interval 1".split()
    follower = subprocess.Popen(
        [sys.executable, "-m", "deplog.client.cli.main", *argv],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        # Ctrl-C as at a terminal, even when the suite runs where SIGINT is ignored (a
        # background job of a shell without job control), which a child inherits.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        time.sleep(3)  # several failed attempts at start-up
        assert follower.poll() is None, "follow gave up while the authority was down"
        authority_files.start(free_port)
        line = _read_line(follower, 30)  # the first verified step
        assert line.startswith(f"trusted {authority_files.log_verifier.name} at size 1")
    finally:
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=30)
        authority_files.stop()
    assert follower.returncode == 130
    assert err.count("retrying with backoff") == 1, err  # said once per kind of failure
    assert "fetch_failed: no usable answer from the authority" in err and "Traceback" not in err
