"""The offline auditor against real logs, honest and tampered with.

A malicious authority holds the log key, so most tampering tests re-sign a
checkpoint over the altered leaves: then the root and size agree and only the
replay's own rules (signatures, authorization, sequences, withdraws) can
catch the change, at the first index that breaks one.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.authority.log import Log
from deplog.client.audit.bundle import read_entries, write_entries
from deplog.client.audit.offline import (
    AuditError,
    audit_checkpoint,
    audit_consistency,
    audit_receipt,
    replay,
)
from deplog.client.errors import DeplogError
from deplog.client.model.rules import InvalidEntry
from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.note import Signer, Verifier
from deplog.client.tlog.proofs import ConsistencyProof, ProofError, TreeMismatchError
from deplog.client.tlog.tiles import BundleFormatError
from tests.builders import (
    make_envelope,
    notice_leaf,
    publisher_leaf,
    publisher_statement,
    register,
    register_statement,
    sign_tree,
)

ORIGIN = "audit.deplog.example/log"


@dataclass
class RealLog:
    """A log built by the real authority code, plus what its tests need to forge entries.

    Entries: 0 register acme, 1-3 acme notices (seq 1-3; 3 is a revoke),
    4 acme withdraws 1 (seq 4), 5 register beta, 6 beta notice (seq 1).
    """

    log_signer: Signer
    acme: Signer
    beta: Signer
    leaves: list[bytes]
    note: bytes
    receipt: bytes
    checkpoints: dict[int, bytes]
    consistency: dict[tuple[int, int], ConsistencyProof]

    @property
    def log_key(self) -> Verifier:
        return self.log_signer.verifier()


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealLog]:
    log_signer, acme, beta = (
        Signer.generate(ORIGIN),
        Signer.generate("acme"),
        Signer.generate("beta"),
    )
    log = Log(tmp_path_factory.mktemp("log") / "log.db", log_signer, ORIGIN)
    try:
        register(log, acme)
        first = log.sequence([make_envelope(acme, 1)])[0]
        log.sequence([make_envelope(acme, 2)])
        revoke = make_envelope(acme, 3, action="revoke", reasons=["critical_bug"])
        withdraw = make_envelope(acme, 4, action="withdraw", withdraws=1, affected=None)
        log.sequence([revoke, withdraw])
        register(log, beta)
        published = log.publish()
        log.sequence([make_envelope(beta, 1)])
        assert log.published is not None and first.checkpoint is not None
        first_receipt = first.receipt(first.checkpoint.note)
        size = log.published.size
        checkpoints = {2: first.checkpoint.note, 6: published.note}
        checkpoints[size] = log.published.note
        yield RealLog(
            log_signer=log_signer,
            acme=acme,
            beta=beta,
            leaves=log.tree.leaf_data(0, size),
            note=log.published.note,
            receipt=first_receipt,
            checkpoints=checkpoints,
            consistency={
                (2, size): ConsistencyProof(2, size, tuple(log.tree.consistency_proof(2, size))),
                (6, size): ConsistencyProof(6, size, tuple(log.tree.consistency_proof(6, size))),
            },
        )
    finally:
        log.close()


def rule_violation(leaves: list[bytes], note: bytes, key: Verifier) -> InvalidEntry:
    """The admission rule the replay finds broken first: the replay goes on to the end
    and reports every entry that fails validation."""
    report = replay(leaves, note, key)
    assert report.invalid, "the replay found every entry valid"
    return report.invalid[0]


def tree_mismatch(
    leaves: list[bytes] | Iterator[bytes], note: bytes, key: Verifier
) -> TreeMismatchError:
    """How the replayed leaves fail to build the checkpoint's tree."""
    with pytest.raises(TreeMismatchError) as caught:
        replay(leaves, note, key)
    return caught.value


# --- checkpoints, receipts, consistency -------------------------------------------


def test_genuine_checkpoint_is_returned(real: RealLog) -> None:
    checkpoint = audit_checkpoint(real.note, real.log_key)
    assert (checkpoint.origin, checkpoint.size) == (ORIGIN, 7)


def test_checkpoint_from_another_key_with_the_same_origin_is_refused(real: RealLog) -> None:
    impostor = sign_checkpoint(Checkpoint(ORIGIN, 7, b"\x00" * 32), Signer.generate(ORIGIN))
    with pytest.raises(DeplogError) as caught:
        audit_checkpoint(impostor, real.log_key)
    assert caught.value.code == "unverified_note"


