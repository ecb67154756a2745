"""The follower's trust state machine, rule by rule (client/follow/trust.py's docstring).

``TrustedState`` is driven directly, step by step, with no network: real keys,
checkpoints signed with the real log key, and real leaves. The honest ones come
from an authority ``Log`` in a temporary SQLite file (``tests.builders.LocalLog``);
the lies are trees a test chose, signed with the same log key, since the
authority holds that key and may lie with it. So every lie below carries a
valid log signature unless the test says otherwise.

Every refusal names its error (class and code) and leaves the trusted state
exactly as it was: size, root, signed note, verification time, tree edge,
registry and notices, in memory and in the file (``refused``).

tests/integration/test_follower_hostile.py shows a follower refusing a few of
these lies over HTTP, and the fetch-level failures; this file is the
specification of the state machine itself.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from deplog.authority.storage import store
from deplog.client.errors import DeplogError
from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import (
    Candidate,
    CheckpointRejectedError,
    ForkError,
    RollbackError,
    SuspectedForkError,
    TrustedState,
)
from deplog.client.model.rules import InvalidEntry
from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.cosignature import cosign, cosigner
from deplog.client.tlog.evidence import read_evidence
from deplog.client.tlog.note import (
    InvalidNoteSignatureError,
    NoteFormatError,
    Signer,
    UnverifiedNoteError,
    add_signature_lines,
    parse_note,
)
from deplog.client.tlog.policy import Policy, PolicyError
from deplog.client.tlog.proofs import (
    ConsistencyProof,
    ProofError,
    TreeMismatchError,
    consistency_path,
    leaf_hash,
)
from tests.builders import (
    ORIGIN,
    LocalLog,
    make_envelope,
    notice_leaf,
    publisher_leaf,
    register_statement,
    sign_tree,
)

TRUSTED_SIZE = 4
"""The follower's trusted tree in most tests: acme's registration, then notices 1 to 3."""
TOOL = "tool:org.acme/search"

E = TypeVar("E", bound=DeplogError)


# -- what the follower holds ---------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    """Everything the trusted state consists of."""

    size: int
    root: bytes
    note: bytes | None
    verified_at: float | None
    frontier: tuple[bytes, ...]
    registry: str
    notices: tuple[tuple[int, str, bytes], ...]


def _held(state: LocalState) -> Held:
    trusted = state.trusted
    with contextlib.closing(sqlite3.connect(f"file:{state.path}?mode=ro", uri=True)) as conn:
        notices = conn.execute("SELECT idx, tool_id, notice FROM notices ORDER BY idx").fetchall()
    return Held(
        size=state.size,
        root=state.root,
        note=None if trusted is None else trusted.note,
        verified_at=None if trusted is None else round(trusted.verified_at.timestamp(), 3),
        frontier=state.frontier.hashes,
        registry=json.dumps(state.registry.to_json(), sort_keys=True),
        notices=tuple((idx, tool, bytes(notice)) for idx, tool, notice in notices),
    )


def held(trusted: TrustedState) -> Held:
    """The trusted state in memory, after checking that its file holds exactly the same."""
    reopened = LocalState(trusted.state.path, ORIGIN)
    try:
        in_file = _held(reopened)
    finally:
        reopened.close()
    in_memory = _held(trusted.state)
    assert in_memory == in_file
    return in_memory


@contextlib.contextmanager
def refused(trusted: TrustedState, error: type[E], code: str) -> Iterator[pytest.ExceptionInfo[E]]:
    """The block must raise ``error`` with ``code`` and leave the trusted state as it was."""
    before = held(trusted)
    with pytest.raises(error) as caught:
        yield caught
    assert caught.value.code == code
    assert held(trusted) == before


# -- logs, honest and not ------------------------------------------------------------------


def honest_leaves(local: LocalLog, end: int | None = None) -> list[bytes]:
    return local.log.tree.leaf_data(0, local.log.tree.size if end is None else end)


def published_note(local: LocalLog) -> bytes:
    assert local.log.published is not None
    return local.log.published.note


def proof_between(leaves: list[bytes], old: int, new: int) -> ConsistencyProof:
    """The RFC 9162 consistency proof of the tree of ``leaves`` (reference implementation)."""
    hashes = [leaf_hash(leaf) for leaf in leaves]
    return ConsistencyProof(old, new, tuple(consistency_path(hashes, old, new)))


def candidate_for(trusted: TrustedState, note: bytes, leaves: list[bytes]) -> Candidate:
    """Steps 1 and 2 for a tree that extends the trusted one: what rules 3 to 5 start from."""
    candidate = trusted.check_checkpoint(note)
    trusted.check_consistency(
        candidate, proof_between(leaves, trusted.state.size, candidate.checkpoint.size)
    )
    return candidate


def check_entries(trusted: TrustedState, log_signer: Signer, leaves: list[bytes]) -> None:
    """Step 3 over the entries of ``leaves`` past the trusted size, under a checkpoint over
    all of ``leaves`` signed with ``log_signer`` (after steps 1 and 2)."""
    candidate = candidate_for(trusted, sign_tree(log_signer, leaves), leaves)
    with trusted.advance(candidate) as session:
        session.add(leaves[trusted.state.size :])


def judged_invalid(
    trusted: TrustedState, log_signer: Signer, leaves: list[bytes]
) -> tuple[InvalidEntry, ...]:
    """Steps 3 to 5 over ``leaves`` under a checkpoint of them all: the advance completes
    (an invalid entry never stops it), and the entries found invalid are what the state
    keeps as evidence."""
    candidate = candidate_for(trusted, sign_tree(log_signer, leaves), leaves)
    with trusted.advance(candidate) as session:
        session.add(leaves[trusted.state.size :])
        advanced = session.finish()
    assert trusted.state.size == len(leaves)
    count, kept = trusted.state.invalid_entries()
    assert (count, tuple(kept)) == (len(advanced.invalid), advanced.invalid)
    return advanced.invalid


def change_one_byte_of_message(leaf: bytes, message: str) -> bytes:
    """The leaf with one letter of its message changed: still canonical, no longer signed."""
    at = leaf.index(message.encode())
    return leaf[:at] + b"X" + leaf[at + 1 :]


@pytest.fixture
def synced(local: LocalLog, trusted: TrustedState) -> TrustedState:
    """The follower after verifying the honest log at TRUSTED_SIZE."""
    for _ in range(TRUSTED_SIZE - 1):
        local.publish()
    local.sync(trusted)
    assert trusted.state.size == TRUSTED_SIZE
    return trusted


# -- the log followed ------------------------------------------------------------------------


def test_the_state_follows_exactly_one_log(tmp_path: Path, local: LocalLog) -> None:
    """The trust policy must name the state's log and no other: no key can be confused."""
    state = LocalState(tmp_path / "other.db", ORIGIN)
    try:
        with pytest.raises(ValueError):
            TrustedState(state, Signer.generate("another.deplog.example/log").verifier())
        other_key = Signer.generate(ORIGIN).verifier()
        two_logs = Policy.parse(
            f"log {local.signer.verifier().vkey()}\nlog {other_key.vkey()}\nquorum none\n"
        )
        with pytest.raises(ValueError):
            TrustedState(state, two_logs)
    finally:
        state.close()


