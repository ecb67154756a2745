"""The tlog-witness core against real SQLite files, real keys and an independent log.

``MinimalLog`` is a log written from the specs alone (RFC 9162 hashing and
consistency proofs with hashlib, the signed note assembled by hand and signed
with raw pynacl), so these tests show interop with any C2SP log rather than
agreement between two halves of deplog. Cosignatures are checked the same way:
raw pynacl over the tlog-cosignature ``cosignature/v1`` message bytes.
Every refusal is checked to leave the witness's record unchanged, and to carry
the code whose status (``authority.http.status``) is the one tlog-witness gives.
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import nacl.signing
import pytest

from deplog.authority.http.status import http_status
from deplog.authority.witness.core import (
    MAX_BODY_SIZE,
    LogConfigError,
    SizeConflictError,
    Witness,
    WitnessState,
    parse_logs_file,
)
from deplog.client.errors import DeplogError
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import SIG_TYPE_COSIGNATURE_V1, Signer
from tests.conftest import BACKENDS

NOW = 1_700_000_000
ORIGIN = "example.com/minimal-log"
WITNESS_NAME = "witness.test/w1"


# A minimal independent log, straight from the specs.


def b64(raw: bytes) -> bytes:
    return base64.b64encode(raw)


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def split_point(n: int) -> int:
    """The largest power of two smaller than n (RFC 9162 section 2.1.1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(hashes: list[bytes]) -> bytes:
    if not hashes:
        return hashlib.sha256(b"").digest()
    if len(hashes) == 1:
        return hashes[0]
    k = split_point(len(hashes))
    return node_hash(mth(hashes[:k]), mth(hashes[k:]))


def subproof(m: int, hashes: list[bytes], complete: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b) of RFC 9162 section 2.1.4.1."""
    n = len(hashes)
    if m == n:
        return [] if complete else [mth(hashes)]
    k = split_point(n)
    if m <= k:
        return [*subproof(m, hashes[:k], complete), mth(hashes[k:])]
    return [*subproof(m - k, hashes[k:], False), mth(hashes[:k])]


def signature_line(name: str, key_id: bytes, signature: bytes) -> bytes:
    return "\u2014 ".encode() + name.encode() + b" " + b64(key_id + signature) + b"\n"


class MinimalLog:
    """An Ed25519 C2SP log of synthetic leaves; ``salt`` makes a different tree (a fork)."""

    def __init__(
        self, origin: str = ORIGIN, key: nacl.signing.SigningKey | None = None, salt: str = ""
    ) -> None:
        self.origin = origin
        self.key = key or nacl.signing.SigningKey.generate()
        self.salt = salt
        self.leaves: list[bytes] = []
        public = bytes(self.key.verify_key)
        self.key_id = hashlib.sha256(origin.encode() + b"\n\x01" + public).digest()[:4]
        key_blob = b64(b"\x01" + public).decode()
        self.vkey = f"{origin}+{self.key_id.hex()}+{key_blob}"

    def grow(self, size: int) -> None:
        while len(self.leaves) < size:
            self.leaves.append(leaf_hash(f"{self.salt}entry {len(self.leaves)}".encode()))

    def root(self, size: int) -> bytes:
        self.grow(size)
        return mth(self.leaves[:size])

    def proof(self, old: int, new: int) -> list[bytes]:
        self.grow(new)
        return [] if old in (0, new) else subproof(old, self.leaves[:new], True)

    def text(self, size: int, extensions: tuple[str, ...] = ()) -> bytes:
        lines = [self.origin, str(size), b64(self.root(size)).decode(), *extensions]
        return "".join(line + "\n" for line in lines).encode()

    def sign(self, text: bytes, *others: nacl.signing.SigningKey) -> bytes:
        """The signed note: text, blank line, this log's signature line, then ``others``."""
        lines = signature_line(self.origin, self.key_id, self.key.sign(text).signature)
        for other in others:
            public = bytes(other.verify_key)
            other_id = hashlib.sha256(self.origin.encode() + b"\n\x01" + public).digest()[:4]
            lines += signature_line(self.origin, other_id, other.sign(text).signature)
        return text + b"\n" + lines

    def checkpoint(self, size: int) -> bytes:
        return self.sign(self.text(size))

    def request(self, old: int, size: int) -> bytes:
        return add_checkpoint_body(old, self.proof(old, size), self.checkpoint(size))


def add_checkpoint_body(old: int, proof: list[bytes], note: bytes) -> bytes:
    """tlog-witness: ``old N``, one base64 hash per line, a blank line, the checkpoint."""
    return b"old %d\n" % old + b"".join(b64(h) + b"\n" for h in proof) + b"\n" + note


def verify_cosignature(line: bytes, note: bytes, name: str, public: bytes) -> int:
    """Check a one-line add-checkpoint answer with raw pynacl; returns its timestamp."""
    prefix = "\u2014 ".encode() + name.encode() + b" "
    assert line.startswith(prefix) and line.endswith(b"\n")
    assert line.count(b"\n") == 1
    blob = base64.b64decode(line[len(prefix) : -1], validate=True)
    assert blob[:4] == hashlib.sha256(name.encode() + b"\n\x04" + public).digest()[:4]
    assert len(blob) == 4 + 8 + 64
    timestamp = int.from_bytes(blob[4:12], "big")
    text = note[: note.rindex(b"\n\n") + 1]
    message = b"cosignature/v1\ntime " + str(timestamp).encode() + b"\n" + text
    nacl.signing.VerifyKey(public).verify(message, blob[12:])
    return timestamp


# Fixtures


@pytest.fixture
def witness_key() -> Signer:
    return Signer.generate(WITNESS_NAME, SIG_TYPE_COSIGNATURE_V1)


@pytest.fixture(params=BACKENDS)
def open_state(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], WitnessState]:
    """Opens the witness's state: a SQLite file, or the ``embedded_witness`` schema of a
    fresh PostgreSQL database (the embedded witness of a log on PostgreSQL); the same
    rules hold on both, so every test here runs on both."""
    if request.param == "sqlite":
        return lambda: WitnessState(tmp_path / "witness.db")
    from deplog.authority.storage.postgres import PostgresDatabase

    url: str = request.getfixturevalue("pg_url")
    return lambda: WitnessState.over(PostgresDatabase(url).embedded_witness_store())


