"""``HttpLogSource`` against a real aiohttp server on 127.0.0.1: its bounds and wire checks.

The server (``scripted_authority``) serves a signed in-memory log in the
authority's wire format unless a test scripts one answer. Entries are read
through ``fetch_page``, as every caller reads them, so the page checks below
are the ones the follower and ``deplog export`` both apply. What the follower
does with an answer that passes (verify it, refuse it, keep its state) is
``test_follower_hostile.py``'s subject.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from deplog.authority.http.push import sse_event
from deplog.client.follow.http import (
    MAX_CHECKPOINT_BYTES,
    MAX_EVENT_BYTES,
    MAX_MAP_PROOF_BYTES,
    MAX_PAGE_BYTES,
    MAX_PROOF_BYTES,
    HttpLogSource,
)
from deplog.client.follow.source import PAGE_SIZE, FetchError, MemoryLogSource, fetch_page
from deplog.client.model.entries import MAX_ENTRY_BYTES
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import ConsistencyProof, consistency_path, leaf_hash
from tests.integration.scripted_authority import (
    MAP_PROOF,
    MAP_PROOF_OF,
    STREAM,
    Raw,
    ScriptedAuthority,
    running,
    signed_log,
    unreachable_url,
)

LEAVES = [f"leaf {i}".encode() for i in range(5)]


@pytest.fixture
def log(log_signer: Signer) -> MemoryLogSource:
    return signed_log(log_signer, LEAVES)


@pytest.fixture
async def server(log: MemoryLogSource) -> AsyncIterator[ScriptedAuthority]:
    async with running(ScriptedAuthority(log)) as authority:
        yield authority


@pytest.fixture
async def source(server: ScriptedAuthority) -> AsyncIterator[HttpLogSource]:
    async with HttpLogSource(server.url, timeout=5.0) as opened:
        yield opened


def page(start: int, entries: list[Any]) -> bytes:
    """An entries page body as the authority would encode it."""
    return json.dumps({"start": start, "entries": entries}).encode()


def b64(leaf: bytes) -> str:
    return base64.b64encode(leaf).decode()


async def refusal(answer: Awaitable[object]) -> str:
    """The code of the FetchError ``answer`` raises."""
    with pytest.raises(FetchError) as refused:
        await answer
    return refused.value.code


# -- honest answers ------------------------------------------------------------------


async def test_each_answer_is_the_served_logs(source: HttpLogSource, log: MemoryLogSource) -> None:
    assert await source.checkpoint() == log.note
    assert await source.consistency(2, 5) == await log.consistency(2, 5)
    assert await fetch_page(source, 1, 4) == LEAVES[1:4]


async def test_a_range_wider_than_the_authoritys_limit_is_asked_for_as_its_first_page(
    server: ScriptedAuthority, source: HttpLogSource, log_signer: Signer
) -> None:
    leaves = [f"{i}".encode() for i in range(PAGE_SIZE + 1)]
    server.serve(signed_log(log_signer, leaves))
    assert await fetch_page(source, 0, PAGE_SIZE + 1) == leaves[:PAGE_SIZE]
    assert server.ranges == [(0, PAGE_SIZE)]


# -- response bounds -----------------------------------------------------------------


def proof_padded_to(size: int) -> bytes:
    """A valid proof body (from 2 to 5 leaves) padded with JSON whitespace to ``size`` bytes."""
    hashes = [leaf_hash(leaf) for leaf in LEAVES]
    proof = ConsistencyProof(2, 5, tuple(consistency_path(hashes, 2, 5)))
    body = json.dumps(proof.to_json()).encode()
    return body + b" " * (size - len(body))


BOUNDED = [
    ("/checkpoint", MAX_CHECKPOINT_BYTES, lambda size: b"x" * size, HttpLogSource.checkpoint),
    (
        "/v1/proofs/consistency",
        MAX_PROOF_BYTES,
        proof_padded_to,
        lambda source: source.consistency(2, 5),
    ),
    (MAP_PROOF, MAX_MAP_PROOF_BYTES, lambda size: b"x" * size, lambda s: s.map_proof(MAP_PROOF_OF)),
]


@pytest.mark.parametrize("framing", ["with-length", "chunked", "gzip"])
@pytest.mark.parametrize(
    ("route", "bound", "body", "ask"), BOUNDED, ids=[route for route, *_ in BOUNDED]
)
async def test_a_body_at_its_bound_is_read_and_one_byte_more_is_refused(
    server: ScriptedAuthority,
    source: HttpLogSource,
    route: str,
    bound: int,
    body: Callable[[int], bytes],
    ask: Callable[[HttpLogSource], Awaitable[object]],
    framing: str,
) -> None:
    """Its decoded bytes are bounded: a gzip-encoded body of a few bytes decodes past it."""
    chunked, gzip = framing == "chunked", framing == "gzip"
    sized = {"Deplog-Checkpoint-Size": "5"}  # a map proof names its checkpoint's size
    server.raw[route] = Raw(body(bound), chunked=chunked, gzip=gzip, headers=sized)
    await ask(source)
    server.raw[route] = Raw(body(bound + 1), chunked=chunked, gzip=gzip, headers=sized)
    assert await refusal(ask(source)) == "response_too_large"


async def test_an_entries_page_declared_over_its_bound_is_refused_unread(
    server: ScriptedAuthority, source: HttpLogSource
) -> None:
    server.raw["/v1/entries"] = Raw(b"{", declared_length=MAX_PAGE_BYTES + 1)
    assert await refusal(fetch_page(source, 0, 2)) == "response_too_large"


# -- proofs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"<html>not json</html>",
        b"[" * 30_000 + b"]" * 30_000,
        b'{"old": 2, "new": 5}',
        b'{"old": 2, "old": 2, "new": 5, "proof": []}',
        b'{"old": 2.0, "new": 5, "proof": []}',
    ],
    ids=["html", "deeply-nested", "missing-field", "duplicate-key", "float"],
)
async def test_a_proof_that_is_not_a_strict_consistency_proof_is_a_bad_response(
    server: ScriptedAuthority, source: HttpLogSource, body: bytes
) -> None:
    server.raw["/v1/proofs/consistency"] = Raw(body)
    assert await refusal(source.consistency(2, 5)) == "bad_response"


# -- entries pages -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        page(1, [b64(LEAVES[1])]),
        b'{"start": false, "entries": ["bGVhZiAw"]}',
        b"[]",
        b'{"start": 0}',
        b'{"start": 0, "entries": "bGVhZiAw"}',
        page(0, [7]),
        page(0, ["YR=="]),
        page(0, ["bGVhZiAw!"]),
        page(0, []),
        page(0, [b64(leaf) for leaf in LEAVES[:3]]),
        page(0, [b64(b"x" * (MAX_ENTRY_BYTES + 1))]),
        b'{"start": 0, "start": 0, "entries": ["bGVhZiAw"]}',
        b"<html>502 Bad Gateway</html>",
    ],
    ids=[
        "starts-elsewhere",
        "start-not-an-integer",
        "not-an-object",
        "no-entries",
        "entries-not-a-list",
        "entry-not-a-string",
        "noncanonical-base64",
        "not-base64",
        "empty",
        "longer-than-asked",
        "entry-over-65535-bytes",
        "duplicate-key",
        "html",
    ],
)
async def test_a_page_that_does_not_answer_the_request_is_a_bad_response(
    server: ScriptedAuthority, source: HttpLogSource, body: bytes
) -> None:
    server.raw["/v1/entries"] = Raw(body)
    assert await refusal(fetch_page(source, 0, 2)) == "bad_response"


async def test_an_entry_of_65535_bytes_is_read(
    server: ScriptedAuthority, source: HttpLogSource
) -> None:
    largest = b"x" * MAX_ENTRY_BYTES
    server.raw["/v1/entries"] = Raw(page(0, [b64(largest)]))
    assert await fetch_page(source, 0, 2) == [largest]


# -- transport -----------------------------------------------------------------------------

ANSWERS: list[tuple[str, Callable[[HttpLogSource], Awaitable[object]]]] = [
    ("/checkpoint", HttpLogSource.checkpoint),
    ("/v1/proofs/consistency", lambda source: source.consistency(2, 5)),
    ("/v1/entries", lambda source: fetch_page(source, 0, 2)),
]


@pytest.mark.parametrize(("route", "ask"), ANSWERS, ids=[route for route, _ in ANSWERS])
async def test_any_status_but_200_is_fetch_failed(
    server: ScriptedAuthority,
    source: HttpLogSource,
    route: str,
    ask: Callable[[HttpLogSource], Awaitable[object]],
) -> None:
    server.raw[route] = Raw(b"{}", status=503)
    assert await refusal(ask(source)) == "fetch_failed"


async def test_an_unreachable_authority_is_fetch_failed() -> None:
    async with HttpLogSource(unreachable_url()) as nowhere:
        assert await refusal(nowhere.checkpoint()) == "fetch_failed"


async def test_an_answer_slower_than_the_timeout_is_fetch_failed(
    server: ScriptedAuthority,
) -> None:
    server.raw["/checkpoint"] = Raw(b"", delay=2.0)
    async with HttpLogSource(server.url, timeout=0.2) as impatient:
        assert await refusal(impatient.checkpoint()) == "fetch_failed"


async def test_a_session_passed_in_is_the_callers_to_close(
    server: ScriptedAuthority, log: MemoryLogSource
) -> None:
    async with aiohttp.ClientSession() as session:
        async with HttpLogSource(server.url, session=session) as shared:
            assert await shared.checkpoint() == log.note
        assert not session.closed


# -- the checkpoint stream -------------------------------------------------------------------


async def announced(source: HttpLogSource) -> list[bytes]:
    """Every note the stream yields until the server ends it."""
    return [note async for note in source.checkpoints()]


async def test_the_stream_yields_each_announced_note_as_the_authority_encodes_it(
    server: ScriptedAuthority, source: HttpLogSource, log: MemoryLogSource, log_signer: Signer
) -> None:
    newer = signed_log(log_signer, [*LEAVES, b"one more"]).note
    server.raw[STREAM] = Raw(
        sse_event(log.note) + b": keep-alive\n\n" + b"event: ping\n\n" + sse_event(newer),
        chunked=True,
    )
    assert await announced(source) == [log.note, newer]


async def test_the_stream_accepts_crlf_line_ends(
    server: ScriptedAuthority, source: HttpLogSource, log: MemoryLogSource
) -> None:
    server.raw[STREAM] = Raw(sse_event(log.note).replace(b"\n", b"\r\n"))
    assert await announced(source) == [log.note]


@pytest.mark.parametrize(
    "event",
    [
        b"data: x\n" * (MAX_EVENT_BYTES // 8 + 1) + b"\n",
        b"data: " + b"x" * MAX_EVENT_BYTES + b"\n\n",
    ],
    ids=["many-lines", "one-long-line"],
)
async def test_an_event_over_its_bound_ends_the_stream(
    server: ScriptedAuthority, source: HttpLogSource, event: bytes
) -> None:
    server.raw[STREAM] = Raw(event, chunked=True)
    assert await refusal(announced(source)) == "response_too_large"


async def test_a_refused_stream_is_fetch_failed(
    server: ScriptedAuthority, source: HttpLogSource
) -> None:
    server.raw[STREAM] = Raw(b"", status=503)
    assert await refusal(announced(source)) == "fetch_failed"