# -- rule 1: a checkpoint is considered only if the trust policy accepts it -----------------


def test_a_checkpoint_signed_by_another_key_under_the_log_name_is_found_invalid(
    synced: TrustedState, local: LocalLog
) -> None:
    local.publish()
    impostor = Signer.generate(ORIGIN)
    with refused(synced, UnverifiedNoteError, "unverified_note"):
        synced.check_checkpoint(sign_tree(impostor, honest_leaves(local)))


def test_a_checkpoint_altered_after_signing_is_found_invalid(
    synced: TrustedState, local: LocalLog
) -> None:
    local.publish()
    published = local.log.published
    assert published is not None
    altered = published.note.replace(
        Checkpoint(ORIGIN, published.size, published.root).to_text().encode(),
        Checkpoint(ORIGIN, published.size, bytes(32)).to_text().encode(),
    )
    assert altered != published.note
    with refused(synced, InvalidNoteSignatureError, "bad_note_signature"):
        synced.check_checkpoint(altered)


def test_a_checkpoint_of_another_log_is_refused(synced: TrustedState, local: LocalLog) -> None:
    """Signed by its own key, with its own origin: not the log this state follows."""
    other = Signer.generate("another.deplog.example/log")
    with refused(synced, PolicyError, "log_not_in_policy"):
        synced.check_checkpoint(sign_tree(other, honest_leaves(local)))


