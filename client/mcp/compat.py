"""The one place that knows which major version of the MCP Python SDK is installed.

deplog supports ``mcp`` 2.x (``deplog[mcp]``) and 1.x from 1.26 (``deplog[mcp1]``, the
ContextForge gateway's line). The majors differ in field names, in the high-level server
and in how a request finds its session, not on the wire: everything else reads and
builds SDK models as wire-format dicts (``to_wire``, ``model_validate``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from mcp import types
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.session import ServerSession

SDK_MAJOR = int(version("mcp").split(".", 1)[0])


def to_wire(model: Any) -> dict[str, Any]:
    """An SDK model as the JSON object the protocol carries (camelCase, ``_meta``)."""
    wire: dict[str, Any] = model.model_dump(by_alias=True, exclude_none=True, mode="json")
    return wire


def tool_manager(server: Any) -> Any:
    """The tool registry behind every ``tools/list`` (no public hook in either major)."""
    return server._tool_manager


def _lowlevel(server: Any) -> Any:
    return server._lowlevel_server if SDK_MAJOR >= 2 else server._mcp_server


def advertise_tools_changed(server: Any) -> None:
    """Make a high-level server advertise ``tools.listChanged`` (both majors leave it off)."""
    lowlevel = _lowlevel(server)
    original = lowlevel.create_initialization_options

    @functools.wraps(original)
    def create(notification_options: NotificationOptions | None = None, *a: Any, **k: Any) -> Any:
        options = notification_options or NotificationOptions()
        options.tools_changed = True
        return original(options, *a, **k)

    lowlevel.create_initialization_options = create


def connection_of(session: ServerSession) -> object:
    """What identifies a client's connection (2.x: a session per request, 1.x per connection)."""
    return session._connection if SDK_MAJOR >= 2 else session


def on_tools_listed(server: Any, record: Callable[[ServerSession], None]) -> None:
    """Call ``record`` with the session of every client that lists the server's tools."""
    if SDK_MAJOR >= 2:

        async def middleware(ctx: Any, call_next: Any) -> Any:
            if ctx.method == "tools/list" and ctx.request_id is not None:
                record(ctx.session)
            return await call_next(ctx)

        server.middleware.append(middleware)
        return
    request_ctx = importlib.import_module("mcp.server.lowlevel.server").request_ctx  # 1.x only
    lowlevel = _lowlevel(server)
    handler = lowlevel.request_handlers[types.ListToolsRequest]

    async def recording(request: Any) -> Any:
        with contextlib.suppress(LookupError):
            record(request_ctx.get().session)
        return await handler(request)

    lowlevel.request_handlers[types.ListToolsRequest] = recording