@pytest.fixture
def state(open_state: Callable[[], WitnessState]) -> Iterator[WitnessState]:
    state = open_state()
    yield state
    state.close()


@pytest.fixture
def log() -> MinimalLog:
    return MinimalLog()


@pytest.fixture
def witness(state: WitnessState, witness_key: Signer, log: MinimalLog) -> Witness:
    state.add_log(log.vkey, NOW)
    return Witness(state, witness_key)


@pytest.fixture
def witnessed(witness: Witness, log: MinimalLog) -> Witness:
    """A witness that has cosigned the log at size 5."""
    witness.add_checkpoint(log.request(0, 5), NOW)
    return witness


def stored(state: WitnessState, origin: str = ORIGIN) -> tuple[int, bytes] | None:
    recorded = state.recorded(origin)
    return None if recorded is None else (recorded.size, recorded.root)


def refusal(witness: Witness, body: bytes, now: int = NOW) -> DeplogError:
    """The error the witness refuses ``body`` with."""
    with pytest.raises(DeplogError) as caught:
        witness.add_checkpoint(body, now)
    return caught.value


def assert_refused(err: DeplogError, status: int, code: str) -> None:
    """The refusal's code, and the tlog-witness status a server answers it with."""
    assert (err.code, http_status(err.code)) == (code, status)


def size_conflict(witness: Witness, body: bytes) -> int:
    """The recorded size an old-size conflict tells the client (tlog-witness: 409)."""
    with pytest.raises(SizeConflictError) as caught:
        witness.add_checkpoint(body, NOW)
    assert http_status(caught.value.code) == 409
    return caught.value.recorded_size


