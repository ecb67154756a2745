"""A follower against a hostile authority: invariant 5 (BRIEF section 6).

The server here is a real aiohttp application on 127.0.0.1 whose three routes
(``/checkpoint``, ``/v1/proofs/consistency``, ``/v1/entries``) answer whatever
the test scripted. Its data comes either from an honest ``authority.log.Log``
or from a crafted tree: leaves the test chose, with roots and proofs computed
by the ``client.proofs`` reference functions and checkpoints signed with the
SAME log key. So every lie below carries a valid log signature unless the test
says otherwise, and only the follower's own checks stand between it and the
trusted state.

Each refusal must leave the trusted state exactly where it was, in memory and
on disk (a fresh ``LocalState`` on the same file sees the same checkpoint and
no notice past it).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
from aiohttp import web

from deplog.authority.log import Log
from deplog.authority.storage import store
from deplog.client.follow.follower import (
    MAX_CHECKPOINT_BYTES,
    MAX_PROOF_BYTES,
    FetchError,
    Follower,
)
from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import ForkError, RollbackError
from deplog.client.model.entries import NoticeEntry, encode_entry
from deplog.client.model.rules import RuleViolation
from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.evidence import EVIDENCE_FORMAT
from deplog.client.tlog.evidence import read_evidence as load_evidence
from deplog.client.tlog.note import Signer, UnverifiedNoteError, Verifier
from deplog.client.tlog.proofs import (
    ConsistencyProof,
    ProofError,
    consistency_path,
    leaf_hash,
    root_from_leaf_hashes,
)
from tests.integration.harness import make_envelope
from tests.local_log import register

ORIGIN = "hostile.deplog.example/log"
TRUSTED_SIZE = 4
"""The honest log before it grows: the publisher entry, then notices 1 to 3."""
PAGE_SIZE = 2
"""Small pages, so an advance spans several fetches and staged work must roll back."""
MESSAGE = "honest notice"
"""Every honest notice's message: a string value a test can change a byte of."""


# -- what the server serves -------------------------------------------------------


class TreeSource(Protocol):
    """One log's view: its latest signed checkpoint, its proofs and its leaves."""

    @property
    def note(self) -> bytes: ...

    def consistency(self, old: int, new: int) -> ConsistencyProof: ...

    def entries(self, start: int, end: int) -> list[bytes]: ...


class HonestLog:
    """An ``authority.log.Log`` served as the real authority would."""

    def __init__(self, log: Log) -> None:
        self.log = log

    @property
    def note(self) -> bytes:
        assert self.log.published is not None
        return self.log.published.note

    def consistency(self, old: int, new: int) -> ConsistencyProof:
        return ConsistencyProof(old, new, tuple(self.log.tree.consistency_proof(old, new)))

    def entries(self, start: int, end: int) -> list[bytes]:
        return self.log.tree.leaf_data(start, end)


class CraftedTree:
    """A malicious log: leaves chosen by the test, signed with the real log key."""

    def __init__(self, signer: Signer, leaves: list[bytes]) -> None:
        self.leaves = leaves
        self.hashes = [leaf_hash(leaf) for leaf in leaves]
        root = root_from_leaf_hashes(self.hashes)
        self.note = sign_checkpoint(Checkpoint(ORIGIN, len(leaves), root), signer)

    def consistency(self, old: int, new: int) -> ConsistencyProof:
        return ConsistencyProof(old, new, tuple(consistency_path(self.hashes, old, new)))

    def entries(self, start: int, end: int) -> list[bytes]:
        return self.leaves[start:end]


@dataclass(frozen=True)
class Raw:
    """A whole response served verbatim; ``chunked`` leaves out its Content-Length."""

    body: bytes
    status: int = 200
    chunked: bool = False
    delay: float = 0.0


