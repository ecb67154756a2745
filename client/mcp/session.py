"""A guarded MCP client session: the agent's side of deplog, in front of any MCP server.

``GuardedClientSession`` is the SDK's ``ClientSession`` with two answers changed (the
rules of ``client.cache.mcp``, with the host's ``pins``):

1. ``list_tools`` drops the tools refused and, unless ``keep_unverified``, those it
   cannot vouch for, and marks deprecated ones ``_meta["dev.deplog/deprecation"]`` (and,
   with ``describe_deprecations``, one line in their description); tools that are not
   deplog's pass, unless ``require_pins``.
2. ``call_tool`` on a tool it would drop returns an MCP error result (``isError``) whose
   text is a sentence a model can act on (``refusal_text``), with
   ``_meta["dev.deplog/refusal"]``, and never calls the server. A call is decided on the
   tool as last listed: a name never listed is listed first (then ``not_listed`` or
   ``not_pinned``), and a listing older than the tool's latest notice is refreshed once
   before deciding.

``ProvenClientSession`` is the same for an agent without a follower: it trusts only its
``verify_checkpoint`` and decides from the map proofs stamped on the tools
(``client.cache.listing_proofs``). A tool without a proof is unverified; one whose proof
does not verify is dropped and refused always; a call checks its proof again at the
time of the call, listing again once if it went stale.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any, TypeVar

from mcp import ClientSession, types

from deplog.client.cache.guard import Decider, Decision, Verdict
from deplog.client.cache.listing_proofs import ListedTool, VerifyCheckpoint, verify_listing
from deplog.client.cache.mcp import (
    DEPRECATION_KEY,
    REFUSAL_KEY,
    ListedIdentity,
    Pins,
    check_listed,
    checked_pins,
    decide_listed,
    deprecation_annotation,
    deprecation_line,
    may_list,
    refusal_annotation,
    refusal_text,
    unlisted_refusal,
)
from deplog.client.mcp.compat import to_wire

__all__ = [
    "GuardedClientSession",
    "ProvenClientSession",
    "refusal_result",
]

MAX_LISTED = 100_000
"""Tool names a session remembers from listings, for deciding calls."""
MAX_LIST_PAGES = 1_000
"""Pages of a tool list a session reads to learn the tools behind a name it is to call."""
V = TypeVar("V")


def refusal_result(decision: Decision, name: str | None = None) -> types.CallToolResult:
    """The error result of a call deplog did not let through (to the tool called ``name``):
    ``refusal_text``'s sentence, and ``_meta["dev.deplog/refusal"]``."""
    refusal = refusal_annotation(decision)
    if name is not None:
        refusal["name"] = name
    return types.CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": refusal_text(decision, name)}],
            "isError": True,
            "_meta": {REFUSAL_KEY: refusal},
        }
    )


class GuardedClientSession(ClientSession):
    """``ClientSession`` whose tool list and calls go through a deplog ``Guard``, or a
    ``LightVerifier`` (rules 1, 2)."""

    def __init__(
        self,
        *args: Any,
        guard: Decider,
        keep_unverified: bool = False,
        pins: Pins | None = None,
        require_pins: bool = False,
        describe_deprecations: bool = False,
        **kwargs: Any,
    ) -> None:
        pinned = checked_pins(pins)  # before anything is set up: a typo fails here
        super().__init__(*args, **kwargs)
        self.guard = guard
        self.keep_unverified = keep_unverified
        self.pins = pinned
        self.require_pins = require_pins
        self.describe_deprecations = describe_deprecations
        self._listed: OrderedDict[str, tuple[ListedIdentity | Decision | None, float]] = (
            OrderedDict()
        )
        """Per tool name (at most ``MAX_LISTED``): ``check_listed``'s answer, and when."""

    async def list_tools(self, *args: Any, **kwargs: Any) -> Any:
        result = await super().list_tools(*args, **kwargs)
        checked = (
            check_listed(t, self.pins, require_pins=self.require_pins)
            for t in to_wire(result)["tools"]
        )
        await self.guard.prepare([c.tool_id for c in checked if isinstance(c, ListedIdentity)])
        return self.guard_listing(result)

    def guard_listing(self, result: Any) -> Any:
        """A ``ListToolsResult`` fetched just now, with the guard's verdicts applied."""
        listed_at = time.time()
        cached_at = datetime.fromtimestamp(listed_at, UTC)
        kept = []
        for tool, listed in zip(result.tools, to_wire(result)["tools"], strict=True):
            checked = check_listed(listed, self.pins, require_pins=self.require_pins)
            _remember(self._listed, tool.name, (checked, listed_at))
            decision = decide_listed(checked, self.guard, cached_at=cached_at)
            if decision is None:
                kept.append(tool)
            elif may_list(decision, keep_unverified=self.keep_unverified):
                kept.append(_with_deprecation(tool, decision, self.describe_deprecations))
        return result.model_copy(update={"tools": kept})

    async def call_tool(self, name: str, arguments: Any = None, *args: Any, **kwargs: Any) -> Any:
        decision = await self._decide(name)
        if decision is not None and not may_list(decision, keep_unverified=self.keep_unverified):
            return refusal_result(decision, name)
        return await super().call_tool(name, arguments, *args, **kwargs)

    async def _decide(self, name: str) -> Decision | None:
        """The decision on a tool as last listed; None for a tool that is not deplog's."""
        if name not in self._listed:
            await self._relist()
        checked = self._listed.get(name, (None, 0.0))[0]
        if isinstance(checked, ListedIdentity):
            await self.guard.prepare([checked.tool_id])
        decision = self._decision(name)
        if decision is not None and decision.reason == "cache_predates_notice":
            await self._relist()
            decision = self._decision(name)
        return decision

    def _decision(self, name: str) -> Decision | None:
        if name not in self._listed:
            return unlisted_refusal(name, self.pins, require_pins=self.require_pins)
        checked, listed_at = self._listed[name]
        cached_at = datetime.fromtimestamp(listed_at, UTC)
        return decide_listed(checked, self.guard, cached_at=cached_at)

    async def _relist(self) -> None:
        await _list_every_page(self)