def cosigned_at(line: bytes, note: bytes, witness_key: Signer) -> int:
    return verify_cosignature(line, note, WITNESS_NAME, witness_key.public_key)


# Accepted checkpoints


def test_first_checkpoint_from_old_zero_is_cosigned(
    witness: Witness, log: MinimalLog, state: WitnessState, witness_key: Signer
) -> None:
    line = witness.add_checkpoint(log.request(0, 5), NOW)
    assert cosigned_at(line, log.checkpoint(5), witness_key) == NOW
    assert stored(state) == (5, log.root(5))


def test_the_last_line_is_given_again_from_the_record_alone(
    witness: Witness, log: MinimalLog
) -> None:
    line = witness.add_checkpoint(log.request(0, 5), NOW)
    log.grow(8)
    assert witness.cosigned_again(log.checkpoint(5)) == line
    assert witness.cosigned_again(log.checkpoint(8)) is None  # never cosigned


@pytest.mark.parametrize(("old", "new"), [(5, 6), (5, 8), (5, 13), (5, 64)])
def test_growth_with_a_valid_consistency_proof_is_cosigned(
    witnessed: Witness,
    log: MinimalLog,
    state: WitnessState,
    witness_key: Signer,
    old: int,
    new: int,
) -> None:
    line = witnessed.add_checkpoint(log.request(old, new), NOW + 1)
    assert cosigned_at(line, log.checkpoint(new), witness_key) == NOW + 1
    assert stored(state) == (new, log.root(new))


def test_growth_from_a_power_of_two_size_is_cosigned(
    witness: Witness, log: MinimalLog, state: WitnessState
) -> None:
    witness.add_checkpoint(log.request(0, 4), NOW)
    witness.add_checkpoint(log.request(4, 11), NOW)
    assert stored(state) == (11, log.root(11))


def test_refresh_at_the_same_size_gives_a_newer_timestamp(
    witnessed: Witness, log: MinimalLog, state: WitnessState, witness_key: Signer
) -> None:
    line = witnessed.add_checkpoint(log.request(5, 5), NOW + 60)
    assert cosigned_at(line, log.checkpoint(5), witness_key) == NOW + 60
    assert state.recorded(ORIGIN) is not None
    assert state.recorded(ORIGIN).updated_at == NOW + 60  # type: ignore[union-attr]


def test_cosignature_times_never_go_backwards_when_the_clock_does(
    witnessed: Witness, log: MinimalLog, witness_key: Signer
) -> None:
    line = witnessed.add_checkpoint(log.request(5, 9), NOW - 3600)
    assert cosigned_at(line, log.checkpoint(9), witness_key) == NOW


def test_cosignature_covers_checkpoint_extension_lines(
    witness: Witness, log: MinimalLog, witness_key: Signer
) -> None:
    note = log.sign(log.text(3, ("extension line",)))
    line = witness.add_checkpoint(add_checkpoint_body(0, [], note), NOW)
    assert cosigned_at(line, note, witness_key) == NOW


def test_signatures_from_unknown_keys_are_ignored(
    witness: Witness, log: MinimalLog, witness_key: Signer
) -> None:
    note = log.sign(log.text(3), nacl.signing.SigningKey.generate())
    line = witness.add_checkpoint(add_checkpoint_body(0, [], note), NOW)
    assert cosigned_at(line, note, witness_key) == NOW


def test_empty_tree_checkpoint_is_cosigned(
    witness: Witness, log: MinimalLog, state: WitnessState
) -> None:
    witness.add_checkpoint(log.request(0, 0), NOW)
    assert stored(state) == (0, hashlib.sha256(b"").digest())


