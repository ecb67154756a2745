"""A guarded MCP client session: the agent's side of deplog, in front of any MCP server.

``GuardedClientSession`` is the SDK's ``ClientSession`` with two answers changed:

* ``list_tools`` drops the tools the guard refuses (revoked, sunset, schema
  mismatch) and, unless ``keep_unverified``, those it cannot vouch for
  (stale or unknown verdicts); it annotates deprecated ones with
  ``_meta["dev.deplog/deprecation"]`` (``deplog.client.cache.mcp``). Tools
  without a ``dev.deplog/tool`` identity pass through.
* ``call_tool`` on a tool the guard would drop returns an MCP error result
  (``isError``) naming the verdict, the reason and the checkpoint the
  decision was made at, in its text and in ``_meta["dev.deplog/refusal"]``,
  and never sends the call to the server.

A call is decided on the identity the server last listed for that name; a
name never listed is looked up with a fresh listing first, and a listing
older than the latest notice about the tool (``cache_predates_notice``) is
refreshed once before deciding, so a new definition is not refused on an old
one's account.

``ProvenClientSession`` is the same for an agent that runs no follower: it trusts
only its own ``verify_checkpoint`` (the log's key, or a witness policy with a
freshness bound), and decides from the map proofs the server or gateway stamps on
its tools (``stamp_tools(..., proofs=guard)``, ``guard_tools_list(...,
with_proof=True)``), checked by ``client.cache.listing_proofs``. A tool without a
proof is unverified (dropped and its calls refused, unless ``keep_unverified``); one
whose proof or checkpoint does not verify is dropped and refused always. A call is
decided on the tool as last listed, its proof checked again at the time of the call
(a sunset may have passed, the checkpoint may have aged past the policy's bound: then
the tools are listed again once before deciding).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any, TypeVar

from mcp import ClientSession, types

from deplog.client.cache.guard import Decision, Guard, Verdict
from deplog.client.cache.listing_proofs import ListedTool, VerifyCheckpoint, verify_listing
from deplog.client.cache.mcp import (
    DEPRECATION_KEY,
    IDENTITY_KEY,
    REFUSAL_KEY,
    deprecation_annotation,
    identity_decision,
    may_list,
    refusal_annotation,
)
from deplog.client.mcp.compat import to_wire

__all__ = [
    "MAX_LISTED",
    "MAX_LIST_PAGES",
    "GuardedClientSession",
    "ProvenClientSession",
    "refusal_result",
]

MAX_LISTED = 100_000
"""Tool names a session remembers from listings, for deciding calls."""
MAX_LIST_PAGES = 1_000
"""Pages of a tool list a session reads to learn the tools behind a name it is to call."""
V = TypeVar("V")


def refusal_result(decision: Decision) -> types.CallToolResult:
    """The error result of a call deplog did not let through."""
    through = decision.processed_through
    at = "nothing verified yet" if through is None else f"checkpoint size {through.size}"
    text = (
        f"deplog refused {decision.tool_id}@{decision.version}: verdict {decision.verdict.value},"
        f" reason {decision.reason}, processed through {at}"
    )
    return types.CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": text}],
            "isError": True,
            "_meta": {REFUSAL_KEY: refusal_annotation(decision)},
        }
    )


class GuardedClientSession(ClientSession):
    """``ClientSession`` whose tool list and tool calls go through a deplog ``Guard``."""

    def __init__(
        self, *args: Any, guard: Guard, keep_unverified: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard
        self.keep_unverified = keep_unverified
        self._listed: OrderedDict[str, tuple[object, float]] = OrderedDict()
        """Per tool name: its ``dev.deplog/tool`` value (None: none) and when it was listed
        (at most ``MAX_LISTED`` names, the longest unlisted forgotten first)."""

    async def list_tools(self, *args: Any, **kwargs: Any) -> Any:
        return self.guard_listing(await super().list_tools(*args, **kwargs))

    def guard_listing(self, result: Any) -> Any:
        """A ``ListToolsResult`` fetched just now, with the guard's verdicts applied (the
        listed identities are remembered for ``call_tool``)."""
        listed_at = time.time()
        cached_at = datetime.fromtimestamp(listed_at, UTC)
        kept = []
        for tool in result.tools:
            identity = (tool.meta or {}).get(IDENTITY_KEY)
            _remember(self._listed, tool.name, (identity, listed_at))
            decision = identity_decision(identity, self.guard, cached_at=cached_at)
            if decision is None:
                kept.append(tool)
            elif may_list(decision, keep_unverified=self.keep_unverified):
                kept.append(_with_deprecation(tool, decision))
        return result.model_copy(update={"tools": kept})

    async def call_tool(self, name: str, arguments: Any = None, *args: Any, **kwargs: Any) -> Any:
        decision = await self._decide(name)
        if decision is not None and not may_list(decision, keep_unverified=self.keep_unverified):
            return refusal_result(decision)
        return await super().call_tool(name, arguments, *args, **kwargs)

    async def _decide(self, name: str) -> Decision | None:
        """The guard's decision on a tool's listed identity; None for a tool without one."""
        if name not in self._listed:
            await self._relist()
        decision = self._decision(name)
        if decision is not None and decision.reason == "cache_predates_notice":
            await self._relist()
            decision = self._decision(name)
        return decision

    def _decision(self, name: str) -> Decision | None:
        identity, listed_at = self._listed.get(name, (None, 0.0))
        cached_at = datetime.fromtimestamp(listed_at, UTC)
        return identity_decision(identity, self.guard, cached_at=cached_at)

    async def _relist(self) -> None:
        await _list_every_page(self)


class ProvenClientSession(ClientSession):
    """``ClientSession`` that lists and calls only the tools whose stamped map proofs show
    them servable under checkpoints ``verify_checkpoint`` accepts (no follower needed)."""

    def __init__(
        self,
        *args: Any,
        verify_checkpoint: VerifyCheckpoint,
        keep_unverified: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.verify_checkpoint = verify_checkpoint
        self.keep_unverified = keep_unverified
        self._listed: OrderedDict[str, dict[str, Any]] = OrderedDict()
        """Per tool name: the tool as last listed (wire form), its proof included (at most
        ``MAX_LISTED`` names, the longest unlisted forgotten first)."""

    async def list_tools(self, *args: Any, **kwargs: Any) -> Any:
        return self.prove_listing(await super().list_tools(*args, **kwargs))

    def prove_listing(self, result: Any) -> Any:
        """A ``ListToolsResult`` fetched just now, keeping the tools its proofs allow (each
        distinct checkpoint verified once); the listed tools are remembered for calls."""
        now = datetime.now(UTC)
        wire = to_wire(result)
        proven = {t.position: t for t in verify_listing(wire, self.verify_checkpoint, now)}
        kept = []
        for position, (tool, listed) in enumerate(zip(result.tools, wire["tools"], strict=True)):
            _remember(self._listed, tool.name, listed)
            checked = proven.get(position)
            if checked is None:  # no deplog identity: not deplog's to decide
                kept.append(tool)
                continue
            decision = checked.decision(now)
            if self._may_use(checked, decision):
                kept.append(_with_deprecation(tool, decision))
        return result.model_copy(update={"tools": kept})

    async def call_tool(self, name: str, arguments: Any = None, *args: Any, **kwargs: Any) -> Any:
        if name not in self._listed:
            await _list_every_page(self)
        checked = self._check(name)
        if checked is not None and checked.verdict == Verdict.STALE:
            await _list_every_page(self)  # the server may hold a newer proof by now
            checked = self._check(name)
        if checked is not None:
            decision = checked.decision(datetime.now(UTC))
            if not self._may_use(checked, decision):
                return refusal_result(decision)
        return await super().call_tool(name, arguments, *args, **kwargs)

    def _check(self, name: str) -> ListedTool | None:
        """The tool as last listed, its proof checked now; None without a deplog identity."""
        listed = self._listed.get(name)
        if listed is None:
            return None
        checked = verify_listing({"tools": [listed]}, self.verify_checkpoint, datetime.now(UTC))
        return checked[0] if checked else None

    def _may_use(self, checked: ListedTool, decision: Decision) -> bool:
        """Listed and callable: proven servable; with ``keep_unverified`` also unproven or
        stale, never a proof that does not verify."""
        return checked.failure is None and may_list(decision, keep_unverified=self.keep_unverified)


def _remember(listed: OrderedDict[str, V], name: str, value: V) -> None:
    """Note what a listing said about ``name``; past ``MAX_LISTED`` names (a server that
    keeps inventing tools) the one listed longest ago is forgotten: a call to it lists
    again first, as to a name never listed."""
    listed.pop(name, None)
    listed[name] = value
    while len(listed) > MAX_LISTED:
        listed.popitem(last=False)


def _with_deprecation(tool: Any, decision: Decision) -> Any:
    """A listed tool, with ``_meta["dev.deplog/deprecation"]`` if the decision warns."""
    if decision.verdict != Verdict.WARN:
        return tool
    meta = {**(tool.meta or {}), DEPRECATION_KEY: deprecation_annotation(decision)}
    return tool.model_copy(update={"meta": meta})


async def _list_every_page(session: ClientSession) -> None:
    """Every page of the server's tool list, through ``session.list_tools`` (which remembers
    the tools behind the names), up to ``MAX_LIST_PAGES``: a server whose cursor never
    ends does not hold a call forever (a name on no page read is decided as never listed)."""
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
        page = to_wire(await session.list_tools(params=params))
        cursor = page.get("nextCursor")
        if not cursor:
            return
