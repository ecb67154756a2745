"""Invariant 3 as a table: only authorized publisher x namespace x key x action cells append.

Every cell runs against a real ``authority.log.Log`` on both backends, a
temporary SQLite file and a PostgreSQL database, built by the real code from
this history:

    0  register acme   namespaces org.acme, keys active, revoked, rotated_out
    1  register beta   namespace org.beta, key beta
    2  acme deprecates tool:org.acme/search (sequence 1, active key): the withdraw target
    3  revoke_key acme revoked
    4  add_key acme rotated_in              } a key rotation: the new key first,
    5  revoke_key acme rotated_out          } then the old one is revoked
    6  revoke_publisher acme                (only in the "revoked publisher" cells)

The notice under test (sequence 2) claims publisher ``acme``, or ``ghost``
(never registered) for the "unknown publisher" cells; its tool is in org.acme
("own": the namespace of the publisher owning the signing key's claimed
identity), org.beta ("foreign": another publisher's) or org.nobody
("unowned"); a withdraw always names acme's own notice at index 2. The key is
one of acme's in the given state, beta's active key, or a key nobody
registered.

``expected_code`` is the rule under test, written independently of the
registry: authorized iff the publisher is active AND the key is an active key
of that publisher AND the namespace is its own; otherwise the first failing
condition names the code, in the order the authority checks them. Each cell is
then checked three ways: the log's verdict, that a refusal leaves size, root,
the latest checkpoint's bytes and every stored row unchanged (and an admission
adds exactly one leaf), and that the offline replay reaches the same verdict
when a malicious log signs a checkpoint over the refused entry anyway. On
PostgreSQL the refused cells of one history share a database (see
``shared_histories``); each SQLite cell and each admitted cell has its own.

The sequence rule (unique per publisher, any order) has its own small table at
the end, checked by the authority, a follower and the offline replay alike.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from deplog.authority.log import Admitted, Log
from deplog.client.audit.offline import replay
from deplog.client.errors import DeplogError
from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import TrustedState
from deplog.client.model.notice import Envelope
from deplog.client.model.registry import AuthorizationError
from deplog.client.model.rules import InvalidEntry
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import ConsistencyProof
from tests.builders import (
    make_envelope,
    notice_leaf,
    publisher_statement,
    register_statement,
    sign_tree,
)
from tests.conftest import BACKENDS, Backend
from tests.dbrows import table_rows
from tests.pgcluster import PgCluster

ORIGIN = "matrix.deplog.example/log"
WITHDRAW_TARGET = 2

PUBLISHERS = ("registered", "revoked", "unknown")
NAMESPACES = ("own", "foreign", "unowned")
KEYS = ("active", "revoked", "rotated_out", "rotated_in", "other_publishers", "unknown")
ACTIONS = ("deprecate", "revoke", "withdraw")

_NAMESPACE = {"own": "org.acme", "foreign": "org.beta", "unowned": "org.nobody"}
_ACTION_FIELDS: dict[str, dict[str, Any]] = {
    "deprecate": {},
    "revoke": {"action": "revoke", "reasons": ["critical_bug"]},
    "withdraw": {"action": "withdraw", "withdraws": WITHDRAW_TARGET, "affected": None},
}


class Cell(NamedTuple):
    """One combination of the matrix."""

    publisher: str
    namespace: str
    key: str
    action: str


def expected_code(cell: Cell) -> str | None:
    """The rule: None (authorized) iff active publisher, its active key, its namespace."""
    if cell.publisher == "unknown":
        return "unknown_publisher"
    if cell.key in ("other_publishers", "unknown"):
        return "unknown_key"
    if cell.publisher == "revoked":
        return "publisher_revoked"
    if cell.key in ("revoked", "rotated_out"):
        return "key_revoked"
    if cell.namespace != "own":
        return "namespace_not_authorized"
    return None


CELLS = [
    Cell(*combination) for combination in itertools.product(PUBLISHERS, NAMESPACES, KEYS, ACTIONS)
]
AUTHORIZED = [cell for cell in CELLS if expected_code(cell) is None]
REFUSED = [cell for cell in CELLS if expected_code(cell) is not None]


def _ids(cells: list[Cell]) -> list[str]:
    return [
        f"{c.publisher}_publisher-{c.namespace}_namespace-{c.key}_key-{c.action}" for c in cells
    ]


all_cells = pytest.mark.parametrize("cell", CELLS, ids=_ids(CELLS))
authorized_cells = pytest.mark.parametrize("cell", AUTHORIZED, ids=_ids(AUTHORIZED))
refused_cells = pytest.mark.parametrize("cell", REFUSED, ids=_ids(REFUSED))


# --- building one cell's log ------------------------------------------------------------


@dataclass
class World:
    """A cell's log (and where its rows are), its signer, and the notice the cell submits."""

    log: Log
    db: str
    log_signer: Signer
    envelope: Envelope

    def leaves(self) -> list[bytes]:
        return self.log.tree.leaf_data(0, self.log.tree.size)

    def state(self) -> tuple[int, bytes, int]:
        """Tree size, tree root, and the size of the latest signed checkpoint."""
        return self.log.tree.size, self.log.tree.current_root(), self.log.publish().size


