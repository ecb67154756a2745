"""For tool authors: a deplog identity on every listed tool, and ``list_changed`` on news.

``stamp_tools`` gives each tool a server built with the SDK lists (``FastMCP``
in 1.x, ``MCPServer`` in 2.x) whose name it is given a ``_meta["dev.deplog/tool"]``:
the tool id and version the author declares, and the digest of the input
schema the server actually lists (computed at listing time, so a changed
signature changes the digest and a notice naming the old one refuses it). Given a
guard (``proofs=``), it also stamps each tool's map proof, so agents behind a
``ProvenClientSession`` check the tools' status without trusting the server. Hosts
check all of it themselves (``client.cache.mcp``): what is stamped here is what an
honest server says, never what a host believes because a server said it.

``ListChangedNotifier`` watches deplog's verdict on the server's tools and,
when a verified advance changes one (or the state goes stale or fresh
again), sends ``notifications/tools/list_changed`` to every connected client
that has listed the tools: the MCP way to say a cached tool list is out of
date. It reads the verdicts from a ``Guard``, over the server's own follower
(``follower.add_listener(notifier.on_advance)``) or over a host follower's
state file (``StateReader``, then ``await notifier.watch(stop)``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from mcp.server.session import ServerSession

from deplog.client.cache.guard import Guard
from deplog.client.cache.mcp import (
    IDENTITY_KEY,
    PROOF_KEY,
    ToolVersion,
    identity_annotation,
    listed_schema_digest,
)
from deplog.client.follow.follower import SyncResult
from deplog.client.mcp.compat import (
    advertise_tools_changed,
    connection_of,
    on_tools_listed,
    tool_manager,
)
from deplog.client.plumbing.waiting import wait_until

__all__ = ["MAX_CLIENTS", "ListChangedNotifier", "ToolVersion", "stamp_tools"]

MAX_CLIENTS = 10_000
"""Listing clients a notifier remembers; the longest-silent are forgotten first."""

log = logging.getLogger("deplog.mcp")


def stamp_tools(
    server: Any, identities: Mapping[str, ToolVersion], *, proofs: Guard | None = None
) -> None:
    """Stamp ``_meta["dev.deplog/tool"]`` on every listed tool named in ``identities``;
    with a ``proofs`` guard, also ``_meta["dev.deplog/proof"]``: the map proof of the tool's
    status record at the guard's checkpoint, which an agent checks without trusting this
    server (``client.mcp.session.ProvenClientSession``). None is stamped while the guard
    decides from no status (nothing verified yet, a stale state, a checkpoint without a
    map): a proof from an earlier listing is never left in place.

    Everything is checked here, so a mistake fails at start-up, not at the first listing:
    the identities (``DeplogError`` ``bad_tool_id`` or ``bad_version``), and each name's
    tool (``ValueError`` naming it: no tool of the server has that name, or its input
    schema has no deplog digest, a float or an integer beyond 2^53 - 1 in it, which every
    guard would refuse as ``schema_undigestable``). A schema that changes to one without
    a digest later is listed without ``schema_digest`` (the guards refuse that tool alone).
    """
    for identity in identities.values():
        identity_annotation(identity.tool_id, identity.version, None)
    manager = tool_manager(server)
    listing = manager.list_tools
    tools = {tool.name: tool for tool in listing()}
    for name in identities:
        if name not in tools:
            raise ValueError(f"stamp_tools: {name!r} is not a tool of this server")
        if listed_schema_digest({"inputSchema": tools[name].parameters}) is None:
            raise ValueError(
                f"stamp_tools: tool {name!r} lists an input schema deplog cannot digest (a"
                " float, or an integer beyond 2^53 - 1): guards refuse it, schema_undigestable"
            )

    def stamped() -> list[Any]:
        tools = listing()
        now = datetime.now(UTC)
        for tool in tools:
            identity = identities.get(tool.name)
            if identity is None:
                continue
            stamp = identity_annotation(identity.tool_id, identity.version, None)
            digest = listed_schema_digest({"inputSchema": tool.parameters})
            if digest is not None:
                stamp["schema_digest"] = digest
            meta = {**(tool.meta or {}), IDENTITY_KEY: stamp}
            meta.pop(PROOF_KEY, None)  # the same tool object every listing: no stale proof
            if proofs is not None:
                decision = proofs.check(
                    identity.tool_id, identity.version, cached_at=now, with_proof=True
                )
                if decision.proof is not None:
                    meta[PROOF_KEY] = json.loads(decision.proof)
            tool.meta = meta
        return list(tools)

    manager.list_tools = stamped


class ListChangedNotifier:
    """Sends ``tools/list_changed`` to listing clients when a listed tool's verdict changes."""

    def __init__(self, server: Any, guard: Guard, identities: Mapping[str, ToolVersion]) -> None:
        self.guard = guard
        self.identities = frozenset(identities.values())
        self.sent = 0
        self._sessions: OrderedDict[object, ServerSession] = OrderedDict()
        self._verdicts = self._decide()
        advertise_tools_changed(server)
        on_tools_listed(server, self._listed)

    def _listed(self, session: ServerSession) -> None:
        """Remember a listing client's connection, at most ``MAX_CLIENTS`` of them."""
        key = connection_of(session)
        self._sessions.pop(key, None)
        self._sessions[key] = session
        while len(self._sessions) > MAX_CLIENTS:
            self._sessions.popitem(last=False)

    def _decide(self) -> dict[ToolVersion, tuple[str, str]]:
        """The verdict and reason on each identity now (the server's definitions are current)."""
        now = datetime.now(UTC)
        verdicts = {}
        for identity in self.identities:
            decision = self.guard.check(identity.tool_id, identity.version, cached_at=now)
            verdicts[identity] = (decision.verdict.value, decision.reason)
        return verdicts

    async def refresh(self) -> bool:
        """Decide again; on any change, notify every listing client. Returns whether it did."""
        verdicts = self._decide()
        if verdicts == self._verdicts:
            return False
        self._verdicts = verdicts
        for key, session in list(self._sessions.items()):
            try:
                await session.send_tool_list_changed()
                self.sent += 1
            except Exception:  # a client that went away; the others still hear of it
                log.info("a client could not be told its tool list changed")
                self._sessions.pop(key, None)
        return True

    async def on_advance(self, result: SyncResult) -> None:
        """A follower listener: ``follower.add_listener(notifier.on_advance)``."""
        await self.refresh()

    async def watch(self, stop: asyncio.Event, interval: float = 0.05) -> None:
        """Refresh every ``interval`` s until ``stop``: for a guard over a ``StateReader``,
        whose follower is another process, and to notice the state going stale."""
        while not stop.is_set():
            await self.refresh()
            await wait_until(stop, interval)