def test_bytes_that_are_not_a_signed_note_are_refused(synced: TrustedState) -> None:
    with refused(synced, NoteFormatError, "malformed_note"):
        synced.check_checkpoint(b"<html>502 Bad Gateway</html>\n")


def test_without_witnesses_a_checkpoint_is_current_as_of_its_fetch(
    trusted: TrustedState, local: LocalLog
) -> None:
    """Under ``quorum none`` nothing vouches for freshness but the local clock."""
    candidate = trusted.check_checkpoint(published_note(local))
    assert candidate.witnessed_at is None
    before = datetime.now(UTC)
    assert before <= candidate.current_as_of() <= datetime.now(UTC)


@pytest.fixture
def witnesses() -> list[Signer]:
    return [cosigner(Signer.generate(f"w{i}.deplog.example")) for i in (1, 2)]


@pytest.fixture
def witnessed(tmp_path: Path, local: LocalLog, witnesses: list[Signer]) -> Iterator[TrustedState]:
    """A follower that takes a checkpoint only with both witnesses' cosignatures."""
    policy = Policy.k_of_n(local.signer.verifier(), [w.verifier() for w in witnesses], 2)
    state = LocalState(tmp_path / "witnessed.db", ORIGIN)
    yield TrustedState(state, policy)
    state.close()


def cosigned(note: bytes, *by: tuple[Signer, int]) -> bytes:
    """``note`` with a cosignature/v1 line by each witness, at its timestamp."""
    text, _ = parse_note(note)
    return add_signature_lines(note, *(cosign(text, witness, at) for witness, at in by))


def test_a_checkpoint_short_of_the_witness_quorum_is_found_invalid(
    witnessed: TrustedState, local: LocalLog, witnesses: list[Signer]
) -> None:
    now = int(time.time())
    with refused(witnessed, PolicyError, "quorum_not_met"):
        witnessed.check_checkpoint(cosigned(published_note(local), (witnesses[0], now)))


def test_a_witnessed_checkpoint_is_trusted_as_current_at_its_quorum_time(
    witnessed: TrustedState, local: LocalLog, witnesses: list[Signer]
) -> None:
    """Two of two: the quorum vouches up to the older of the two cosignatures, not to now."""
    now = int(time.time())
    note = cosigned(published_note(local), (witnesses[0], now - 300), (witnesses[1], now - 100))
    candidate = witnessed.check_checkpoint(note)
    assert candidate.witnessed_at == now - 300

    witnessed.check_consistency(candidate, ConsistencyProof(0, 1, ()))
    with witnessed.advance(candidate) as session:
        session.add(honest_leaves(local))
        session.finish()
    assert witnessed.state.trusted is not None
    assert witnessed.state.trusted.verified_at == datetime.fromtimestamp(now - 300, UTC)


def test_an_old_quorum_is_accepted_and_recorded_as_old(
    witnessed: TrustedState, local: LocalLog, witnesses: list[Signer]
) -> None:
    """Freshness is the guard's judgement, made from this time; the state only records it."""
    day_ago = int(time.time()) - 86_400
    note = cosigned(published_note(local), (witnesses[0], day_ago), (witnesses[1], day_ago))
    candidate = witnessed.check_checkpoint(note)
    assert candidate.current_as_of() == datetime.fromtimestamp(day_ago, UTC)


# -- rule 2: never below the trusted size; the same root at it; consistent above it --------


def test_a_validly_signed_smaller_checkpoint_is_a_rollback(
    synced: TrustedState, local: LocalLog
) -> None:
    older = store.checkpoint_at(local.log.conn, 1)
    assert older is not None
    with refused(synced, RollbackError, "rollback"):
        synced.check_checkpoint(older.note)


def test_a_second_root_for_the_trusted_size_is_a_fork_with_both_checkpoints_as_evidence(
    synced: TrustedState, local: LocalLog
) -> None:
    history = honest_leaves(local)
    other_history = [*history[:-1], notice_leaf(make_envelope(local.publisher, 3, message="x"))]
    fork = sign_tree(local.signer, other_history)
    with refused(synced, ForkError, "fork") as caught:
        synced.check_checkpoint(fork)

    evidence_file = caught.value.evidence
    assert evidence_file is not None
    evidence = read_evidence(evidence_file)
    assert evidence.verify(local.signer.verifier()) == "conflicting_roots"
    assert (evidence.first, evidence.second) == (published_note(local), fork)


