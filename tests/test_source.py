"""The log-source seam without a network: the in-memory source, ``fetch_page``, ``sync_step``.

The in-memory source's proofs are checked by the client's RFC 9162 verifier
against roots computed apart; ``sync_step`` runs over a real authority log's
signed checkpoint and leaves, into a real follower state. Sources are read
through a recorder, so each test states which questions a step asks, in
which order.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from deplog.client.follow.source import (
    FetchError,
    LogSource,
    MemoryLogSource,
    fetch_page,
    sync_step,
)
from deplog.client.follow.trust import TrustedState
from deplog.client.model.entries import MAX_ENTRY_BYTES
from deplog.client.tlog.proofs import (
    ConsistencyProof,
    leaf_hash,
    root_from_leaf_hashes,
    verify_consistency,
)
from tests.builders import LocalLog

LEAVES = [f"leaf {i}".encode() for i in range(7)]


class Recording:
    """A source that answers from ``inner`` and notes each question it was asked.

    With ``fail_from``, entries at or past that index fail as an unreachable
    server's would.
    """

    def __init__(self, inner: LogSource, fail_from: int | None = None) -> None:
        self.inner = inner
        self.fail_from = fail_from
        self.asked: list[str] = []

    async def checkpoint(self) -> bytes:
        self.asked.append("checkpoint")
        return await self.inner.checkpoint()

    async def consistency(self, old: int, new: int) -> ConsistencyProof:
        self.asked.append(f"consistency {old} {new}")
        return await self.inner.consistency(old, new)

    async def entries(self, start: int, end: int) -> Sequence[bytes]:
        self.asked.append(f"entries {start} {end}")
        if self.fail_from is not None and start >= self.fail_from:
            raise FetchError("fetch_failed", "authority unreachable")
        return await self.inner.entries(start, end)


class FixedPage:
    """A source whose every entries answer is ``page``, whatever was asked."""

    def __init__(self, page: list[bytes]) -> None:
        self.page = page

    async def checkpoint(self) -> bytes:
        raise FetchError()

    async def consistency(self, old: int, new: int) -> ConsistencyProof:
        raise FetchError()

    async def entries(self, start: int, end: int) -> Sequence[bytes]:
        return self.page


# -- the in-memory source -------------------------------------------------------------


async def test_a_memory_log_answers_its_note_and_pages_of_its_leaves() -> None:
    log = MemoryLogSource(b"a note\n", LEAVES, page_size=3)
    assert await log.checkpoint() == b"a note\n"
    assert await log.entries(0, 7) == tuple(LEAVES[:3])
    assert await log.entries(5, 7) == tuple(LEAVES[5:])
    assert await log.entries(2, 4) == tuple(LEAVES[2:4])


async def test_a_memory_logs_proofs_verify_between_the_roots_of_its_trees() -> None:
    log = MemoryLogSource(b"", LEAVES)
    hashes = [leaf_hash(leaf) for leaf in LEAVES]
    for new in range(len(LEAVES) + 1):
        for old in range(new + 1):
            proof = await log.consistency(old, new)
            assert (proof.old, proof.new) == (old, new)
            old_root = root_from_leaf_hashes(hashes[:old])
            new_root = root_from_leaf_hashes(hashes[:new])
            verify_consistency(old, new, old_root, new_root, proof.hashes)


@pytest.mark.parametrize(
    ("start", "end"), [(7, 8), (3, 3), (-1, 2), (5, 4)], ids=["past", "empty", "negative", "back"]
)
async def test_entries_outside_a_memory_logs_leaves_are_fetch_failed(start: int, end: int) -> None:
    with pytest.raises(FetchError) as refused:
        await MemoryLogSource(b"", LEAVES).entries(start, end)
    assert refused.value.code == "fetch_failed"


@pytest.mark.parametrize(("old", "new"), [(2, 8), (5, 4)], ids=["past", "back"])
async def test_a_proof_outside_a_memory_logs_leaves_is_fetch_failed(old: int, new: int) -> None:
    with pytest.raises(FetchError) as refused:
        await MemoryLogSource(b"", LEAVES).consistency(old, new)
    assert refused.value.code == "fetch_failed"


# -- fetch_page: every source is held to its promise -------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        FixedPage([]),
        FixedPage(LEAVES[:3]),
        MemoryLogSource(b"", [b"x" * (MAX_ENTRY_BYTES + 1), b"y"]),
    ],
    ids=["empty", "longer-than-asked", "entry-over-65535-bytes"],
)
async def test_a_page_that_breaks_the_sources_promise_is_a_bad_response(
    source: LogSource,
) -> None:
    with pytest.raises(FetchError) as refused:
        await fetch_page(source, 0, 2)
    assert refused.value.code == "bad_response"


async def test_a_non_empty_prefix_of_the_range_is_a_page() -> None:
    largest = b"x" * MAX_ENTRY_BYTES
    assert await fetch_page(FixedPage([largest]), 0, 2) == [largest]


# -- sync_step: the one sequence of a verified step ----------------------------------------


async def test_a_step_verifies_the_checkpoint_the_proof_then_pages_of_entries(
    local: LocalLog, trusted: TrustedState
) -> None:
    for _ in range(4):
        local.publish()
    source = Recording(local.snapshot())

    advanced = await sync_step(source, trusted, page_size=2)

    assert advanced is not None and (advanced.old_size, advanced.new_size) == (0, 5)
    assert advanced.tools == {"tool:org.acme/search"}
    assert source.asked == [
        "checkpoint",
        "consistency 0 5",
        "entries 0 2",
        "entries 2 4",
        "entries 4 5",
    ]
    assert local.log.published is not None
    assert (trusted.state.size, trusted.state.root) == (5, local.log.published.root)


async def test_a_step_from_a_trusted_size_asks_for_the_proof_from_there(
    local: LocalLog, trusted: TrustedState
) -> None:
    await sync_step(local.snapshot(), trusted)
    local.publish()
    source = Recording(local.snapshot())

    advanced = await sync_step(source, trusted)

    assert advanced is not None and (advanced.old_size, advanced.new_size) == (1, 2)
    assert source.asked == ["checkpoint", "consistency 1 2", "entries 1 2"]


async def test_a_step_at_the_trusted_size_only_refreshes_the_checkpoint(
    local: LocalLog, trusted: TrustedState
) -> None:
    await sync_step(local.snapshot(), trusted)
    assert trusted.state.trusted is not None
    first_seen = trusted.state.trusted.verified_at
    source = Recording(local.snapshot())

    assert await sync_step(source, trusted) is None

    assert source.asked == ["checkpoint"]
    assert trusted.state.size == 1
    assert trusted.state.trusted.verified_at >= first_seen


async def test_a_step_to_a_given_note_does_not_ask_for_the_checkpoint(
    local: LocalLog, trusted: TrustedState
) -> None:
    local.publish()
    honest = local.snapshot()
    source = Recording(honest)

    advanced = await sync_step(source, trusted, honest.note)

    assert advanced is not None and advanced.new_size == 2
    assert source.asked == ["consistency 0 2", "entries 0 2"]


async def test_a_source_that_fails_after_a_verified_page_leaves_the_state_where_it_was(
    local: LocalLog, trusted: TrustedState
) -> None:
    await sync_step(local.snapshot(), trusted)
    before = (trusted.state.size, trusted.state.root)
    for _ in range(4):
        local.publish()
    failing = Recording(local.snapshot(), fail_from=3)

    with pytest.raises(FetchError) as refused:
        await sync_step(failing, trusted, page_size=1)

    assert refused.value.code == "fetch_failed"
    assert failing.asked[2:] == ["entries 1 2", "entries 2 3", "entries 3 4"]
    assert (trusted.state.size, trusted.state.root) == before
    assert trusted.state.notice_at(1) is None
