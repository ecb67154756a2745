"""Witness policies (C2SP tlog-policy) and checking a checkpoint against one.

A policy names the logs a client trusts, the witnesses it knows, and the
quorum: the rule that decides whether the witnesses that cosigned a
checkpoint are enough. :meth:`Policy.verify` applies all of it to a signed
checkpoint note and, because deplog's witnesses add timestamped
``cosignature/v1`` signatures (tlog-cosignature), also says *since when* the
quorum has vouched for the checkpoint, which is what bounds its staleness
(BRIEF section 3, "Freshness").

Syntax, all from tlog-policy "Policy file syntax and structure":

* the file is octets, line based: each line ends in a newline (a last line
  without one is accepted, as Go implementations do); items are separated by
  runs of spaces and tabs *only*; leading and trailing whitespace is allowed;
  blank lines and lines whose first non-blank octet is ``#`` are ignored (a
  ``#`` later in a line is not a comment);
* the only octets allowed are tab, newline, 0x20-0x7E and 0x80-0xFF
  ("Character set"), so no carriage return; octets with the high bit set are
  opaque, so names are compared octet for octet, never normalized (they are
  held as ``str`` decoded with ``surrogateescape``, which round-trips any
  octets exactly, PEP 383);
* ``log <vkey> [<url>]`` with a type 0x01 key (tlog-checkpoint) whose name is
  the log's origin; ``witness <name> <vkey> [<url>]`` with a cosigner key
  (tlog-cosignature v1.1): type 0x04 (Ed25519 ``cosignature/v1``) or type 0x06
  (ML-DSA-44), so one quorum may mix both; two logs, or two witnesses, wrapping
  the same public key are duplicates and refused even if their names and key
  IDs differ ("Public key representation"). A log key may also be a witness
  key: the spec only forbids duplicates within each kind;
* ``group <name> all|any|<k> <member>...`` with n >= 1 members and
  1 <= k <= n (``any`` is k = 1, ``all`` is k = n, ``k`` is ASCII decimal);
* witnesses and groups share one namespace, in which ``none`` is predefined;
  a name is defined once, and only names defined on *earlier* lines can be
  members or the quorum (which also rules out cycles);
* each defined name is a group member at most once in the whole file, so a
  witness contributes to the quorum in only one way ("Defining a witness
  group"; sigsum-go reads it the same way); ``none`` is never a member;
* exactly one ``quorum <name>`` line.

deplog's own lines. tlog-policy has no way to say how a witness signs, so deplog
reads two lines of its own, written as comments so that every other
implementation's parser skips them (and so applies the spec's stricter rule to
the witness they name; the file stays a valid tlog-policy). A comment line whose
first non-blank octets are ``#deplog:`` is one of:

* ``#deplog: tree-lines <witness>``: this Ed25519 (type 0x04) witness may sign
  ``cosignature/v1`` over the checkpoint's first three lines only (litewitness,
  torchwood up to v0.5.0, does): tlog-cosignature says a cosigner makes no
  statement about extension lines, so that form states what a full-body one
  states about the tree. Its cosignatures are then accepted in either form and
  each says which (``Cosignature.statement``); every other witness's must cover
  the whole text, as the spec says. The witness must be defined on an earlier
  line, be named once, and be type 0x04 (an ML-DSA-44 cosignature covers the
  tree lines only anyway).
* ``#deplog: map-quorum <name>``: the witness or group (defined on an earlier
  line) whose cosignatures must also vouch for the checkpoint's
  ``deplog-map/v1`` line, as map-verifying witnesses (``witness serve
  --verify-map``) do. Only full-body Ed25519 cosignatures by witnesses not
  marked ``tree-lines`` count toward it: neither a tree-lines witness nor an
  ML-DSA-44 one ever signs the map line. A map quorum that such witnesses
  alone could never meet is refused when the policy is read; at most one.

Any other ``#deplog:`` line is refused, so a typo is never read as a comment
(``# deplog:``, with a space, is an ordinary comment).

Limits ("Implementation limits" asks for at least 32 of each): at most
:data:`MAX_LOGS` logs, :data:`MAX_WITNESSES` witnesses, :data:`MAX_GROUPS`
groups and :data:`MAX_POLICY_SIZE` octets. Errors are
:class:`PolicyFormatError` naming the line number, never the line's content.

Quorum *time*. A witness that cosigned is satisfied at ``t_w``, the timestamp
of its newest valid cosignature: it stated that the checkpoint was the newest
it knew of as of ``t_w``. A k-of-n group is satisfied at time T if at least k
members are satisfied at some time >= T, so its time is the k-th largest of
its members' times (a member that is not satisfied counts as minus infinity).
The quorum's time is the time of the quorum name: the moment up to which the
quorum vouches that nothing newer existed, the number a freshness bound is
compared against.
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

__all__ = [
    "MAX_CLOCK_SKEW",
    "MAX_GROUPS",
    "MAX_LOGS",
    "MAX_POLICY_SIZE",
    "MAX_WITNESSES",
    "NONE",
    "NO_QUORUM",
    "NoQuorum",
    "Policy",
    "PolicyError",
    "PolicyFormatError",
    "PolicyGroup",
    "PolicyLog",
    "PolicyWitness",
    "VerifiedCheckpoint",
]

DIRECTIVE: Final = b"#deplog:"
"""How deplog's own policy lines start (see the module docstring)."""

