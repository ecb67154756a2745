"""The entries every explorer test browses: every kind of registry change, one notice of each
action, and one hostile message.

``seed`` appends a second publisher's whole life (``register``, ``add_key``,
``revoke_key``, ``revoke_publisher``) through the caller's admin path, then posts
the notices through the real ``POST /v1/notices`` of a running authority (in
process or not), in a fixed order, so the tests can name the log indexes. The
publisher ``acme`` owning ``org.acme`` must be registered at index 0 first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from deplog.client.model import canonical
from deplog.client.model.entries import PublisherStatement
from deplog.client.model.notice import Envelope
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope, publisher_statement

__all__ = ["HOSTILE_MESSAGE", "Seeded", "registry_changes", "seed"]

HOSTILE_MESSAGE = (
    '<script>document.title="pwned"</script><b id="injected">bold</b>'
    '<img src="x" id="injected-img" onerror="document.title=1"> & "quotes"'
)

WEATHER_EVENTS = [{"introduced": "1.0.0"}, {"fixed": "2.0.0"}]
PostNotice = Callable[[bytes], Awaitable[int]]
AppendStatement = Callable[[PublisherStatement], Awaitable[int]]


@dataclass(frozen=True)
class Seeded:
    """The log indexes of the seeded notices."""

    deprecated: int
    revoked: int
    withdrawn: int
    withdraw: int
    hostile: int
    registry: tuple[int, ...] = ()
    """``register``, ``add_key``, ``revoke_key`` and ``revoke_publisher`` of ``beta``."""
    ranged: int = 0
    """``tool:org.acme/weather`` 1.0.0 up to 2.0.0 revoked for security (a CVE and a GHSA)."""


def _body(envelope: Envelope) -> bytes:
    return canonical.dumps(envelope.to_json())


def registry_changes() -> list[PublisherStatement]:
    """Publisher ``beta`` (``org.beta``) registered, given a second key, its first key
    revoked, then revoked itself."""
    first, second = Signer.generate("beta"), Signer.generate("beta")
    return [
        publisher_statement("register", "beta", (first,), ("org.beta",)),
        publisher_statement("add_key", "beta", (second,)),
        publisher_statement("revoke_key", "beta", (first,)),
        publisher_statement("revoke_publisher", "beta"),
    ]


async def seed(publisher: Signer, post: PostNotice, append: AppendStatement) -> Seeded:
    """Append ``registry_changes``, then post a deprecation, a revocation, a withdrawn
    deprecation and its withdraw, a notice whose message is markup, and a revoked range and a
    deprecated version of one tool."""
    registry = tuple([await append(statement) for statement in registry_changes()])
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
    ranged = await post(
        notice(
            6,
            tool="tool:org.acme/weather",
            action="revoke",
            affected={"ranges": [{"type": "SEMVER", "events": WEATHER_EVENTS}]},
            reasons=["security"],
            advisories=["CVE-2026-4242", "GHSA-2345-6789-cfgh"],
            message="Upgrade to 2.3.1 at least.",
        )
    )
    await post(
        notice(
            7,
            tool="tool:org.acme/weather",
            affected={"versions": ["2.3.1"]},
            replacement={"tool_id": "tool:org.acme/weather", "version": "3.0.0"},
        )
    )
    return Seeded(deprecated, revoked, withdrawn, withdraw, hostile, registry, ranged)
