"""Publisher authorization state, as a pure fold of the log. Rules:

1. Only authority-signed publisher entries change it (``apply``); each is checked whole
   first, so a refused entry leaves the registry exactly as it was (``RegistryError``;
   ``EntrySignatureError`` for one the authority did not sign).
2. A publisher id, a namespace, a key id and a raw public key each belong to at most one
   publisher, forever: revoking does not free them. Namespaces match exactly.
3. ``authorize`` decides whether an envelope may enter the log at this point
   (``AuthorizationError``; ``NoticeSignatureError`` for a bad signature). Sequence
   numbers are not registry state (``client.model.rules``).
4. A withdraw names an earlier deprecate or revoke of its publisher about its tool
   (``ConflictError``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.model.entries import PublisherEntry
from deplog.client.model.notice import Envelope, Notice
from deplog.client.tlog.note import Verifier

SNAPSHOT_FORMAT: Final = "deplog-registry/v1"


class NoticeRef(Protocol):
    """What a withdraw check needs of its target: a ``Notice`` or a compact record of one."""

    @property
    def publisher(self) -> str: ...

    @property
    def tool_id(self) -> str: ...

    @property
    def action(self) -> str: ...


class RegistryError(DeplogError):
    """A publisher entry or snapshot that cannot be applied to the current state."""

    codes = frozenset(
        {
            ErrorCode.PUBLISHER_EXISTS,
            ErrorCode.NAMESPACE_IN_USE,
            ErrorCode.PUBLISHER_NOT_REGISTERED,
            ErrorCode.PUBLISHER_ALREADY_REVOKED,
            ErrorCode.KEY_NOT_REGISTERED,
            ErrorCode.KEY_ALREADY_REVOKED,
            ErrorCode.KEY_IN_USE,
            ErrorCode.BAD_SNAPSHOT,
        }
    )


class AuthorizationError(DeplogError):
    """An envelope whose signer may not publish this notice: who signed, or where."""

    codes = frozenset(
        {
            ErrorCode.UNKNOWN_PUBLISHER,
            ErrorCode.UNKNOWN_KEY,
            ErrorCode.PUBLISHER_REVOKED,
            ErrorCode.KEY_REVOKED,
            ErrorCode.NAMESPACE_NOT_AUTHORIZED,
        }
    )


class ConflictError(DeplogError):
    """A notice that is valid and authorized but conflicts with the log's history."""

    codes = frozenset(
        {
            ErrorCode.SEQUENCE_REUSED,
            ErrorCode.BAD_WITHDRAW_TARGET,
        }
    )


@dataclass
class KeyState:
    """One publisher key: when it was added and, if so, revoked (log indexes)."""

    verifier: Verifier
    added_at: int
    revoked_at: int | None = None

    @property
    def revoked(self) -> bool:
        """True once a revoke_key entry named this key."""
        return self.revoked_at is not None

    def to_json(self) -> dict[str, Any]:
        """JSON form for snapshots and ``GET /v1/publishers``."""
        return {
            "key": self.verifier.vkey(),
            "key_id": self.verifier.key_id.hex(),
            "status": "revoked" if self.revoked else "active",
            "added_at": self.added_at,
            "revoked_at": self.revoked_at,
        }


@dataclass
class PublisherState:
    """A registered publisher: its namespaces, keys (by key id) and revocation."""

    publisher: str
    namespaces: tuple[str, ...]
    registered_at: int
    keys: dict[bytes, KeyState] = field(default_factory=dict)
    revoked_at: int | None = None

    @property
    def revoked(self) -> bool:
        """True once a revoke_publisher entry named this publisher."""
        return self.revoked_at is not None

    def to_json(self) -> dict[str, Any]:
        """JSON form for snapshots and ``GET /v1/publishers``."""
        return {
            "publisher": self.publisher,
            "namespaces": list(self.namespaces),
            "status": "revoked" if self.revoked else "active",
            "registered_at": self.registered_at,
            "revoked_at": self.revoked_at,
            "keys": [k.to_json() for k in self.keys.values()],
        }


