"""A drop-in guarded tool cache: an in-process LRU/TTL map that asks the guard on every hit.

Keys are ``(tool_id, version)``. Every ``get`` asks the ``Guard`` (a refused, stale or
unknown verdict is a miss, and the decision says why), and each verified advance evicts
exactly the cached keys whose status changed (``StatusChange.changed``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Generic, TypeVar

from deplog.client.cache.guard import Decision, Guard
from deplog.client.model.status import StatusChange

if TYPE_CHECKING:
    from deplog.client.follow.follower import SyncResult

T = TypeVar("T")
Key = tuple[str, str]


@dataclass(frozen=True)
class Hit(Generic[T]):
    """A cache lookup: the value if it may be served, and the guard's decision either way."""

    value: T | None
    decision: Decision | None

    @property
    def served(self) -> bool:
        return self.value is not None


class GuardedCache(Generic[T]):
    """Tool definitions keyed by (tool_id, version), at most ``max_entries``, each ``ttl`` s."""

    def __init__(
        self,
        guard: Guard,
        *,
        max_entries: int = 10_000,
        ttl: float = 3600.0,
        clock: Callable[[], float] = time.time,
        on_evict: Callable[[Key, str], None] | None = None,
    ) -> None:
        if max_entries < 1 or ttl <= 0:
            raise ValueError("max_entries and ttl must be positive")
        self.guard = guard
        self.max_entries = max_entries
        self.ttl = ttl
        self.clock = clock
        self.on_evict = on_evict
        self._entries: OrderedDict[Key, tuple[T, float, str | None]] = OrderedDict()

    def put(
        self, tool_id: str, version: str, value: T, *, schema_digest: str | None = None
    ) -> None:
        """Cache a definition fetched now (its ``cached_at`` is the current time)."""
        key = (tool_id, version)
        self._entries.pop(key, None)
        self._entries[key] = (value, self.clock(), schema_digest)
        while len(self._entries) > self.max_entries:
            evicted, _ = self._entries.popitem(last=False)
            self._evicted(evicted, "capacity")

    def get(self, tool_id: str, version: str) -> Hit[T]:
        """The cached value if present, not expired, and the guard says it may be served."""
        key = (tool_id, version)
        entry = self._entries.get(key)
        if entry is None:
            return Hit(None, None)
        value, cached_at, digest = entry
        if self.clock() - cached_at > self.ttl:
            self._remove(key, "expired")
            return Hit(None, None)
        decision = self.guard.check(
            tool_id,
            version,
            cached_at=datetime.fromtimestamp(cached_at, UTC),
            schema_digest=digest,
        )
        if not decision.may_serve:
            if decision.reason in ("revoked", "sunset", "schema_mismatch", "cache_predates_notice"):
                self._remove(key, decision.reason)
            return Hit(None, decision)
        self._entries.move_to_end(key)
        return Hit(value, decision)

    def invalidate(self, changes: tuple[StatusChange, ...] | list[StatusChange]) -> list[Key]:
        """Evict exactly the cached keys whose status a verified advance changed."""
        by_tool = {change.tool_id: change for change in changes}
        doomed = [
            key for key in self._entries if key[0] in by_tool and by_tool[key[0]].changed(key[1])
        ]
        for key in doomed:
            self._remove(key, "status_changed")
        return doomed

    def on_advance(self, result: SyncResult) -> None:
        """A follower listener: ``follower.add_listener(cache.on_advance)``."""
        self.invalidate(result.changes)

    def _remove(self, key: Key, why: str) -> None:
        if self._entries.pop(key, None) is not None:
            self._evicted(key, why)

    def _evicted(self, key: Key, why: str) -> None:
        if self.on_evict is not None:
            self.on_evict(key, why)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Key]:
        return iter(list(self._entries))