def test_at_size_zero_only_the_empty_tree_is_accepted(
    trusted: TrustedState, local: LocalLog, tmp_path: Path
) -> None:
    """With nothing trusted yet there is nothing to fork from: a malformed claim, no evidence."""
    files = set(tmp_path.iterdir())
    claim = sign_checkpoint(Checkpoint(ORIGIN, 0, leaf_hash(b"not empty")), local.signer)
    with refused(trusted, CheckpointRejectedError, "bad_checkpoint"):
        trusted.check_checkpoint(claim)
    assert set(tmp_path.iterdir()) == files


def test_a_larger_tree_that_rewrites_the_trusted_one_is_a_suspicion_with_unproven_evidence(
    synced: TrustedState, local: LocalLog
) -> None:
    """The proof served is the rewritten tree's own, correct for it: it cannot reach the
    trusted root. The log never signed that proof, so nothing is proven (rule 2)."""
    rewritten = [
        *honest_leaves(local, 2),
        *(notice_leaf(make_envelope(local.publisher, seq, message="rewritten")) for seq in (2, 3)),
        notice_leaf(make_envelope(local.publisher, 4)),
    ]
    note = sign_tree(local.signer, rewritten)
    candidate = synced.check_checkpoint(note)
    served = proof_between(rewritten, TRUSTED_SIZE, len(rewritten))
    with refused(synced, SuspectedForkError, "suspected_fork") as caught:
        synced.check_consistency(candidate, served)

    assert caught.value.evidence is not None
    evidence = read_evidence(caught.value.evidence)
    assert evidence.verify(local.signer.verifier()) == "failing_proof"
    assert not evidence.proven
    assert (evidence.second, evidence.proof) == (note, served)


def test_a_consistency_proof_that_does_not_verify_is_a_suspicion_with_the_proof_as_evidence(
    synced: TrustedState, local: LocalLog
) -> None:
    """The tree is honest, the proof is not: anyone on the path could have corrupted it,
    so the follower keeps what it was served, unproven, and may retry."""
    local.publish()
    local.publish()
    candidate = synced.check_checkpoint(published_note(local))
    honest = proof_between(honest_leaves(local), TRUSTED_SIZE, TRUSTED_SIZE + 2)
    broken = ConsistencyProof(honest.old, honest.new, (bytes(32), *honest.hashes[1:]))
    with refused(synced, SuspectedForkError, "suspected_fork") as caught:
        synced.check_consistency(candidate, broken)

    assert caught.value.evidence is not None
    evidence = read_evidence(caught.value.evidence)
    assert (evidence.proof, evidence.proven) == (broken, False)
    synced.check_consistency(candidate, honest)  # the honest proof, asked again, verifies


def test_corrupted_proofs_between_one_pair_of_checkpoints_keep_one_evidence_file(
    synced: TrustedState, local: LocalLog
) -> None:
    """Retried syncs meet ever other corrupted proofs: the evidence does not pile up, since
    only checkpoints the log signed can make a new file."""
    local.publish()
    candidate = synced.check_checkpoint(published_note(local))
    honest = proof_between(honest_leaves(local), TRUSTED_SIZE, TRUSTED_SIZE + 1)
    files = []
    for corrupt in range(3):
        broken = ConsistencyProof(
            honest.old, honest.new, (bytes([corrupt]) * 32, *honest.hashes[1:])
        )
        with refused(synced, SuspectedForkError, "suspected_fork") as caught:
            synced.check_consistency(candidate, broken)
        files.append(caught.value.evidence)
    assert files[0].name.startswith("suspected-fork-")
    assert files == [files[0]] * 3
    assert read_evidence(files[0]).proof is not None