@dataclass
class HostileAuthority:
    """The script of the three routes; a test changes it between syncs.

    ``source`` answers by default; ``checkpoint``, ``proof`` and ``entries``
    replace its answer on one route, and ``raw`` replaces a route's whole
    response with a fixed ``Raw`` one.
    """

    source: TreeSource | None = None
    checkpoint: bytes | None = None
    proof: ConsistencyProof | None = None
    entries: Callable[[int, int], list[bytes]] | None = None
    raw: dict[str, Raw] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    url: str = ""

    def serve(self, source: TreeSource) -> None:
        """Answer honestly from ``source`` on every route again."""
        self.source, self.checkpoint, self.proof, self.entries = source, None, None, None
        self.raw.clear()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/checkpoint", self._checkpoint)
        app.router.add_get("/v1/proofs/consistency", self._consistency)
        app.router.add_get("/v1/entries", self._entries)
        return app

    async def _raw(self, request: web.Request) -> web.Response | None:
        self.requests.append(request.path)
        if request.path not in self.raw:
            return None
        raw = self.raw[request.path]
        await asyncio.sleep(raw.delay)
        response = web.Response(status=raw.status, body=raw.body)
        if raw.chunked:
            response.enable_chunked_encoding()
        return response

    async def _checkpoint(self, request: web.Request) -> web.Response:
        if (raw := await self._raw(request)) is not None:
            return raw
        assert self.source is not None
        note = self.checkpoint if self.checkpoint is not None else self.source.note
        return web.Response(body=note, content_type="text/plain")

    async def _consistency(self, request: web.Request) -> web.Response:
        if (raw := await self._raw(request)) is not None:
            return raw
        assert self.source is not None
        old, new = int(request.query["old"]), int(request.query["new"])
        proof = self.proof or self.source.consistency(old, new)
        return web.json_response(proof.to_json())

    async def _entries(self, request: web.Request) -> web.Response:
        if (raw := await self._raw(request)) is not None:
            return raw
        assert self.source is not None
        start, end = int(request.query["start"]), int(request.query["end"])
        leaves = (self.entries or self.source.entries)(start, end)
        encoded = [base64.b64encode(leaf).decode() for leaf in leaves]
        return web.json_response({"start": start, "entries": encoded})


# -- building logs ---------------------------------------------------------------


def notice_leaf(signer: Signer, sequence: int, **fields: Any) -> bytes:
    fields.setdefault("message", MESSAGE)
    return encode_entry(NoticeEntry(make_envelope(signer, sequence, **fields)))


def grow(log: Log, publisher: Signer, count: int) -> None:
    """Sequence ``count`` more honest notices; notice n sits at index n."""
    first = log.tree.size
    envelopes = [
        make_envelope(publisher, seq, message=MESSAGE) for seq in range(first, first + count)
    ]
    assert all(result.error is None for result in log.sequence(envelopes))


def change_one_byte_of_message(leaf: bytes) -> bytes:
    """The leaf with one letter of its message changed: still canonical, no longer signed."""
    at = leaf.index(MESSAGE.encode())
    tampered = leaf[:at] + b"H" + leaf[at + 1 :]
    assert len(tampered) == len(leaf) and tampered != leaf
    return tampered


# -- the trusted state ------------------------------------------------------------


@dataclass(frozen=True)
class Trusted:
    size: int
    root: bytes
    note: bytes


def trusted_of(state: LocalState) -> Trusted:
    return Trusted(state.size, state.root, state.trusted.note if state.trusted else b"")


def assert_state_unchanged(follower: Follower, before: Trusted) -> None:
    """Nothing moved in memory, and nothing partial was committed to the file."""
    assert trusted_of(follower.state) == before
    reopened = LocalState(follower.state.path, ORIGIN)
    try:
        assert trusted_of(reopened) == before
        assert reopened.notice_at(before.size) is None
    finally:
        reopened.close()


def read_evidence(refused: ForkError, log_key: Verifier, proves: str) -> dict[str, Any]:
    """The evidence file's JSON, after checking that it proves ``proves`` offline."""
    assert refused.evidence is not None and refused.evidence.is_file()
    assert load_evidence(refused.evidence).verify(log_key) == proves
    evidence: dict[str, Any] = json.loads(refused.evidence.read_text())
    assert evidence["format"] == EVIDENCE_FORMAT
    return evidence


# -- fixtures ----------------------------------------------------------------------


@pytest.fixture
def log_signer() -> Signer:
    return Signer.generate(ORIGIN)


