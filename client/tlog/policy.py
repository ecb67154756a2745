"""Witness policies (C2SP tlog-policy) and checking a checkpoint against one.

A policy names the logs a client trusts, the witnesses it knows and the quorum that
decides whether the witnesses that cosigned a checkpoint are enough; ``Policy.verify``
also says since when the quorum vouches for the checkpoint, which bounds its staleness.
Rules ("Policy file syntax and structure"; a break is ``PolicyFormatError`` naming the
line number, never its content):

1. Octets, line based, of tab, newline, 0x20-0x7E and 0x80-0xFF only; items separated by
   spaces and tabs; blank lines and lines starting ``#`` ignored; the last newline
   optional. Names are opaque octets, compared as such.
2. ``log <vkey> [<url>]`` takes a type 0x01 key named for the log's origin; ``witness
   <name> <vkey> [<url>]`` a cosigner key, type 0x04 (Ed25519) or 0x06 (ML-DSA-44). Two
   logs, or two witnesses, with one public key are duplicates.
3. ``group <name> all|any|<k> <member>...`` with 1 <= k <= n members. Witnesses and
   groups share one namespace where ``none`` is predefined; a name is defined once, and
   only names of earlier lines are members (each at most once) or the quorum.
4. Exactly one ``quorum <name>`` line.
5. deplog's own lines, comments to every other parser: ``#deplog: tree-lines <witness>``
   lets an Ed25519 witness sign the first three lines only (as litewitness does), and
   ``#deplog: map-quorum <name>`` names who must also vouch for the ``deplog-map/v1``
   line, which only full-body Ed25519 cosignatures do (a map quorum that could never be
   met is refused). Any other ``#deplog:`` line is refused.
6. At most ``MAX_LOGS`` logs, ``MAX_WITNESSES`` witnesses, ``MAX_GROUPS`` groups and
   ``MAX_POLICY_SIZE`` octets ("Implementation limits").
7. Quorum time: a witness counts at its newest valid cosignature's timestamp, a k-of-n
   group at the k-th largest of its members' times; the quorum's is the moment up to
   which it vouches that nothing newer existed.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Literal

from deplog.client.errors import ErrorCode, FormatError, VerificationError
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.cosignature import FULL_BODY, Cosignature, cosignatures
from deplog.client.tlog.note import (
    COSIGNER_TYPES,
    SIG_TYPE_COSIGNATURE_V1,
    SIG_TYPE_ED25519,
    KeyFormatError,
    UnverifiedNoteError,
    Verifier,
    parse_note,
)

DIRECTIVE: Final = b"#deplog:"
"""How deplog's own policy lines start (rule 5)."""

MAX_LOGS: Final = 256
MAX_WITNESSES: Final = 256
MAX_GROUPS: Final = 256
MAX_POLICY_SIZE: Final = 512 * 1024
"""Largest policy accepted, in octets: room for every witness line with an ML-DSA-44 key
(some 1,800 octets each)."""

MAX_CLOCK_SKEW: Final = 60
"""Seconds a cosignature may be dated in our future and still count (honest clock drift)."""

NONE: Final = "none"
"""The predefined quorum name that requires no cosignature at all."""

_ALLOWED = re.compile(rb"[\t\n\x20-\x7e\x80-\xff]*")
_TOKEN = re.compile(rb"[\x21-\x7e\x80-\xff]+")
_WHITESPACE = re.compile(rb"[ \t]+")
_DECIMAL = re.compile(rb"[0-9]+")
_SURROGATES = "surrogateescape"


class PolicyFormatError(FormatError):
    """A policy that breaks tlog-policy's syntax or rules; ``line`` is where, if known."""

    code = ErrorCode.MALFORMED_POLICY

    def __init__(self, detail: str, line: int | None = None) -> None:
        self.detail = detail
        self.line = line
        super().__init__(message=detail if line is None else f"line {line}: {detail}")


class PolicyError(VerificationError):
    """A checkpoint that does not satisfy the policy (``code`` says which rule failed)."""

    codes = frozenset(
        {ErrorCode.LOG_NOT_IN_POLICY, ErrorCode.QUORUM_NOT_MET, ErrorCode.STALE_CHECKPOINT}
    )


