"""deplog as a ContextForge gateway plugin (extra ``deplog[contextforge]``).

The gateway loads ``deplog.client.mcp.contextforge.DeplogPlugin`` on its
``tool_pre_invoke`` hook (``docs/contextforge.md`` tells operators how). Rules:

1. Identities come from the plugin config (``tools``: original tool name to
   ``tool_id``, ``version``, optionally ``schema_digest``), since the gateway renames
   tools and drops their ``_meta``; the tool's ``original_name`` is matched first.
2. Decisions come from a ``Guard`` over the host follower's state file, watched by path
   (``WatchedState``), or with ``url`` and ``log_key`` or ``policy`` instead of ``state``,
   from a ``LightVerifier`` of that authority, one a process for each configuration (the
   gateway rebuilds plugin instances every 30 s), refreshed by its push stream and a poll
   every ``LIGHT_POLL`` seconds from the first call on; freshness is ``freshness_seconds``.
3. A refused tool, and unless ``keep_unverified`` one deplog cannot vouch for, is
   blocked with a violation coded ``DEPLOG_<REASON>`` whose description is
   ``refusal_text``'s sentence (the same a guarded MCP session gives); a deprecated tool
   passes with the deprecation in ``metadata``; a tool the config does not name passes
   untouched.
4. The gateway has no hook on ``tools/list``: a refused tool stays listed, its calls
   blocked.
5. Only a bad ``config:`` block stops the plugin loading. A state that is unavailable
   for any reason blocks every configured tool ``DEPLOG_NOT_SYNCED``, naming the path,
   the problem and what to do; a stale one names the follower to check.
6. One log line per process at load, and one per transition of the state (unavailable
   at ERROR, available at INFO), never one per call.
7. What happens to calls when the plugin fails is the gateway's choice (its settings
   are in ``docs/contextforge.md``).

``cpex`` is imported only when the gateway asks for ``DeplogPlugin``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from deplog.client.cache.guard import DEFAULT_FRESHNESS, Decider, Decision, Guard, Verdict
from deplog.client.cache.mcp import (
    DEPRECATION_KEY,
    REFUSAL_KEY,
    deprecation_annotation,
    identity_annotation,
    may_list,
    refusal_annotation,
    refusal_text,
)
from deplog.client.follow.http import HttpLogSource
from deplog.client.follow.light import LightVerifier
from deplog.client.follow.state import StateError
from deplog.client.follow.watch import LOOK_INTERVAL, StateProblem, WatchedState
from deplog.client.model.notice import parse_schema_digest
from deplog.client.tlog.keyfile import read_verifier_key
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.policy import MAX_POLICY_SIZE, Policy

__all__ = ["STATE_KEY", "GatewayGuard", "PluginSettings", "ToolIdentity", "violation_fields"]

LIGHT_POLL = 30.0
"""Seconds between a light verifier's refreshes besides the pushed checkpoints."""
STATE_KEY = "dev.deplog/state"
"""A ``not_synced`` violation's details key for the state's path and problem (rule 5)."""

_log = logging.getLogger(__name__)
_logged_lock = threading.Lock()
_announced: set[tuple[Any, ...]] = set()  # configurations whose load line is logged (rule 6)
_transitions: dict[Path, str | None] = {}  # per state path: the problem code last logged
_lights: dict[tuple[Any, ...], tuple[LightVerifier, list[asyncio.Task[None]]]] = {}
"""Per light configuration: its verifier and, once called, its refreshing task (rule 2)."""


@dataclass(frozen=True)
class ToolIdentity:
    """The deplog identity the operator declares for one upstream tool."""

    tool_id: str
    version: str
    schema_digest: str | None = None