@pytest.mark.parametrize(
    ("old", "new"), [(1, TRUSTED_SIZE + 2), (TRUSTED_SIZE, TRUSTED_SIZE + 1)], ids=["old", "new"]
)
def test_a_proof_between_other_sizes_than_asked_is_found_invalid(
    synced: TrustedState, local: LocalLog, old: int, new: int
) -> None:
    """Checked before the hashes: a valid proof of another question is no answer."""
    local.publish()
    local.publish()
    candidate = synced.check_checkpoint(published_note(local))
    with refused(synced, ProofError, "proof_size_mismatch"):
        synced.check_consistency(candidate, proof_between(honest_leaves(local), old, new))


def test_the_trusted_checkpoint_seen_again_only_renews_how_current_it_is(
    synced: TrustedState, local: LocalLog
) -> None:
    """The same tree with another signature line (here an unknown witness's): the state
    keeps the newest note and its time, and nothing else moves."""
    before = held(synced)
    witness = cosigner(Signer.generate("w9.deplog.example"))
    again = cosigned(published_note(local), (witness, int(time.time())))
    candidate = synced.check_checkpoint(again)
    synced.refresh(candidate)

    after = held(synced)
    assert after.note == again
    assert after.verified_at is not None and before.verified_at is not None
    assert after.verified_at >= before.verified_at
    assert replace(after, note=None, verified_at=None) == replace(
        before, note=None, verified_at=None
    )


def test_refresh_takes_only_the_trusted_checkpoint(synced: TrustedState, local: LocalLog) -> None:
    local.publish()
    candidate = synced.check_checkpoint(published_note(local))
    before = held(synced)
    with pytest.raises(ValueError):
        synced.refresh(candidate)
    assert held(synced) == before


# -- rule 3: each new entry passes the authority's admission rules, in log order ------------


@pytest.fixture
def extended(synced: TrustedState, local: LocalLog) -> list[bytes]:
    """The trusted leaves and one more honest notice (sequence 4), to append lies after."""
    return [*honest_leaves(local), notice_leaf(make_envelope(local.publisher, 4))]


def test_an_entry_that_is_not_canonical_is_found_invalid_at_its_index(
    synced: TrustedState, local: LocalLog, extended: list[bytes]
) -> None:
    spaced = notice_leaf(make_envelope(local.publisher, 5)).replace(b'{"', b'{ "', 1)
    leaves = [*extended, spaced]
    (found,) = judged_invalid(synced, local.signer, leaves)
    assert (found.code, found.index, found.cause) == (
        "bad_leaf",
        TRUSTED_SIZE + 1,
        "noncanonical_entry",
    )


def test_a_publisher_entry_not_signed_by_the_log_key_is_found_invalid(
    synced: TrustedState, local: LocalLog, extended: list[bytes]
) -> None:
    mallory = Signer.generate("mallory")
    forged = publisher_leaf(
        register_statement("mallory", ("org.mallory",), (mallory,)), Signer.generate(ORIGIN)
    )
    leaves = [*extended, forged]
    (found,) = judged_invalid(synced, local.signer, leaves)
    assert (found.code, found.index, found.cause) == (
        "bad_publisher_entry",
        TRUSTED_SIZE + 1,
        "bad_authority_signature",
    )


def test_a_publisher_entry_that_is_no_valid_registry_change_is_found_invalid(
    synced: TrustedState, local: LocalLog, extended: list[bytes]
) -> None:
    """Signed by the log key, but acme is registered already."""
    again = publisher_leaf(
        register_statement("acme", ("org.acme",), (local.publisher,)), local.signer
    )
    leaves = [*extended, again]
    (found,) = judged_invalid(synced, local.signer, leaves)
    assert (found.code, found.index, found.cause) == (
        "bad_publisher_entry",
        TRUSTED_SIZE + 1,
        "publisher_exists",
    )


@pytest.mark.parametrize(
    "cause", ["bad_signature", "unknown_key", "namespace_not_authorized", "unknown_publisher"]
)
def test_a_notice_its_publisher_could_not_have_signed_is_found_invalid(
    synced: TrustedState, local: LocalLog, extended: list[bytes], cause: str
) -> None:
    acme = local.publisher
    lies = {
        "bad_signature": lambda: change_one_byte_of_message(
            notice_leaf(make_envelope(acme, 5, message="signed")), "signed"
        ),
        "unknown_key": lambda: notice_leaf(make_envelope(Signer.generate("acme"), 5)),
        "namespace_not_authorized": lambda: notice_leaf(
            make_envelope(acme, 5, tool="tool:org.other/search")
        ),
        "unknown_publisher": lambda: notice_leaf(make_envelope(Signer.generate("ghost"), 1)),
    }
    leaves = [*extended, lies[cause]()]
    (found,) = judged_invalid(synced, local.signer, leaves)
    assert (found.code, found.index, found.cause) == (
        "unauthorized_notice",
        TRUSTED_SIZE + 1,
        cause,
    )


