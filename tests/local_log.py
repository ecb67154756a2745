"""A real authority log in a temporary SQLite file, and a follower state fed from it in-process.

For unit tests of the client side that need real signed checkpoints, real
leaves and real proofs but no HTTP: ``LocalLog.sync(trusted)`` performs the
same verified steps as ``client.follower.Follower.sync``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deplog.authority.log import Log
from deplog.client.follow.trust import Advanced, TrustedState
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import ConsistencyProof
from tests.builders import make_envelope, register

ORIGIN = "local.deplog.example/log"


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

    def sync(self, trusted: TrustedState) -> Advanced | None:
        """Verify and fold the log's latest checkpoint, as a follower would."""
        published = self.log.published
        assert published is not None
        candidate = trusted.check_checkpoint(published.note)
        old = trusted.state.size
        new = candidate.checkpoint.size
        if new == old:
            trusted.refresh(candidate)
            return None
        proof = ConsistencyProof(old, new, tuple(self.log.tree.consistency_proof(old, new)))
        trusted.check_consistency(candidate, proof)
        with trusted.advance(candidate) as session:
            session.add(self.log.tree.leaf_data(old, new))
            return session.finish()