class PublisherRegistry:
    """Who may publish for which namespace, with which keys, at this point of the log."""

    def __init__(self) -> None:
        self._publishers: dict[str, PublisherState] = {}
        self._namespace_owner: dict[str, str] = {}
        self._key_id_owner: dict[bytes, str] = {}
        self._raw_key_owner: dict[bytes, str] = {}

    def publisher(self, publisher: str) -> PublisherState | None:
        """The state of ``publisher``, or None if it was never registered."""
        return self._publishers.get(publisher)

    def publishers(self) -> list[PublisherState]:
        """Every publisher ever registered, in registration order."""
        return list(self._publishers.values())

    def namespace_owner(self, namespace: str) -> str | None:
        """The publisher that owns ``namespace``, if any."""
        return self._namespace_owner.get(namespace)

    def apply(self, index: int, entry: PublisherEntry, authority: Verifier) -> None:
        """Fold in a publisher entry, or refuse it (rule 1)."""
        entry.verify(authority)
        st = entry.statement
        action = st.action
        current = self._publishers.get(st.publisher)
        if action == "register":
            if current is not None:
                raise RegistryError(ErrorCode.PUBLISHER_EXISTS)
            for ns in st.namespaces:
                if ns in self._namespace_owner:
                    raise RegistryError(ErrorCode.NAMESPACE_IN_USE)
            verifiers = self._new_keys(st.verifiers())
            state = PublisherState(st.publisher, st.namespaces, index)
            for v in verifiers:
                self._add_key(state, v, index)
            for ns in st.namespaces:
                self._namespace_owner[ns] = st.publisher
            self._publishers[st.publisher] = state
            return
        if current is None:
            raise RegistryError(ErrorCode.PUBLISHER_NOT_REGISTERED)
        if current.revoked:
            raise RegistryError(ErrorCode.PUBLISHER_ALREADY_REVOKED)
        if action == "add_key":
            for v in self._new_keys(st.verifiers()):
                self._add_key(current, v, index)
        elif action == "revoke_key":
            targets: list[KeyState] = []
            for v in st.verifiers():
                ks = current.keys.get(v.key_id)
                if ks is None or ks.verifier != v:
                    raise RegistryError(ErrorCode.KEY_NOT_REGISTERED)
                if ks.revoked:
                    raise RegistryError(ErrorCode.KEY_ALREADY_REVOKED)
                targets.append(ks)
            for ks in targets:
                ks.revoked_at = index
        else:  # revoke_publisher
            current.revoked_at = index

    def _new_keys(self, verifiers: tuple[Verifier, ...]) -> tuple[Verifier, ...]:
        """Refuse keys whose key id or raw key already belongs to anyone (or repeats)."""
        ids: set[bytes] = set()
        raws: set[bytes] = set()
        for v in verifiers:
            kid, raw = bytes(v.key_id), bytes(v.public_key)
            if kid in self._key_id_owner or raw in self._raw_key_owner or kid in ids or raw in raws:
                raise RegistryError(ErrorCode.KEY_IN_USE)
            ids.add(kid)
            raws.add(raw)
        return verifiers

    def _add_key(self, state: PublisherState, v: Verifier, index: int) -> None:
        state.keys[bytes(v.key_id)] = KeyState(v, index)
        self._key_id_owner[bytes(v.key_id)] = state.publisher
        self._raw_key_owner[bytes(v.public_key)] = state.publisher

    def authorize(self, envelope: Envelope) -> None:
        """Refuse an ``envelope`` its signer may not publish (rule 3)."""
        notice = envelope.notice
        state = self._publishers.get(notice.publisher)
        if state is None:
            raise AuthorizationError(ErrorCode.UNKNOWN_PUBLISHER)
        key = state.keys.get(envelope.key_id)
        if key is None:
            raise AuthorizationError(ErrorCode.UNKNOWN_KEY)
        envelope.verify(key.verifier)
        if state.revoked:
            raise AuthorizationError(ErrorCode.PUBLISHER_REVOKED)
        if key.revoked:
            raise AuthorizationError(ErrorCode.KEY_REVOKED)
        if notice.namespace not in state.namespaces:
            raise AuthorizationError(ErrorCode.NAMESPACE_NOT_AUTHORIZED)

    @staticmethod
    def check_withdraw(notice: Notice, target: NoticeRef | None) -> None:
        """Refuse a withdraw whose ``target`` (None: no earlier notice) breaks rule 4."""
        if notice.action != "withdraw":
            return
        if (
            target is None
            or target.action not in ("deprecate", "revoke")
            or target.publisher != notice.publisher
            or target.tool_id != notice.tool_id
        ):
            raise ConflictError(ErrorCode.BAD_WITHDRAW_TARGET)

    def to_json(self) -> dict[str, Any]:
        """A snapshot of the whole state (persist it instead of replaying the log)."""
        return {
            "format": SNAPSHOT_FORMAT,
            "publishers": [p.to_json() for p in self._publishers.values()],
        }

    @classmethod
    def from_json(cls, obj: object) -> PublisherRegistry:
        """Rebuild a registry from ``to_json`` output; RegistryError ``bad_snapshot``."""
        try:
            return cls._from_json(obj)
        except RegistryError:
            raise
        except (DeplogError, KeyError, TypeError, ValueError, AttributeError):
            raise RegistryError(ErrorCode.BAD_SNAPSHOT) from None

    @classmethod
    def _from_json(cls, obj: object) -> PublisherRegistry:
        if not isinstance(obj, dict) or obj.get("format") != SNAPSHOT_FORMAT:
            raise RegistryError(ErrorCode.BAD_SNAPSHOT)
        reg = cls()
        for p in obj["publishers"]:
            name = p["publisher"]
            namespaces = tuple(p["namespaces"])
            if (
                not isinstance(name, str)
                or name in reg._publishers
                or not all(isinstance(ns, str) for ns in namespaces)
                or any(ns in reg._namespace_owner for ns in namespaces)
            ):
                raise RegistryError(ErrorCode.BAD_SNAPSHOT)
            state = PublisherState(
                name, namespaces, _index(p["registered_at"]), revoked_at=_opt_index(p["revoked_at"])
            )
            if (p["status"] == "revoked") != state.revoked:
                raise RegistryError(ErrorCode.BAD_SNAPSHOT)
            for k in p["keys"]:
                v = Verifier.parse(k["key"])  # a bad one is bad_snapshot (from_json)
                try:
                    reg._new_keys((v,))
                except RegistryError:
                    raise RegistryError(ErrorCode.BAD_SNAPSHOT) from None
                reg._add_key(state, v, _index(k["added_at"]))
                state.keys[bytes(v.key_id)].revoked_at = _opt_index(k["revoked_at"])
                if (k["status"] == "revoked") != state.keys[bytes(v.key_id)].revoked:
                    raise RegistryError(ErrorCode.BAD_SNAPSHOT)
            for ns in namespaces:
                reg._namespace_owner[ns] = name
            reg._publishers[name] = state
        # An older snapshot's "sequences" map is read past.
        return reg


def _index(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RegistryError(ErrorCode.BAD_SNAPSHOT)
    return value


def _opt_index(value: object) -> int | None:
    return None if value is None else _index(value)