Keys = dict[str, Signer]


def _keys() -> Keys:
    keys = {name: Signer.generate(f"acme-{name}") for name in ("active", "revoked", "rotated_out")}
    keys["rotated_in"] = Signer.generate("acme-rotated_in")
    keys["other_publishers"] = Signer.generate("beta")
    keys["unknown"] = Signer.generate("acme-stray")
    return keys


def _history(db: Path | str, log_signer: Signer, keys: Keys, publisher_revoked: bool) -> Log:
    """The history of the module docstring, written by the real ``Log`` into ``db``."""
    log = Log(db, log_signer, ORIGIN)
    acme_keys = (keys["active"], keys["revoked"], keys["rotated_out"])
    log.append_publisher(register_statement("acme", ("org.acme",), acme_keys))
    log.append_publisher(register_statement("beta", ("org.beta",), (keys["other_publishers"],)))
    [target] = log.admit_notices([make_envelope(keys["active"], 1, publisher="acme")])
    assert target == Admitted(WITHDRAW_TARGET, created=True)
    log.append_publisher(publisher_statement("revoke_key", "acme", (keys["revoked"],)))
    log.append_publisher(publisher_statement("add_key", "acme", (keys["rotated_in"],)))
    log.append_publisher(publisher_statement("revoke_key", "acme", (keys["rotated_out"],)))
    if publisher_revoked:
        log.append_publisher(publisher_statement("revoke_publisher", "acme"))
    log.publish()
    return log


def _envelope(keys: Keys, cell: Cell) -> Envelope:
    return make_envelope(
        keys[cell.key],
        2,
        publisher="ghost" if cell.publisher == "unknown" else "acme",
        tool=f"tool:{_NAMESPACE[cell.namespace]}/search",
        **_ACTION_FIELDS[cell.action],
    )


def _build(db: Path | str, cell: Cell) -> World:
    """``cell``'s own log, in a fresh database ``db``."""
    log_signer, keys = Signer.generate(ORIGIN), _keys()
    log = _history(db, log_signer, keys, cell.publisher == "revoked")
    return World(log, str(db), log_signer, _envelope(keys, cell))


@dataclass(frozen=True)
class SharedHistory:
    """One history, written once into a PostgreSQL database that refused cells share."""

    url: str
    log_signer: Signer
    keys: Keys


@pytest.fixture(scope="module")
def shared_histories(pg_cluster: PgCluster, pg_template: str) -> dict[bool, SharedHistory]:
    """On PostgreSQL a fresh database costs a few hundred milliseconds (CREATE DATABASE
    writes a copy of its template), 156 refused cells times four tests of them would
    cost minutes. A refusal changes nothing, and every test of a refused cell proves it
    (``test_refusal_changes_nothing_stored`` compares every row), so refused cells share
    one database per history (publisher revoked or not), each test opening its own
    ``Log`` on it. Authorized cells append: each gets its own database."""
    histories = {}
    for revoked in (False, True):
        url = pg_cluster.create_database(pg_template)
        log_signer, keys = Signer.generate(ORIGIN), _keys()
        _history(url, log_signer, keys, revoked).close()
        histories[revoked] = SharedHistory(url, log_signer, keys)
    return histories