@dataclass(frozen=True)
class PluginSettings:
    """The plugin's ``config:`` block, checked before the gateway serves anything."""

    state: Path | None
    tools: dict[str, ToolIdentity]
    freshness: timedelta = DEFAULT_FRESHNESS
    keep_unverified: bool = False
    url: str | None = None
    trust: Verifier | Policy | None = None
    """With ``url``, instead of ``state``: the light verifier's log key or policy (rule 2)."""

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PluginSettings:
        """Parse the block: ``DeplogError`` for bad ids or digests, else ``ValueError``."""
        unknown = set(config) - {"state", "tools", "freshness_seconds", "keep_unverified"}
        unknown -= {"url", "log_key", "policy"}
        if unknown:
            raise ValueError(f"unknown deplog plugin settings: {sorted(unknown)}")
        state, url, tools = config.get("state"), config.get("url"), config.get("tools", {})
        if (state is None) == (url is None) or not isinstance(state or url, str):
            raise ValueError("the deplog plugin needs 'state' (a path) or 'url' (an authority)")
        if not isinstance(tools, dict):
            raise ValueError("the deplog plugin's 'tools' is a mapping")
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
        trust = None if url is None else _trust(config.get("log_key"), config.get("policy"))
        at = None if state is None else Path(state)
        return cls(at, identities, timedelta(seconds=freshness), keep, url, trust)


def _trust(log_key: object, policy: object) -> Verifier | Policy:
    """The light verifier's trust: a log key (or a file holding one), or a policy file."""
    if isinstance(policy, str) and log_key is None:
        with open(policy, "rb") as f:
            return Policy.parse(f.read(MAX_POLICY_SIZE + 1))
    if isinstance(log_key, str) and policy is None:
        return read_verifier_key(log_key)
    raise ValueError("with 'url', give the log's 'log_key' or a 'policy' file")


class GatewayGuard:
    """The plugin's decisions, by the gateway's tool names."""

    def __init__(self, settings: PluginSettings, *, interval: float = LOOK_INTERVAL) -> None:
        self.settings = settings
        self.guard: Decider
        self.state: WatchedState | None = None
        self.light: LightVerifier | None = None
        if settings.state is None:
            assert settings.url is not None and settings.trust is not None
            trust = settings.trust
            text = trust.vkey() if isinstance(trust, Verifier) else trust.to_text()
            key = (settings.url, text, settings.freshness)
            if key not in _lights:
                source = HttpLogSource(settings.url)
                _lights[key] = (LightVerifier(source, trust, freshness=settings.freshness), [])
            self.guard = self.light = _lights[key][0]
            self._running = _lights[key][1]
            self.path = Path()
            self.where = f"the light verifier of {settings.url}"
        else:
            self.path = settings.state.absolute()
            self.state = WatchedState(
                self.path,
                interval=interval,
                on_change=functools.partial(_log_transition, self.path),
            )
            self.guard = Guard(self.state, freshness=settings.freshness)
            self.where = f"the follower state {self.path}"
        _log_load(self.where, settings)
        if self.state is not None:
            self.state.problem()  # its availability is logged at load (rule 6)

    def close(self) -> None:
        if self.state is not None:
            self.state.close()

    async def aclose(self) -> None:
        """Close the state; a light verifier is the process's, and keeps running."""
        self.close()

    async def prepare(self, *names: str | None) -> None:
        """Fetch what deciding on ``names`` needs; a light verifier starts refreshing on the
        first call."""
        if self.light is None:
            return
        if not self._running:
            self._running.append(asyncio.create_task(self.light.run(LIGHT_POLL)))
        tools = [self.settings.tools[n].tool_id for n in names if n in self.settings.tools]
        await self.light.prepare(tools)

    def decide(self, *names: str | None) -> Decision | None:
        """The decision on the first configured name (original name first); None if none is."""
        for name in names:
            identity = None if name is None else self.settings.tools.get(name)
            if identity is not None:
                try:
                    return self.guard.check(
                        identity.tool_id,
                        identity.version,
                        cached_at=datetime.now(UTC),
                        schema_digest=identity.schema_digest,
                    )
                except StateError:  # the state went away during the check (rule 5)
                    return Decision(
                        Verdict.UNKNOWN, "not_synced", identity.tool_id, identity.version, None
                    )
        return None

    def blocks(self, decision: Decision) -> bool:
        return not may_list(decision, keep_unverified=self.settings.keep_unverified)

    def violation(self, decision: Decision) -> dict[str, Any]:
        """A blocked call's violation fields, saying what to do about the state behind it."""
        if decision.reason == "not_synced" and self.state is not None:
            problem = self.state.last_problem
            return violation_fields(decision, path=self.path, problem=problem)
        if decision.reason == "not_synced":
            hint = f"{self.where} has verified no checkpoint yet: check the gateway reaches it"
            return violation_fields(decision, hint=hint)
        if decision.reason == "checkpoint_stale" and decision.processed_through is not None:
            verified = decision.processed_through.verified_at.isoformat(timespec="seconds")
            seconds = int(self.settings.freshness.total_seconds())
            what = f"the checkpoint of {self.where}"
            if self.state is not None:
                what = f"the follower state at {self.path}"
            todo = (
                f"check that `deplog follow` runs on this host with --state {self.path} and "
                "reaches its authority"
                if self.state is not None
                else "check that the gateway reaches it"
            )
            hint = f"{what} was last verified at {verified}, more than {seconds} s ago: {todo}"
            return violation_fields(decision, hint=hint)
        return violation_fields(decision)