def test_record_survives_reopening_the_database(
    witnessed: Witness,
    log: MinimalLog,
    open_state: Callable[[], WitnessState],
    witness_key: Signer,
) -> None:
    witnessed.state.close()
    reopened = open_state()
    try:
        assert stored(reopened) == (5, log.root(5))
        assert size_conflict(Witness(reopened, witness_key), log.request(0, 3)) == 5
    finally:
        reopened.close()


# Refusals, in the spec's order; each leaves the record as it was.


def test_body_over_the_size_limit_is_413(
    witnessed: Witness, log: MinimalLog, state: WitnessState
) -> None:
    body = log.request(5, 8)
    body += b"x" * (MAX_BODY_SIZE + 1 - len(body))
    assert_refused(refusal(witnessed, body), 413, "too_large")
    assert stored(state) == (5, log.root(5))


def _malformed_bodies(log: MinimalLog) -> dict[str, bytes]:
    note = log.checkpoint(8)
    proof = log.proof(5, 8)
    good_proof = b"".join(b64(h) + b"\n" for h in proof)
    return {
        "no old line": note,
        "leading zero": b"old 05\n" + good_proof + b"\n" + note,
        "zero with leading zero": b"old 00\n\n" + log.checkpoint(3),
        "negative": b"old -5\n" + good_proof + b"\n" + note,
        "plus sign": b"old +5\n" + good_proof + b"\n" + note,
        "tab separator": b"old\t5\n" + good_proof + b"\n" + note,
        "carriage returns": b"old 5\r\n" + good_proof + b"\r\n" + note,
        "64 proof lines": add_checkpoint_body(5, [proof[0]] * 64, note),
        "31-byte hash": b"old 5\n" + b64(b"\x00" * 31) + b"\n\n" + note,
        "non-canonical base64": b"old 5\n" + b64(proof[0]).rstrip(b"=") + b"\n\n" + note,
        "no blank line": b"old 5\n" + good_proof + note,
        "not a note": b"old 5\n\nhello\n",
        "empty note": b"old 5\n\n",
        "signed text not a checkpoint": add_checkpoint_body(
            5, [], log.sign(f"{ORIGIN}\nseven\n{b64(log.root(7)).decode()}\n".encode())
        ),
        "size too large": add_checkpoint_body(
            5, [], log.sign(f"{ORIGIN}\n{1 << 63}\n{b64(log.root(7)).decode()}\n".encode())
        ),
    }


@pytest.mark.parametrize("case", list(_malformed_bodies(MinimalLog())))
def test_malformed_body_is_400(
    witnessed: Witness, log: MinimalLog, state: WitnessState, case: str
) -> None:
    assert_refused(refusal(witnessed, _malformed_bodies(log)[case]), 400, "malformed_request")
    assert stored(state) == (5, log.root(5))


def test_unknown_origin_is_404(witnessed: Witness, state: WitnessState, log: MinimalLog) -> None:
    other = MinimalLog("other.example/log")
    assert_refused(refusal(witnessed, other.request(0, 3)), 404, "unknown_log")
    assert stored(state, "other.example/log") is None
    assert stored(state) == (5, log.root(5))


def test_bad_signature_from_the_trusted_key_is_403(
    witnessed: Witness, log: MinimalLog, state: WitnessState
) -> None:
    note = bytearray(log.checkpoint(8))
    signature = note.rindex(b" ") + 10
    note[signature] = ord("A") if note[signature] != ord("A") else ord("B")
    body = add_checkpoint_body(5, log.proof(5, 8), bytes(note))
    assert_refused(refusal(witnessed, body), 403, "untrusted_checkpoint")
    assert stored(state) == (5, log.root(5))


def test_checkpoint_signed_only_by_an_unknown_key_is_403(
    witnessed: Witness, log: MinimalLog, state: WitnessState
) -> None:
    impostor = MinimalLog(ORIGIN)  # same origin, another key
    assert_refused(refusal(witnessed, impostor.request(5, 8)), 403, "untrusted_checkpoint")
    assert stored(state) == (5, log.root(5))


