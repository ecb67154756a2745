"""Fixtures: a real authority process with real keys and registered publishers.

The authority's log is in SQLite (``data/log.db``). A test or module marked
``both_backends`` runs twice: on SQLite and on PostgreSQL, where the authority is
``authority serve --db postgresql://...`` over a fresh database of the session's cluster
(``authority_db``, tests/conftest.py), migrated by ``authority migrate`` first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from deplog.client.tlog.note import Signer
from tests.integration.harness import AuthorityProcess


@pytest.fixture
def authority_files(
    tmp_path: Path, publisher: Signer, authority_db: str | None
) -> AuthorityProcess:
    """An initialized authority with publisher ``acme`` owning ``org.acme``."""
    authority = AuthorityProcess(tmp_path / "authority", db=authority_db)
    authority.init()
    authority.add_publisher(publisher, "org.acme")
    return authority


@pytest.fixture
def authority(authority_files: AuthorityProcess) -> Iterator[AuthorityProcess]:
    authority_files.start()
    yield authority_files
    authority_files.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        yield session