class NoQuorum(enum.Enum):
    """The type of ``NO_QUORUM``."""

    NO_QUORUM = "none"


NO_QUORUM: Final = NoQuorum.NO_QUORUM
"""``Policy.quorum_time`` under ``quorum none``: met, but with no time (nothing is dated)."""


def _encode(value: str) -> bytes:
    """The octets of a name or URL (inverse of the parser's ``surrogateescape`` decoding)."""
    try:
        return value.encode("utf-8", _SURROGATES)
    except UnicodeEncodeError:
        raise PolicyFormatError("name or URL is not representable as octets") from None


def _decode(token: bytes) -> str:
    return token.decode("utf-8", _SURROGATES)


def _check_token(value: str, what: str) -> None:
    """Names and URLs are single items: non-empty, no whitespace or control octets (rule 1)."""
    if not _TOKEN.fullmatch(_encode(value)):
        raise PolicyFormatError(f"{what} is empty or contains whitespace or control octets")


@dataclass(frozen=True)
class PolicyLog:
    """A trusted log: its type 0x01 key, whose name is the log's origin, and an optional URL."""

    verifier: Verifier
    url: str | None = None


@dataclass(frozen=True)
class PolicyWitness:
    """A known witness: name, cosigner key, optional URL, and whether ``tree_lines`` (rule 5)."""

    name: str
    verifier: Verifier
    url: str | None = None
    tree_lines: bool = False


@dataclass(frozen=True)
class PolicyGroup:
    """A group witnessing a checkpoint when ``threshold`` of its ``members`` do."""

    name: str
    threshold: int
    members: tuple[str, ...]