def test_old_size_above_the_checkpoint_size_is_400(
    witnessed: Witness, log: MinimalLog, state: WitnessState
) -> None:
    body = add_checkpoint_body(5, [], log.checkpoint(3))
    assert_refused(refusal(witnessed, body), 400, "old_size_too_large")
    assert stored(state) == (5, log.root(5))


def test_old_size_other_than_the_recorded_one_is_409_with_the_recorded_size(
    witnessed: Witness, log: MinimalLog, state: WitnessState
) -> None:
    assert size_conflict(witnessed, log.request(3, 8)) == 5
    assert stored(state) == (5, log.root(5))


def test_log_never_cosigned_reports_recorded_size_zero(
    witness: Witness, log: MinimalLog, state: WitnessState
) -> None:
    assert size_conflict(witness, log.request(3, 8)) == 0
    assert stored(state) is None


def test_rollback_to_a_smaller_checkpoint_is_refused(
    witnessed: Witness, log: MinimalLog, state: WitnessState
) -> None:
    assert size_conflict(witnessed, log.request(3, 3)) == 5
    assert size_conflict(witnessed, log.request(0, 3)) == 5
    too_large = refusal(witnessed, add_checkpoint_body(5, [], log.checkpoint(3)))
    assert_refused(too_large, 400, "old_size_too_large")
    assert stored(state) == (5, log.root(5))


def test_bad_consistency_proof_is_422(
    witnessed: Witness, log: MinimalLog, state: WitnessState
) -> None:
    proof = log.proof(5, 8)
    proof[-1] = hashlib.sha256(b"not a node").digest()
    body = add_checkpoint_body(5, proof, log.checkpoint(8))
    assert_refused(refusal(witnessed, body), 422, "bad_consistency_proof")
    assert stored(state) == (5, log.root(5))


def test_proof_from_old_size_zero_must_be_empty(
    witness: Witness, log: MinimalLog, state: WitnessState
) -> None:
    body = add_checkpoint_body(0, [log.root(1)], log.checkpoint(5))
    assert_refused(refusal(witness, body), 422, "bad_consistency_proof")
    assert stored(state) is None


def test_proof_between_equal_sizes_must_be_empty(
    witnessed: Witness, log: MinimalLog, state: WitnessState
) -> None:
    body = add_checkpoint_body(5, [log.root(5)], log.checkpoint(5))
    assert_refused(refusal(witnessed, body), 422, "bad_consistency_proof")
    assert stored(state) == (5, log.root(5))


def test_fork_at_the_recorded_size_is_409(
    witnessed: Witness, log: MinimalLog, state: WitnessState
) -> None:
    fork = MinimalLog(ORIGIN, log.key, salt="fork ")
    assert_refused(refusal(witnessed, fork.request(5, 5)), 409, "root_mismatch")
    assert stored(state) == (5, log.root(5))


def test_fork_at_a_larger_size_is_422(
    witnessed: Witness, log: MinimalLog, state: WitnessState
) -> None:
    fork = MinimalLog(ORIGIN, log.key, salt="fork ")
    assert_refused(refusal(witnessed, fork.request(5, 8)), 422, "bad_consistency_proof")
    assert stored(state) == (5, log.root(5))


def test_refused_validly_signed_forks_are_kept_as_evidence(
    witnessed: Witness, log: MinimalLog, state: WitnessState
) -> None:
    fork = MinimalLog(ORIGIN, log.key, salt="fork ")
    refusal(witnessed, fork.request(5, 5), NOW)
    refusal(witnessed, fork.request(5, 8), NOW + 1)
    refusal(witnessed, log.request(3, 8), NOW + 2)  # a stale client, not misbehaviour
    kept = state.evidence(ORIGIN)
    assert [(e.reason, e.received_at, e.body) for e in kept] == [
        ("root_mismatch", NOW, fork.request(5, 5)),
        ("bad_consistency_proof", NOW + 1, fork.request(5, 8)),
    ]


