"""``deplog audit map``: every archived checkpoint's map root against the fold of the
entries under it; a fault-injected authority is named at its first bad size."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deplog.client.audit.bundle import write_entries
from deplog.client.audit.mapaudit import MapRootError, audit_map
from deplog.client.cli.main import main as deplog_main
from deplog.client.map.line import map_line
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.proofs import TreeMismatchError
from tests.builders import LocalLog, admitted


@pytest.fixture
def history(local: LocalLog) -> list[bytes]:
    """The signed checkpoint after each of five publications (sizes 2 to 6)."""
    notes = []
    for i in range(5):
        local.publish(tool_id=f"tool:org.acme/t{i % 2}")
        published = local.log.published
        assert published is not None
        notes.append(published.note)
    return notes


def leaves(local: LocalLog) -> list[bytes]:
    return local.log.tree.leaf_data(0, local.log.tree.size)


def forged(local: LocalLog, size: int, map_root: bytes) -> bytes:
    """A checkpoint of the log's real tree at ``size`` that commits to ``map_root``."""
    tree_root = local.log.tree.root_at(size)
    checkpoint = Checkpoint(local.log.origin, size, tree_root, (map_line(map_root),))
    return sign_checkpoint(checkpoint, local.signer)


def test_an_honest_logs_checkpoints_all_match(local: LocalLog, history: list[bytes]) -> None:
    report = audit_map(leaves(local), history, local.signer.verifier())
    assert report.matched == (2, 3, 4, 5, 6)
    assert (report.entries, report.without_line) == (6, ())


def test_a_misfolded_notice_is_named_at_its_size(local: LocalLog, history: list[bytes]) -> None:
    wrong = VerifiableMap().fold(admitted(leaves(local)[:3]))  # leaves out the notice at 3
    notes = [*history[:2], forged(local, 4, wrong), *history[3:]]
    with pytest.raises(MapRootError) as named:
        audit_map(leaves(local), notes, local.signer.verifier())
    assert named.value.size == 4


def test_the_first_of_several_bad_sizes_is_named(local: LocalLog, history: list[bytes]) -> None:
    notes = [*history, forged(local, 5, os.urandom(32)), forged(local, 3, os.urandom(32))]
    with pytest.raises(MapRootError) as named:
        audit_map(leaves(local), notes, local.signer.verifier())
    assert named.value.size == 3


def test_entries_that_are_not_the_checkpoints_are_refused(
    local: LocalLog, history: list[bytes]
) -> None:
    tampered = leaves(local)
    tampered[2] = tampered[3]
    with pytest.raises(TreeMismatchError):
        audit_map(tampered, history, local.signer.verifier())


def test_a_checkpoint_without_a_line_is_counted_not_checked(local: LocalLog) -> None:
    local.publish()
    size = local.log.tree.size
    bare = Checkpoint(local.log.origin, size, local.log.tree.root_at(size))
    report = audit_map(
        leaves(local), [sign_checkpoint(bare, local.signer)], local.signer.verifier()
    )
    assert (report.matched, report.without_line) == ((), (size,))


def export_dir(tmp_path: Path, local: LocalLog, notes: list[bytes]) -> Path:
    """An export directory with the latest checkpoint and the others archived."""
    out = tmp_path / "export"
    (out / "checkpoints").mkdir(parents=True)
    write_entries(out / "entries", leaves(local))
    (out / "checkpoint").write_bytes(notes[-1])
    for i, note in enumerate(notes[:-1]):
        (out / "checkpoints" / f"{i}").write_bytes(note)
    return out


def test_the_command_checks_the_export_and_its_archive(
    tmp_path: Path, local: LocalLog, history: list[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    out = export_dir(tmp_path, local, history)
    key = local.signer.verifier().vkey()
    assert deplog_main(["audit", "map", "--log-key", key, str(out)]) == 0
    assert capsys.readouterr().out.startswith("ok: 5 checkpoints commit to the map")


def test_the_command_names_the_first_bad_size(
    tmp_path: Path, local: LocalLog, history: list[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    out = export_dir(tmp_path, local, history)
    extra = tmp_path / "forged"
    extra.write_bytes(forged(local, 4, os.urandom(32)))
    key = local.signer.verifier().vkey()
    assert (
        deplog_main(["audit", "map", "--log-key", key, str(out), "--checkpoint", str(extra)]) == 1
    )
    assert "bad_map_root: first bad size 4" in capsys.readouterr().err