def test_a_notice_that_reuses_its_publishers_sequence_is_found_invalid(
    synced: TrustedState, local: LocalLog, extended: list[bytes]
) -> None:
    """Validly signed, but sequence 4 was used just before, by other content."""
    reused = notice_leaf(make_envelope(local.publisher, 4, message="again"))
    leaves = [*extended, reused]
    (found,) = judged_invalid(synced, local.signer, leaves)
    assert (found.code, found.index, found.cause) == (
        "replayed_notice",
        TRUSTED_SIZE + 1,
        "sequence_reused",
    )


@pytest.mark.parametrize("replayed", [1, TRUSTED_SIZE], ids=["trusted_notice", "new_notice"])
def test_a_replayed_envelope_is_found_invalid(
    synced: TrustedState, local: LocalLog, extended: list[bytes], replayed: int
) -> None:
    """An envelope the follower already trusted, or one earlier in the same advance,
    logged again: a log may hold an envelope once."""
    leaves = [*extended, extended[replayed]]
    (found,) = judged_invalid(synced, local.signer, leaves)
    assert (found.code, found.index, found.cause) == (
        "replayed_notice",
        TRUSTED_SIZE + 1,
        "sequence_reused",
    )


def test_a_state_file_from_before_the_sequence_index_is_indexed_on_open(
    synced: TrustedState, local: LocalLog
) -> None:
    """State written under the increasing rule has no ``sequences`` table: opening it
    builds one from the stored notices, so their numbers still count as used."""
    path = synced.state.path
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("DROP TABLE sequences")
    LocalState(path, ORIGIN).close()
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        rows = conn.execute("SELECT publisher, sequence FROM sequences").fetchall()
    assert sorted(rows) == [("acme", 1), ("acme", 2), ("acme", 3)]


def test_a_lower_unused_sequence_after_a_higher_one_is_accepted(
    synced: TrustedState, local: LocalLog, extended: list[bytes]
) -> None:
    """Sequences are unique, not ordered: 9 then 7 is a valid log."""
    late = [notice_leaf(make_envelope(local.publisher, s)) for s in (9, 7)]
    leaves = [*extended, *late]
    check_entries(synced, local.signer, leaves)


@pytest.mark.parametrize(
    ("target", "why"),
    [(0, "a publisher entry"), (TRUSTED_SIZE + 1, "itself"), (TRUSTED_SIZE + 9, "the future")],
)
def test_a_withdraw_of_anything_but_an_earlier_notice_of_its_own_is_found_invalid(
    synced: TrustedState, local: LocalLog, extended: list[bytes], target: int, why: str
) -> None:
    withdraw = make_envelope(local.publisher, 5, action="withdraw", withdraws=target, affected=None)
    leaves = [*extended, notice_leaf(withdraw)]
    (found,) = judged_invalid(synced, local.signer, leaves)
    assert (found.code, found.index) == ("invalid_withdraw", TRUSTED_SIZE + 1)


def test_every_invalid_entry_is_found_in_log_order_and_the_advance_goes_on(
    synced: TrustedState, local: LocalLog, extended: list[bytes]
) -> None:
    """Entries are judged one by one in log order; a bad one stops nothing, and an honest
    notice after them is verified and folded."""
    leaves = [
        *extended,
        b"not an entry",
        notice_leaf(make_envelope(Signer.generate("acme"), 6)),
        notice_leaf(make_envelope(local.publisher, 7, tool="tool:org.acme/fetch")),
    ]
    found = judged_invalid(synced, local.signer, leaves)
    assert [(e.code, e.index, e.tool_id) for e in found] == [
        ("bad_leaf", TRUSTED_SIZE + 1, None),
        ("unauthorized_notice", TRUSTED_SIZE + 2, TOOL),
    ]
    assert synced.state.notice_at(TRUSTED_SIZE + 3) is not None