# The race the spec warns about: check, then persist, must be atomic.


def _run(witness: Witness, body: bytes, results: dict[str, bytes | DeplogError], key: str) -> None:
    try:
        results[key] = witness.add_checkpoint(body, NOW)
    except DeplogError as err:
        results[key] = err


@pytest.mark.parametrize("recorded", [0, 3])
def test_stalled_request_cannot_roll_back_a_larger_checkpoint_committed_meanwhile(
    witness: Witness, log: MinimalLog, state: WitnessState, recorded: int
) -> None:
    if recorded:
        witness.add_checkpoint(log.request(0, recorded), NOW)
    stalled, release = threading.Event(), threading.Event()

    def stall_size_5(checkpoint: Checkpoint) -> None:
        if checkpoint.size == 5:
            stalled.set()
            assert release.wait(10)

    witness.test_hook_before_commit = stall_size_5
    results: dict[str, bytes | DeplogError] = {}
    first = threading.Thread(target=_run, args=(witness, log.request(recorded, 5), results, "a"))
    first.start()
    assert stalled.wait(10)
    second = threading.Thread(target=_run, args=(witness, log.request(recorded, 8), results, "b"))
    second.start()
    second.join(10)
    assert isinstance(results["b"], bytes)  # cosigned
    release.set()
    first.join(10)
    conflict = results["a"]
    assert isinstance(conflict, SizeConflictError) and conflict.recorded_size == 8
    assert stored(state) == (8, log.root(8))


# Configuration and status


def test_log_status_reports_latest_size_and_cosign_time(
    witnessed: Witness, log: MinimalLog, state: WitnessState
) -> None:
    witnessed.add_checkpoint(log.request(5, 7), NOW + 30)
    [status] = state.logs()
    assert (status.origin, status.vkey) == (ORIGIN, log.vkey)
    assert status.recorded is not None
    assert (status.recorded.size, status.recorded.updated_at) == (7, NOW + 30)
    assert status.lag(NOW + 100) == 70


def test_configured_log_never_cosigned_has_no_lag(witness: Witness, state: WitnessState) -> None:
    [status] = state.logs()
    assert status.recorded is None and status.lag(NOW) is None


def test_adding_the_same_log_key_again_changes_nothing(
    witness: Witness, log: MinimalLog, state: WitnessState
) -> None:
    verifier, added = state.add_log(log.vkey, NOW)
    assert (verifier.name, added) == (ORIGIN, False)


def test_two_processes_adding_the_same_log_at_once_both_succeed_once_each(
    open_state: Callable[[], WitnessState], log: MinimalLog
) -> None:
    """As the authority processes sharing one PostgreSQL log do when they start together."""
    states = [open_state(), open_state()]
    barrier = threading.Barrier(2)
    added: list[bool] = []

    def add(state: WitnessState) -> None:
        barrier.wait(5)
        added.append(state.add_log(log.vkey, NOW)[1])

    threads = [threading.Thread(target=add, args=(state,)) for state in states]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert sorted(added) == [False, True]
        assert [status.origin for status in states[0].logs()] == [ORIGIN]
    finally:
        for state in states:
            state.close()


def test_another_key_for_a_configured_origin_is_refused(
    witness: Witness, state: WitnessState
) -> None:
    with pytest.raises(LogConfigError) as err:
        state.add_log(MinimalLog(ORIGIN).vkey, NOW)
    assert err.value.code == "log_key_conflict"


def test_cosigner_key_is_not_accepted_as_a_log_key(
    state: WitnessState, witness_key: Signer
) -> None:
    with pytest.raises(LogConfigError) as err:
        state.add_log(witness_key.verifier().vkey(), NOW)
    assert err.value.code == "bad_log_key"


def test_witness_refuses_to_cosign_with_a_log_signing_key(state: WitnessState) -> None:
    with pytest.raises(ValueError):
        Witness(state, Signer.generate(WITNESS_NAME))


