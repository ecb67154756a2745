"""Invariant 3 as a table: only authorized publisher x namespace x key x action cells append.

Every cell runs against its own real ``authority.log.Log`` in a temporary
SQLite file, built by the real code from this history:

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
then checked three ways: the log's verdict, that a refusal leaves size and
root unchanged (and an admission adds exactly one leaf), and that the offline
replay reaches the same verdict when a malicious log signs a checkpoint over
the refused entry anyway.
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
from deplog.client.model.notice import Envelope
from deplog.client.model.registry import AuthorizationError
from deplog.client.model.rules import RuleViolation
from deplog.client.tlog.note import Signer
from tests.builders import (
    make_envelope,
    notice_leaf,
    publisher_statement,
    register_statement,
    sign_tree,
)

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
    """A cell's log, its signer, and the notice the cell submits."""

    log: Log
    log_signer: Signer
    envelope: Envelope

    def leaves(self) -> list[bytes]:
        return self.log.tree.leaf_data(0, self.log.tree.size)

    def state(self) -> tuple[int, bytes, int]:
        """Tree size, tree root, and the size of the latest signed checkpoint."""
        return self.log.tree.size, self.log.tree.current_root(), self.log.publish().size


def _build(directory: Path, cell: Cell) -> World:
    log_signer = Signer.generate(ORIGIN)
    keys = {name: Signer.generate(f"acme-{name}") for name in ("active", "revoked", "rotated_out")}
    keys["rotated_in"] = Signer.generate("acme-rotated_in")
    keys["other_publishers"] = Signer.generate("beta")
    keys["unknown"] = Signer.generate("acme-stray")
    log = Log(directory / "log.db", log_signer, ORIGIN)
    acme_keys = (keys["active"], keys["revoked"], keys["rotated_out"])
    log.append_publisher(register_statement("acme", ("org.acme",), acme_keys))
    log.append_publisher(register_statement("beta", ("org.beta",), (keys["other_publishers"],)))
    [target] = log.admit_notices([make_envelope(keys["active"], 1, publisher="acme")])
    assert target == Admitted(WITHDRAW_TARGET, created=True)
    log.append_publisher(publisher_statement("revoke_key", "acme", (keys["revoked"],)))
    log.append_publisher(publisher_statement("add_key", "acme", (keys["rotated_in"],)))
    log.append_publisher(publisher_statement("revoke_key", "acme", (keys["rotated_out"],)))
    if cell.publisher == "revoked":
        log.append_publisher(publisher_statement("revoke_publisher", "acme"))
    log.publish()
    envelope = make_envelope(
        keys[cell.key],
        2,
        publisher="ghost" if cell.publisher == "unknown" else "acme",
        tool=f"tool:{_NAMESPACE[cell.namespace]}/search",
        **_ACTION_FIELDS[cell.action],
    )
    return World(log, log_signer, envelope)


@pytest.fixture
def world(tmp_path: Path, cell: Cell) -> Iterator[World]:
    built = _build(tmp_path, cell)
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


@authorized_cells
def test_admission_appends_exactly_one_leaf(world: World, cell: Cell) -> None:
    size, _, _ = world.state()
    world.log.admit_notices([world.envelope])
    assert world.state()[0::2] == (size + 1, size + 1)


@refused_cells
def test_replay_refuses_the_forced_entry_with_the_same_code(world: World, cell: Cell) -> None:
    """The log signs a checkpoint over the refused entry anyway: the auditor names it."""
    leaves = [*world.leaves(), notice_leaf(world.envelope)]
    with pytest.raises(RuleViolation) as caught:
        replay(leaves, sign_tree(world.log_signer, leaves), world.log_signer.verifier())
    assert (caught.value.code, caught.value.cause, caught.value.index) == (
        "unauthorized_notice",
        expected_code(cell),
        len(leaves) - 1,
    )


@authorized_cells
def test_replay_accepts_the_admitted_entry(world: World, cell: Cell) -> None:
    world.log.admit_notices([world.envelope])
    report = replay(world.leaves(), world.log.publish().note, world.log_signer.verifier())
    assert report.notices.get(cell.action, 0) == (2 if cell.action == "deprecate" else 1)