def test_checkpoint_with_altered_text_is_refused(real: RealLog) -> None:
    altered = real.note.replace(b"\n7\n", b"\n8\n", 1)
    with pytest.raises(DeplogError) as caught:
        audit_checkpoint(altered, real.log_key)
    assert caught.value.code == "bad_note_signature"


def test_receipt_proves_its_entry(real: RealLog) -> None:
    assert audit_receipt(real.receipt, real.leaves[1], real.log_key).size == 2


def test_receipt_does_not_prove_another_entry(real: RealLog) -> None:
    with pytest.raises(DeplogError) as caught:
        audit_receipt(real.receipt, real.leaves[0], real.log_key)
    assert caught.value.code == "bad_inclusion_proof"


def test_receipt_for_bytes_that_are_no_entry_is_refused(real: RealLog) -> None:
    with pytest.raises(DeplogError) as caught:
        audit_receipt(real.receipt, b"not an entry", real.log_key)
    assert caught.value.code == "malformed_json"


def test_receipt_checked_against_another_log_key_is_refused(real: RealLog) -> None:
    with pytest.raises(DeplogError) as caught:
        audit_receipt(real.receipt, real.leaves[1], Signer.generate(ORIGIN).verifier())
    assert caught.value.code == "unverified_note"


@pytest.mark.parametrize("old", [2, 6])
def test_consistency_between_genuine_checkpoints_verifies(real: RealLog, old: int) -> None:
    proof = real.consistency[(old, 7)]
    first, second = audit_consistency(real.checkpoints[old], real.note, proof, real.log_key)
    assert (first.size, second.size) == (old, 7)


def test_consistency_proof_naming_other_sizes_is_refused(real: RealLog) -> None:
    """Sizes come from the checkpoints: a proof for 6 -> 7 is no proof for 2 -> 7."""
    with pytest.raises(ProofError) as caught:
        audit_consistency(real.checkpoints[2], real.note, real.consistency[(6, 7)], real.log_key)
    assert caught.value.code == "proof_size_mismatch"


def test_consistency_proof_with_a_wrong_hash_is_refused(real: RealLog) -> None:
    proof = real.consistency[(2, 7)]
    forged = ConsistencyProof(2, 7, (b"\x00" * 32, *proof.hashes[1:]))
    with pytest.raises(DeplogError) as caught:
        audit_consistency(real.checkpoints[2], real.note, forged, real.log_key)
    assert caught.value.code == "bad_consistency_proof"


def test_fork_from_the_old_checkpoint_is_refused(real: RealLog) -> None:
    """A new checkpoint over a rewritten history has no valid proof from the old one."""
    rewritten = sign_tree(real.log_signer, [real.leaves[0], real.leaves[2], *real.leaves[2:]])
    with pytest.raises(DeplogError) as caught:
        audit_consistency(real.checkpoints[2], rewritten, real.consistency[(2, 7)], real.log_key)
    assert caught.value.code == "bad_consistency_proof"


def test_two_roots_signed_for_one_size_are_conflicting_checkpoints(real: RealLog) -> None:
    other = sign_tree(real.log_signer, [real.leaves[1], real.leaves[0]])
    empty = ConsistencyProof(2, 2, ())
    with pytest.raises(AuditError) as caught:
        audit_consistency(real.checkpoints[2], other, empty, real.log_key)
    assert caught.value.code == "conflicting_checkpoints"


# --- replay: the honest log -------------------------------------------------------


def test_honest_log_replays_with_its_counts(real: RealLog) -> None:
    report = replay(real.leaves, real.note, real.log_key)
    assert (report.size, report.root) == (7, audit_checkpoint(real.note, real.log_key).root_hash)
    assert report.notices == {"deprecate": 3, "revoke": 1, "withdraw": 1}
    assert report.publisher_entries == 2
    assert report.publishers == ("acme", "beta")


def test_empty_log_replays(real: RealLog) -> None:
    report = replay([], sign_tree(real.log_signer, []), real.log_key)
    assert (report.size, report.publishers, report.notices) == (0, (), {})


def test_replay_streams_from_an_entry_bundle(real: RealLog, tmp_path: Path) -> None:
    write_entries(tmp_path / "entries", real.leaves)
    assert replay(read_entries(tmp_path / "entries"), real.note, real.log_key).size == 7