class _Rules:
    """The rules, applied one definition at a time, by the parser and ``Policy`` alike."""

    def __init__(self) -> None:
        self.logs: list[PolicyLog] = []
        self.witnesses: dict[str, PolicyWitness] = {}
        self.groups: dict[str, PolicyGroup] = {}
        self.quorum: str | None = None
        self.map_quorum: str | None = None
        # One public key twice is a duplicate (rule 2); one name and key ID for two keys
        # (a 2^-32 accident) would make signature lines ambiguous.
        self._log_keys: set[bytes] = set()
        self._log_ids: set[tuple[str, bytes]] = set()
        self._witness_keys: set[bytes] = set()
        self._witness_ids: set[tuple[str, bytes]] = set()
        self._used_members: set[str] = set()

    def _new_name(self, name: str) -> None:
        _check_token(name, "name")
        if name == NONE or name in self.witnesses or name in self.groups:
            raise PolicyFormatError("name is already defined")

    def add_log(self, log: PolicyLog) -> None:
        if log.verifier.sig_type != SIG_TYPE_ED25519:
            raise PolicyFormatError("log keys must be type 0x01 (tlog-checkpoint) vkeys")
        if log.url is not None:
            _check_token(log.url, "URL")
        _new_key(log.verifier, self._log_keys, self._log_ids, "log")
        if len(self.logs) >= MAX_LOGS:
            raise PolicyFormatError(f"more than {MAX_LOGS} logs")
        self.logs.append(log)

    def add_witness(self, witness: PolicyWitness) -> None:
        self._new_name(witness.name)
        if witness.verifier.sig_type not in COSIGNER_TYPES:
            raise PolicyFormatError("witness keys must be type 0x04 or 0x06 (cosigner) vkeys")
        if witness.tree_lines:
            self._check_tree_lines(witness)
        if witness.url is not None:
            _check_token(witness.url, "URL")
        _new_key(witness.verifier, self._witness_keys, self._witness_ids, "witness")
        if len(self.witnesses) >= MAX_WITNESSES:
            raise PolicyFormatError(f"more than {MAX_WITNESSES} witnesses")
        self.witnesses[witness.name] = witness

    def add_group(self, group: PolicyGroup) -> None:
        self._new_name(group.name)
        if not group.members:
            raise PolicyFormatError("a group needs at least one member")
        if isinstance(group.threshold, bool) or not 1 <= group.threshold <= len(group.members):
            raise PolicyFormatError("group threshold must be between 1 and the member count")
        for member in group.members:
            if member not in self.witnesses and member not in self.groups:
                raise PolicyFormatError("group member is not defined on an earlier line")
            if member in self._used_members:
                raise PolicyFormatError("name is already a group member")
            self._used_members.add(member)
        if len(self.groups) >= MAX_GROUPS:
            raise PolicyFormatError(f"more than {MAX_GROUPS} groups")
        self.groups[group.name] = group

    def set_quorum(self, name: str) -> None:
        if self.quorum is not None:
            raise PolicyFormatError("more than one quorum line")
        if name != NONE and name not in self.witnesses and name not in self.groups:
            raise PolicyFormatError("quorum is not defined on an earlier line")
        self.quorum = name

    @staticmethod
    def _check_tree_lines(witness: PolicyWitness) -> None:
        if witness.verifier.sig_type != SIG_TYPE_COSIGNATURE_V1:
            raise PolicyFormatError(
                "tree-lines names an Ed25519 (0x04) witness; ML-DSA-44 signs the tree lines only"
            )

    def mark_tree_lines(self, name: str) -> None:
        """``#deplog: tree-lines <witness>``."""
        witness = self.witnesses.get(name)
        if witness is None:
            raise PolicyFormatError("tree-lines names no witness defined on an earlier line")
        if witness.tree_lines:
            raise PolicyFormatError("tree-lines names this witness twice")
        marked = PolicyWitness(witness.name, witness.verifier, witness.url, True)
        self._check_tree_lines(marked)
        self.witnesses[name] = marked

    def set_map_quorum(self, name: str) -> None:
        """``#deplog: map-quorum <name>``, checked by ``finish`` once every mark is known."""
        if self.map_quorum is not None:
            raise PolicyFormatError("more than one map-quorum line")
        if name not in self.witnesses and name not in self.groups:
            raise PolicyFormatError("map-quorum is not a witness or group of an earlier line")
        self.map_quorum = name

    def finish(self) -> None:
        """The checks that need the whole file: a map quorum that can be met (rule 5)."""
        if self.map_quorum is not None and not self._can_vouch_for_map(self.map_quorum):
            raise PolicyFormatError(
                "map-quorum can never be met: only full-body Ed25519 witnesses sign the "
                "map line, not tree-lines or ML-DSA-44 ones"
            )

    def _can_vouch_for_map(self, name: str) -> bool:
        witness = self.witnesses.get(name)
        if witness is not None:
            return witness.verifier.sig_type == SIG_TYPE_COSIGNATURE_V1 and not witness.tree_lines
        group = self.groups[name]
        eligible = sum(1 for m in group.members if self._can_vouch_for_map(m))
        return eligible >= group.threshold


def _new_key(verifier: Verifier, keys: set[bytes], ids: set[tuple[str, bytes]], kind: str) -> None:
    """Record a log's or a witness's key, refusing a duplicate (rule 2) or an ambiguous ID."""
    if verifier.public_key in keys:
        raise PolicyFormatError(f"duplicate {kind} key")
    if (verifier.name, verifier.key_id) in ids:
        raise PolicyFormatError(f"two {kind} keys share a name and key ID")
    keys.add(verifier.public_key)
    ids.add((verifier.name, verifier.key_id))


def _threshold(token: bytes, members: int) -> int:
    if token == b"any":
        return 1
    if token == b"all":
        return members
    if not _DECIMAL.fullmatch(token):
        raise PolicyFormatError("group threshold must be all, any or a decimal number")
    # A k over the member count is refused later; the cap spares int() a huge number.
    return int(token) if len(token) <= 6 else members + 1


