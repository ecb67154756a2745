"""Committed states of a dict that one thread keeps changing, read by others without a copy.

The map's layer (``client.map.layer``) is thousands of entries, a batch changes a few
dozen, and readers in the writer's process read it as of the last commit: instead of a
copy per commit, the owner records each key's value at the last commit before its first
change since (``History.set``, ``pop``), and a reader of that commit's ``Snapshot`` finds
a key in the first record since its commit that has it, else in the live dict. Rules:

1. One thread, the owner, changes the dict, only through its ``History``: every change
   is recorded, in the newest record, before it is made. A record is closed once a newer
   one begins.
2. A lookup (``Snapshot.get``) is right whatever the owner does meanwhile. It walks the
   records; finding the key past the first, it walks the ones before again (closed, so
   final) and takes the first that has it. Finding it in none, it reads the live dict and
   walks the records again: a change made before that read was recorded before it was
   made, so none found means the live value is the committed one. Each dict operation is
   one C call, atomic under the interpreter lock. A whole read (``copy``) looks up every
   key the live dict and the records have.
3. ``commit`` begins a new record linked to the last; a record is dropped with the last
   snapshot that reaches it.
4. ``revert`` undoes the changes since the last commit in the live dict and begins a new
   record; the undone one stays linked, so readers of that commit still find its values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final, Generic, TypeVar, cast

K = TypeVar("K")
V = TypeVar("V")

_ABSENT: Final = object()
"""A key's recorded value when the dict had no such key."""
_UNSET: Final = object()
"""No record has the key."""


class _Changes:
    """One commit's record: every key changed since that commit, with its value there."""

    __slots__ = ("before", "next")

    def __init__(self) -> None:
        self.before: dict[object, object] = {}
        self.next: _Changes | None = None
        """The next commit's record, once it began (rule 3)."""


class Snapshot(Mapping[K, V]):
    """A dict as it was at a commit of its ``History``, whatever the owner does later."""

    __slots__ = ("_changes", "_len", "_live")

    def __init__(self, live: dict[K, V], changes: _Changes, length: int) -> None:
        self._live = live
        self._changes = changes
        self._len = length

    def get(self, key: K, default: V | None = None) -> V | None:  # type: ignore[override]
        value = self._recorded(key)  # rule 2's order
        if value is _UNSET:
            value = self._live.get(key, _ABSENT)
            recorded = self._recorded(key)
            if recorded is not _UNSET:
                value = recorded
        return default if value is _ABSENT else cast(V, value)

    def _recorded(self, key: object) -> object:
        """The key's value at the commit if a record has it, else ``_UNSET``."""
        first: _Changes | None = self._changes
        changes = first
        while changes is not None:
            before = changes.before.get(key, _UNSET)
            if before is not _UNSET:
                break
            changes = changes.next
        else:
            return _UNSET
        while first is not changes:  # closed since this one began: a final answer
            assert first is not None
            earlier = first.before.get(key, _UNSET)
            if earlier is not _UNSET:
                return earlier
            first = first.next
        return before

    def __getitem__(self, key: K) -> V:
        value = self.get(key, cast(V, _ABSENT))
        if value is _ABSENT:
            raise KeyError(key)
        return cast(V, value)

    def __contains__(self, key: object) -> bool:
        return self.get(cast(K, key), cast(V, _ABSENT)) is not _ABSENT

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        return iter(self.copy())

    def copy(self) -> dict[K, V]:
        """The dict as it was at the commit, in a new dict (rule 2)."""
        keys: list[object] = list(self._live)  # first: a key removed later is recorded
        changes: _Changes | None = self._changes
        while changes is not None:
            keys += list(changes.before)
            changes = changes.next
        state: dict[K, V] = {}
        for key in keys:
            value = self.get(cast(K, key), cast(V, _ABSENT))
            if value is not _ABSENT:
                state[cast(K, key)] = cast(V, value)
        return state

    def of(self, live: dict[K, V]) -> bool:
        """True if this is a snapshot of ``live``."""
        return self._live is live


class History(Generic[K, V]):
    """The owner's side of ``live``: its changes since each commit still read (rule 1)."""

    __slots__ = ("_changes", "live")

    def __init__(self, live: dict[K, V]) -> None:
        self.live = live
        self._changes = _Changes()

    def set(self, key: K, value: V) -> None:
        before = self._changes.before
        if key not in before:
            before[key] = self.live.get(key, _ABSENT)
        self.live[key] = value

    def pop(self, key: K) -> None:
        """Remove ``key``, which the dict has."""
        before = self._changes.before
        if key not in before:
            before[key] = self.live[key]
        del self.live[key]

    def commit(self) -> Snapshot[K, V]:
        """The dict as it is now, for readers; later changes go to a new record."""
        self._begin()
        return Snapshot(self.live, self._changes, len(self.live))

    def revert(self) -> None:
        """Undo every change since the last commit (rule 4)."""
        for key, value in self._changes.before.items():
            if value is _ABSENT:
                self.live.pop(cast(K, key), None)
            else:
                self.live[cast(K, key)] = cast(V, value)
        self._begin()

    def _begin(self) -> None:
        changes = _Changes()
        self._changes.next = changes
        self._changes = changes
