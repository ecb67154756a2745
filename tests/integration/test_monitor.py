"""``deplog monitor`` against a real authority process: what a publisher is alerted to.

The publisher publishes with ``deplog publish --out JOURNAL``; its key leaks, and the
operator adds a key to it. Each ``deplog monitor --once`` prints one JSON line per
event and exits 3 when there are events, 0 when there are none.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from deplog.client.cli.main import main as deplog_main
from deplog.client.cli.monitor import EXIT_EVENTS
from deplog.client.tlog.keyfile import create_signer
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess

pytestmark = pytest.mark.slow  # real authority processes

Events = list[dict[str, Any]]
MonitorOnce = Callable[..., tuple[int, Events]]


@pytest.fixture
def publisher(tmp_path: Path) -> Signer:
    """``acme``'s key, on disk as ``deplog keygen`` writes it (``deplog publish`` reads it)."""
    return create_signer(tmp_path / "keys", "acme", "acme")


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "journal"


@pytest.fixture
def monitor_once(
    authority: AuthorityProcess,
    tmp_path: Path,
    journal: Path,
    capsys: pytest.CaptureFixture[str],
) -> MonitorOnce:
    """Runs ``deplog monitor --once`` over one state file; returns (status, events)."""
    journal.mkdir(exist_ok=True)
    argv = [
        "monitor",
        authority.url,
        "--namespace",
        "org.acme",
        "--key-id",
        str(tmp_path / "keys" / "acme.pub"),
        "--journal",
        str(journal),
        "--log-key",
        authority.log_verifier.vkey(),
        "--state",
        str(tmp_path / "monitor.db"),
        "--once",
    ]

    def run(*extra: str) -> tuple[int, Events]:
        capsys.readouterr()
        status = deplog_main([*argv, *extra])
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        return status, [json.loads(line) for line in captured.out.splitlines()]

    return run


@pytest.fixture
def monitored(monitor_once: MonitorOnce) -> MonitorOnce:
    """The monitor has seen the namespace's registration, its first event."""
    status, events = monitor_once()
    assert status == EXIT_EVENTS
    assert [(e["event"], e["action"], e["index"]) for e in events] == [("registry", "register", 0)]
    return monitor_once


def publish(authority: AuthorityProcess, tmp_path: Path, journal: Path, sequence: int) -> None:
    argv = ["publish", "--url", authority.url, "--key", str(tmp_path / "keys" / "acme.key")]
    argv += ["--tool", "tool:org.acme/search", "--action", "deprecate", "--reason", "other"]
    argv += ["--version", "1.0.0", "--sequence", str(sequence), "--out", str(journal)]
    assert deplog_main(argv) == 0


def post(authority: AuthorityProcess, signer: Signer, sequence: int) -> None:
    """A notice posted straight to the log, as a holder of a leaked key would."""
    request = urllib.request.Request(
        authority.url + "/v1/notices",
        data=make_envelope(signer, sequence).canonical_bytes(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201


def test_the_publishers_own_journaled_notice_is_not_reported(
    authority: AuthorityProcess, monitored: MonitorOnce, tmp_path: Path, journal: Path
) -> None:
    publish(authority, tmp_path, journal, 1)
    assert monitored() == (0, [])


def test_a_notice_posted_with_a_leaked_key_is_reported(
    authority: AuthorityProcess, monitored: MonitorOnce, publisher: Signer, tmp_path: Path
) -> None:
    post(authority, publisher, 5)
    status, [event] = monitored()
    assert status == EXIT_EVENTS
    assert (event["event"], event["index"], event["reasons"]) == ("notice", 1, ["not_in_journal"])
    assert (event["tool_id"], event["sequence"], event["publisher"]) == (
        "tool:org.acme/search",
        5,
        "acme",
    )
    assert event["key_id"] == bytes(publisher.key_id).hex()
    assert event["checkpoint_size"] == 2


def test_a_key_added_by_the_operator_is_reported_and_so_are_its_notices(
    authority: AuthorityProcess, monitored: MonitorOnce, tmp_path: Path
) -> None:
    added = Signer.generate("acme")
    changed = authority.run_cli("publisher", "add-key", "acme", "--key", added.verifier().vkey())
    assert changed.returncode == 0, changed.stderr
    post(authority, added, 9)
    status, events = monitored()
    assert status == EXIT_EVENTS
    assert [(e["event"], e.get("action"), e.get("reasons")) for e in events] == [
        ("registry", "add_key", None),
        ("notice", "deprecate", ["unknown_key", "not_in_journal"]),
    ]
    assert events[0]["key_ids"] == [bytes(added.key_id).hex()]


def test_a_journal_file_that_is_not_an_envelope_stops_the_monitor_with_one_line(
    authority: AuthorityProcess,
    monitor_once: MonitorOnce,
    journal: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (journal / "acme-1.envelope.json").write_text("{}")
    argv = ["monitor", authority.url, "--namespace", "org.acme", "--key-id", "00000000"]
    argv += ["--journal", str(journal), "--log-key", authority.log_verifier.vkey(), "--once"]
    argv += ["--state", str(journal.parent / "other.db")]
    status = deplog_main(argv)
    assert status == 1
    err = capsys.readouterr().err
    assert "bad_journal" in err and "acme-1.envelope.json" in err and "Traceback" not in err


@pytest.mark.parametrize("tiles", ["off", "url"])
def test_the_monitor_reads_the_log_through_tiles_or_the_json_api_alike(
    authority: AuthorityProcess,
    monitored: MonitorOnce,
    publisher: Signer,
    tiles: str,
) -> None:
    """``--tiles`` as for ``deplog follow``: the events do not depend on the source."""
    post(authority, publisher, 5)
    status, [event] = monitored("--tiles", authority.url if tiles == "url" else "off")
    assert status == EXIT_EVENTS
    assert (event["event"], event["index"], event["checkpoint_size"]) == ("notice", 1, 2)
