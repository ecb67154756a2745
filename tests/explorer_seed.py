"""The notices every explorer test browses: one of each action, and one hostile message.

``seed`` posts them through the real ``POST /v1/notices`` of a running
authority (in process or not) in a fixed order, so the tests can name the log
indexes. The publisher ``acme`` owning ``org.acme`` must be registered at
index 0 first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from deplog.client.model import canonical
from deplog.client.model.notice import Envelope
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope

__all__ = ["HOSTILE_MESSAGE", "Seeded", "seed"]

HOSTILE_MESSAGE = (
    '<script>document.title="pwned"</script><b id="injected">bold</b>'
    '<img src="x" id="injected-img" onerror="document.title=1"> & "quotes"'
)

PostNotice = Callable[[bytes], Awaitable[int]]


@dataclass(frozen=True)
class Seeded:
    """The log indexes of the seeded notices."""

    deprecated: int
    revoked: int
    withdrawn: int
    withdraw: int
    hostile: int


def _body(envelope: Envelope) -> bytes:
    return canonical.dumps(envelope.to_json())


async def seed(publisher: Signer, post: PostNotice) -> Seeded:
    """Post a deprecation, a revocation, a withdrawn deprecation and its withdraw, and a notice
    whose message is markup."""
    sign: Callable[..., Envelope] = make_envelope

    def notice(sequence: int, **fields: Any) -> bytes:
        return _body(sign(publisher, sequence, **fields))

    deprecated = await post(
        notice(
            1,
            tool="tool:org.acme/search",
            sunset_at="2027-06-01T00:00:00Z",
            replacement={"tool_id": "tool:org.acme/search", "version": "2.0.0"},
            schema_digest="sha256:" + "ab" * 32,
        )
    )
    revoked = await post(
        notice(
            2,
            tool="tool:org.acme/fetch",
            action="revoke",
            reasons=["security"],
            advisories=["CVE-2026-1234"],
        )
    )
    withdrawn = await post(notice(3, tool="tool:org.acme/legacy"))
    withdraw = await post(
        notice(
            4,
            tool="tool:org.acme/legacy",
            action="withdraw",
            affected=None,
            withdraws=withdrawn,
            reasons=["other"],
        )
    )
    hostile = await post(notice(5, tool="tool:org.acme/markup", message=HOSTILE_MESSAGE))
    return Seeded(deprecated, revoked, withdrawn, withdraw, hostile)
