"""The agent's MCP sessions keep what listings said about each tool name, read a server's
tool list within bounds, hold to the pins they are given, and say why they refuse."""

from __future__ import annotations

from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from mcp import types

from deplog.client.cache.guard import Decision, ProcessedThrough, Verdict
from deplog.client.cache.mcp import REFUSAL_KEY, ToolVersion
from deplog.client.errors import DeplogError
from deplog.client.mcp import session
from deplog.client.mcp.compat import to_wire
from deplog.client.model.notice import Replacement
from deplog.client.model.status import VersionStatus


def test_a_session_remembers_at_most_max_listed_names_forgetting_the_oldest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session, "MAX_LISTED", 3)
    listed: OrderedDict[str, int] = OrderedDict()
    for name in ("a", "b", "c", "a", "d", "e"):
        session._remember(listed, name, ord(name))
    assert list(listed) == ["a", "d", "e"]  # "a" listed again after "b" and "c"


class EndlessPages:
    """A server whose tool list never ends: every page names one more tool and a cursor."""

    def __init__(self) -> None:
        self.pages = 0

    async def list_tools(self, params: object = None) -> types.ListToolsResult:
        self.pages += 1
        return types.ListToolsResult.model_validate(
            {
                "tools": [{"name": f"t{self.pages}", "inputSchema": {"type": "object"}}],
                "nextCursor": str(self.pages),
            }
        )


async def test_listing_every_page_stops_at_max_list_pages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session, "MAX_LIST_PAGES", 5)
    server = EndlessPages()
    await session._list_every_page(server)  # type: ignore[arg-type]
    assert server.pages == 5


def test_a_refusal_on_the_listing_says_so_names_the_tool_and_no_checkpoint() -> None:
    decision = Decision(Verdict.REFUSE, "identity_mismatch", "tool:org.acme/a", "1.0.0", None)
    refused = to_wire(session.refusal_result(decision, "a"))
    assert refused["isError"] is True
    assert refused["content"][0]["text"] == (
        "deplog refused the call to tool:org.acme/a@1.0.0: the server declares another "
        "identity than the one the host pinned. Do not call it again as it is; decided on "
        "the tool server's listing alone (verdict refuse, reason identity_mismatch)."
    )
    assert refused["_meta"][REFUSAL_KEY] == {
        "verdict": "refuse",
        "reason": "identity_mismatch",
        "tool_id": "tool:org.acme/a",
        "version": "1.0.0",
        "name": "a",
    }


@pytest.mark.parametrize("kind", ["guarded", "proven"])
async def test_a_session_refuses_a_bad_pin_when_made(kind: str) -> None:
    to_server, from_client = anyio.create_memory_object_stream[Any](1)
    to_client, from_server = anyio.create_memory_object_stream[Any](1)
    trust: dict[str, Any] = {"guard": None} if kind == "guarded" else {"verify_checkpoint": None}
    made = session.GuardedClientSession if kind == "guarded" else session.ProvenClientSession
    pins = {"search": ToolVersion("search", "1.0.0")}  # not a tool id
    with pytest.raises(DeplogError) as raised:
        made(from_server, to_server, pins=pins, **trust)
    for stream in (to_server, from_client, to_client, from_server):
        stream.close()
    assert raised.value.code == "bad_tool_id"


def test_a_revoked_tools_refusal_says_why_what_instead_since_when_and_the_checkpoint() -> None:
    status = VersionStatus(
        "tool:org.acme/weather",
        "1.5.0",
        "revoked",
        notices=(3,),
        effective_at=datetime(2026, 2, 1, tzinfo=UTC),
        replacement=Replacement.from_json({"tool_id": "tool:org.acme/weather", "version": "2.0.0"}),
        reasons=("security",),
        advisories=("CVE-2026-1234", "GHSA-23cf-gh45-mpqr"),
    )
    through = ProcessedThrough("checkpoint", 39, datetime(2026, 3, 1, tzinfo=UTC))
    decision = Decision(
        Verdict.REFUSE, "revoked", status.tool_id, "1.5.0", through, status, message="RCE"
    )
    assert to_wire(session.refusal_result(decision, "weather"))["content"][0]["text"] == (
        "deplog refused the call to tool:org.acme/weather@1.5.0: the deplog log says it is "
        "revoked since 2026-02-01T00:00:00Z; reasons security; advisories CVE-2026-1234, "
        'GHSA-23cf-gh45-mpqr; the publisher says "RCE"; use tool:org.acme/weather@2.0.0 '
        "instead. Do not call it again as it is; decided at checkpoint size 39 of the log "
        "(verdict refuse, reason revoked, log indexes 3)."
    )
