"""Builders for the tests: every value a test makes, made one way.

Notices and envelopes, publisher statements, log leaves, checkpoints signed
over chosen leaves, registrations in a real ``Log``, a settable clock, the
Hypothesis strategies of the data model, a real log in process (``LocalLog``,
``InProcessLogSource``), and servers on 127.0.0.1 (``serving``, ``unused_port``).
Everything here is a plain value or function over real keys and real formats; the
pytest fixtures built from them live in ``tests/conftest.py``.

One notice template serves every test: ``notice_json`` holds the defaults and
``make_envelope`` only overrides what a signed submission by a given key
needs (its publisher, its tool, issued now).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import socket
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import strategies as st

from deplog.authority.http.server import ServerConfig, build_admin_app, build_app
from deplog.authority.log import Log
from deplog.client.errors import ErrorCode
from deplog.client.follow.source import FetchError, MemoryLogSource, sync_step
from deplog.client.follow.trust import Advanced, TrustedState
from deplog.client.map.stored import StoredMap
from deplog.client.model import canonical
from deplog.client.model.entries import (
    NoticeEntry,
    PublisherStatement,
    StatementAction,
    decode_entry,
    encode_entry,
    sign_publisher_statement,
)
from deplog.client.model.notice import Envelope, Notice
from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import ConsistencyProof, leaf_hash, root_from_leaf_hashes
from deplog.client.tlog.tiles import (
    TILE_WIDTH,
    encode_entry_bundle,
    encode_hash_tile,
    entry_tiles,
    hash_tiles,
)
from deplog.client.tlog.timestamps import now_timestamp

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TOOL = "tool:org.example/search"
PUBLISHER = "example"
NAMESPACE = "org.example"


class Clock:
    """A settable clock (POSIX seconds) for code that takes a ``clock`` callable."""

    def __init__(self, now: float | None = None) -> None:
        self.now = time.time() if now is None else now

    def __call__(self) -> float:
        return self.now


# --- notices and envelopes ----------------------------------------------------------


def notice_json(**overrides: Any) -> dict[str, Any]:
    """A valid deprecate notice as JSON; ``None`` values delete a field."""
    base: dict[str, Any] = {
        "tool_id": TOOL,
        "action": "deprecate",
        "affected": {"versions": ["1.0.0", "1.1.0"]},
        "reasons": ["superseded"],
        "effective_at": "2026-02-01T00:00:00Z",
        "sunset_at": "2026-06-01T00:00:00Z",
        "issued_at": "2026-01-15T09:30:00Z",
        "publisher": PUBLISHER,
        "sequence": 1,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def make_notice(**overrides: Any) -> Notice:
    """``Notice.from_json(notice_json(**overrides))``."""
    return Notice.from_json(notice_json(**overrides))


def revoke_json(**overrides: Any) -> dict[str, Any]:
    """A valid revoke notice (security, with an advisory)."""
    fields: dict[str, Any] = {
        "action": "revoke",
        "sunset_at": None,
        "reasons": ["security"],
        "advisories": ["CVE-2026-1234"],
    }
    fields.update(overrides)
    return notice_json(**fields)


def withdraw_json(target: int, **overrides: Any) -> dict[str, Any]:
    """A valid withdraw of the notice at log index ``target``."""
    fields: dict[str, Any] = {
        "action": "withdraw",
        "affected": None,
        "sunset_at": None,
        "withdraws": target,
        "reasons": ["other"],
    }
    fields.update(overrides)
    return notice_json(**fields)


def make_envelope(
    signer: Signer,
    sequence: int,
    *,
    tool: str | None = None,
    publisher: str | None = None,
    **fields: Any,
) -> Envelope:
    """A submission signed by ``signer``: a deprecation of version 1.0.0, without a sunset,
    by the publisher named like the key, about ``tool:org.<publisher>/search``, issued now.

    ``fields`` override notice members (``None`` deletes one), as in ``notice_json``.
    """
    publisher = publisher or signer.name
    submission: dict[str, Any] = {
        "tool_id": tool or f"tool:org.{publisher}/search",
        "affected": {"versions": ["1.0.0"]},
        "effective_at": "2026-01-01T00:00:00Z",
        "sunset_at": None,
        "issued_at": now_timestamp(),
        "publisher": publisher,
        "sequence": sequence,
    }
    return Envelope.sign(make_notice(**(submission | fields)), signer)


# --- publisher statements -------------------------------------------------------------


def publisher_statement(
    action: StatementAction,
    publisher: str = PUBLISHER,
    keys: Sequence[Signer] = (),
    namespaces: Sequence[str] = (),
) -> PublisherStatement:
    """An unsigned registry change about ``publisher`` and the public keys of ``keys``."""
    return PublisherStatement(
        action=action,
        publisher=publisher,
        issued_at=NOW,
        namespaces=tuple(namespaces),
        keys=tuple(k.verifier().vkey() for k in keys),
    )


def register_statement(
    publisher: str = PUBLISHER,
    namespaces: Sequence[str] = (NAMESPACE,),
    keys: Sequence[Signer] = (),
) -> PublisherStatement:
    """A register statement for ``publisher`` with the given namespaces and keys."""
    return publisher_statement("register", publisher, keys, namespaces)


# --- leaves, logs and checkpoints -------------------------------------------------------


def notice_leaf(envelope: Envelope) -> bytes:
    """The log leaf of a notice: its canonical entry bytes."""
    return encode_entry(NoticeEntry(envelope))


def publisher_leaf(statement: PublisherStatement, log_signer: Signer) -> bytes:
    """The log leaf of a registry change, signed with ``log_signer`` (the log key, or not)."""
    return encode_entry(sign_publisher_statement(statement, log_signer))


def register(log: Log, publisher: Signer, namespace: str | None = None) -> int:
    """Append the registration of the publisher named like the key ``publisher``, with that
    one key and one namespace (by default ``org.<name>``, where ``make_envelope``'s tools
    live); returns its index."""
    owned = namespace or f"org.{publisher.name}"
    return log.append_publisher(register_statement(publisher.name, (owned,), (publisher,)))


def sign_tree(log_signer: Signer, leaves: Sequence[bytes]) -> bytes:
    """A checkpoint over exactly ``leaves``, signed with ``log_signer`` (origin: its name).

    What any holder of the log key can publish, honest or not: with it a test
    shows a verifier a tree it chose, under a genuine log signature.
    """
    root = root_from_leaf_hashes([leaf_hash(leaf) for leaf in leaves])
    return sign_checkpoint(Checkpoint(log_signer.name, len(leaves), root), log_signer)


def write_tiles(directory: Path, note: bytes, leaves: Sequence[bytes]) -> None:
    """Publish ``leaves`` under ``note`` as a C2SP tlog-tiles directory, as a writer would:
    every hash tile and entry bundle of the tree of ``len(leaves)`` leaves, then ``checkpoint``.

    Level-L hashes are computed here by the RFC 9162 reference function over
    the 256 hashes below each, not by the tiles reader under test. Files of
    tiles the tree does not have (an older tree's partial tiles) are left alone.
    """
    levels = [[leaf_hash(leaf) for leaf in leaves]]
    while len(levels[-1]) >= TILE_WIDTH:
        below = levels[-1]
        levels.append(
            [
                root_from_leaf_hashes(below[i : i + TILE_WIDTH])
                for i in range(0, len(below) - TILE_WIDTH + 1, TILE_WIDTH)
            ]
        )
    for tile in hash_tiles(len(leaves)):
        hashes = levels[tile.level][tile.node_indices.start : tile.node_indices.stop]
        _write_file(directory / tile.path, encode_hash_tile(tile, hashes))
    for bundle in entry_tiles(len(leaves)):
        data = leaves[bundle.leaf_indices.start : bundle.leaf_indices.stop]
        _write_file(directory / bundle.path, encode_entry_bundle(bundle, data))
    _write_file(directory / "checkpoint", note)


def _write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


# --- Hypothesis strategies ------------------------------------------------------------

_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
namespaces = st.lists(_label, min_size=2, max_size=4).map(".".join)
tool_ids = st.builds(
    lambda ns, name: f"tool:{ns}/{name}",
    namespaces,
    st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True),
)
_num = st.integers(0, 30).map(str)
_pre_id = st.one_of(_num, st.from_regex(r"[0-9]{0,2}[a-zA-Z-][0-9a-zA-Z-]{0,4}", fullmatch=True))
semvers = st.builds(
    lambda a, b, c, pre, build: (
        f"{a}.{b}.{c}"
        + (("-" + ".".join(pre)) if pre else "")
        + (("+" + ".".join(build)) if build else "")
    ),
    _num,
    _num,
    _num,
    st.lists(_pre_id, max_size=3),
    st.lists(st.from_regex(r"[0-9a-zA-Z-]{1,5}", fullmatch=True), max_size=2),
)
_times = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2100, 1, 1)).map(
    lambda d: d.replace(microsecond=0, tzinfo=UTC)
)


def _ts(d: datetime) -> str:
    return d.strftime("%Y-%m-%dT%H:%M:%SZ")


@st.composite
def _ranges(draw: st.DrawFn) -> dict[str, Any]:
    """An OSV range with strictly increasing, alternating events."""
    from deplog.client.model.semver import Version

    vs = draw(st.lists(semvers, min_size=1, max_size=5))
    uniq: dict[tuple[object, ...], str] = {}
    for v in vs:
        uniq.setdefault(Version.parse(v).sort_key, v)
    ordered = [uniq[k] for k in sorted(uniq)]
    events: list[dict[str, str]] = []
    if draw(st.booleans()):
        events.append({"introduced": "0"})
        kinds = ["fixed", "last_affected"]
    else:
        kinds = []
    for v in ordered:
        if len(events) % 2 == 0:
            events.append({"introduced": v})
        else:
            events.append({draw(st.sampled_from(kinds or ["fixed", "last_affected"])): v})
    return {"type": "SEMVER", "events": events}


_reasons = st.lists(
    st.sampled_from(
        [
            "superseded",
            "end_of_life",
            "security",
            "critical_bug",
            "schema_change",
            "moved",
            "policy",
            "other",
        ]
    ),
    min_size=1,
    max_size=8,
    unique=True,
)
_advisories = st.lists(
    st.one_of(
        st.from_regex(r"CVE-[0-9]{4}-[0-9]{4,8}", fullmatch=True),
        st.from_regex(
            r"GHSA-[23456789cfghjmpqrvwx]{4}-[23456789cfghjmpqrvwx]{4}-[23456789cfghjmpqrvwx]{4}",
            fullmatch=True,
        ),
    ),
    min_size=1,
    max_size=4,
    unique=True,
)
_message = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Cf")),
    min_size=1,
    max_size=50,
)


@st.composite
def notices(draw: st.DrawFn) -> dict[str, Any]:
    """Valid notice JSON objects covering every action and optional field."""
    action = draw(st.sampled_from(["deprecate", "revoke", "withdraw"]))
    effective = draw(_times)
    obj: dict[str, Any] = {
        "tool_id": draw(tool_ids),
        "action": action,
        "reasons": draw(_reasons),
        "effective_at": _ts(effective),
        "issued_at": _ts(draw(_times)),
        "publisher": draw(st.from_regex(r"[a-z0-9][a-z0-9-]{0,10}", fullmatch=True)),
        "sequence": draw(st.integers(1, 2**53 - 1)),
    }
    if action == "withdraw":
        obj["withdraws"] = draw(st.integers(0, 2**53 - 1))
    else:
        affected: dict[str, Any] = {}
        which = draw(st.sampled_from(["versions", "ranges", "both"]))
        if which in ("versions", "both"):
            affected["versions"] = draw(st.lists(semvers, min_size=1, max_size=5, unique=True))
        if which in ("ranges", "both"):
            affected["ranges"] = draw(st.lists(_ranges(), min_size=1, max_size=3))
        obj["affected"] = affected
        if draw(st.booleans()):
            obj["schema_digest"] = "sha256:" + draw(st.from_regex(r"[0-9a-f]{64}", fullmatch=True))
        if draw(st.booleans()):
            obj["replacement"] = {"tool_id": draw(tool_ids), "version": draw(semvers)}
        if action == "deprecate" and draw(st.booleans()):
            sunset = effective + timedelta(seconds=draw(st.integers(0, 10**9)))
            obj["sunset_at"] = _ts(sunset)
    needs_adv = action == "revoke" and "security" in obj["reasons"]
    if needs_adv or draw(st.booleans()):
        obj["advisories"] = draw(_advisories)
    if draw(st.booleans()):
        obj["message"] = draw(_message)
    return obj


def admitted(leaves: Sequence[bytes], start: int = 0) -> list[tuple[int, Notice]]:
    """The map's items of an admitted log's ``leaves`` from index ``start`` (tests build
    admitted logs, so every entry decodes and passes the rules): each notice with its
    index, as ``client.model.rules.fold_item`` gives them."""
    items = []
    for index, leaf in enumerate(leaves, start):
        entry = decode_entry(leaf)
        if isinstance(entry, NoticeEntry):
            items.append((index, entry.envelope.notice))
    return items


def advance_leaves(
    stored: StoredMap, start: int, leaves: Sequence[bytes], **options: bool
) -> bytes:
    """``stored.advance_notices`` over an admitted log's ``leaves`` from ``start``."""
    return stored.advance_notices(start, start + len(leaves), admitted(leaves, start), **options)


# Edits that tend to matter to deplog's line- and JSON-based formats (shared by the
# hypothesis tests and the atheris fuzz targets in bench/fuzz/).
HOSTILE_TOKENS: tuple[bytes, ...] = (
    b"\n",
    b"\n\n",
    b"\xe2\x80\x94 ",  # the signature line prefix: em dash, space
    b" ",
    b"\t",
    b"\r",
    b"\x00",
    b"+",
    b"=",
    b"0",
    b"00",
    b"-1",
    b"9223372036854775808",
    b"18446744073709551616",
    b'"',
    b"\\",
    b"\\ud800",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"1e5",
    b"null",
    b"\xff",
    b"\xc3\xa9",
    b"#",
)


# -- a real log in process ----------------------------------------------------------------------
# For unit tests of the client side that need real signed checkpoints, real leaves and real
# proofs but no HTTP: ``InProcessLogSource`` reads an authority ``Log`` as a ``LogSource``,
# ``LocalLog.sync(trusted)`` takes the follower's own verified step over it, and
# ``LocalLog.snapshot()`` copies the log into a ``MemoryLogSource``.

ORIGIN = "local.deplog.example/log"


class InProcessLogSource:
    """An authority ``Log`` read as the authority's HTTP API would answer, without HTTP:
    its latest published checkpoint, the proofs its own tree computes, its stored leaves."""

    def __init__(self, log: Log) -> None:
        self.log = log

    async def checkpoint(self) -> bytes:
        assert self.log.published is not None
        return self.log.published.note

    async def consistency(self, old: int, new: int) -> ConsistencyProof:
        if not 0 <= old <= new <= self.log.tree.size:
            raise FetchError(ErrorCode.FETCH_FAILED, "no proof between those sizes")
        return ConsistencyProof(old, new, tuple(self.log.tree.consistency_proof(old, new)))

    async def entries(self, start: int, end: int) -> Sequence[bytes]:
        if not 0 <= start < end <= self.log.tree.size:
            raise FetchError(ErrorCode.FETCH_FAILED, "no entries in that range")
        return self.log.tree.leaf_data(start, end)


class LocalLog:
    """An authority ``Log`` with publisher ``acme`` owning ``org.acme``."""

    def __init__(
        self, directory: Path, db: str | None = None, signer: Signer | None = None
    ) -> None:
        """The log in ``directory/authority.db``, or in ``db`` (a migrated PostgreSQL URL),
        signed by ``signer`` (a key for ``ORIGIN``; a fresh one by default)."""
        self.signer = signer or Signer.generate(ORIGIN)
        self.db = db if db is not None else str(directory / "authority.db")
        self.log = Log(
            self.db if db is not None else directory / "authority.db", self.signer, ORIGIN
        )
        self.publisher = Signer.generate("acme")
        self.register(self.publisher, "org.acme")
        self.sequence = 0

    def register(self, publisher: Signer, namespace: str) -> None:
        register(self.log, publisher, namespace)
        self.log.publish()

    def publish(self, **fields: Any) -> int:
        """Append one notice by ``acme`` about ``tool:org.acme/search``; returns its index."""
        self.sequence += 1
        envelope = make_envelope(self.publisher, self.sequence, **fields)
        [result] = self.log.sequence([envelope])
        assert result.index is not None, result.error
        return result.index

    def publish_many(self, count: int) -> None:
        """Append ``count`` notices by ``acme`` in one batch (one checkpoint), over 50 tools."""
        envelopes = []
        for _ in range(count):
            self.sequence += 1
            tool = f"tool:org.acme/t{self.sequence % 50}"
            envelopes.append(make_envelope(self.publisher, self.sequence, tool=tool))
        results = self.log.sequence(envelopes)
        assert all(result.index is not None for result in results)

    def snapshot(self) -> MemoryLogSource:
        """The log as it stands, held in memory: its signed checkpoint and every leaf under it."""
        published = self.log.published
        assert published is not None
        return MemoryLogSource(published.note, self.log.tree.leaf_data(0, published.size))

    def write_tiles(self, directory: Path) -> None:
        """Publish the log as it stands as a tlog-tiles directory (``write_tiles``)."""
        published = self.log.published
        assert published is not None
        write_tiles(directory, published.note, self.log.tree.leaf_data(0, published.size))

    def sync(self, trusted: TrustedState) -> Advanced | None:
        """Verify and fold the log's latest checkpoint, as a follower would."""
        return asyncio.run(sync_step(InProcessLogSource(self.log), trusted))


@contextlib.asynccontextmanager
async def serving(
    app: web.Application,
) -> AsyncIterator[tuple[TestClient[object, object], TestClient[object, object]]]:
    """``app`` and its admin app (``build_admin_app``) on real servers on 127.0.0.1: a
    client of each, both closed after."""
    client: TestClient[object, object] = TestClient(TestServer(app))
    await client.start_server()
    admin: TestClient[object, object] = TestClient(TestServer(build_admin_app(app)))
    try:
        await admin.start_server()
        yield client, admin
    finally:
        await admin.close()
        await client.close()


@dataclasses.dataclass
class ServedLog:
    """An authority on real servers on 127.0.0.1 (``serving_log``)."""

    app: web.Application
    client: TestClient[object, object]
    log_key: Signer
    publisher: Signer
    """``acme``, registered for ``org.acme``."""
    admin: TestClient[object, object]


@contextlib.asynccontextmanager
async def serving_log(directory: Path, origin: str, **config: Any) -> AsyncIterator[ServedLog]:
    """An authority's app over ``directory/log.db`` (``config`` replaces ``ServerConfig``
    fields: ``db_url``, limits...) with a fresh log key for ``origin``, on real servers
    (``serving``), publisher ``acme`` registered through the admin API."""
    log_key = Signer.generate(origin)
    server_config = dataclasses.replace(ServerConfig(directory / "log.db", log_key.name), **config)
    app = build_app(server_config, log_key)
    async with serving(app) as (client, admin):
        publisher = Signer.generate("acme")
        body = canonical.dumps(register_statement("acme", ("org.acme",), (publisher,)).to_json())
        response = await admin.post("/admin/publishers", data=body)
        assert response.status == 201, await response.text()
        yield ServedLog(app, client, log_key, publisher, admin)


def unused_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, for a server a test starts: below the
    kernel's ephemeral range, so that no outgoing connection is given it meanwhile (one from
    ``bind(0)`` can be, and the server then fails to start), and above the well-known ports
    (PostgreSQL's 5432 among them). Tests take it as the ``free_port`` fixture."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    candidates = range(max(10_000, low - 8192), low)
    for port in random.sample(candidates, min(64, len(candidates))):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 below the ephemeral range ({low})")