@pytest.fixture
def log(tmp_path: Path, log_signer: Signer, publisher: Signer) -> Iterator[Log]:
    """An honest log of TRUSTED_SIZE leaves with publisher ``acme`` owning ``org.acme``."""
    opened = Log(tmp_path / "log.db", log_signer, ORIGIN)
    register(opened, publisher, "org.acme")
    opened.publish()
    grow(opened, publisher, TRUSTED_SIZE - 1)
    yield opened
    opened.close()


@pytest.fixture
async def server() -> AsyncIterator[HostileAuthority]:
    authority = HostileAuthority()
    runner = web.AppRunner(authority.app(), shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    authority.url = f"http://{host}:{port}"
    yield authority
    await runner.cleanup()


@pytest.fixture
async def follower(
    server: HostileAuthority, log_signer: Signer, tmp_path: Path
) -> AsyncIterator[Follower]:
    """A follower with an empty state, pointed at the hostile server."""
    async with Follower(
        server.url,
        log_signer.verifier(),
        tmp_path / "state.db",
        page_size=PAGE_SIZE,
        evidence_dir=tmp_path / "evidence",
    ) as opened:
        yield opened


@pytest.fixture
async def trusted(server: HostileAuthority, follower: Follower, log: Log) -> Trusted:
    """The follower has verified the honest log at TRUSTED_SIZE; returns that state."""
    server.serve(HonestLog(log))
    result = await follower.sync()
    assert result.new_size == TRUSTED_SIZE
    return trusted_of(follower.state)


# -- an honest server, so that the refusals below mean something -------------------


async def test_an_honest_server_advances_the_follower_and_a_quiet_one_keeps_it(
    server: HostileAuthority, follower: Follower, log: Log
) -> None:
    server.serve(HonestLog(log))
    first = await follower.sync()
    assert (first.old_size, first.new_size) == (0, TRUSTED_SIZE)
    assert log.published is not None
    assert follower.state.root == log.published.root

    server.requests.clear()
    again = await follower.sync()
    assert not again.advanced
    assert follower.state.size == TRUSTED_SIZE
    assert server.requests == ["/checkpoint"]


async def test_an_honest_log_that_grew_is_followed_over_a_consistency_proof(
    server: HostileAuthority, follower: Follower, trusted: Trusted, log: Log, publisher: Signer
) -> None:
    grow(log, publisher, 3)
    result = await follower.sync()
    assert (result.old_size, result.new_size) == (TRUSTED_SIZE, TRUSTED_SIZE + 3)
    assert log.published is not None
    assert follower.state.root == log.published.root


# -- checkpoints ------------------------------------------------------------------


async def test_a_checkpoint_signed_by_another_key_is_rejected(
    server: HostileAuthority, follower: Follower, trusted: Trusted, log: Log, publisher: Signer
) -> None:
    grow(log, publisher, 2)
    assert log.published is not None
    same_tree = Checkpoint(ORIGIN, log.published.size, log.published.root)
    server.checkpoint = sign_checkpoint(same_tree, Signer.generate(ORIGIN))

    with pytest.raises(UnverifiedNoteError):
        await follower.sync()
    assert_state_unchanged(follower, trusted)


async def test_a_validly_signed_smaller_checkpoint_is_a_rollback(
    server: HostileAuthority, follower: Follower, trusted: Trusted, log: Log
) -> None:
    older = store.checkpoint_at(log.conn, 1)
    assert older is not None
    server.checkpoint = older.note

    with pytest.raises(RollbackError):
        await follower.sync()
    assert_state_unchanged(follower, trusted)


async def test_a_second_tree_of_the_trusted_size_is_a_fork_with_evidence(
    server: HostileAuthority,
    follower: Follower,
    trusted: Trusted,
    log: Log,
    log_signer: Signer,
    publisher: Signer,
) -> None:
    other_history = [
        *log.tree.leaf_data(0, TRUSTED_SIZE - 1),
        notice_leaf(publisher, 3, message="x"),
    ]
    fork = CraftedTree(log_signer, other_history)
    server.serve(fork)

    with pytest.raises(ForkError) as refused:
        await follower.sync()
    evidence = read_evidence(refused.value, log_signer.verifier(), "conflicting_roots")
    assert evidence["first_checkpoint"] == trusted.note.decode()
    assert evidence["second_checkpoint"] == fork.note.decode()
    assert_state_unchanged(follower, trusted)


async def test_a_larger_tree_that_does_not_extend_the_trusted_one_is_a_fork_with_evidence(
    server: HostileAuthority,
    follower: Follower,
    trusted: Trusted,
    log: Log,
    log_signer: Signer,
    publisher: Signer,
) -> None:
    """The proof is the crafted tree's own, correct for it: it cannot match the trusted root."""
    rewritten = [notice_leaf(publisher, seq, message="rewritten") for seq in range(2, 6)]
    fork = CraftedTree(log_signer, [*log.tree.leaf_data(0, 2), *rewritten])
    server.serve(fork)
    server.requests.clear()

    with pytest.raises(ForkError) as refused:
        await follower.sync()
    evidence = read_evidence(refused.value, log_signer.verifier(), "inconsistent_proof")
    assert evidence["first_checkpoint"] == trusted.note.decode()
    assert evidence["second_checkpoint"] == fork.note.decode()
    assert evidence["consistency_proof"] == fork.consistency(TRUSTED_SIZE, 6).to_json()
    assert server.requests == ["/checkpoint", "/v1/proofs/consistency"]
    assert_state_unchanged(follower, trusted)


# -- proofs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"), [(1, TRUSTED_SIZE + 2), (TRUSTED_SIZE, TRUSTED_SIZE + 1)], ids=["old", "new"]
)
async def test_a_proof_between_other_sizes_than_requested_is_rejected(
    server: HostileAuthority,
    follower: Follower,
    trusted: Trusted,
    log: Log,
    publisher: Signer,
    old: int,
    new: int,
) -> None:
    grow(log, publisher, 2)
    server.proof = HonestLog(log).consistency(old, new)

    with pytest.raises(ProofError) as refused:
        await follower.sync()
    assert refused.value.code == "proof_size_mismatch"
    assert_state_unchanged(follower, trusted)