MAX_LOGS: Final = 256
MAX_WITNESSES: Final = 256
MAX_GROUPS: Final = 256
MAX_POLICY_SIZE: Final = 512 * 1024
"""Largest policy accepted, in octets: room for every witness line with an ML-DSA-44 key
(some 1,800 octets each)."""

MAX_CLOCK_SKEW: Final = 60
"""Seconds a cosignature may be dated in our future and still count (tlog-cosignature: a
verifier MAY reject future timestamps; a little slack absorbs honest clock drift)."""

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
    """The type of :data:`NO_QUORUM`."""

    NO_QUORUM = "none"


NO_QUORUM: Final = NoQuorum.NO_QUORUM
"""What :meth:`Policy.quorum_time` returns under ``quorum none``: no witness requirement,
so met, but with no time either (the policy bounds nothing about freshness)."""


def _encode(value: str) -> bytes:
    """The octets of a name or URL (inverse of the parser's ``surrogateescape`` decoding)."""
    try:
        return value.encode("utf-8", _SURROGATES)
    except UnicodeEncodeError:
        raise PolicyFormatError("name or URL is not representable as octets") from None


def _decode(token: bytes) -> str:
    return token.decode("utf-8", _SURROGATES)


def _check_token(value: str, what: str) -> None:
    """Names and URLs are single items: non-empty, no whitespace or control octets."""
    if not _TOKEN.fullmatch(_encode(value)):
        raise PolicyFormatError(f"{what} is empty or contains whitespace or control octets")


@dataclass(frozen=True)
class PolicyLog:
    """A trusted log: its type 0x01 key, whose name is the log's origin, and an optional URL."""

    verifier: Verifier
    url: str | None = None


@dataclass(frozen=True)
class PolicyWitness:
    """A known witness: its policy-local name, cosigner key (type 0x04 or 0x06) and
    optional URL; ``tree_lines`` if its Ed25519 cosignatures may cover the first three
    lines only (``#deplog: tree-lines``)."""

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
    """The rules of tlog-policy, applied one definition at a time in file order.

    Both the parser (which adds line numbers to errors) and :class:`Policy`'s
    own constructor go through here, so a policy built in code obeys exactly
    the rules a parsed one does and always renders to a parseable file.
    """

    def __init__(self) -> None:
        self.logs: list[PolicyLog] = []
        self.witnesses: dict[str, PolicyWitness] = {}
        self.groups: dict[str, PolicyGroup] = {}
        self.quorum: str | None = None
        self.map_quorum: str | None = None
        # Same public key: a duplicate (tlog-policy "Public key representation").
        # Same name and key ID with another key (a 2^-32 accident): signature
        # lines would be ambiguous, so that is refused too.
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
        if log.verifier.public_key in self._log_keys:
            raise PolicyFormatError("duplicate log key")
        if (log.verifier.name, log.verifier.key_id) in self._log_ids:
            raise PolicyFormatError("two log keys share a name and key ID")
        if len(self.logs) >= MAX_LOGS:
            raise PolicyFormatError(f"more than {MAX_LOGS} logs")
        self._log_keys.add(log.verifier.public_key)
        self._log_ids.add((log.verifier.name, log.verifier.key_id))
        self.logs.append(log)

    def add_witness(self, witness: PolicyWitness) -> None:
        self._new_name(witness.name)
        if witness.verifier.sig_type not in COSIGNER_TYPES:
            raise PolicyFormatError("witness keys must be type 0x04 or 0x06 (cosigner) vkeys")
        if witness.tree_lines:
            self._check_tree_lines(witness)
        if witness.url is not None:
            _check_token(witness.url, "URL")
        if witness.verifier.public_key in self._witness_keys:
            raise PolicyFormatError("duplicate witness key")
        if (witness.verifier.name, witness.verifier.key_id) in self._witness_ids:
            raise PolicyFormatError("two witness keys share a name and key ID")
        if len(self.witnesses) >= MAX_WITNESSES:
            raise PolicyFormatError(f"more than {MAX_WITNESSES} witnesses")
        self._witness_keys.add(witness.verifier.public_key)
        self._witness_ids.add((witness.verifier.name, witness.verifier.key_id))
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
        """``#deplog: map-quorum <name>``; checked against the tree-lines marks by
        :meth:`finish`, once they are all known."""
        if self.map_quorum is not None:
            raise PolicyFormatError("more than one map-quorum line")
        if name not in self.witnesses and name not in self.groups:
            raise PolicyFormatError("map-quorum is not a witness or group of an earlier line")
        self.map_quorum = name

    def finish(self) -> None:
        """The checks that need the whole file: a map quorum its eligible witnesses (full
        body Ed25519, not tree-lines) can meet."""
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


