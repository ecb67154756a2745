"""The publisher's monitor: which verified entries it reports, and never of a refused history.

Entries come from a real authority ``Log`` (``LocalLog``) and are verified by the
follower's own trust state; the monitor is that state's ``watch``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deplog.client.follow.monitor import Journal, JournalError, Monitor, MonitorEvent, parse_key_id
from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import TrustedState
from deplog.client.model.entries import PublisherStatement
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import TreeMismatchError
from deplog.client.tlog.timestamps import now_timestamp
from tests.builders import ORIGIN, LocalLog, make_envelope, notice_leaf, sign_tree

NAMESPACE = "org.acme"


@pytest.fixture
def local(tmp_path: Path) -> LocalLog:
    return LocalLog(tmp_path)


@pytest.fixture
def journal_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "journal"
    directory.mkdir()
    return directory


@pytest.fixture
def trusted(tmp_path: Path, local: LocalLog) -> Iterator[TrustedState]:
    state = LocalState(tmp_path / "monitor.db", ORIGIN)
    yield TrustedState(state, local.signer.verifier())
    state.close()


def watched(trusted: TrustedState, local: LocalLog, monitor: Monitor) -> list[MonitorEvent]:
    """Sync with ``monitor`` as the watch; the events of the committed advance."""
    trusted.watch = monitor
    advanced = local.sync(trusted)
    assert advanced is not None
    return [event for event in advanced.noticed if isinstance(event, MonitorEvent)]


def journal(directory: Path, local: LocalLog, **fields: object) -> None:
    """Publish a notice as ``deplog publish`` does: the envelope on disk first."""
    local.sequence += 1
    envelope = make_envelope(local.publisher, local.sequence, **fields)
    name = f"{envelope.notice.publisher}-{envelope.notice.sequence}.envelope.json"
    (directory / name).write_bytes(envelope.canonical_bytes())
    [result] = local.log.sequence([envelope])
    assert result.error is None


def add_key(local: LocalLog, key: Signer) -> None:
    statement = PublisherStatement.from_json(
        {
            "action": "add_key",
            "publisher": "acme",
            "issued_at": now_timestamp(),
            "keys": [key.verifier().vkey()],
        }
    )
    local.log.append_publisher(statement)


def test_the_registration_of_the_namespace_is_an_event(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.log.publish()
    [event] = watched(trusted, local, Monitor(NAMESPACE, [local.publisher.key_id]))
    assert event.to_json() == {
        "event": "registry",
        "index": 0,
        "action": "register",
        "publisher": "acme",
        "namespaces": [NAMESPACE],
        "key_ids": [bytes(local.publisher.key_id).hex()],
    }


def test_a_journaled_notice_by_a_known_key_is_not_an_event(
    trusted: TrustedState, local: LocalLog, journal_dir: Path
) -> None:
    journal(journal_dir, local)
    local.log.publish()
    monitor = Monitor(NAMESPACE, [local.publisher.key_id], Journal(journal_dir))
    assert [e.event for e in watched(trusted, local, monitor)] == ["registry"]


def test_a_notice_missing_from_the_journal_is_an_event_though_its_key_is_known(
    trusted: TrustedState, local: LocalLog, journal_dir: Path
) -> None:
    """A leaked key signs as well as its owner: only the journal tells them apart."""
    index = local.publish()
    local.log.publish()
    monitor = Monitor(NAMESPACE, [local.publisher.key_id], Journal(journal_dir))
    events = watched(trusted, local, monitor)
    leaked = events[-1].to_json()
    assert (leaked["event"], leaked["index"], leaked["reasons"]) == (
        "notice",
        index,
        ["not_in_journal"],
    )
    assert leaked["key_id"] == bytes(local.publisher.key_id).hex()


def test_without_a_journal_only_unknown_key_ids_make_notices_events(
    trusted: TrustedState, local: LocalLog
) -> None:
    local.publish()
    local.log.publish()
    assert [
        e.event for e in watched(trusted, local, Monitor(NAMESPACE, [local.publisher.key_id]))
    ] == ["registry"]


def test_a_key_added_by_the_operator_and_its_notices_are_events(
    trusted: TrustedState, local: LocalLog
) -> None:
    added = Signer.generate("acme")
    add_key(local, added)
    [result] = local.log.sequence([make_envelope(added, 1)])
    assert result.error is None
    local.log.publish()
    events = [
        e.to_json() for e in watched(trusted, local, Monitor(NAMESPACE, [local.publisher.key_id]))
    ]
    assert [(e["event"], e.get("action"), e.get("reasons")) for e in events] == [
        ("registry", "register", None),
        ("registry", "add_key", None),
        ("notice", "deprecate", ["unknown_key"]),
    ]
    assert events[1]["key_ids"] == [bytes(added.key_id).hex()]


def test_other_namespaces_and_publishers_are_not_events(
    trusted: TrustedState, local: LocalLog
) -> None:
    other = Signer.generate("other")
    local.register(other, "org.other")
    [result] = local.log.sequence([make_envelope(other, 1)])
    assert result.error is None
    local.log.publish()
    monitor = Monitor(NAMESPACE, [local.publisher.key_id])
    assert [e.index for e in watched(trusted, local, monitor)] == [0]


def test_entries_of_a_refused_advance_are_never_reported(
    trusted: TrustedState, local: LocalLog
) -> None:
    """The watch saw the notice, but the advance failed later: nothing is noticed."""
    leaked = make_envelope(local.publisher, 1)
    leaves = [*local.log.tree.leaf_data(0, 1), notice_leaf(leaked)]
    note = sign_tree(local.signer, [*leaves, notice_leaf(make_envelope(local.publisher, 2))])
    seen: list[int] = []

    def monitor(index: int, entry: object, registry: object) -> object:
        seen.append(index)
        return index

    trusted.watch = monitor
    candidate = trusted.check_checkpoint(note)
    with pytest.raises(TreeMismatchError), trusted.advance(candidate) as session:
        session.add(leaves)
        session.finish()  # one entry short of the checkpoint
    assert seen == [0, 1]
    assert trusted.state.size == 0


# -- the journal -------------------------------------------------------------------------


def test_the_journal_finds_envelopes_written_after_it_was_opened(
    local: LocalLog, journal_dir: Path
) -> None:
    opened = Journal(journal_dir)
    envelope = make_envelope(local.publisher, 7)
    (journal_dir / "acme-7.envelope.json").write_bytes(envelope.canonical_bytes())
    assert opened.holds(envelope)
    assert not opened.holds(make_envelope(local.publisher, 8))


def test_a_journal_file_that_is_not_an_envelope_is_refused(journal_dir: Path) -> None:
    (journal_dir / "acme-1.envelope.json").write_text('{"not": "an envelope"}')
    with pytest.raises(JournalError) as refused:
        Journal(journal_dir)
    assert refused.value.code == "bad_journal"
    assert refused.value.path == journal_dir / "acme-1.envelope.json"


def test_a_journal_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JournalError):
        Journal(tmp_path / "missing")


@pytest.mark.parametrize("text", ["", "abc", "0011223", "001122334", "zz112233"])
def test_a_key_id_is_eight_hex_digits(text: str) -> None:
    with pytest.raises(ValueError):
        parse_key_id(text)
    assert parse_key_id("0a1b2c3d") == bytes.fromhex("0a1b2c3d")