# -- entries ------------------------------------------------------------------------


async def test_an_entry_with_one_byte_changed_is_rejected_at_its_index(
    server: HostileAuthority, follower: Follower, trusted: Trusted, log: Log, publisher: Signer
) -> None:
    """The changed byte is inside the notice's message: the leaf still decodes as a
    canonical notice, and only the publisher's signature gives it away."""
    grow(log, publisher, 4)
    tampered_index = TRUSTED_SIZE + 2
    honest = HonestLog(log)

    def tamper(start: int, end: int) -> list[bytes]:
        leaves = honest.entries(start, end)
        if start <= tampered_index < end:
            at = tampered_index - start
            leaves[at] = change_one_byte_of_message(leaves[at])
        return leaves

    server.entries = tamper

    with pytest.raises(RuleViolation) as refused:
        await follower.sync()
    assert (refused.value.code, refused.value.index) == ("unauthorized_notice", tampered_index)
    assert refused.value.cause == "bad_signature"
    assert_state_unchanged(follower, trusted)


async def test_a_refused_advance_leaves_the_follower_able_to_advance_later(
    server: HostileAuthority, follower: Follower, trusted: Trusted, log: Log, publisher: Signer
) -> None:
    """The pages verified before the bad one were staged, then rolled back cleanly."""
    grow(log, publisher, 4)
    honest = HonestLog(log)
    last = TRUSTED_SIZE + 3
    server.entries = lambda start, end: [
        change_one_byte_of_message(leaf) if i == last else leaf
        for i, leaf in enumerate(honest.entries(start, end), start)
    ]
    with pytest.raises(RuleViolation):
        await follower.sync()

    server.serve(honest)
    result = await follower.sync()
    assert (result.old_size, result.new_size) == (TRUSTED_SIZE, TRUSTED_SIZE + 4)
    assert follower.state.notice_at(last) is not None


async def test_an_entry_left_out_of_a_range_is_rejected(
    server: HostileAuthority, follower: Follower, trusted: Trusted, log: Log, publisher: Signer
) -> None:
    """Pages may be short, so the follower cannot see the gap itself: it takes the leaf
    after the hidden one at the hidden index, asks on from the next index, gets that same
    leaf again, and its repeated publisher sequence gives the lie away there."""
    grow(log, publisher, 4)
    honest = HonestLog(log)
    hidden = TRUSTED_SIZE + 1
    server.entries = lambda start, end: [
        leaf for i, leaf in enumerate(honest.entries(start, end), start) if i != hidden
    ]

    with pytest.raises(RuleViolation) as refused:
        await follower.sync()
    assert (refused.value.code, refused.value.index) == ("replayed_notice", hidden + 1)
    assert_state_unchanged(follower, trusted)