def test_an_invalid_notice_makes_its_tool_unknown_and_no_other(
    synced: TrustedState, local: LocalLog, extended: list[bytes]
) -> None:
    """Fail closed for that tool only: what the entry said cannot be known, so every
    version of its tool is ``unknown`` (with the entry named); other tools are as before."""
    forged = notice_leaf(make_envelope(Signer.generate("acme"), 6, tool="tool:org.acme/fetch"))
    (found,) = judged_invalid(synced, local.signer, [*extended, forged])
    assert found.tool_id == "tool:org.acme/fetch"
    fetch, _ = synced.state.tool_status("tool:org.acme/fetch")
    status = fetch.lookup("tool:org.acme/fetch", "9.9.9", datetime.now(UTC))
    assert (status.status, status.invalid) == ("unknown", (TRUSTED_SIZE + 1,))
    search, _ = synced.state.tool_status(TOOL)
    assert search.lookup(TOOL, "1.0.0", datetime.now(UTC)).status == "deprecated"


@pytest.mark.parametrize(
    ("leaf", "tool_id"),
    [
        (b'{"notice":{"tool_id":"tool:org.acme/fetch"},"type":"notice"}', "tool:org.acme/fetch"),
        (b'{"type":"notice","notice":{"tool_id":"tool:org.acme/fetch","x":1.5}}', None),
        (b'{"notice":{"tool_id":"tool:ORG/x"},"type":"notice"}', None),
        (b'{"notice":{"tool_id":"tool:org.acme/a"},"type":"publisher"}', None),
        (b'{"notice":{"tool_id":"tool:org.acme/a","tool_id":"tool:org.acme/b"}}', None),
        (b"\xff", None),
    ],
    ids=["readable", "a float", "not the grammar", "not a notice", "duplicate", "not utf-8"],
)
def test_a_leaf_that_does_not_decode_names_its_tool_only_when_strict_json_reads_it(
    synced: TrustedState, local: LocalLog, extended: list[bytes], leaf: bytes, tool_id: str | None
) -> None:
    (found,) = judged_invalid(synced, local.signer, [*extended, leaf])
    assert (found.code, found.tool_id) == ("bad_leaf", tool_id)


def test_entries_are_checked_against_the_earlier_entries_of_the_same_advance(
    synced: TrustedState, local: LocalLog, extended: list[bytes]
) -> None:
    """A publisher registered, then its notice; a notice, then its withdraw: all in one
    advance, each allowed only by an entry before it."""
    beta = Signer.generate("beta")
    withdraw = make_envelope(
        local.publisher, 5, action="withdraw", withdraws=TRUSTED_SIZE, affected=None
    )
    leaves = [
        *extended,
        publisher_leaf(register_statement("beta", ("org.beta",), (beta,)), local.signer),
        notice_leaf(make_envelope(beta, 1)),
        notice_leaf(withdraw),
    ]
    candidate = candidate_for(synced, sign_tree(local.signer, leaves), leaves)
    with synced.advance(candidate) as session:
        session.add(leaves[TRUSTED_SIZE:])
        advanced = session.finish()

    assert (advanced.old_size, advanced.new_size) == (TRUSTED_SIZE, len(leaves))
    synced.state.registry.authorize(make_envelope(beta, 2))  # beta is registered now
    assert synced.state.notice_at(len(leaves) - 1) is not None


# -- rule 4: the entries make exactly the checkpoint's tree ----------------------------------


@pytest.fixture
def grown(synced: TrustedState, local: LocalLog) -> Candidate:
    """The honest log two notices past the trusted size, checked up to rule 2."""
    local.publish()
    local.publish()
    return candidate_for(synced, published_note(local), honest_leaves(local))


def test_fewer_entries_than_the_checkpoint_counts_are_refused(
    synced: TrustedState, local: LocalLog, grown: Candidate
) -> None:
    with (
        refused(synced, TreeMismatchError, "missing_entries") as caught,
        synced.advance(grown) as session,
    ):
        session.add(honest_leaves(local)[TRUSTED_SIZE:-1])
        session.finish()
    assert caught.value.index == TRUSTED_SIZE + 1