def _parse_line(rules: _Rules, items: list[bytes]) -> None:
    keyword, args = items[0], items[1:]
    if keyword == b"log" and len(args) in (1, 2):
        url = _decode(args[1]) if len(args) == 2 else None
        rules.add_log(PolicyLog(_vkey(args[0], SIG_TYPE_ED25519), url))
    elif keyword == b"witness" and len(args) in (2, 3):
        url = _decode(args[2]) if len(args) == 3 else None
        verifier = _vkey(args[1], SIG_TYPE_COSIGNATURE_V1)
        rules.add_witness(PolicyWitness(_decode(args[0]), verifier, url))
    elif keyword == b"group" and len(args) >= 3:
        members = tuple(_decode(m) for m in args[2:])
        threshold = _threshold(args[1], len(members))
        rules.add_group(PolicyGroup(_decode(args[0]), threshold, members))
    elif keyword == b"quorum" and len(args) == 1:
        rules.set_quorum(_decode(args[0]))
    elif keyword in (b"log", b"witness", b"group", b"quorum"):
        raise PolicyFormatError("wrong number of items for this keyword")
    else:
        raise PolicyFormatError("unknown keyword")


def _parse_directive(rules: _Rules, items: list[bytes]) -> None:
    """A ``#deplog:`` line's items after the prefix (rule 5)."""
    if items[:1] == [b"tree-lines"] and len(items) == 2:
        rules.mark_tree_lines(_decode(items[1]))
    elif items[:1] == [b"map-quorum"] and len(items) == 2:
        rules.set_map_quorum(_decode(items[1]))
    elif items[:1] in ([b"tree-lines"], [b"map-quorum"]):
        raise PolicyFormatError("wrong number of items for this #deplog: line")
    else:
        raise PolicyFormatError("unknown #deplog: line (tree-lines or map-quorum)")


def _vkey(token: bytes, sig_type: int) -> Verifier:
    """A vkey of the type the line needs: 0x01 for logs, 0x04 or 0x06 for witnesses."""
    wanted, other = Verifier.parse, Verifier.parse_cosigner
    if sig_type == SIG_TYPE_COSIGNATURE_V1:
        wanted, other = other, wanted
    try:
        return wanted(_decode(token))
    except KeyFormatError:
        pass
    try:
        found = other(_decode(token)).sig_type
    except KeyFormatError:
        raise PolicyFormatError("malformed vkey") from None
    wanted_types = "0x04 or 0x06" if sig_type == SIG_TYPE_COSIGNATURE_V1 else f"0x{sig_type:02x}"
    raise PolicyFormatError(f"vkey has signature type 0x{found:02x}, not {wanted_types}")


@dataclass(frozen=True)
class VerifiedCheckpoint:
    """A checkpoint that satisfied a policy: its log, each witness's newest valid cosignature,
    and the quorum time (rule 7; None under ``quorum none``), at most the map quorum's."""

    checkpoint: Checkpoint
    log: Verifier
    cosignatures: tuple[Cosignature, ...]
    witnessed_at: int | None
    map_witnessed_at: int | None = None