def _log_load(where: str, settings: PluginSettings) -> None:
    """The load line (rule 6), once per process and configuration."""
    key = (where, frozenset(settings.tools.items()), settings.freshness, settings.keep_unverified)
    with _logged_lock:
        if key in _announced:
            return
        _announced.add(key)
    count = len(settings.tools)
    _log.info(
        "deplog plugin loaded: guarding %d tool%s (%s) with %s (freshness %g s, %s)",
        count,
        "" if count == 1 else "s",
        ", ".join(sorted(settings.tools)),
        where,
        settings.freshness.total_seconds(),
        "unverified tools served" if settings.keep_unverified else "unverified tools blocked",
    )


def _log_transition(path: Path, problem: StateProblem | None) -> None:
    """One line per transition of the state at ``path`` in this process (rule 6)."""
    code = None if problem is None else problem.code
    with _logged_lock:
        if path in _transitions and _transitions[path] == code:
            return
        _transitions[path] = code
    if problem is None:
        _log.info("deplog: the follower state at %s is available: deciding from it", path)
    else:
        _log.error(
            "deplog: the follower state is unavailable (%s), every guarded call is refused "
            "with DEPLOG_NOT_SYNCED: %s",
            problem.code,
            problem.message,
        )


def violation_fields(
    decision: Decision,
    *,
    path: Path | None = None,
    problem: StateProblem | None = None,
    hint: str | None = None,
) -> dict[str, Any]:
    """A cpex ``PluginViolation``'s fields for a blocked call (rules 3, 5)."""
    details: dict[str, Any] = {REFUSAL_KEY: refusal_annotation(decision)}
    description = refusal_text(decision)
    if problem is not None:
        hint = problem.message
        details[STATE_KEY] = {"path": str(path), "problem": problem.code}
    if hint is not None:
        description += f"; {hint}"
    return {
        "reason": f"deplog {decision.verdict.value}: {decision.reason}",
        "description": description,
        "code": f"DEPLOG_{decision.reason.upper()}",
        "details": details,
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

        async def shutdown(self) -> None:
            await self.deplog.aclose()

        async def tool_pre_invoke(self, payload: Any, context: Any) -> Any:
            tool = context.global_context.metadata.get("tool")
            original = getattr(tool, "original_name", None)
            await self.deplog.prepare(original, payload.name)
            decision = self.deplog.decide(original, payload.name)
            if decision is None:
                return ToolPreInvokeResult(continue_processing=True)
            if self.deplog.blocks(decision):
                return ToolPreInvokeResult(
                    continue_processing=False,
                    violation=PluginViolation(**self.deplog.violation(decision)),
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