def test_more_entries_than_the_checkpoint_counts_are_refused(
    synced: TrustedState, local: LocalLog, grown: Candidate
) -> None:
    one_more = notice_leaf(make_envelope(local.publisher, 6))
    with (
        refused(synced, TreeMismatchError, "too_many_entries") as caught,
        synced.advance(grown) as session,
    ):
        session.add([*honest_leaves(local)[TRUSTED_SIZE:], one_more])
    assert caught.value.index == TRUSTED_SIZE + 2


def test_valid_entries_that_make_another_tree_are_refused(
    synced: TrustedState, local: LocalLog, grown: Candidate
) -> None:
    """Each entry passes every admission rule, but the last is not the one the checkpoint
    committed to: only the root gives it away."""
    other_last = notice_leaf(make_envelope(local.publisher, 5, message="not the logged one"))
    with (
        refused(synced, TreeMismatchError, "entries_root_mismatch") as caught,
        synced.advance(grown) as session,
    ):
        session.add([*honest_leaves(local)[TRUSTED_SIZE:-1], other_last])
        session.finish()
    assert caught.value.index is None  # a root covers every leaf: it points at none


# -- rule 5: all of it is committed together, or none of it -----------------------------------


def test_a_finished_advance_commits_checkpoint_tree_registry_and_notices_together(
    synced: TrustedState, local: LocalLog
) -> None:
    beta = Signer.generate("beta")
    local.register(beta, "org.beta")
    local.publish(action="revoke", reasons=["other"])
    candidate = candidate_for(synced, published_note(local), honest_leaves(local))
    with synced.advance(candidate) as session:
        session.add(honest_leaves(local)[TRUSTED_SIZE:])
        advanced = session.finish()

    now = held(synced)  # and the file holds the same
    assert (now.size, now.root, now.note) == (
        candidate.checkpoint.size,
        candidate.checkpoint.root_hash,
        candidate.note,
    )
    synced.state.registry.authorize(make_envelope(beta, 1))  # beta is registered now
    assert [idx for idx, _, _ in now.notices] == [1, 2, 3, TRUSTED_SIZE + 1]
    assert advanced.tools == frozenset({TOOL})


def test_an_advance_left_without_finishing_commits_nothing(
    synced: TrustedState, local: LocalLog, grown: Candidate
) -> None:
    before = held(synced)
    with synced.advance(grown) as session:
        session.add(honest_leaves(local)[TRUSTED_SIZE:])
    assert held(synced) == before


def test_an_error_of_the_caller_during_an_advance_rolls_it_back(
    synced: TrustedState, local: LocalLog, grown: Candidate
) -> None:
    before = held(synced)
    with pytest.raises(TimeoutError), synced.advance(grown) as session:
        session.add(honest_leaves(local)[TRUSTED_SIZE : TRUSTED_SIZE + 1])
        raise TimeoutError  # the next page never came
    assert held(synced) == before


def test_after_a_refused_advance_the_honest_one_goes_through(
    synced: TrustedState, local: LocalLog, grown: Candidate
) -> None:
    """What the refused advance had staged is gone, so nothing collides with the honest one."""
    leaves = honest_leaves(local)
    bad_last = change_one_byte_of_message(
        notice_leaf(make_envelope(local.publisher, 5, message="signed")), "signed"
    )
    with pytest.raises(TreeMismatchError), synced.advance(grown) as session:
        session.add(leaves[TRUSTED_SIZE:-1])
        session.add([bad_last])
        session.finish()  # not the signed tree's entries

    with synced.advance(grown) as session:
        session.add(leaves[TRUSTED_SIZE:-1])
        session.add(leaves[-1:])
        session.finish()
    assert (synced.state.size, synced.state.root) == (
        grown.checkpoint.size,
        grown.checkpoint.root_hash,
    )
    assert synced.state.notice_at(TRUSTED_SIZE + 1) is not None


def test_the_time_recorded_is_when_the_checkpoint_was_current_or_the_one_given(
    synced: TrustedState, local: LocalLog, grown: Candidate
) -> None:
    """``finish(now)`` lets a caller record the time it fetched the checkpoint."""
    fetched = datetime.now(UTC) - timedelta(seconds=30)
    with synced.advance(grown) as session:
        session.add(honest_leaves(local)[TRUSTED_SIZE:])
        session.finish(fetched)
    assert synced.state.trusted is not None
    assert synced.state.trusted.verified_at == fetched