@dataclass(frozen=True)
class Policy:
    """A validated tlog-policy; built in code, it obeys the rules ``parse`` does."""

    logs: tuple[PolicyLog, ...]
    witnesses: Mapping[str, PolicyWitness]
    groups: Mapping[str, PolicyGroup]
    quorum: str
    map_quorum: str | None = None
    _by_key: Mapping[tuple[str, bytes], str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rules = _Rules()
        for log in self.logs:
            rules.add_log(log)
        for name, witness in self.witnesses.items():
            if name != witness.name:
                raise PolicyFormatError("witness mapping key differs from its name")
            rules.add_witness(witness)
        for name, group in self.groups.items():
            if name != group.name:
                raise PolicyFormatError("group mapping key differs from its name")
            rules.add_group(group)
        rules.set_quorum(self.quorum)
        if self.map_quorum is not None:
            rules.set_map_quorum(self.map_quorum)
        rules.finish()
        object.__setattr__(self, "logs", tuple(rules.logs))
        object.__setattr__(self, "witnesses", MappingProxyType(rules.witnesses))
        object.__setattr__(self, "groups", MappingProxyType(rules.groups))
        by_key = {(w.verifier.name, w.verifier.key_id): w.name for w in rules.witnesses.values()}
        object.__setattr__(self, "_by_key", MappingProxyType(by_key))

    @classmethod
    def parse(cls, text: bytes | str) -> Policy:
        """Parse a policy file (tlog-policy); errors name the line number only."""
        data = _encode(text) if isinstance(text, str) else bytes(text)
        if len(data) > MAX_POLICY_SIZE:
            where = data[:MAX_POLICY_SIZE].count(b"\n") + 1  # the line that crosses the limit
            raise PolicyFormatError(f"policy is over {MAX_POLICY_SIZE} octets", where)
        rules = _Rules()
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()  # the newline that terminates the last line
        map_quorum_line = None
        for number, raw in enumerate(lines, start=1):
            try:
                if not _ALLOWED.fullmatch(raw):
                    raise PolicyFormatError("control character (only tab and newline allowed)")
                line = raw.strip(b" \t")
                if line.startswith(DIRECTIVE):
                    items = _WHITESPACE.split(line[len(DIRECTIVE) :].strip(b" \t"))
                    _parse_directive(rules, items)
                    map_quorum_line = number if items[0] == b"map-quorum" else map_quorum_line
                elif line and not line.startswith(b"#"):
                    _parse_line(rules, _WHITESPACE.split(line))
            except PolicyFormatError as err:
                raise PolicyFormatError(err.detail, number) from None
        if rules.quorum is None:
            raise PolicyFormatError("no quorum line", len(lines) + 1)
        try:
            rules.finish()
        except PolicyFormatError as err:
            raise PolicyFormatError(err.detail, map_quorum_line) from None
        return cls(tuple(rules.logs), rules.witnesses, rules.groups, rules.quorum, rules.map_quorum)

    def to_text(self) -> str:
        """The canonical file, which ``parse`` reads back to an equal policy."""
        lines: list[str] = []
        for log in self.logs:
            lines.append(" ".join(["log", log.verifier.vkey(), *_optional(log.url)]))
        for w in self.witnesses.values():
            lines.append(" ".join(["witness", w.name, w.verifier.vkey(), *_optional(w.url)]))
            if w.tree_lines:
                lines.append(f"{DIRECTIVE.decode()} tree-lines {w.name}")
        for g in self.groups.values():
            n = len(g.members)
            k = "all" if g.threshold == n else "any" if g.threshold == 1 else str(g.threshold)
            lines.append(" ".join(["group", g.name, k, *g.members]))
        lines.append(f"quorum {self.quorum}")
        if self.map_quorum is not None:
            lines.append(f"{DIRECTIVE.decode()} map-quorum {self.map_quorum}")
        return "".join(line + "\n" for line in lines)

    @classmethod
    def single_log(cls, log_key: Verifier) -> Policy:
        """Trust one log and require no cosignatures (``quorum none``)."""
        return cls((PolicyLog(log_key),), {}, {}, NONE)

    @classmethod
    def k_of_n(
        cls,
        log_key: Verifier,
        witnesses: list[Verifier],
        k: int,
        tree_lines: Collection[Verifier] = (),
    ) -> Policy:
        """Trust one log and ``k`` of ``witnesses`` (by key name), grouped as ``+quorum``."""
        marked = set(tree_lines)
        defined = {v.name: PolicyWitness(v.name, v, None, v in marked) for v in witnesses}
        if len(defined) != len(witnesses):
            raise PolicyFormatError("two witness keys share a key name")
        group = PolicyGroup("+quorum", k, tuple(defined))
        return cls((PolicyLog(log_key),), defined, {group.name: group}, group.name)

    def witness_verifiers(self) -> list[Verifier]:
        """The cosigner keys of every witness in the policy."""
        return [w.verifier for w in self.witnesses.values()]

    def tree_lines_verifiers(self) -> list[Verifier]:
        """The keys of the witnesses marked ``#deplog: tree-lines``."""
        return [w.verifier for w in self.witnesses.values() if w.tree_lines]

    def cosignatures(self, note: bytes) -> list[Cosignature]:
        """Every valid cosignature on ``note`` by a policy witness, in a form it accepts."""
        return cosignatures(note, self.witness_verifiers(), tree_lines=self.tree_lines_verifiers())

    def quorum_time(
        self, cosigs: Iterable[Cosignature]
    ) -> int | Literal[NoQuorum.NO_QUORUM] | None:
        """The quorum time (rule 7): ``NO_QUORUM`` under ``quorum none``, None if not met."""
        if self.quorum == NONE:
            return NO_QUORUM
        return self._time(self.quorum, cosigs)

    def map_quorum_time(self, cosigs: Iterable[Cosignature]) -> int | None:
        """The map quorum's time (rules 5, 7), or None if it is not met or there is none."""
        if self.map_quorum is None:
            return None
        eligible = [
            c
            for c in cosigs
            if c.statement == FULL_BODY
            and c.sig_type == SIG_TYPE_COSIGNATURE_V1
            and (name := self._by_key.get((c.name, c.key_id))) is not None
            and not self.witnesses[name].tree_lines
        ]
        return self._time(self.map_quorum, eligible)

    def _time(self, root: str, cosigs: Iterable[Cosignature]) -> int | None:
        times: dict[str, int] = {}
        for cosig in cosigs:
            name = self._by_key.get((cosig.name, cosig.key_id))
            if name is not None and cosig.timestamp > times.get(name, -1):
                times[name] = cosig.timestamp
        # Groups are in definition order, so members' times are known already.
        for group in self.groups.values():
            member_times = sorted((times[m] for m in group.members if m in times), reverse=True)
            if len(member_times) >= group.threshold:
                times[group.name] = member_times[group.threshold - 1]
        return times.get(root)

    def verify(self, note: bytes, *, now: float, max_age: float | None) -> VerifiedCheckpoint:
        """Check a signed checkpoint note at ``now`` (POSIX seconds): a policy log's signature
        (``log_not_in_policy``), the witnesses' cosignatures (``bad_cosignature``; one
        dated over ``MAX_CLOCK_SKEW`` ahead does not count), the quorum and map quorum
        (``quorum_not_met``) and, with ``max_age``, the quorum time's age
        (``stale_checkpoint``; under ``quorum none`` nothing is dated)."""
        if max_age is not None and not max_age >= 0:
            raise ValueError("max_age must be a non-negative number of seconds")
        checkpoint, log = self._open(note)
        valid = [c for c in self.cosignatures(note) if c.timestamp <= now + MAX_CLOCK_SKEW]
        when = self.quorum_time(valid)
        if when is None:
            raise PolicyError(ErrorCode.QUORUM_NOT_MET, "the witness quorum has not cosigned")
        map_when = self.map_quorum_time(valid)
        if self.map_quorum is not None:
            if map_when is None:
                raise PolicyError(
                    ErrorCode.QUORUM_NOT_MET, "the map quorum has not cosigned the map line"
                )
            when = map_when if when is NO_QUORUM else min(when, map_when)
        if when is NO_QUORUM:
            return VerifiedCheckpoint(checkpoint, log, tuple(valid), None)
        if max_age is not None and now - when > max_age:
            raise PolicyError(
                ErrorCode.STALE_CHECKPOINT, "the quorum's newest cosignature is too old"
            )
        return VerifiedCheckpoint(checkpoint, log, tuple(valid), when, map_when)

    def _open(self, note: bytes) -> tuple[Checkpoint, Verifier]:
        """Verify the signature of a policy log named like the origin; a bad one rejects."""
        text, _ = parse_note(note)
        origin = text.split("\n", 1)[0]
        candidates = [log.verifier for log in self.logs if log.verifier.name == origin]
        if not candidates:
            raise PolicyError(
                ErrorCode.LOG_NOT_IN_POLICY, "the checkpoint is not from a policy log"
            )
        failure: UnverifiedNoteError | None = None
        for verifier in candidates:
            try:
                checkpoint, _ = open_checkpoint(note, verifier)
            except UnverifiedNoteError as err:  # no signature by this key: try the next
                failure = err
                continue
            return checkpoint, verifier
        assert failure is not None
        raise failure


def _optional(url: str | None) -> list[str]:
    return [] if url is None else [url]
