"""A follower against a hostile authority: invariant 5 (BRIEF section 6).

The server here is a real aiohttp application on 127.0.0.1
(``scripted_authority``) whose routes answer whatever the test scripted. Its
data comes from a log source: either an honest ``authority.log.Log`` read
in-process, or a crafted tree (``signed_log``: a ``MemoryLogSource`` over
leaves the test chose, with proofs computed by the ``client.tlog.proofs``
reference functions) under checkpoints signed with the SAME log key. So every
lie below carries a valid log signature unless the test says otherwise, and
only the follower's own checks stand between it and the trusted state. (The
HTTP source's bounds and wire checks, answer by answer, are specified in
``test_http_source.py``.)

Each refusal must leave the trusted state exactly where it was, in memory and
on disk (a fresh ``LocalState`` on the same file sees the same checkpoint and
no notice past it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from deplog.authority.http.push import sse_event
from deplog.authority.log import Log
from deplog.authority.storage import store
from deplog.client.cli.audit import EXIT_NOT_PROVEN
from deplog.client.cli.main import main as deplog_main
from deplog.client.follow.follower import SUSPICION_ESCALATION, Follower
from deplog.client.follow.http import MAX_CHECKPOINT_BYTES
from deplog.client.follow.source import FetchError, MemoryLogSource
from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import ForkError, RollbackError, SuspectedForkError
from deplog.client.model.entries import NoticeEntry, encode_entry
from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.evidence import EVIDENCE_FORMAT
from deplog.client.tlog.evidence import read_evidence as load_evidence
from deplog.client.tlog.note import Signer, UnverifiedNoteError, Verifier
from deplog.client.tlog.proofs import ConsistencyProof, ProofError, TreeMismatchError
from tests.builders import ORIGIN, InProcessLogSource, make_envelope, register
from tests.integration.scripted_authority import (
    STREAM,
    Raw,
    ScriptedAuthority,
    running,
    signed_log,
)

TRUSTED_SIZE = 4
"""The honest log before it grows: the publisher entry, then notices 1 to 3."""
PAGE_SIZE = 2
"""Small pages, so an advance spans several fetches and staged work must roll back."""
MESSAGE = "honest notice"
"""Every honest notice's message: a string value a test can change a byte of."""


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


def read_evidence(
    refused: ForkError | SuspectedForkError, log_key: Verifier, proves: str
) -> dict[str, Any]:
    """The evidence file's JSON, after checking that it proves ``proves`` offline."""
    assert refused.evidence is not None and refused.evidence.is_file()
    assert load_evidence(refused.evidence).verify(log_key) == proves
    evidence: dict[str, Any] = json.loads(refused.evidence.read_text())
    assert evidence["format"] == EVIDENCE_FORMAT
    return evidence


# -- fixtures ----------------------------------------------------------------------


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
async def server() -> AsyncIterator[ScriptedAuthority]:
    async with running(ScriptedAuthority()) as authority:
        yield authority


@pytest.fixture
async def follower(
    server: ScriptedAuthority, log_signer: Signer, tmp_path: Path
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
async def trusted(server: ScriptedAuthority, follower: Follower, log: Log) -> Trusted:
    """The follower has verified the honest log at TRUSTED_SIZE; returns that state."""
    server.serve(InProcessLogSource(log))
    result = await follower.sync()
    assert result.new_size == TRUSTED_SIZE
    return trusted_of(follower.state)


# -- an honest server, so that the refusals below mean something -------------------


async def test_an_honest_server_advances_the_follower_and_a_quiet_one_keeps_it(
    server: ScriptedAuthority, follower: Follower, log: Log
) -> None:
    server.serve(InProcessLogSource(log))
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
    server: ScriptedAuthority, follower: Follower, trusted: Trusted, log: Log, publisher: Signer
) -> None:
    grow(log, publisher, 3)
    result = await follower.sync()
    assert (result.old_size, result.new_size) == (TRUSTED_SIZE, TRUSTED_SIZE + 3)
    assert log.published is not None
    assert follower.state.root == log.published.root


# -- checkpoints ------------------------------------------------------------------


async def test_a_checkpoint_signed_by_another_key_is_rejected(
    server: ScriptedAuthority, follower: Follower, trusted: Trusted, log: Log, publisher: Signer
) -> None:
    grow(log, publisher, 2)
    assert log.published is not None
    same_tree = Checkpoint(ORIGIN, log.published.size, log.published.root)
    server.checkpoint = sign_checkpoint(same_tree, Signer.generate(ORIGIN))

    with pytest.raises(UnverifiedNoteError):
        await follower.sync()
    assert_state_unchanged(follower, trusted)