class ProvenClientSession(ClientSession):
    """``ClientSession`` deciding from the map proofs stamped on the tools, with no follower."""

    def __init__(
        self,
        *args: Any,
        verify_checkpoint: VerifyCheckpoint,
        keep_unverified: bool = False,
        pins: Pins | None = None,
        require_pins: bool = False,
        describe_deprecations: bool = False,
        **kwargs: Any,
    ) -> None:
        pinned = checked_pins(pins)  # before anything is set up: a typo fails here
        super().__init__(*args, **kwargs)
        self.verify_checkpoint = verify_checkpoint
        self.keep_unverified = keep_unverified
        self.pins = pinned
        self.require_pins = require_pins
        self.describe_deprecations = describe_deprecations
        self._listed: OrderedDict[str, dict[str, Any]] = OrderedDict()
        """Per tool name (at most ``MAX_LISTED``): the tool as last listed, in wire form."""

    async def list_tools(self, *args: Any, **kwargs: Any) -> Any:
        return self.prove_listing(await super().list_tools(*args, **kwargs))

    def prove_listing(self, result: Any) -> Any:
        """A ``ListToolsResult`` fetched just now, keeping the tools its proofs allow."""
        now = datetime.now(UTC)
        wire = to_wire(result)
        proven = {t.position: t for t in self._verify(wire, now)}
        kept = []
        for position, (tool, listed) in enumerate(zip(result.tools, wire["tools"], strict=True)):
            _remember(self._listed, tool.name, listed)
            checked = proven.get(position)
            if checked is None:  # not deplog's to decide
                kept.append(tool)
                continue
            decision = checked.decision(now)
            if self._may_use(checked, decision):
                kept.append(_with_deprecation(tool, decision, self.describe_deprecations))
        return result.model_copy(update={"tools": kept})

    async def call_tool(self, name: str, arguments: Any = None, *args: Any, **kwargs: Any) -> Any:
        if name not in self._listed:
            await _list_every_page(self)
        if name not in self._listed:
            refused = unlisted_refusal(name, self.pins, require_pins=self.require_pins)
            if refused is not None:
                return refusal_result(refused, name)
        checked = self._check(name)
        if checked is not None and checked.verdict == Verdict.STALE:
            await _list_every_page(self)  # the server may hold a newer proof by now
            checked = self._check(name)
        if checked is not None:
            decision = checked.decision(datetime.now(UTC))
            if not self._may_use(checked, decision):
                return refusal_result(decision, name)
        return await super().call_tool(name, arguments, *args, **kwargs)

    def _verify(self, wire: dict[str, Any], now: datetime) -> list[ListedTool]:
        return verify_listing(
            wire, self.verify_checkpoint, now, pins=self.pins, require_pins=self.require_pins
        )

    def _check(self, name: str) -> ListedTool | None:
        """The tool as last listed, its proof checked now; None when it is not deplog's."""
        listed = self._listed.get(name)
        if listed is None:
            return None
        checked = self._verify({"tools": [listed]}, datetime.now(UTC))
        return checked[0] if checked else None

    def _may_use(self, checked: ListedTool, decision: Decision) -> bool:
        """Listed and callable (``may_list``), never on a proof that does not verify."""
        return checked.failure is None and may_list(decision, keep_unverified=self.keep_unverified)


def _remember(listed: OrderedDict[str, V], name: str, value: V) -> None:
    """Note what a listing said about ``name``, forgetting the oldest past ``MAX_LISTED``."""
    listed.pop(name, None)
    listed[name] = value
    while len(listed) > MAX_LISTED:
        listed.popitem(last=False)


def _with_deprecation(tool: Any, decision: Decision, describe: bool) -> Any:
    """A listed tool, with ``_meta["dev.deplog/deprecation"]`` if the decision warns, and
    with ``describe`` the ``deprecation_line`` in its description."""
    if decision.verdict != Verdict.WARN:
        return tool
    meta = {**(tool.meta or {}), DEPRECATION_KEY: deprecation_annotation(decision)}
    update: dict[str, Any] = {"meta": meta}
    if describe:
        line = deprecation_line(decision)
        update["description"] = f"{tool.description}\n\n{line}" if tool.description else line
    return tool.model_copy(update=update)


async def _list_every_page(session: ClientSession) -> None:
    """Every page of the server's tool list (at most ``MAX_LIST_PAGES``), through
    ``session.list_tools``, which remembers the tools."""
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
        page = to_wire(await session.list_tools(params=params))
        cursor = page.get("nextCursor")
        if not cursor:
            return