def _threshold(token: bytes, members: int) -> int:
    if token == b"any":
        return 1
    if token == b"all":
        return members
    if not _DECIMAL.fullmatch(token):
        raise PolicyFormatError("group threshold must be all, any or a decimal number")
    # Any k over the member count is refused later; cap the digits so a
    # hostile file cannot make int() parse a huge number.
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
    """A ``#deplog:`` line's items after the prefix (module docstring)."""
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
    """A checkpoint that satisfied a policy.

    ``log`` is the policy log whose signature verified; ``cosignatures`` are the
    valid, not future-dated cosignatures by policy witnesses (one per witness,
    its newest; each says its key type and ``statement``); ``witnessed_at`` is the
    quorum time (POSIX seconds), or None under ``quorum none``, where the caller has
    nothing better than the time it fetched the checkpoint. With a map quorum,
    ``map_witnessed_at`` is its time, and ``witnessed_at`` is at most that.
    """

    checkpoint: Checkpoint
    log: Verifier
    cosignatures: tuple[Cosignature, ...]
    witnessed_at: int | None
    map_witnessed_at: int | None = None


@dataclass(frozen=True)
class Policy:
    """A parsed, validated tlog-policy: logs, witnesses, groups and the quorum name.

    ``witnesses`` and ``groups`` are read-only mappings from name to
    definition, in definition order (every group refers only to witnesses and
    earlier groups). Constructing a Policy directly applies the same rules as
    :meth:`parse`.
    """

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
        """The canonical file: logs, witnesses, groups in definition order, then the quorum.

        One space between items, ``any``/``all`` where they fit, no comments but
        deplog's own lines (a ``tree-lines`` line right after its witness, the
        ``map-quorum`` line last); :meth:`parse` reads it back to an equal policy.
        """
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
        """Trust one log and require cosignatures from ``k`` of ``witnesses``.

        Witnesses are named by their key names, which must then be distinct;
        the group is named ``+quorum``, a name no key name can take (key names
        never contain ``+``), so it cannot collide with a witness. The witnesses
        in ``tree_lines`` are marked ``#deplog: tree-lines``.
        """
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
        """Every valid cosignature on ``note`` by a policy witness, each witness's in the
        form the policy accepts from it (a tree-lines witness's in either form)."""
        return cosignatures(note, self.witness_verifiers(), tree_lines=self.tree_lines_verifiers())

    def quorum_time(
        self, cosigs: Iterable[Cosignature]
    ) -> int | Literal[NoQuorum.NO_QUORUM] | None:
        """Since when the quorum vouches for a checkpoint, given its *verified* cosignatures.

        Returns :data:`NO_QUORUM` under ``quorum none`` (no witness is required,
        so there is no time), None if the quorum is not met, else the quorum
        time in POSIX seconds: each witness counts at its newest cosignature's
        timestamp and a k-of-n group at the k-th largest of its members' times
        (see the module docstring). Cosignatures by keys that are not policy
        witnesses are ignored; the caller must have verified the rest.
        """
        if self.quorum == NONE:
            return NO_QUORUM
        return self._time(self.quorum, cosigs)

    def map_quorum_time(self, cosigs: Iterable[Cosignature]) -> int | None:
        """Since when the map quorum vouches for the checkpoint's map line, or None if it
        is not met (or the policy has none): as :meth:`quorum_time`, counting only
        full-body Ed25519 cosignatures by witnesses not marked ``tree-lines``."""
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
        """Check a signed checkpoint note against the policy, at time ``now`` (POSIX seconds).

        1. It must carry a valid signature by a policy log whose key name is
           its origin (tlog-policy "Defining a log"): no such log is
           ``log_not_in_policy``; a failing signature keeps the note's error code.
        2. Cosignatures by policy witnesses are verified (lines by unknown keys
           are ignored; a witness's invalid line is ``bad_cosignature``; a line of
           a ``tree-lines`` witness may cover the first three lines only). A
           witness counts at its newest cosignature; if that one is dated more
           than :data:`MAX_CLOCK_SKEW` seconds after ``now`` the witness does
           not count at all (fail closed: its clock or key is not to be relied on).
        3. The quorum must be met (``quorum_not_met``), and so must the map quorum
           if the policy has one (``quorum_not_met``; the quorum time is then the
           earlier of the two), and with ``max_age`` the
           quorum time must be at most ``max_age`` seconds before ``now``
           (``stale_checkpoint``). Under ``quorum none`` no witness vouches for
           freshness, so ``max_age`` cannot be enforced: ``witnessed_at`` is
           None and the caller only has its own fetch time.
        """
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
        """Verify the log signature, trying each policy log named like the note's origin.

        The unverified origin line only selects candidate keys; nothing is
        trusted before a signature verifies. A bad signature by any candidate
        rejects the note outright, as any failing known-key signature does
        (signed-note "Signatures").
        """
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
