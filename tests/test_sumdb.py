"""Any C2SP log, including one whose origin is not its key name: sum.golang.org, and a
log of our own.

The fixtures are genuine tree heads; the first tests check them with deplog's
verifier, so every later test stands on signatures that really verify.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deplog.authority.http.status import http_status
from deplog.authority.witness.core import (
    LogConfigError,
    UntrustedCheckpointError,
    Witness,
    WitnessState,
)
from deplog.client.cli.audit import EXIT_NOT_PROVEN
from deplog.client.cli.main import main as deplog_main
from deplog.client.tlog.checkpoint import Checkpoint, WrongOriginError, open_checkpoint
from deplog.client.tlog.evidence import FAILING_PROOF, evidence_between, write_evidence
from deplog.client.tlog.note import (
    SIG_TYPE_COSIGNATURE_V1,
    InvalidNoteSignatureError,
    Signer,
    UnverifiedNoteError,
    sign_note,
)
from deplog.client.tlog.proofs import (
    ConsistencyProof,
    consistency_path,
    leaf_hash,
    root_from_leaf_hashes,
)
from tests import sumdb
from tests.test_witness import add_checkpoint_body, verify_cosignature

WITNESS = "witness.test/sumdb"


@pytest.mark.parametrize("note", sumdb.checkpoints(), ids=lambda n: n.split(b"\n")[1].decode())
def test_each_genuine_tree_head_verifies_under_its_origin(note: bytes) -> None:
    checkpoint, _ = open_checkpoint(note, sumdb.verifier(), sumdb.ORIGIN)
    assert checkpoint.origin == "go.sum database tree"
    assert str(checkpoint.size) == note.split(b"\n")[1].decode()


def test_the_expected_origin_defaults_to_the_key_name() -> None:
    with pytest.raises(WrongOriginError):
        open_checkpoint(sumdb.checkpoints()[0], sumdb.verifier())


def test_a_tampered_tree_head_fails_its_signature() -> None:
    with pytest.raises((InvalidNoteSignatureError, UnverifiedNoteError)):
        open_checkpoint(sumdb.tampered(sumdb.checkpoints()[0]), sumdb.verifier(), sumdb.ORIGIN)


# -- the witness -------------------------------------------------------------------


@pytest.fixture
def witness(tmp_path: Path) -> Witness:
    state = WitnessState(tmp_path / "witness.db")
    state.add_log(sumdb.KEY, 1, sumdb.ORIGIN)
    return Witness(state, Signer.generate(WITNESS, SIG_TYPE_COSIGNATURE_V1))


def test_the_witness_cosigns_a_genuine_tree_head_from_old_zero(witness: Witness) -> None:
    note = sumdb.checkpoints()[0]
    line = witness.add_checkpoint(add_checkpoint_body(0, [], note), 1_700_000_000)
    public = witness.verifier().public_key
    assert verify_cosignature(line, note, WITNESS, public) == 1_700_000_000


def test_the_witness_refuses_a_tampered_copy_as_untrusted_with_403(witness: Witness) -> None:
    note = sumdb.tampered(sumdb.checkpoints()[0])
    with pytest.raises(UntrustedCheckpointError) as refused:
        witness.add_checkpoint(add_checkpoint_body(0, [], note), 1_700_000_000)
    assert http_status(refused.value.code) == 403
    assert witness.state.recorded(sumdb.ORIGIN) is None


def test_the_key_name_is_not_an_origin_the_witness_knows(witness: Witness) -> None:
    """Registered under its real origin, the log is not also reachable by its key name."""
    assert witness.state.log_verifier(sumdb.ORIGIN) is not None
    assert witness.state.log_verifier("sum.golang.org") is None


def test_an_origin_over_two_lines_is_refused(tmp_path: Path) -> None:
    state = WitnessState(tmp_path / "witness.db")
    with pytest.raises(LogConfigError) as refused:
        state.add_log(sumdb.KEY, 1, "go.sum\ndatabase tree")
    assert refused.value.code == "bad_origin"
    assert state.logs() == []


# -- deplog audit ------------------------------------------------------------------------


def audit_checkpoint(note: bytes, tmp_path: Path, *extra: str) -> int:
    path = tmp_path / "checkpoint"
    path.write_bytes(note)
    return deplog_main(["audit", "checkpoint", "--log-key", sumdb.KEY, *extra, str(path)])


def test_audit_checkpoint_with_origin_accepts_a_genuine_tree_head(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    note = sumdb.checkpoints()[-1]
    assert audit_checkpoint(note, tmp_path, "--origin", sumdb.ORIGIN) == 0
    size = note.split(b"\n")[1].decode()
    assert capsys.readouterr().out.startswith(f"ok: checkpoint go.sum database tree size {size} ")


def test_audit_checkpoint_without_origin_names_the_mismatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert audit_checkpoint(sumdb.checkpoints()[-1], tmp_path) == 1
    assert "wrong_origin" in capsys.readouterr().err


def test_audit_checkpoint_with_origin_refuses_a_tampered_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tampered = sumdb.tampered(sumdb.checkpoints()[-1])
    assert audit_checkpoint(tampered, tmp_path, "--origin", sumdb.ORIGIN) == 1
    assert "Traceback" not in capsys.readouterr().err


# -- a log of our own whose key name is not its origin ---------------------------------

OWN_ORIGIN = "a log named otherwise"


def own_tree(signer: Signer, size: int) -> bytes:
    """A signed checkpoint of ``size`` synthetic leaves, origin ``OWN_ORIGIN``."""
    hashes = [leaf_hash(b"leaf %d" % i) for i in range(size)]
    checkpoint = Checkpoint(OWN_ORIGIN, size, root_from_leaf_hashes(hashes))
    return sign_note(checkpoint.to_text(), signer)


def own_proof(old: int, new: int) -> ConsistencyProof:
    hashes = [leaf_hash(b"leaf %d" % i) for i in range(new)]
    return ConsistencyProof(old, new, tuple(consistency_path(hashes, old, new)))


@pytest.mark.parametrize("origin", [OWN_ORIGIN, None], ids=["with-origin", "without"])
def test_audit_consistency_takes_the_origin_too(tmp_path: Path, origin: str | None) -> None:
    signer = Signer.generate("key.example")
    files = {"old": own_tree(signer, 3), "new": own_tree(signer, 7)}
    for name, body in files.items():
        (tmp_path / name).write_bytes(body)
    (tmp_path / "proof").write_text(json.dumps(own_proof(3, 7).to_json()))
    argv = ["audit", "consistency", "--log-key", signer.verifier().vkey()]
    argv += [] if origin is None else ["--origin", origin]
    argv += [str(tmp_path / n) for n in ("old", "new", "proof")]
    assert deplog_main(argv) == (0 if origin else 1)


def test_audit_evidence_takes_the_origin_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    signer = Signer.generate("key.example")
    broken = own_proof(3, 7)
    broken = ConsistencyProof(3, 7, (bytes(32), *broken.hashes[1:]))
    path = write_evidence(
        tmp_path,
        evidence_between(
            signer.verifier(), own_tree(signer, 3), own_tree(signer, 7), broken, "t", FAILING_PROOF
        ),
    )
    argv = ["audit", "evidence", "--log-key", signer.verifier().vkey(), "--origin", OWN_ORIGIN]
    assert deplog_main([*argv, str(path)]) == EXIT_NOT_PROVEN
    assert capsys.readouterr().out.startswith("not proven: failing_proof")


def test_audit_checkpoint_refuses_an_empty_origin_as_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as usage:
        audit_checkpoint(sumdb.checkpoints()[0], tmp_path, "--origin", "")
    assert usage.value.code == 2
    assert "one non-empty line" in capsys.readouterr().err
