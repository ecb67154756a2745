"""Fixtures shared by the client-side tests: a real local log and a follower state fed by it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import TrustedState
from tests.local_log import ORIGIN, LocalLog


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
