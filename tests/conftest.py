"""Fixtures shared by the unit tests: real keys, a settable clock, a real local log and a
follower state fed by it. The values they hold are built by ``tests/builders.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import TrustedState
from deplog.client.model.notice import Envelope
from deplog.client.tlog.note import Signer
from tests.builders import ORIGIN, Clock, LocalLog, make_notice


@pytest.fixture(scope="session")
def authority() -> Signer:
    """The authority's log key, which signs publisher statements (under tests/integration,
    ``authority`` is a running authority server instead)."""
    return Signer.generate("log.example.org")


@pytest.fixture(scope="session")
def publisher_key() -> Signer:
    """The publisher's signing key."""
    return Signer.generate("example-key-1")


@pytest.fixture
def signed_envelope(publisher_key: Signer) -> Envelope:
    """A valid deprecate notice signed by ``publisher_key``."""
    return Envelope.sign(make_notice(), publisher_key)


@pytest.fixture
def clock() -> Clock:
    """A settable clock, starting now."""
    return Clock()


@pytest.fixture
def local(tmp_path: Path) -> LocalLog:
    """An authority log in a temporary SQLite file, publisher acme owning org.acme."""
    return LocalLog(tmp_path)


@pytest.fixture
def trusted(tmp_path: Path, local: LocalLog) -> Iterator[TrustedState]:
    """A follower's trusted state for ``local``'s log; nothing synced yet."""
    state = LocalState(tmp_path / "follower.db", ORIGIN)
    yield TrustedState(state, local.signer.verifier())
    state.close()
