"""A real authority log in a temporary SQLite file, and a follower state fed from it in-process.

For unit tests of the client side that need real signed checkpoints, real
leaves and real proofs but no HTTP: ``InProcessLogSource`` reads an authority
``Log`` as a ``LogSource``, ``LocalLog.sync(trusted)`` takes the follower's
own verified step (``client.follow.source.sync_step``) over it, and
``LocalLog.snapshot()`` copies the log into a ``MemoryLogSource``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deplog.authority.log import Log
from deplog.client.errors import ErrorCode
from deplog.client.follow.source import FetchError, MemoryLogSource, sync_step
from deplog.client.follow.trust import Advanced, TrustedState
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import ConsistencyProof
from tests.builders import make_envelope, register

ORIGIN = "local.deplog.example/log"


class InProcessLogSource:
    """An authority ``Log`` read as the authority's HTTP API would answer, without HTTP:
    its latest published checkpoint, the proofs its own tree computes, its stored leaves."""

    def __init__(self, log: Log) -> None:
        self.log = log

    async def checkpoint(self) -> bytes:
        assert self.log.published is not None
        return self.log.published.note

    async def consistency(self, old: int, new: int) -> ConsistencyProof:
        if not 0 <= old <= new <= self.log.tree.size:
            raise FetchError(ErrorCode.FETCH_FAILED, "no proof between those sizes")
        return ConsistencyProof(old, new, tuple(self.log.tree.consistency_proof(old, new)))

    async def entries(self, start: int, end: int) -> Sequence[bytes]:
        if not 0 <= start < end <= self.log.tree.size:
            raise FetchError(ErrorCode.FETCH_FAILED, "no entries in that range")
        return self.log.tree.leaf_data(start, end)


class LocalLog:
    """An authority ``Log`` with publisher ``acme`` owning ``org.acme``."""

    def __init__(self, directory: Path) -> None:
        self.signer = Signer.generate(ORIGIN)
        self.log = Log(directory / "authority.db", self.signer, ORIGIN)
        self.publisher = Signer.generate("acme")
        self.register(self.publisher, "org.acme")
        self.sequence = 0

    def register(self, publisher: Signer, namespace: str) -> None:
        register(self.log, publisher, namespace)
        self.log.publish()

    def publish(self, **fields: Any) -> int:
        """Append one notice by ``acme`` about ``tool:org.acme/search``; returns its index."""
        self.sequence += 1
        envelope = make_envelope(self.publisher, self.sequence, **fields)
        [result] = self.log.sequence([envelope])
        assert result.index is not None, result.error
        return result.index

    def snapshot(self) -> MemoryLogSource:
        """The log as it stands, held in memory: its signed checkpoint and every leaf under it."""
        published = self.log.published
        assert published is not None
        return MemoryLogSource(published.note, self.log.tree.leaf_data(0, published.size))

    def sync(self, trusted: TrustedState) -> Advanced | None:
        """Verify and fold the log's latest checkpoint, as a follower would."""
        return asyncio.run(sync_step(InProcessLogSource(self.log), trusted))
