"""The agent's MCP sessions keep what listings said about each tool name, within a bound."""

from __future__ import annotations

from collections import OrderedDict

import pytest

from deplog.client.mcp import session


def test_a_session_remembers_at_most_max_listed_names_forgetting_the_oldest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session, "MAX_LISTED", 3)
    listed: OrderedDict[str, int] = OrderedDict()
    for name in ("a", "b", "c", "a", "d", "e"):
        session._remember(listed, name, ord(name))
    assert list(listed) == ["a", "d", "e"]  # "a" listed again after "b" and "c"
