"""The failover oracle (log_oracle.py) names each broken promise, and passes a clean history.

Every history here is made of real signed notices, real signed checkpoints and real
receipts; each test breaks one rule the way a buggy cluster would (a lost notice, a
notice logged twice, a fork, a second root for a size, a stall after a kill) and expects
the oracle to name exactly that rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import inclusion_path, leaf_hash
from deplog.client.tlog.receipt import format_receipt
from tests.builders import make_envelope, notice_leaf, sign_tree
from tests.integration.harness import ORIGIN
from tests.integration.log_oracle import (
    Ack,
    Kill,
    Observations,
    Seen,
    first_violation,
    resume_gaps,
)

LOG = Signer.generate(ORIGIN)
PUBLISHER = Signer.generate("acme")
ENVELOPES = [make_envelope(PUBLISHER, sequence) for sequence in range(1, 9)]
LEAVES = [notice_leaf(envelope) for envelope in ENVELOPES]


def ack(leaves: Sequence[bytes], index: int, size: int, at: float = 0.0, status: int = 201) -> Ack:
    """The 201 a client got for leaf ``index``, with a receipt into the tree of ``size``."""
    hashes = [leaf_hash(leaf) for leaf in leaves]
    receipt = format_receipt(
        index, inclusion_path(hashes, index, size), sign_tree(LOG, leaves[:size])
    )
    return Ack(ENVELOPES[index].canonical_bytes(), receipt, status, at, index % 3)


def seen(leaves: Sequence[bytes], size: int, source: str = "poll") -> Seen:
    return Seen(sign_tree(LOG, leaves[:size]), source, 0.0, 0)


def history() -> Observations:
    """A clean history: every notice acknowledged at a growing size, every size polled."""
    return Observations(
        acks=[ack(LEAVES, i, i + 1, at=float(i)) for i in range(len(LEAVES))],
        seen=[seen(LEAVES, size) for size in range(1, len(LEAVES) + 1)],
        kills=[Kill(2.5, 1, True), Kill(5.5, 0, False)],
    )


def judge(observations: Observations, leaves: Sequence[bytes] = LEAVES, **kw: float) -> str:
    verdict = first_violation(
        observations, sign_tree(LOG, leaves), leaves, LOG.verifier(), kw.get("bound")
    )
    return verdict or "no violation"


def test_a_clean_history_has_no_violation_and_its_resume_gaps() -> None:
    assert judge(history(), bound=1.0) == "no violation"
    assert resume_gaps(history()) == [1.0, 1.0]


def test_leaves_that_do_not_hash_to_the_final_root_break_rule_1() -> None:
    final = sign_tree(LOG, LEAVES)
    verdict = first_violation(history(), final, [*LEAVES[:-1], LEAVES[0]], LOG.verifier())
    assert verdict is not None and verdict.startswith("rule 1 (final): the final leaves")


def test_a_final_checkpoint_signed_by_another_key_breaks_rule_1() -> None:
    other = Signer.generate(ORIGIN)
    verdict = first_violation(history(), sign_tree(other, LEAVES), LEAVES, LOG.verifier())
    assert verdict is not None and verdict.startswith("rule 1 (final): the final checkpoint")


def test_a_notice_logged_twice_breaks_rule_2() -> None:
    doubled = [*LEAVES, LEAVES[3]]
    verdict = judge(Observations(), doubled)
    assert verdict == "rule 2 (once): notice ('acme', 4) is at indices 3 and 8"


def test_an_acknowledged_notice_missing_from_the_final_log_breaks_rule_3() -> None:
    lost = LEAVES[:5] + LEAVES[6:]  # a history where notice 6 was rolled back
    observations = Observations(acks=[ack(LEAVES, 5, 6)])
    assert judge(observations, lost) == (
        "rule 3 (acknowledged): ('acme', 6) got a 201 (index 5) and is not in the final log "
        "of size 7"
    )


def test_an_acknowledged_notice_at_another_index_breaks_rule_3() -> None:
    moved = [LEAVES[1], LEAVES[0], *LEAVES[2:]]
    observations = Observations(acks=[ack(LEAVES, 0, 1)])
    assert judge(observations, moved) == (
        "rule 3 (acknowledged): ('acme', 1) has receipt index 0, final index 1"
    )


def test_a_receipt_for_another_leaf_breaks_rule_3() -> None:
    wrong = ack(LEAVES, 2, 4)
    observations = Observations(
        acks=[Ack(ENVELOPES[3].canonical_bytes(), wrong.receipt, 201, 0, 0)]
    )
    verdict = judge(observations)
    assert verdict.startswith("rule 3 (acknowledged): the receipt for ('acme', 4) does not verify")


def test_two_roots_for_one_size_break_rule_4() -> None:
    fork = [LEAVES[0], LEAVES[7], LEAVES[2]]
    observations = history()
    observations.seen.append(Seen(sign_tree(LOG, fork), "push", 0.0, 2))
    assert judge(observations) == (
        "rule 4 (one root per size): size 3 has two roots (poll; push from process 2)"
    )


def test_a_seen_checkpoint_with_a_forged_signature_breaks_rule_4() -> None:
    observations = Observations(
        seen=[Seen(sign_tree(Signer.generate(ORIGIN), LEAVES), "poll", 0, 0)]
    )
    assert judge(observations).startswith("rule 4 (one root per size): a poll checkpoint")


def test_a_seen_checkpoint_off_the_final_history_breaks_rule_5() -> None:
    fork = [LEAVES[1], LEAVES[0]]
    observations = Observations(seen=[Seen(sign_tree(LOG, fork), "receipt", 0.0, 1)])
    assert judge(observations) == (
        "rule 5 (consistent): size 2 is not consistent with the final checkpoint: "
        "bad_consistency_proof"
    )


def test_a_seen_checkpoint_past_the_final_one_breaks_rule_5() -> None:
    observations = Observations(seen=[seen(LEAVES, 8)])
    assert judge(observations, LEAVES[:6]) == (
        "rule 5 (consistent): size 8 was seen, past the final one"
    )


@pytest.mark.parametrize(
    ("kill_at", "expected"),
    [
        (3.5, "rule 6 (resume): after the kill of process 1 at 3.50: 2.00 s (bound 1.5 s)"),
        (
            20.0,
            "rule 6 (resume): after the kill of process 1 at 20.00: no 201 after it (bound 1.5 s)",
        ),
    ],
)
def test_appends_that_do_not_resume_in_time_break_rule_6(kill_at: float, expected: str) -> None:
    observations = history()
    observations.acks = [a for a in observations.acks if a.at != 4.0]  # nothing at 4 s
    observations.kills = [Kill(kill_at, 1, True)]
    assert judge(observations, bound=1.5) == expected


def test_an_idempotent_200_does_not_count_as_resumed_appends() -> None:
    observations = history()
    observations.acks.append(ack(LEAVES, 2, 8, at=3.2, status=200))
    observations.kills = [Kill(3.1, 0, None)]
    assert resume_gaps(observations) == [1.0]
