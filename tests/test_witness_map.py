"""A map-verifying witness: cosigns only checkpoints whose map root it reproduced from the
log's entries; a fault-injected authority is declined and the record does not move."""

from __future__ import annotations

import base64
import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from deplog.authority.witness.core import Witness, WitnessState
from deplog.authority.witness.mapverify import MapVerifier
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.source import FetchError
from deplog.client.map.line import map_line
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.model.status import InvalidMark
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from deplog.client.tlog.note import SIG_TYPE_COSIGNATURE_V1, Signer
from deplog.client.tlog.proofs import consistency_path, leaf_hash
from tests.builders import LocalLog, admitted, make_envelope, notice_leaf
from tests.map_formats import write_first_draft_map

MAP_WITNESS = "map.witness.example/w"


class Mirror:
    """Serves a local log's entries, a page of at most three at a time, like an API."""

    def __init__(self, local: LocalLog) -> None:
        self.local = local
        self.down = False
        self.reordered = False

    def __call__(self, start: int, end: int) -> Sequence[bytes]:
        if self.down:
            raise FetchError(ErrorCode.FETCH_FAILED)
        page = self.local.log.tree.leaf_data(start, min(end, start + 3))
        return page[::-1] if self.reordered else page


@pytest.fixture
def mirror(local: LocalLog) -> Mirror:
    return Mirror(local)


@pytest.fixture
def witness(tmp_path: Path, local: LocalLog, mirror: Mirror) -> Iterator[Witness]:
    state = WitnessState(tmp_path / "witness.db")
    state.add_log(local.signer.verifier().vkey(), 0)
    verifier = MapVerifier(tmp_path / "map.db", mirror, state.log_verifier)
    witness = Witness(state, Signer.generate(MAP_WITNESS, SIG_TYPE_COSIGNATURE_V1))
    witness.statement = verifier.check
    yield witness
    verifier.close()
    state.close()


def body(local: LocalLog, old: int, note: bytes) -> bytes:
    """A tlog-witness add-checkpoint body from ``old`` to the note's size."""
    size = open_checkpoint(note, local.signer.verifier())[0].size
    hashes = [leaf_hash(leaf) for leaf in local.log.tree.leaf_data(0, size)]
    proof = consistency_path(hashes, old, size) if 0 < old < size else []
    lines = b"".join(base64.b64encode(h) + b"\n" for h in proof)
    return b"old %d\n" % old + lines + b"\n" + note


def latest(local: LocalLog) -> bytes:
    published = local.log.published
    assert published is not None
    return published.note


def with_map_root(local: LocalLog, root: bytes) -> bytes:
    """The log's latest checkpoint, signed again with another map root."""
    honest, _ = open_checkpoint(latest(local), local.signer.verifier())
    forged = Checkpoint(honest.origin, honest.size, honest.root_hash, (map_line(root),))
    return sign_checkpoint(forged, local.signer)


def test_an_honest_checkpoint_is_cosigned_and_the_next_one_too(
    local: LocalLog, witness: Witness
) -> None:
    for _ in range(4):
        local.publish()
    first = latest(local)
    assert witness.add_checkpoint(body(local, 0, first), 1000).startswith("— ".encode())
    local.publish(tool_id="tool:org.acme/fetch")
    assert witness.add_checkpoint(body(local, 5, latest(local)), 1001)
    assert witness.state.recorded(local.log.origin).size == 6  # type: ignore[union-attr]


@pytest.mark.parametrize("fault", ["misfolded notice", "random root"])
def test_a_false_map_root_is_declined_and_nothing_is_recorded(
    local: LocalLog, witness: Witness, fault: str
) -> None:
    local.publish()
    local.publish()
    leaves = local.log.tree.leaf_data(0, local.log.tree.size)
    bad = VerifiableMap().fold(admitted(leaves[:-1])) if fault == "misfolded notice" else None
    note = with_map_root(local, bad or os.urandom(32))
    with pytest.raises(DeplogError) as declined:
        witness.add_checkpoint(body(local, 0, note), 1000)
    assert declined.value.code == ErrorCode.MAP_NOT_REPRODUCED
    assert witness.state.recorded(local.log.origin) is None
    # The honest checkpoint of that size is still cosigned: the refusal changed nothing.
    assert witness.add_checkpoint(body(local, 0, latest(local)), 1001)