async def test_a_validly_signed_smaller_checkpoint_is_a_rollback(
    server: ScriptedAuthority, follower: Follower, trusted: Trusted, log: Log
) -> None:
    older = store.checkpoint_at(log.conn, 1)
    assert older is not None
    server.checkpoint = older.note

    with pytest.raises(RollbackError):
        await follower.sync()
    assert_state_unchanged(follower, trusted)


async def test_a_second_tree_of_the_trusted_size_is_a_fork_with_evidence(
    server: ScriptedAuthority,
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
    fork = signed_log(log_signer, other_history)
    server.serve(fork)

    with pytest.raises(ForkError) as refused:
        await follower.sync()
    evidence = read_evidence(refused.value, log_signer.verifier(), "conflicting_roots")
    assert evidence["first_checkpoint"] == trusted.note.decode()
    assert evidence["second_checkpoint"] == fork.note.decode()
    assert_state_unchanged(follower, trusted)


def forked_at_two(log: Log, log_signer: Signer, publisher: Signer) -> MemoryLogSource:
    """A larger tree under the real log key whose leaves 2 and 3 are not the trusted ones."""
    rewritten = [notice_leaf(publisher, seq, message="rewritten") for seq in range(2, 6)]
    return signed_log(log_signer, [*log.tree.leaf_data(0, 2), *rewritten])


async def test_a_larger_signed_tree_whose_leaves_do_not_start_with_the_trusted_one_is_a_proven_fork(
    server: ScriptedAuthority,
    follower: Follower,
    trusted: Trusted,
    log: Log,
    log_signer: Signer,
    publisher: Signer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The failing proof is the new tree's own: its leaves rebuild a prefix of the trusted
    size that the proof ties to the signed root, and that prefix is not the trusted root."""
    fork = forked_at_two(log, log_signer, publisher)
    server.serve(fork)

    with pytest.raises(ForkError) as refused:
        await follower.sync()
    evidence = read_evidence(refused.value, log_signer.verifier(), "inconsistent_prefix")
    assert evidence["proven"] is True
    assert evidence["first_checkpoint"] == trusted.note.decode()
    assert evidence["second_checkpoint"] == fork.note.decode()
    assert evidence["consistency_proof"] == (await fork.consistency(TRUSTED_SIZE, 6)).to_json()
    assert refused.value.evidence.name.startswith("fork-evidence-")
    assert_state_unchanged(follower, trusted)
    key = log_signer.verifier().vkey()
    argv = ["audit", "evidence", str(refused.value.evidence), "--log-key", key]
    assert await asyncio.to_thread(deplog_main, argv) == 0
    assert capsys.readouterr().out.startswith("proven: inconsistent_prefix: ")


async def test_a_larger_tree_not_extending_the_trusted_one_stays_a_suspicion_without_its_leaves(
    server: ScriptedAuthority,
    follower: Follower,
    trusted: Trusted,
    log: Log,
    log_signer: Signer,
    publisher: Signer,
) -> None:
    """The log signed no proof, and its leaves cannot be had: the evidence is kept, unproven."""
    fork = forked_at_two(log, log_signer, publisher)
    server.serve(fork)
    server.raw["/v1/entries"] = Raw(b"unavailable", status=503)
    server.requests.clear()

    with pytest.raises(SuspectedForkError) as refused:
        await follower.sync()
    evidence = read_evidence(refused.value, log_signer.verifier(), "failing_proof")
    assert evidence["proven"] is False
    assert evidence["first_checkpoint"] == trusted.note.decode()
    assert evidence["second_checkpoint"] == fork.note.decode()
    assert evidence["consistency_proof"] == (await fork.consistency(TRUSTED_SIZE, 6)).to_json()
    assert server.requests == ["/checkpoint", "/v1/proofs/consistency", "/v1/entries"]
    assert_state_unchanged(follower, trusted)


# -- proofs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"), [(1, TRUSTED_SIZE + 2), (TRUSTED_SIZE, TRUSTED_SIZE + 1)], ids=["old", "new"]
)
async def test_a_proof_between_other_sizes_than_requested_is_rejected(
    server: ScriptedAuthority,
    follower: Follower,
    trusted: Trusted,
    log: Log,
    publisher: Signer,
    old: int,
    new: int,
) -> None:
    grow(log, publisher, 2)
    server.proof = await InProcessLogSource(log).consistency(old, new)

    with pytest.raises(ProofError) as refused:
        await follower.sync()
    assert refused.value.code == "proof_size_mismatch"
    assert_state_unchanged(follower, trusted)


# -- entries ------------------------------------------------------------------------


async def test_an_entry_with_one_byte_changed_in_transit_is_rejected(
    server: ScriptedAuthority, follower: Follower, trusted: Trusted, log: Log, publisher: Signer
) -> None:
    """The changed byte is inside the notice's message: the leaf still decodes as a
    canonical notice, its signature fails, and it is not the signed tree's leaf: the
    tree it rebuilds is not the checkpoint's, so nothing of it is kept (not even as an
    invalid entry, which only a signed tree can hold)."""
    grow(log, publisher, 4)
    tampered = TRUSTED_SIZE + 2
    server.rewrite_page = lambda start, leaves: [
        change_one_byte_of_message(leaf) if i == tampered else leaf
        for i, leaf in enumerate(leaves, start)
    ]

    with pytest.raises(TreeMismatchError) as refused:
        await follower.sync()
    assert refused.value.code == "entries_root_mismatch"
    assert_state_unchanged(follower, trusted)
    assert follower.state.invalid_entries() == (0, [])


async def test_a_refused_advance_leaves_the_follower_able_to_advance_later(
    server: ScriptedAuthority, follower: Follower, trusted: Trusted, log: Log, publisher: Signer
) -> None:
    """The pages verified before the bad one were staged, then rolled back cleanly."""
    grow(log, publisher, 4)
    last = TRUSTED_SIZE + 3
    server.rewrite_page = lambda start, leaves: [
        change_one_byte_of_message(leaf) if i == last else leaf
        for i, leaf in enumerate(leaves, start)
    ]
    with pytest.raises(TreeMismatchError):
        await follower.sync()

    server.serve(InProcessLogSource(log))
    result = await follower.sync()
    assert (result.old_size, result.new_size) == (TRUSTED_SIZE, TRUSTED_SIZE + 4)
    assert follower.state.notice_at(last) is not None


async def test_an_entry_left_out_of_a_range_is_rejected(
    server: ScriptedAuthority, follower: Follower, trusted: Trusted, log: Log, publisher: Signer
) -> None:
    """Pages may be short, so the follower cannot see the gap itself: it takes the leaf
    after the hidden one at the hidden index, asks on from the next index and gets that
    same leaf again; the tree those leaves rebuild is not the checkpoint's."""
    grow(log, publisher, 4)
    hidden = TRUSTED_SIZE + 1
    server.rewrite_page = lambda start, leaves: [
        leaf for i, leaf in enumerate(leaves, start) if i != hidden
    ]

    with pytest.raises(TreeMismatchError):
        await follower.sync()
    assert_state_unchanged(follower, trusted)


async def test_a_notice_by_an_unauthorized_key_under_a_signed_checkpoint_makes_its_tool_unknown(
    server: ScriptedAuthority,
    follower: Follower,
    trusted: Trusted,
    log: Log,
    log_signer: Signer,
    publisher: Signer,
) -> None:
    """The malicious log extends the trusted tree honestly (the proof verifies) but
    includes a notice for ``acme`` signed by a key ``acme`` never registered: the
    follower records it, the tool it names is unknown, and following goes on."""
    impostor = Signer.generate(publisher.name)
    leaves = [
        *log.tree.leaf_data(0, TRUSTED_SIZE),
        notice_leaf(publisher, TRUSTED_SIZE),
        notice_leaf(impostor, TRUSTED_SIZE + 1, action="revoke", reasons=["other"]),
    ]
    server.serve(signed_log(log_signer, leaves))

    result = await follower.sync()
    assert result.new_size == TRUSTED_SIZE + 2
    (found,) = result.invalid
    assert (found.code, found.index, found.cause) == (
        "unauthorized_notice",
        TRUSTED_SIZE + 1,
        "unknown_key",
    )
    assert follower.state.invalid_entries() == (1, [found])
    index, _ = follower.state.tool_status(found.tool_id or "")
    assert index.lookup(found.tool_id or "", "1.0.0", datetime.now(UTC)).status == "unknown"


# -- unusable responses ----------------------------------------------------------


def padded(body: bytes, bound: int) -> bytes:
    """``body`` with trailing whitespace past ``bound``: only its length is wrong."""
    return body + b" " * (bound + 1 - len(body))


def oversized_checkpoint(log: Log) -> Raw:
    assert log.published is not None
    return Raw(padded(log.published.note, MAX_CHECKPOINT_BYTES))


@pytest.mark.parametrize(
    ("route", "response", "code"),
    [
        ("/checkpoint", oversized_checkpoint, "response_too_large"),
        ("/v1/proofs/consistency", lambda _: Raw(b"<html>not json</html>"), "bad_response"),
        ("/v1/entries", lambda _: Raw(b"<html>502 Bad Gateway</html>"), "bad_response"),
        ("/v1/entries", lambda _: Raw(b"{}", status=503), "fetch_failed"),
    ],
    ids=["huge-checkpoint", "html-proof", "html-entries", "http-503"],
)
async def test_an_unusable_response_is_a_fetch_error_that_changes_nothing(
    server: ScriptedAuthority,
    follower: Follower,
    trusted: Trusted,
    log: Log,
    publisher: Signer,
    route: str,
    response: Callable[[Log], Raw],
    code: str,
) -> None:
    grow(log, publisher, 2)
    server.raw[route] = response(log)

    with pytest.raises(FetchError) as refused:
        await follower.sync()
    assert refused.value.code == code
    assert route in server.requests
    assert_state_unchanged(follower, trusted)


async def test_an_empty_page_after_verified_ones_rolls_the_whole_advance_back(
    server: ScriptedAuthority, follower: Follower, trusted: Trusted, log: Log, publisher: Signer
) -> None:
    """An empty page would stall a sync that waited for the rest: it is refused."""
    grow(log, publisher, 4)
    server.rewrite_page = lambda start, leaves: leaves if start == TRUSTED_SIZE else []
    server.ranges.clear()

    with pytest.raises(FetchError) as refused:
        await follower.sync()
    assert refused.value.code == "bad_response"
    assert server.ranges == [(TRUSTED_SIZE, TRUSTED_SIZE + 2), (TRUSTED_SIZE + 2, TRUSTED_SIZE + 4)]
    assert_state_unchanged(follower, trusted)


async def test_a_server_that_stalls_is_a_fetch_error(
    server: ScriptedAuthority, log_signer: Signer, trusted: Trusted, tmp_path: Path
) -> None:
    server.raw["/checkpoint"] = Raw(b"", delay=2.0)
    async with Follower(
        server.url, log_signer.verifier(), tmp_path / "state.db", timeout=0.2
    ) as impatient:
        with pytest.raises(FetchError) as refused:
            await impatient.sync()
        assert refused.value.code == "fetch_failed"
        assert_state_unchanged(impatient, trusted)


# -- under run(): a hostile network path ---------------------------------------------


def over_long_line(size: int) -> bytes:
    return b"data: " + b"x" * size + b"\n\n"


@pytest.mark.parametrize(
    "stream",
    [
        over_long_line(600_000),
        over_long_line(2 * 1024 * 1024),
        b"data: not a checkpoint\n\n",
        b"data: \xff\xfe\x00 not utf-8\n\n",
    ],
    ids=["600kB-line", "2MiB-line", "garbage", "not-utf8"],
)
async def test_a_bad_push_event_is_dropped_counted_and_the_stream_reconnects(
    server: ScriptedAuthority, follower: Follower, trusted: Trusted, stream: bytes
) -> None:
    """Neither an over-long line nor a malformed event stops pushing for good or
    escapes ``run``: it is counted, and the stream is opened again."""
    server.raw[STREAM] = Raw(stream)
    stop = asyncio.Event()
    running_follower = asyncio.create_task(follower.run(30.0, stop=stop))
    deadline = asyncio.get_running_loop().time() + 10
    while follower.counters.push_reconnects < 2:
        assert asyncio.get_running_loop().time() < deadline, "the stream was not reopened"
        assert not running_follower.done()
        await asyncio.sleep(0.05)

    assert follower.counters.push_dropped >= 2
    assert server.requests.count(STREAM) >= 2
    stop.set()
    await asyncio.wait_for(running_follower, 5)  # returns: nothing escaped
    assert_state_unchanged(follower, trusted)


async def test_a_fork_pushed_on_the_stream_ends_run_at_once(
    server: ScriptedAuthority,
    follower: Follower,
    trusted: Trusted,
    log: Log,
    log_signer: Signer,
    publisher: Signer,
) -> None:
    """Polling every 30 s would not see it: the pushed, signed second root ends ``run``."""
    other_history = [
        *log.tree.leaf_data(0, TRUSTED_SIZE - 1),
        notice_leaf(publisher, 3, message="x"),
    ]
    fork = signed_log(log_signer, other_history)
    server.raw[STREAM] = Raw(sse_event(fork.note))

    with pytest.raises(ForkError) as refused:
        await asyncio.wait_for(follower.run(30.0), 5)
    evidence = read_evidence(refused.value, log_signer.verifier(), "conflicting_roots")
    assert evidence["proven"] is True
    assert_state_unchanged(follower, trusted)


async def test_a_corrupted_proof_is_retried_escalated_once_and_never_halts_the_follower(
    server: ScriptedAuthority,
    follower: Follower,
    trusted: Trusted,
    log: Log,
    publisher: Signer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Anyone on the path can corrupt a proof, so it cannot halt the follower: the state
    stands still (freshness untouched, so a guard goes stale), the suspicion is counted
    and escalated once, and the honest proof, once it gets through, is followed."""
    verified_at = follower.state.trusted.verified_at if follower.state.trusted else None
    grow(log, publisher, 2)
    honest = await InProcessLogSource(log).consistency(TRUSTED_SIZE, TRUSTED_SIZE + 2)
    server.proof = ConsistencyProof(honest.old, honest.new, (bytes(32), *honest.hashes[1:]))
    stop = asyncio.Event()
    running_follower = asyncio.create_task(
        follower.run(0.01, stop=stop, max_backoff=0.02, push=False)
    )
    deadline = asyncio.get_running_loop().time() + 10
    while follower.counters.suspicions < SUSPICION_ESCALATION + 2:
        assert asyncio.get_running_loop().time() < deadline
        assert not running_follower.done()
        await asyncio.sleep(0.02)

    assert follower.counters.escalations == 1
    loud = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(loud) == 1 and "unproven evidence" in loud[0].getMessage()
    assert_state_unchanged(follower, trusted)
    assert follower.state.trusted is not None
    assert follower.state.trusted.verified_at == verified_at
    evidence = follower.counters.last_evidence
    assert evidence is not None and evidence.name.startswith("suspected-fork-")
    assert load_evidence(evidence).proven is False

    server.proof = None
    while follower.state.size != TRUSTED_SIZE + 2:
        assert asyncio.get_running_loop().time() < deadline, "the honest proof was not followed"
        await asyncio.sleep(0.02)
    assert follower.counters.consecutive_suspicions == 0
    stop.set()
    await asyncio.wait_for(running_follower, 5)


# -- deplog follow ----------------------------------------------------------------------


async def test_follow_once_exits_with_its_own_status_on_a_suspected_fork(
    server: ScriptedAuthority,
    log: Log,
    log_signer: Signer,
    publisher: Signer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.serve(InProcessLogSource(log))
    argv = ["follow", server.url, "--log-key", log_signer.verifier().vkey()]
    argv += ["--state", str(tmp_path / "cli.db"), "--once"]
    assert await asyncio.to_thread(deplog_main, argv) == 0
    grow(log, publisher, 2)
    honest = await InProcessLogSource(log).consistency(TRUSTED_SIZE, TRUSTED_SIZE + 2)
    server.proof = ConsistencyProof(honest.old, honest.new, (bytes(32), *honest.hashes[1:]))

    assert await asyncio.to_thread(deplog_main, argv) == EXIT_NOT_PROVEN
    err = capsys.readouterr().err
    assert "suspected_fork" in err and "not proven" in err and "suspected-fork-" in err
    assert "Traceback" not in err


async def test_follow_timeout_bounds_each_request(
    server: ScriptedAuthority,
    log_signer: Signer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.raw["/checkpoint"] = Raw(b"", delay=3.0)
    argv = ["follow", server.url, "--log-key", log_signer.verifier().vkey()]
    argv += ["--state", str(tmp_path / "cli.db"), "--once", "--timeout", "0.2"]
    started = time.monotonic()
    assert await asyncio.to_thread(deplog_main, argv) == 1
    assert time.monotonic() - started < 2.5
    assert "fetch_failed" in capsys.readouterr().err
