"""deplog as a ContextForge gateway plugin (extra ``deplog[contextforge]``).

The gateway (``mcp-contextforge-gateway``) loads native plugins of its plugin
framework (``cpex``) by the ``kind`` in its ``plugins/config.yaml``; deplog's is
``deplog.client.mcp.contextforge.DeplogPlugin``, on the ``tool_pre_invoke``
hook. Its rules:

1. Identities come from the plugin config (``tools``: original tool name to
   ``tool_id``, ``version`` and optionally ``schema_digest``), because the
   gateway renames tools (``<gateway>-<tool>``) and does not keep the upstream
   tools' ``_meta``. The plugin matches the tool's ``original_name`` from the
   gateway's context, falling back to the invoked name.
2. Decisions come from a ``Guard`` over the host follower's state file, opened
   read-only (``StateReader``): one ``deplog follow`` per host keeps it
   current, and every gateway worker process reads it. Freshness is the
   guard's (``freshness_seconds``, from the verified checkpoint).
3. A refused tool, and (unless ``keep_unverified``) one deplog cannot vouch
   for, is blocked: ``continue_processing=False`` with a violation whose code
   is ``DEPLOG_<REASON>`` and whose details name the verdict, the reason, the
   notices (log indexes) and the checkpoint size. A deprecated tool passes,
   with the deprecation in the result's ``metadata``. A tool the config does
   not name passes untouched.
4. The gateway has no hook on ``tools/list`` (``http_post_request`` sees
   headers and status, not the body), so a refused tool stays listed by the
   gateway; calls to it are blocked. Agents behind a ``GuardedClientSession``
   do not see it listed.

The framework is imported only when the gateway asks for ``DeplogPlugin``, so
this module (its settings and violations) imports without ``cpex``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from deplog.client.cache.guard import DEFAULT_FRESHNESS, Decision, Guard, Verdict
from deplog.client.cache.mcp import (
    DEPRECATION_KEY,
    REFUSAL_KEY,
    deprecation_annotation,
    identity_annotation,
    may_list,
    refusal_annotation,
)
from deplog.client.follow.reader import StateReader
from deplog.client.model.notice import parse_schema_digest

__all__ = ["GatewayGuard", "PluginSettings", "ToolIdentity", "violation_fields"]


@dataclass(frozen=True)
class ToolIdentity:
    """The deplog identity the operator declares for one upstream tool."""

    tool_id: str
    version: str
    schema_digest: str | None = None


@dataclass(frozen=True)
class PluginSettings:
    """The plugin's ``config:`` block, checked before the gateway serves anything."""

    state: Path
    tools: dict[str, ToolIdentity]
    freshness: timedelta = DEFAULT_FRESHNESS
    keep_unverified: bool = False

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PluginSettings:
        """Parse the block; a bad tool id, version or digest raises ``DeplogError``
        (``bad_tool_id``, ``bad_version``, ``bad_digest``), anything else ``ValueError``."""
        unknown = set(config) - {"state", "tools", "freshness_seconds", "keep_unverified"}
        if unknown:
            raise ValueError(f"unknown deplog plugin settings: {sorted(unknown)}")
        state, tools = config.get("state"), config.get("tools", {})
        if not isinstance(state, str) or not isinstance(tools, dict):
            raise ValueError("the deplog plugin needs 'state' (a path) and 'tools' (a mapping)")
        identities = {}
        for name, entry in tools.items():
            if not isinstance(entry, dict) or set(entry) - {"tool_id", "version", "schema_digest"}:
                raise ValueError("each deplog tool is {tool_id, version[, schema_digest]}")
            tool_id, version = entry.get("tool_id"), entry.get("version")
            if not isinstance(tool_id, str) or not isinstance(version, str):
                raise ValueError("each deplog tool names its tool_id and version as strings")
            identity_annotation(tool_id, version, None)
            digest = entry.get("schema_digest")
            identities[str(name)] = ToolIdentity(
                tool_id, version, None if digest is None else parse_schema_digest(digest)
            )
        freshness = config.get("freshness_seconds", DEFAULT_FRESHNESS.total_seconds())
        keep = config.get("keep_unverified", False)
        if not isinstance(freshness, int | float) or freshness <= 0 or not isinstance(keep, bool):
            raise ValueError("freshness_seconds is a positive number, keep_unverified a boolean")
        return cls(Path(state), identities, timedelta(seconds=freshness), keep)


class GatewayGuard:
    """The plugin's decisions, by the gateway's tool names."""

    def __init__(self, settings: PluginSettings) -> None:
        self.settings = settings
        self.guard = Guard(StateReader(settings.state), freshness=settings.freshness)

    def decide(self, *names: str | None) -> Decision | None:
        """The decision on the first configured name (original name first); None if none is."""
        for name in names:
            identity = None if name is None else self.settings.tools.get(name)
            if identity is not None:
                return self.guard.check(
                    identity.tool_id,
                    identity.version,
                    cached_at=datetime.now(UTC),
                    schema_digest=identity.schema_digest,
                )
        return None

    def blocks(self, decision: Decision) -> bool:
        return not may_list(decision, keep_unverified=self.settings.keep_unverified)


def violation_fields(decision: Decision) -> dict[str, Any]:
    """A cpex ``PluginViolation``'s fields for a blocked call (rule 3)."""
    details = refusal_annotation(decision)
    notices = details.get("notices", [])
    at = details.get("checkpoint_size", "none")
    return {
        "reason": f"deplog {decision.verdict.value}: {decision.reason}",
        "description": (
            f"{decision.tool_id}@{decision.version}: verdict {decision.verdict.value}, reason "
            f"{decision.reason}, log indexes {notices}, processed through checkpoint size {at}"
        ),
        "code": f"DEPLOG_{decision.reason.upper()}",
        "details": {REFUSAL_KEY: details},
    }


@functools.cache
def _plugin_class() -> type:
    """``DeplogPlugin``, built on first use so the module imports without ``cpex``."""
    from cpex.framework import Plugin, PluginViolation, ToolPreInvokeResult

    class DeplogPlugin(Plugin):  # type: ignore[misc]
        """Blocks ``tool_pre_invoke`` for tools deplog refuses (see the module's rules)."""

        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.deplog = GatewayGuard(PluginSettings.from_config(dict(config.config or {})))

        async def tool_pre_invoke(self, payload: Any, context: Any) -> Any:
            tool = context.global_context.metadata.get("tool")
            original = getattr(tool, "original_name", None)
            decision = self.deplog.decide(original, payload.name)
            if decision is None:
                return ToolPreInvokeResult(continue_processing=True)
            if self.deplog.blocks(decision):
                return ToolPreInvokeResult(
                    continue_processing=False,
                    violation=PluginViolation(**violation_fields(decision)),
                )
            metadata = {}
            if decision.verdict == Verdict.WARN:
                metadata[DEPRECATION_KEY] = deprecation_annotation(decision)
            return ToolPreInvokeResult(continue_processing=True, metadata=metadata)

    return DeplogPlugin


def __getattr__(name: str) -> Any:
    if name == "DeplogPlugin":
        return _plugin_class()
    raise AttributeError(name)