@pytest.fixture(params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    """Every cell runs on both backends."""
    return str(request.param)


@pytest.fixture
def world(
    request: pytest.FixtureRequest, tmp_path: Path, cell: Cell, backend_kind: str
) -> Iterator[World]:
    if backend_kind == "sqlite":
        built = _build(tmp_path / "log.db", cell)
    elif expected_code(cell) is None:
        built = _build(request.getfixturevalue("pg_migrated_url"), cell)
    else:
        shared: SharedHistory = request.getfixturevalue("shared_histories")[
            cell.publisher == "revoked"
        ]
        log = Log(shared.url, shared.log_signer, ORIGIN)
        built = World(log, shared.url, shared.log_signer, _envelope(shared.keys, cell))
    try:
        yield built
    finally:
        built.log.close()


def _outcome(result: Admitted | DeplogError) -> str:
    return "admitted" if isinstance(result, Admitted) else result.code


# --- the tests ------------------------------------------------------------------------------


def test_matrix_has_authorized_and_refused_cells() -> None:
    """Guards the table itself: only 2 keys x 3 actions of an active publisher's namespace pass."""
    assert (len(CELLS), len(AUTHORIZED)) == (162, 6)


@all_cells
def test_log_verdict_follows_the_rule(world: World, cell: Cell) -> None:
    [result] = world.log.admit_notices([world.envelope])
    assert _outcome(result) == (expected_code(cell) or "admitted")


@refused_cells
def test_refusal_is_an_authorization_error(world: World, cell: Cell) -> None:
    [result] = world.log.admit_notices([world.envelope])
    assert isinstance(result, AuthorizationError)


@refused_cells
def test_refusal_leaves_size_and_root_unchanged(world: World, cell: Cell) -> None:
    before = world.state()
    world.log.admit_notices([world.envelope])
    assert world.state() == before


@refused_cells
def test_refusal_changes_nothing_stored(world: World, cell: Cell) -> None:
    """The hidden state: the latest checkpoint's bytes and every row of every table."""
    before = (world.log.publish().note, table_rows(world.db))
    world.log.admit_notices([world.envelope])
    assert (world.log.publish().note, table_rows(world.db)) == before


@authorized_cells
def test_admission_appends_exactly_one_leaf(world: World, cell: Cell) -> None:
    size, _, _ = world.state()
    world.log.admit_notices([world.envelope])
    assert world.state()[0::2] == (size + 1, size + 1)


@refused_cells
def test_replay_refuses_the_forced_entry_with_the_same_code(world: World, cell: Cell) -> None:
    """The log signs a checkpoint over the refused entry anyway: the auditor names it."""
    leaves = [*world.leaves(), notice_leaf(world.envelope)]
    report = replay(leaves, sign_tree(world.log_signer, leaves), world.log_signer.verifier())
    (found,) = report.invalid
    assert (found.code, found.cause, found.index) == (
        "unauthorized_notice",
        expected_code(cell),
        len(leaves) - 1,
    )


@authorized_cells
def test_replay_accepts_the_admitted_entry(world: World, cell: Cell) -> None:
    world.log.admit_notices([world.envelope])
    report = replay(world.leaves(), world.log.publish().note, world.log_signer.verifier())
    assert report.notices.get(cell.action, 0) == (2 if cell.action == "deprecate" else 1)


# --- the sequence rule, three ways: the authority, the follower, the offline replay ----------
#
# Sequence numbers are unique per publisher and need not increase. History of these
# cells: 0 register acme, 1 register beta, 2 acme's notice with sequence 5. The cell's
# notice then arrives; the authority decides it, and a follower and an auditor check a
# log that holds it whatever the authority said (a malicious log signs over it anyway).


class SequenceCase(NamedTuple):
    """The notice a cell submits after acme's sequence 5, and the verdict of the rule."""

    publisher: str
    sequence: int
    reasons: tuple[str, ...]
    verdict: str


_LOGGED = SequenceCase("acme", 5, ("superseded",), "")
SEQUENCE_CASES = {
    "higher_unused": SequenceCase("acme", 6, ("superseded",), "admitted"),
    "lower_unused": SequenceCase("acme", 3, ("superseded",), "admitted"),
    "other_publisher_same_number": SequenceCase("beta", 5, ("superseded",), "admitted"),
    "used_with_other_content": SequenceCase("acme", 5, ("end_of_life",), "sequence_reused"),
    "identical_envelope": SequenceCase("acme", 5, ("superseded",), "sequence_reused"),
}
sequence_cases = pytest.mark.parametrize("case", list(SEQUENCE_CASES), ids=list(SEQUENCE_CASES))


@dataclass
class SequenceWorld:
    log: Log
    db: str
    log_signer: Signer
    logged: Envelope
    envelope: Envelope


@pytest.fixture
def sequence_world(backend: Backend, case: str) -> Iterator[SequenceWorld]:
    log_signer = Signer.generate(ORIGIN)
    signers = {"acme": Signer.generate("acme"), "beta": Signer.generate("beta")}
    log = Log(backend.db, log_signer, ORIGIN)
    for name, signer in signers.items():
        log.append_publisher(register_statement(name, (f"org.{name}",), (signer,)))

    def envelope(c: SequenceCase) -> Envelope:
        return make_envelope(
            signers[c.publisher],
            c.sequence,
            publisher=c.publisher,
            tool=f"tool:org.{c.publisher}/search",
            reasons=list(c.reasons),
        )

    logged = envelope(_LOGGED)
    assert log.admit_notices([logged]) == [Admitted(2, created=True)]
    log.publish()
    try:
        # The identical envelope is the logged one itself: a second build may carry a
        # later issued_at (make_envelope stamps now), which is another envelope.
        again = logged if case == "identical_envelope" else envelope(SEQUENCE_CASES[case])
        yield SequenceWorld(log, backend.db, log_signer, logged, again)
    finally:
        log.close()


def _follower_verdict(directory: Path, leaves: list[bytes], log_signer: Signer) -> str:
    """A fresh follower's verdict on a log of exactly ``leaves``."""
    state = LocalState(directory / "follower.db", ORIGIN)
    try:
        trusted = TrustedState(state, log_signer.verifier())
        candidate = trusted.check_checkpoint(sign_tree(log_signer, leaves))
        trusted.check_consistency(candidate, ConsistencyProof(0, len(leaves), ()))
        with trusted.advance(candidate) as session:
            session.add(leaves)
            advanced = session.finish()
        return _sequence_finding(advanced.invalid, len(leaves) - 1)
    finally:
        state.close()


def _replay_verdict(leaves: list[bytes], log_signer: Signer) -> str:
    report = replay(leaves, sign_tree(log_signer, leaves), log_signer.verifier())
    return _sequence_finding(report.invalid, len(leaves) - 1)


def _sequence_finding(invalid: tuple[InvalidEntry, ...], index: int) -> str:
    """A verifier's finding, as the code the authority refuses the entry with."""
    if not invalid:
        return "admitted"
    (found,) = invalid
    assert (found.code, found.index) == ("replayed_notice", index)
    assert found.cause is not None
    return str(found.cause)


@sequence_cases
def test_authority_applies_the_sequence_rule(sequence_world: SequenceWorld, case: str) -> None:
    """A used number is refused, except the identical envelope: the idempotent answer
    with the original index, and no new leaf."""
    world = sequence_world
    size, rows = world.log.tree.size, table_rows(world.db)
    [result] = world.log.admit_notices([world.envelope])
    if case == "identical_envelope":
        assert (result, world.log.tree.size) == (Admitted(2, created=False), size)
        assert table_rows(world.db) == rows
        return
    assert _outcome(result) == SEQUENCE_CASES[case].verdict
    assert world.log.tree.size == size + (1 if isinstance(result, Admitted) else 0)
    if not isinstance(result, Admitted):
        assert table_rows(world.db) == rows


@sequence_cases
def test_follower_and_replay_agree_with_the_sequence_rule(
    sequence_world: SequenceWorld, case: str, tmp_path: Path
) -> None:
    """Over a log holding the cell's notice after sequence 5, both give the rule's verdict."""
    world = sequence_world
    leaves = [*world.log.tree.leaf_data(0, world.log.tree.size), notice_leaf(world.envelope)]
    verdict = SEQUENCE_CASES[case].verdict
    assert _follower_verdict(tmp_path, leaves, world.log_signer) == verdict
    assert _replay_verdict(leaves, world.log_signer) == verdict