# --- replay: tampering --------------------------------------------------------------


def test_altered_signed_byte_fails_that_notices_signature(real: RealLog) -> None:
    leaves = list(real.leaves)
    leaves[2] = leaves[2].replace(b'"1.0.0"', b'"1.0.1"')
    err = rule_violation(leaves, sign_tree(real.log_signer, leaves), real.log_key)
    assert (err.code, err.cause, err.index) == ("unauthorized_notice", "bad_signature", 2)


def test_altered_byte_that_breaks_the_json_is_a_bad_leaf(real: RealLog) -> None:
    leaves = list(real.leaves)
    leaves[3] = leaves[3].replace(b"{", b"[", 1)
    err = rule_violation(leaves, sign_tree(real.log_signer, leaves), real.log_key)
    assert (err.code, err.index) == ("bad_leaf", 3)


def test_non_canonical_leaf_is_a_bad_leaf(real: RealLog) -> None:
    """One entry has one leaf: re-encoding it (same JSON value) changes its hash."""
    leaves = list(real.leaves)
    leaves[1] = leaves[1].replace(b'{"notice":', b'{ "notice":', 1)
    err = rule_violation(leaves, sign_tree(real.log_signer, leaves), real.log_key)
    assert (err.code, err.cause, err.index) == ("bad_leaf", "noncanonical_entry", 1)


def test_notices_out_of_sequence_order_replay(real: RealLog) -> None:
    """Sequence numbers are unique, not ordered: a log that holds acme's sequence 2
    before its sequence 1 is valid, and log order decides which supersedes which."""
    leaves = list(real.leaves)
    leaves[1], leaves[2] = leaves[2], leaves[1]
    assert replay(leaves, sign_tree(real.log_signer, leaves), real.log_key).size == 7


def test_notice_moved_before_its_publisher_registration_is_unauthorized(real: RealLog) -> None:
    leaves = [real.leaves[1], real.leaves[0], *real.leaves[2:]]
    err = rule_violation(leaves, sign_tree(real.log_signer, leaves), real.log_key)
    assert (err.code, err.cause, err.index) == ("unauthorized_notice", "unknown_publisher", 0)


def test_missing_leaf_is_missing_entries_from_the_first_absent_index(real: RealLog) -> None:
    """Without leaf 2 the rest still obeys every rule; only the checkpoint's size tells."""
    leaves = [leaf for i, leaf in enumerate(real.leaves) if i != 2]
    err = tree_mismatch(leaves, real.note, real.log_key)
    assert (err.code, err.index) == ("missing_entries", 6)


def test_extra_leaf_is_too_many_entries_at_the_checkpoint_size(real: RealLog) -> None:
    leaves = [*real.leaves, notice_leaf(make_envelope(real.beta, 2))]
    err = tree_mismatch(leaves, real.note, real.log_key)
    assert (err.code, err.index) == ("too_many_entries", 7)


def test_leaves_past_the_checkpoint_stop_the_replay_at_once(real: RealLog) -> None:
    """The checkpoint bounds the work: an endless input is refused at its first extra leaf."""
    endless = itertools.chain(real.leaves, itertools.repeat(b"junk"))
    err = tree_mismatch(endless, real.note, real.log_key)
    assert (err.code, err.index) == ("too_many_entries", 7)


def test_valid_substitute_leaf_is_an_entries_root_mismatch(real: RealLog) -> None:
    leaves = [*real.leaves[:6], notice_leaf(make_envelope(real.beta, 1, message="other"))]
    err = tree_mismatch(leaves, real.note, real.log_key)
    assert (err.code, err.index) == ("entries_root_mismatch", None)


def test_notice_signed_by_an_unregistered_key_is_caught_by_authorization(real: RealLog) -> None:
    """The authority logged it anyway and signed the checkpoint: only the registry objects."""
    stranger = Signer.generate("acme")
    leaves = [*real.leaves, notice_leaf(make_envelope(stranger, 9))]
    err = rule_violation(leaves, sign_tree(real.log_signer, leaves), real.log_key)
    assert (err.code, err.cause, err.index) == ("unauthorized_notice", "unknown_key", 7)


def test_notice_for_another_publishers_namespace_is_unauthorized(real: RealLog) -> None:
    leaves = [*real.leaves, notice_leaf(make_envelope(real.acme, 9, tool="tool:org.beta/search"))]
    err = rule_violation(leaves, sign_tree(real.log_signer, leaves), real.log_key)
    assert (err.code, err.cause, err.index) == (
        "unauthorized_notice",
        "namespace_not_authorized",
        7,
    )


