"""For tool authors: a deplog identity on every listed tool, and ``list_changed`` on news.

``stamp_tools`` gives each named tool of an SDK server (``FastMCP`` in 1.x, ``MCPServer``
in 2.x) its ``_meta["dev.deplog/tool"]``: the declared tool id and version, and the
digest of the input schema actually listed, computed at listing time (a changed
signature changes it); with a guard, its map proof too. Hosts check all of it themselves
(``client.cache.mcp``). ``ListChangedNotifier`` sends ``notifications/tools/list_changed``
to every client that listed the tools when deplog's verdict on one changes (or the state
goes stale or fresh), deciding from a ``Guard`` over the server's follower or a host's
state file.
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

__all__ = ["ListChangedNotifier", "ToolVersion", "stamp_tools"]

MAX_CLIENTS = 10_000
"""Listing clients a notifier remembers; the longest-silent are forgotten first."""

log = logging.getLogger("deplog.mcp")


def stamp_tools(
    server: Any, identities: Mapping[str, ToolVersion], *, proofs: Guard | None = None
) -> None:
    """Stamp ``_meta["dev.deplog/tool"]`` (and, with a ``proofs`` guard, the tool's map proof
    when there is one, never a stale one) on every listed tool named in ``identities``.
    Checked here, at start-up: the identities (``bad_tool_id``, ``bad_version``) and each
    name's tool (``ValueError``: none of that name, or a schema no guard can digest)."""
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
        """Refresh every ``interval`` s until ``stop`` (a follower in another process)."""
        while not stop.is_set():
            await self.refresh()
            await wait_until(stop, interval)
