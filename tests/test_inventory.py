"""Inventory reports: deterministic, content-free, each change naming its notices."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from deplog.client.cache import inventory
from deplog.client.cli.main import main as deplog_main
from deplog.client.cli.verdicts import EXIT_REFUSE
from deplog.client.errors import DeplogError
from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import TrustedState
from deplog.client.tlog.checkpoint import open_checkpoint
from tests.builders import ORIGIN, LocalLog

TOOL = "tool:org.acme/search"
AT = datetime(2027, 1, 1, tzinfo=UTC)
ITEMS = [
    {"tool_id": TOOL, "version": "1.0.0"},
    {"tool_id": TOOL, "version": "2.0.0", "schema_digest": "sha256:" + "b" * 64},
    {"tool_id": TOOL, "version": "3.0.0"},
    {"tool_id": "tool:org.other/search", "version": "1.0.0"},
]


@pytest.fixture
def state(tmp_path: Path, local: LocalLog) -> Iterator[LocalState]:
    state = LocalState(tmp_path / "follower.db", ORIGIN)
    yield state
    state.close()


@pytest.fixture
def history(local: LocalLog, state: LocalState) -> tuple[bytes, bytes]:
    """Two signed checkpoints: before and after a revoke, a deprecation and a withdraw."""
    trusted = TrustedState(state, local.signer.verifier())
    revoked = local.publish(action="revoke", reasons=["other"], affected={"versions": ["3.0.0"]})
    local.sync(trusted)
    assert local.log.published is not None
    before = local.log.published.note
    local.publish(action="revoke", reasons=["other"], affected={"versions": ["1.0.0"]})
    local.publish(
        affected={"versions": ["2.0.0"]},
        sunset_at="2099-01-01T00:00:00Z",
        schema_digest="sha256:" + "a" * 64,
    )
    local.publish(action="withdraw", withdraws=revoked, affected=None)
    local.sync(trusted)
    assert local.log.published is not None
    return before, local.log.published.note


def report_bytes(state: LocalState, items: list[dict[str, str]]) -> bytes:
    return inventory.to_json(
        inventory.check(state, inventory.parse_inventory(json.dumps(items).encode()), AT)
    )


def test_check_reports_each_status_with_its_notices(
    state: LocalState, history: tuple[bytes, bytes]
) -> None:
    report = json.loads(report_bytes(state, ITEMS))
    by_version = {(e["tool_id"], e["version"]): e for e in report["items"]}
    assert by_version[(TOOL, "1.0.0")]["status"] == "revoked"
    assert by_version[(TOOL, "2.0.0")]["status"] == "deprecated"
    assert by_version[(TOOL, "2.0.0")]["schema_mismatch"] is True
    assert by_version[(TOOL, "3.0.0")]["status"] == "active"
    assert by_version[("tool:org.other/search", "1.0.0")]["status"] == "active"
    assert report["checkpoint"]["size"] == state.size


def test_reports_are_byte_identical_across_input_orderings_and_runs(
    state: LocalState, history: tuple[bytes, bytes]
) -> None:
    first = report_bytes(state, ITEMS)
    for seed in range(5):
        shuffled = ITEMS[:]
        random.Random(seed).shuffle(shuffled)
        assert report_bytes(state, shuffled + shuffled[:1]) == first


def test_diff_names_each_change_and_the_notices_behind_it(
    local: LocalLog, state: LocalState, history: tuple[bytes, bytes]
) -> None:
    key = local.signer.verifier()
    old, _ = open_checkpoint(history[0], key)
    new, _ = open_checkpoint(history[1], key)
    items = inventory.parse_inventory(json.dumps(ITEMS).encode())
    changes = inventory.diff(state, items, old, new, AT)["changes"]
    summary = [(c["version"], c["change"], c["from"], c["to"], c["caused_by"]) for c in changes]
    assert summary == [
        ("1.0.0", "revoked", "active", "revoked", [2]),
        ("2.0.0", "newly_deprecated", "active", "deprecated", [3]),
        ("3.0.0", "withdrawn", "revoked", "active", [4]),
    ]


def test_reports_are_content_free(local: LocalLog, state: LocalState) -> None:
    trusted = TrustedState(state, local.signer.verifier())
    local.publish(message="SECRET-FREE-TEXT endpoint https://internal.example")
    local.sync(trusted)
    report = report_bytes(state, ITEMS)
    assert b"SECRET-FREE-TEXT" not in report and b"internal.example" not in report


def test_markdown_rendering_is_deterministic(
    state: LocalState, history: tuple[bytes, bytes]
) -> None:
    items = inventory.parse_inventory(json.dumps(ITEMS).encode())
    text = inventory.to_markdown(inventory.check(state, items, AT))
    assert text == inventory.to_markdown(inventory.check(state, list(reversed(items)), AT))
    assert f"| `{TOOL}` | 1.0.0 | revoked |" in text


@pytest.mark.parametrize(
    "bad",
    [
        b"{}",
        b'[{"tool_id": "x", "version": "1.0.0"}]',
        b'[{"tool_id": "tool:org.a/b", "version": "1"}]',
        b'[{"tool_id": "tool:org.a/b", "version": "1.0.0", "z": 1}]',
    ],
)
def test_malformed_inventories_are_refused(bad: bytes) -> None:
    with pytest.raises(DeplogError):
        inventory.parse_inventory(bad)


def test_inventory_commands_write_the_reports(
    tmp_path: Path,
    local: LocalLog,
    state: LocalState,
    history: tuple[bytes, bytes],
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(ITEMS))
    (tmp_path / "old").write_bytes(history[0])
    (tmp_path / "new").write_bytes(history[1])
    state_file = str(tmp_path / "follower.db")
    assert (
        deplog_main(
            ["inventory", "check", str(path), "--state", state_file, "--at", "2027-01-01T00:00:00Z"]
        )
        == EXIT_REFUSE  # one entry is revoked: a script must not serve it
    )
    checked = capsys.readouterr().out
    assert checked.encode() == report_bytes(state, ITEMS)
    assert (
        deplog_main(
            [
                "inventory",
                "diff",
                str(path),
                "--state",
                state_file,
                "--from",
                str(tmp_path / "old"),
                "--to",
                str(tmp_path / "new"),
                "--log-key",
                local.signer.verifier().vkey(),
                "--at",
                "2027-01-01T00:00:00Z",
                "--format",
                "markdown",
            ]
        )
        == 0
    )
    assert "| withdrawn |" in capsys.readouterr().out