def test_logs_file_reads_log_lines_and_skips_client_policy_lines(log: MinimalLog) -> None:
    other = MinimalLog("other.example/log")
    policy = (
        "# logs this witness follows\n"
        f"log {log.vkey}\n"
        f"log {other.vkey} https://other.example/\n"
        "\n"
        "witness w1 witness.test/w1+01234567+BAAA https://w1.example/\n"
        "quorum none\n"
    )
    assert [v.vkey() for v in parse_logs_file(policy)] == [log.vkey, other.vkey]


def test_logs_file_with_an_unknown_line_is_refused(log: MinimalLog) -> None:
    with pytest.raises(LogConfigError):
        parse_logs_file(f"lgo {log.vkey}\n")


@pytest.mark.slow
def test_every_thread_answers_after_postgresql_dropped_its_connections(
    pg_url: str, witness_key: Signer, log: MinimalLog
) -> None:
    """The embedded witness of a log on PostgreSQL: each request thread's connection is
    found lost only when next used (the database restarted meanwhile); that use makes
    it again, for a request's reads and for a swap alike, instead of answering 503."""
    import psycopg

    from deplog.authority.storage.postgres import PostgresDatabase

    state = WitnessState.over(PostgresDatabase(pg_url).embedded_witness_store())
    try:
        state.add_log(log.vkey, NOW)
        witness = Witness(state, witness_key)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            warmed = threading.Barrier(4)

            def warm() -> None:  # each of the pool's threads opens its connection
                stored(state)
                warmed.wait(10)

            for future in [pool.submit(warm) for _ in range(4)]:
                future.result(10)
            expected = state.recorded(ORIGIN)
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            state.compare_and_swap(ORIGIN, expected, 3, log.root(3), NOW)  # BEGIN first
            requests = [pool.submit(witness.add_checkpoint, log.request(3, 5), NOW)]
            requests += [pool.submit(stored, state) for _ in range(3)]
            assert [type(r.result(10)).__name__ for r in requests] == ["bytes"] + ["tuple"] * 3
        assert stored(state) == (5, log.root(5))
    finally:
        state.close()


def test_an_mldsa_witness_cosigns_the_tree_lines_with_a_type_6_key(
    state: WitnessState, log: MinimalLog
) -> None:
    from deplog.client.tlog.cosignature import verify_cosignature
    from deplog.client.tlog.note import NoteSignature, parse_note

    key = Signer.generate(WITNESS_NAME, 0x06)
    state.add_log(log.vkey, NOW)
    witness = Witness(state, key)
    assert witness.verifier().sig_type == 0x06
    request = log.request(0, 5)
    line = witness.add_checkpoint(request, NOW)
    note = request[request.index(b"\n\n") + 2 :]
    text, _ = parse_note(note)
    _, (sig,) = parse_note(text.encode() + b"\n" + line)
    assert isinstance(sig, NoteSignature) and len(sig.signature) == 8 + 2420
    cosig = verify_cosignature(text, sig, witness.verifier())
    assert (cosig.timestamp, cosig.statement, cosig.algorithm) == (NOW, "tree_lines", "ml-dsa-44")
    # The same checks as any witness: an old size it did not record is refused.
    assert refusal(witness, log.request(0, 6)).code == "old_size_mismatch"


def test_a_commit_that_fails_leaves_no_transaction_open(tmp_path: Path, log: MinimalLog) -> None:
    """SQLite keeps a transaction open when its COMMIT fails (here: a deferred foreign key);
    the state rolls it back, so the next request starts clean instead of failing too."""
    state = WitnessState(tmp_path / "witness.db")
    conn = state._conn()
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute(
        "CREATE TABLE child (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )
    with pytest.raises(sqlite3.IntegrityError), state._transaction() as writing:
        writing.execute("INSERT INTO child VALUES (1)")
    assert not conn.in_transaction
    assert state.add_log(log.vkey, NOW)[1]
    state.close()
