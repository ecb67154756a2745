"""The agent's MCP sessions keep what listings said about each tool name, and read a
server's tool list, within bounds."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from mcp import types

from deplog.client.mcp import session


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