def test_key_revoked_earlier_in_the_log_cannot_sign_later_notices(real: RealLog) -> None:
    revoke = publisher_statement("revoke_key", real.acme.name, (real.acme,))
    leaves = [
        *real.leaves,
        publisher_leaf(revoke, real.log_signer),
        notice_leaf(make_envelope(real.acme, 9)),
    ]
    err = rule_violation(leaves, sign_tree(real.log_signer, leaves), real.log_key)
    assert (err.code, err.cause, err.index) == ("unauthorized_notice", "key_revoked", 8)


def test_publisher_entry_signed_by_another_key_is_refused(real: RealLog) -> None:
    forger = Signer.generate(ORIGIN)
    mallory = Signer.generate("mallory")
    leaves = [
        *real.leaves,
        publisher_leaf(register_statement("mallory", ("org.mallory",), (mallory,)), forger),
    ]
    err = rule_violation(leaves, sign_tree(real.log_signer, leaves), real.log_key)
    assert (err.code, err.cause, err.index) == (
        "bad_publisher_entry",
        "bad_authority_signature",
        7,
    )


def test_publisher_entry_that_is_no_valid_transition_is_refused(real: RealLog) -> None:
    """Signed by the real key, but beta's namespace already belongs to beta."""
    leaves = [
        *real.leaves,
        publisher_leaf(register_statement("beta", ("org.beta",), (real.beta,)), real.log_signer),
    ]
    err = rule_violation(leaves, sign_tree(real.log_signer, leaves), real.log_key)
    assert (err.code, err.cause, err.index) == ("bad_publisher_entry", "publisher_exists", 7)


def test_replayed_notice_reuses_its_sequence(real: RealLog) -> None:
    leaves = [*real.leaves, real.leaves[2]]
    err = rule_violation(leaves, sign_tree(real.log_signer, leaves), real.log_key)
    assert (err.code, err.cause, err.index) == ("replayed_notice", "sequence_reused", 7)


@pytest.mark.parametrize(
    ("target", "why"),
    [
        (0, "a publisher entry"),
        (4, "a withdraw"),
        (6, "another publisher's notice"),
        (7, "the withdraw itself"),
        (99, "past the end of the log"),
    ],
)
def test_withdraw_of_anything_but_an_earlier_own_notice_is_refused(
    real: RealLog, target: int, why: str
) -> None:
    withdraw = make_envelope(real.acme, 9, action="withdraw", withdraws=target, affected=None)
    leaves = [*real.leaves, notice_leaf(withdraw)]
    err = rule_violation(leaves, sign_tree(real.log_signer, leaves), real.log_key)
    assert (err.code, err.cause, err.index) == ("invalid_withdraw", "bad_withdraw_target", 7), why


def test_checkpoint_from_another_key_stops_the_replay_before_any_leaf(real: RealLog) -> None:
    root = audit_checkpoint(real.note, real.log_key).root_hash
    impostor = sign_checkpoint(Checkpoint(ORIGIN, 7, root), Signer.generate(ORIGIN))
    with pytest.raises(DeplogError) as caught:
        replay(real.leaves, impostor, real.log_key)
    assert caught.value.code == "unverified_note"


def test_broken_bundle_error_reaches_the_caller_with_its_index(
    real: RealLog, tmp_path: Path
) -> None:
    path = tmp_path / "entries"
    write_entries(path, real.leaves)
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(BundleFormatError) as caught:
        replay(read_entries(path), real.note, real.log_key)
    assert caught.value.index == 6


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_any_altered_byte_fails_the_replay(real: RealLog, data: st.DataObject) -> None:
    """Against the genuine checkpoint, no single-byte change goes unnoticed."""
    index = data.draw(st.integers(0, len(real.leaves) - 1), label="leaf")
    leaf = bytearray(real.leaves[index])
    at = data.draw(st.integers(0, len(leaf) - 1), label="byte")
    leaf[at] ^= data.draw(st.integers(1, 255), label="xor")
    leaves = [*real.leaves[:index], bytes(leaf), *real.leaves[index + 1 :]]
    with pytest.raises(TreeMismatchError) as caught:  # not the signed tree's entries
        replay(leaves, real.note, real.log_key)
    assert caught.value.code == "entries_root_mismatch"
