"""Fork evidence: written by a follower that saw two histories, verified offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deplog.authority.log import Log
from deplog.authority.storage import store
from deplog.client.cli.audit import EXIT_NOT_PROVEN
from deplog.client.cli.main import main as deplog_main
from deplog.client.tlog.evidence import (
    CONFLICTING_ROOTS,
    FAILING_PROOF,
    INCONSISTENT_PREFIX,
    MAP_MISMATCH,
    EvidenceError,
    EvidenceFormatError,
    ForkEvidence,
    evidence_between,
    read_evidence,
    write_evidence,
)
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import ConsistencyProof
from tests.builders import ORIGIN, LocalLog, make_envelope, register


def grown_log(path: Path, log_signer: Signer, namespace: str, notices: int) -> Log:
    publisher = Signer.generate("acme")
    log = Log(path, log_signer, ORIGIN)
    register(log, publisher, namespace)
    for sequence in range(1, notices + 1):
        log.sequence([make_envelope(publisher, sequence, tool=f"tool:{namespace}/search")])
    return log


@pytest.fixture
def two_histories(tmp_path: Path, log_signer: Signer) -> tuple[Log, Log]:
    """Two logs under one key: the same size, different trees."""
    return (
        grown_log(tmp_path / "a.db", log_signer, "org.acme", 2),
        grown_log(tmp_path / "b.db", log_signer, "org.evil", 2),
    )


def note(log: Log) -> bytes:
    assert log.published is not None
    return log.published.note


def test_same_size_different_roots_prove_a_fork(
    two_histories: tuple[Log, Log], log_signer: Signer
) -> None:
    a, b = two_histories
    evidence = evidence_between(log_signer.verifier(), note(a), note(b), None, "test")
    assert evidence.verify(log_signer.verifier()) == "conflicting_roots"


def test_a_failing_served_proof_is_a_finding_that_proves_nothing(
    tmp_path: Path, log_signer: Signer, two_histories: tuple[Log, Log]
) -> None:
    """The log signs checkpoints, never proofs: a failing proof is a suspicion only."""
    _, b = two_histories
    smaller = grown_log(tmp_path / "c.db", log_signer, "org.acme", 1)
    proof = ConsistencyProof(2, 3, tuple(b.tree.consistency_proof(2, 3)))
    evidence = evidence_between(
        log_signer.verifier(), note(smaller), note(b), proof, "test", FAILING_PROOF
    )
    assert evidence.verify(log_signer.verifier()) == FAILING_PROOF
    assert not evidence.proven
    assert evidence.to_json()["proven"] is False


def test_a_failing_proof_claimed_as_conflicting_roots_is_refused(
    tmp_path: Path, log_signer: Signer, two_histories: tuple[Log, Log]
) -> None:
    """A file cannot claim more than its signed data shows."""
    _, b = two_histories
    smaller = grown_log(tmp_path / "c.db", log_signer, "org.acme", 1)
    proof = ConsistencyProof(2, 3, tuple(b.tree.consistency_proof(2, 3)))
    overclaim = evidence_between(
        log_signer.verifier(), note(smaller), note(b), proof, "test", CONFLICTING_ROOTS
    )
    with pytest.raises(EvidenceError) as refused:
        overclaim.verify(log_signer.verifier())
    assert refused.value.code == "finding_mismatch"


def prefix_evidence(log_signer: Signer, smaller: bytes, larger: Log, prefix: bytes) -> ForkEvidence:
    """``smaller`` (size 2), and ``larger`` (size 3) whose prefix is said to be ``prefix``."""
    proof = ConsistencyProof(2, 3, tuple(larger.tree.consistency_proof(2, 3)))
    return evidence_between(
        log_signer.verifier(), smaller, note(larger), proof, "t", INCONSISTENT_PREFIX, prefix
    )


def test_a_larger_trees_proven_prefix_that_is_not_the_smaller_tree_proves_a_fork(
    tmp_path: Path, log_signer: Signer, two_histories: tuple[Log, Log]
) -> None:
    a, b = two_histories
    smaller = store.checkpoint_at(a.conn, 2)
    assert smaller is not None
    evidence = prefix_evidence(log_signer, smaller.note, b, b.tree.root_at(2))
    read = read_evidence(write_evidence(tmp_path / "evidence", evidence))
    assert read == evidence and read.proven
    assert read.verify(log_signer.verifier()) == INCONSISTENT_PREFIX


@pytest.mark.parametrize("which", ["not-tied-by-the-proof", "the-smaller-tree"])
def test_a_prefix_that_is_not_proven_or_is_the_smaller_tree_proves_nothing(
    log_signer: Signer, two_histories: tuple[Log, Log], which: str
) -> None:
    a, b = two_histories
    smaller = store.checkpoint_at((a if which == "not-tied-by-the-proof" else b).conn, 2)
    assert smaller is not None
    prefix = bytes(32) if which == "not-tied-by-the-proof" else b.tree.root_at(2)
    with pytest.raises(EvidenceError) as refused:
        prefix_evidence(log_signer, smaller.note, b, prefix).verify(log_signer.verifier())
    assert refused.value.code == "no_conflict"


def test_audit_evidence_says_a_map_mismatch_is_proven(
    tmp_path: Path,
    log_signer: Signer,
    two_histories: tuple[Log, Log],
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = two_histories
    evidence = evidence_between(log_signer.verifier(), note(a), note(b), None, "t", MAP_MISMATCH)
    path = write_evidence(tmp_path, evidence)
    argv = ["audit", "evidence", str(path), "--log-key", log_signer.verifier().vkey()]
    assert deplog_main(argv) == 0
    assert capsys.readouterr().out.startswith("proven: map_mismatch: ")


def test_a_file_whose_proven_flag_contradicts_its_finding_is_malformed(
    tmp_path: Path, log_signer: Signer, two_histories: tuple[Log, Log]
) -> None:
    a, b = two_histories
    obj = evidence_between(log_signer.verifier(), note(a), note(b), None, "test").to_json()
    obj["proven"] = False
    path = tmp_path / "e.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(EvidenceFormatError):
        read_evidence(path)


def test_consistent_checkpoints_are_not_evidence(tmp_path: Path) -> None:
    local = LocalLog(tmp_path)
    local.publish()
    first = note(local.log)
    local.publish()
    size = local.log.tree.size
    honest = ConsistencyProof(2, size, tuple(local.log.tree.consistency_proof(2, size)))
    key = local.signer.verifier()
    evidence = evidence_between(key, first, note(local.log), honest, "test")
    with pytest.raises(EvidenceError) as refused:
        evidence.verify(key)
    assert refused.value.code == "no_conflict"


def test_evidence_checked_against_another_log_key_is_refused(
    two_histories: tuple[Log, Log], log_signer: Signer
) -> None:
    a, b = two_histories
    evidence = evidence_between(log_signer.verifier(), note(a), note(b), None, "test")
    with pytest.raises(EvidenceError) as refused:
        evidence.verify(Signer.generate(ORIGIN).verifier())
    assert refused.value.code == "other_log"


def test_evidence_files_round_trip(
    tmp_path: Path, two_histories: tuple[Log, Log], log_signer: Signer
) -> None:
    a, b = two_histories
    evidence = evidence_between(log_signer.verifier(), note(a), note(b), None, "test")
    assert read_evidence(write_evidence(tmp_path, evidence)) == evidence


def test_a_file_that_is_not_evidence_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(EvidenceFormatError):
        read_evidence(path)


def test_audit_evidence_command_proves_a_fork(
    tmp_path: Path,
    two_histories: tuple[Log, Log],
    log_signer: Signer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = two_histories
    path = write_evidence(
        tmp_path, evidence_between(log_signer.verifier(), note(a), note(b), None, "follower")
    )
    assert (
        deplog_main(["audit", "evidence", "--log-key", log_signer.verifier().vkey(), str(path)])
        == 0
    )
    assert capsys.readouterr().out.startswith("proven: conflicting_roots")


def test_audit_evidence_command_never_calls_a_failing_unsigned_proof_proven(
    tmp_path: Path,
    log_signer: Signer,
    two_histories: tuple[Log, Log],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, b = two_histories
    smaller = grown_log(tmp_path / "c.db", log_signer, "org.acme", 1)
    proof = ConsistencyProof(2, 3, tuple(b.tree.consistency_proof(2, 3)))
    path = write_evidence(
        tmp_path,
        evidence_between(
            log_signer.verifier(), note(smaller), note(b), proof, "follower", FAILING_PROOF
        ),
    )
    key = log_signer.verifier().vkey()
    assert deplog_main(["audit", "evidence", "--log-key", key, str(path)]) == EXIT_NOT_PROVEN
    out = capsys.readouterr().out
    assert out.startswith("not proven: failing_proof")
    assert "proven: " not in out.removeprefix("not proven: ")


def test_audit_evidence_command_fails_on_tampered_evidence(
    tmp_path: Path, two_histories: tuple[Log, Log], log_signer: Signer
) -> None:
    a, b = two_histories
    evidence = evidence_between(log_signer.verifier(), note(a), note(b), None, "follower")
    forged = ForkEvidence(
        evidence.log_key,
        evidence.first,
        evidence.second.replace("\u2014".encode(), b"-", 1),
        None,
        evidence.detected_at,
        evidence.reporter,
    )
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(forged.to_json()))
    assert (
        deplog_main(["audit", "evidence", "--log-key", log_signer.verifier().vkey(), str(path)])
        == 1
    )