def test_a_checkpoint_without_a_map_line_is_declined(local: LocalLog, witness: Witness) -> None:
    local.publish()
    honest, _ = open_checkpoint(latest(local), local.signer.verifier())
    bare = sign_checkpoint(Checkpoint(honest.origin, honest.size, honest.root_hash), local.signer)
    with pytest.raises(DeplogError) as declined:
        witness.add_checkpoint(body(local, 0, bare), 1000)
    assert declined.value.code == ErrorCode.MAP_NOT_REPRODUCED


def test_entries_it_cannot_fetch_make_it_answer_unavailable(
    local: LocalLog, witness: Witness, mirror: Mirror
) -> None:
    local.publish()
    mirror.down = True
    with pytest.raises(DeplogError) as declined:
        witness.add_checkpoint(body(local, 0, latest(local)), 1000)
    assert declined.value.code == ErrorCode.ENTRIES_UNAVAILABLE
    mirror.down = False
    assert witness.add_checkpoint(body(local, 0, latest(local)), 1001)


def test_entries_that_are_not_the_checkpoints_are_declined(
    local: LocalLog, witness: Witness, mirror: Mirror
) -> None:
    local.publish()
    local.publish()
    mirror.reordered = True
    with pytest.raises(DeplogError) as declined:
        witness.add_checkpoint(body(local, 0, latest(local)), 1000)
    assert declined.value.code == ErrorCode.MAP_NOT_REPRODUCED


def test_a_mirror_of_another_record_format_is_dropped_and_mirrored_again(
    tmp_path: Path, local: LocalLog, mirror: Mirror
) -> None:
    """The mirror's map holds the first draft's records: it goes at start with the tree
    edge (one transaction), and the next checkpoint is mirrored from entry 0 and cosigned."""
    state = WitnessState(tmp_path / "witness.db")
    state.add_log(local.signer.verifier().vkey(), 0)
    witness = Witness(state, Signer.generate(MAP_WITNESS, SIG_TYPE_COSIGNATURE_V1))
    verifier = MapVerifier(tmp_path / "map.db", mirror, state.log_verifier)
    witness.statement = verifier.check
    local.publish()
    assert witness.add_checkpoint(body(local, 0, latest(local)), 1000)
    verifier.close()
    conn = sqlite3.connect(tmp_path / "map.db")
    write_first_draft_map(conn, local.log.tree.leaf_data(0, local.log.tree.size))
    conn.close()
    verifier = MapVerifier(tmp_path / "map.db", mirror, state.log_verifier)
    witness.statement = verifier.check
    assert verifier.conn.execute("SELECT count(*) FROM mirror_frontier").fetchone()[0] == 0
    assert verifier.map.size() is None
    size = local.log.tree.size
    local.publish(tool_id="tool:org.acme/fetch")
    assert witness.add_checkpoint(body(local, size, latest(local)), 1001)
    assert verifier.map.size() == local.log.tree.size
    verifier.close()
    state.close()


def test_a_map_folding_an_unauthorized_notice_as_valid_is_declined(
    local: LocalLog, witness: Witness
) -> None:
    """The witness replays the registry and applies the admission rules (the one
    validator): a log that slipped in a notice signed by a key its publisher never
    registered, and folded it as a valid notice, is not cosigned; the map every
    verifier folds (the notice as the mark of an invalid entry) is."""
    local.publish()
    forged = notice_leaf(make_envelope(Signer.generate("acme"), 9, tool="tool:org.acme/fetch"))
    log = local.log
    log.conn.execute("BEGIN")
    log.tree.append_entry(forged)
    log.conn.execute("COMMIT")
    leaves = log.tree.leaf_data(0, log.tree.size)
    at = len(leaves) - 1

    def signed(map_root: bytes) -> bytes:
        checkpoint = Checkpoint(
            log.origin, len(leaves), log.tree.current_root(), (map_line(map_root),)
        )
        return sign_checkpoint(checkpoint, local.signer)

    naive = VerifiableMap().fold(admitted(leaves))
    honest = VerifiableMap().fold(
        [*admitted(leaves[:-1]), (at, InvalidMark("tool:org.acme/fetch", at))]
    )
    with pytest.raises(DeplogError) as declined:
        witness.add_checkpoint(body(local, 0, signed(naive)), 1000)
    assert declined.value.code == ErrorCode.MAP_NOT_REPRODUCED
    assert witness.add_checkpoint(body(local, 0, signed(honest)), 1001)