async def test_a_notice_by_an_unauthorized_key_is_rejected_even_under_a_signed_checkpoint(
    server: HostileAuthority,
    follower: Follower,
    trusted: Trusted,
    log: Log,
    log_signer: Signer,
    publisher: Signer,
) -> None:
    """The malicious log extends the trusted tree honestly (the proof verifies) but
    includes a notice for ``acme`` signed by a key ``acme`` never registered."""
    impostor = Signer.generate(publisher.name)
    leaves = [
        *log.tree.leaf_data(0, TRUSTED_SIZE),
        notice_leaf(publisher, TRUSTED_SIZE),
        notice_leaf(impostor, TRUSTED_SIZE + 1, action="revoke", reasons=["other"]),
    ]
    server.serve(CraftedTree(log_signer, leaves))

    with pytest.raises(RuleViolation) as refused:
        await follower.sync()
    assert (refused.value.code, refused.value.index) == ("unauthorized_notice", TRUSTED_SIZE + 1)
    assert refused.value.cause == "unknown_key"
    assert_state_unchanged(follower, trusted)


# -- unusable responses ----------------------------------------------------------


def padded(body: bytes, bound: int) -> bytes:
    """``body`` with trailing whitespace past ``bound``: only its length is wrong."""
    return body + b" " * (bound + 1 - len(body))


def proof_body(honest: HonestLog) -> bytes:
    """The honest proof from the trusted size to the grown log, as JSON bytes."""
    return json.dumps(honest.consistency(TRUSTED_SIZE, TRUSTED_SIZE + 2).to_json()).encode()


@pytest.mark.parametrize(
    ("route", "response", "code"),
    [
        (
            "/checkpoint",
            lambda honest: Raw(padded(honest.note, MAX_CHECKPOINT_BYTES)),
            "response_too_large",
        ),
        (
            "/v1/proofs/consistency",
            lambda honest: Raw(padded(proof_body(honest), MAX_PROOF_BYTES)),
            "response_too_large",
        ),
        (
            "/v1/proofs/consistency",
            lambda honest: Raw(padded(proof_body(honest), MAX_PROOF_BYTES), chunked=True),
            "response_too_large",
        ),
        ("/v1/proofs/consistency", lambda _: Raw(b"<html>not json</html>"), "bad_response"),
        ("/v1/entries", lambda _: Raw(b"<html>502 Bad Gateway</html>"), "bad_response"),
        ("/v1/entries", lambda _: Raw(b"{}", status=503), "fetch_failed"),
        pytest.param(
            "/v1/proofs/consistency",
            lambda _: Raw(b"[" * 30_000 + b"]" * 30_000),
            "bad_response",
            id="deeply-nested-proof",
        ),
    ],
    ids=[
        "huge-checkpoint",
        "huge-proof",
        "huge-proof-without-length",
        "html-proof",
        "html-entries",
        "http-503",
        "deeply-nested-proof",
    ],
)
async def test_an_unusable_response_is_a_fetch_error(
    server: HostileAuthority,
    follower: Follower,
    trusted: Trusted,
    log: Log,
    publisher: Signer,
    route: str,
    response: Callable[[HonestLog], Raw],
    code: str,
) -> None:
    grow(log, publisher, 2)
    server.raw[route] = response(HonestLog(log))

    with pytest.raises(FetchError) as refused:
        await follower.sync()
    assert refused.value.code == code
    assert route in server.requests
    assert_state_unchanged(follower, trusted)


async def test_a_server_that_stalls_is_a_fetch_error(
    server: HostileAuthority, log_signer: Signer, trusted: Trusted, tmp_path: Path
) -> None:
    server.raw["/checkpoint"] = Raw(b"", delay=2.0)
    async with Follower(
        server.url, log_signer.verifier(), tmp_path / "state.db", timeout=0.2
    ) as impatient:
        with pytest.raises(FetchError) as refused:
            await impatient.sync()
        assert refused.value.code == "fetch_failed"
        assert_state_unchanged(impatient, trusted)
