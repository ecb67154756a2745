"""Every refusal has a stable code, echoes nothing, and leaves the log unchanged: the
served checkpoint byte-identical and every row of the database as it was.

Each test runs on both backends: SQLite and ``authority serve --db postgresql://...``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest

from deplog.client.model.notice import Envelope
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.dbrows import table_rows
from tests.integration.harness import AuthorityProcess, wait_for_checkpoint

# Real authority processes; SQLite, and serve --db postgresql://.
pytestmark = [pytest.mark.slow, pytest.mark.both_backends]

JSON = {"Content-Type": "application/json"}
Post = Callable[[bytes], Awaitable[tuple[int, dict[str, str]]]]


@pytest.fixture
async def unchanged(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> AsyncIterator[None]:
    """Asserts after the test that the published checkpoint is byte-identical and that no
    row of the log's database changed."""

    async def fetch() -> bytes:
        async with http.get(authority.url + "/checkpoint") as response:
            return await response.read()

    before, rows = await fetch(), table_rows(authority.db_target)
    yield
    assert await fetch() == before
    assert table_rows(authority.db_target) == rows


@pytest.fixture
def post(authority: AuthorityProcess, http: aiohttp.ClientSession) -> Post:
    async def send(body: bytes, headers: dict[str, str] = JSON) -> tuple[int, dict[str, str]]:
        async with http.post(authority.url + "/v1/notices", data=body, headers=headers) as r:
            if r.status < 300:  # a receipt, not an error
                return r.status, {}
            assert r.content_type == "application/json"
            return r.status, await r.json()

    return send  # type: ignore[return-value]


def tampered(envelope: Envelope, **changes: object) -> bytes:
    """The envelope with notice fields changed after signing."""
    obj = envelope.to_json()
    obj["notice"].update(changes)
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "malformed_json"),
        (b'{"notice": {}, "notice": {}}', "duplicate_field"),
        (b"\xff\xfe", "malformed_json"),
        (b"[" * 10_000 + b"]" * 10_000, "malformed_json"),
        (b'{"notice": 1e400, "signature": {}}', "malformed_json"),
    ],
    ids=["syntax", "duplicate-key", "invalid-utf8", "deep-nesting", "huge-number"],
)
async def test_malformed_json_is_refused_with_400(
    post: Post, unchanged: None, body: bytes, code: str
) -> None:
    assert await post(body) == (400, {"error": code})


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"colour": "red"}, "unknown_field"),
        ({"tool_id": "tool:Org.Acme/search"}, "bad_tool_id"),
        ({"affected": {"versions": ["1.0"]}}, "bad_version"),
        ({"sunset_at": "2025-01-01T00:00:00Z"}, "sunset_before_effective"),
        ({"sequence": "7"}, "wrong_type"),
        ({"message": "x" * 501}, "too_long"),
        ({"reasons": ["boredom"]}, "bad_reason"),
    ],
)
async def test_schema_violations_are_refused_with_400(
    post: Post, publisher: Signer, unchanged: None, changes: dict[str, object], code: str
) -> None:
    assert await post(tampered(make_envelope(publisher, 1), **changes)) == (400, {"error": code})


async def test_altered_notice_fails_its_signature_with_401(
    post: Post, publisher: Signer, unchanged: None
) -> None:
    body = tampered(make_envelope(publisher, 1), sequence=2)
    assert await post(body) == (401, {"error": "bad_signature"})


async def test_unregistered_key_of_a_known_publisher_is_refused_with_401(
    post: Post, unchanged: None
) -> None:
    impostor = Signer.generate("acme")
    assert await post(make_envelope(impostor, 1).canonical_bytes()) == (
        401,
        {"error": "unknown_key"},
    )


async def test_unknown_publisher_is_refused_with_401(post: Post, unchanged: None) -> None:
    stranger = Signer.generate("stranger")
    body = make_envelope(stranger, 1).canonical_bytes()
    assert await post(body) == (401, {"error": "unknown_publisher"})


async def test_foreign_namespace_is_refused_with_403(
    post: Post, publisher: Signer, unchanged: None
) -> None:
    body = make_envelope(publisher, 1, tool="tool:org.other/search").canonical_bytes()
    assert await post(body) == (403, {"error": "namespace_not_authorized"})


async def test_revoked_key_is_refused_with_403(
    authority: AuthorityProcess, post: Post, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    result = authority.run_cli(
        "publisher", "revoke-key", "acme", "--key", publisher.verifier().vkey()
    )
    assert result.returncode == 0, result.stderr
    before = await wait_for_checkpoint(http, authority, 2)
    rows = table_rows(authority.db_target)
    assert await post(make_envelope(publisher, 1).canonical_bytes()) == (
        403,
        {"error": "key_revoked"},
    )
    async with http.get(authority.url + "/checkpoint") as response:
        assert await response.read() == before
    assert table_rows(authority.db_target) == rows


async def test_revoked_publisher_is_refused_with_403(
    authority: AuthorityProcess, post: Post, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    assert authority.run_cli("publisher", "revoke", "acme").returncode == 0
    before = await wait_for_checkpoint(http, authority, 2)
    rows = table_rows(authority.db_target)
    assert await post(make_envelope(publisher, 1).canonical_bytes()) == (
        403,
        {"error": "publisher_revoked"},
    )
    async with http.get(authority.url + "/checkpoint") as response:
        assert await response.read() == before
    assert table_rows(authority.db_target) == rows


async def test_reused_sequence_with_other_content_is_refused_with_409(
    post: Post, publisher: Signer
) -> None:
    assert (await post(make_envelope(publisher, 5).canonical_bytes()))[0] == 201
    other = make_envelope(publisher, 5, reasons=["end_of_life"]).canonical_bytes()
    assert await post(other) == (409, {"error": "sequence_reused"})


async def test_a_lower_unused_sequence_is_logged_after_a_higher_one(
    post: Post, publisher: Signer
) -> None:
    """Sequences are unique, not ordered: a notice that lost a race (or waited out a
    429) is still logged after a later one landed."""
    assert (await post(make_envelope(publisher, 5).canonical_bytes()))[0] == 201
    status, _ = await post(make_envelope(publisher, 4).canonical_bytes())
    assert status == 201


async def test_withdraw_of_a_publisher_entry_is_refused_with_409(
    post: Post, publisher: Signer, unchanged: None
) -> None:
    withdraw = make_envelope(publisher, 1, action="withdraw", withdraws=0, affected=None)
    assert await post(withdraw.canonical_bytes()) == (409, {"error": "bad_withdraw_target"})


async def test_oversized_body_is_refused_with_413(post: Post, unchanged: None) -> None:
    assert await post(b" " * (60 * 1024 + 1)) == (413, {"error": "too_large"})


async def test_wrong_content_type_is_refused_with_415(
    post: Post, publisher: Signer, unchanged: None
) -> None:
    body = make_envelope(publisher, 1).canonical_bytes()
    headers = {"Content-Type": "text/plain"}
    assert await post(body, headers) == (415, {"error": "unsupported_media_type"})  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/v1/proofs/inclusion?index=0", 400, "bad_parameter"),
        ("/v1/proofs/inclusion?index=-1&size=1", 400, "bad_parameter"),
        ("/v1/proofs/inclusion?index=01&size=1", 400, "bad_parameter"),
        ("/v1/proofs/inclusion?index=1&size=1", 400, "out_of_range"),
        ("/v1/proofs/inclusion?index=0&size=99", 400, "size_not_published"),
        ("/v1/proofs/consistency?old=1&new=0", 400, "out_of_range"),
        ("/v1/proofs/consistency?old=0&new=99999999999999999999", 400, "bad_parameter"),
        ("/v1/entries?start=0&end=0", 400, "out_of_range"),
        ("/v1/entries?start=0&end=5", 400, "size_not_published"),
        ("/v1/entries?start=0&end=1001", 400, "range_too_large"),
        ("/v1/entries?start=5&end=2", 400, "out_of_range"),
        ("/v1/proofs/inclusion?index=99&size=98", 400, "out_of_range"),
        ("/v1/proofs/consistency?old=99&new=98", 400, "out_of_range"),
        ("/v1/proofs/consistency?old=1&new=4&old=2", 400, "repeated_parameter"),
        ("/v1/proofs/inclusion?index=0&index=0&size=1", 400, "repeated_parameter"),
        ("/v1/entries?start=0&end=1&end=1", 400, "repeated_parameter"),
        ("/v1/tools/tool:org.example/x/proof?format=json&format=json", 400, "repeated_parameter"),
        ("/v1/tools/not-a-tool", 400, "bad_tool_id"),
        ("/nowhere", 404, "not_found"),
    ],
)
async def test_bad_reads_get_stable_codes(
    authority: AuthorityProcess, http: aiohttp.ClientSession, path: str, status: int, code: str
) -> None:
    async with http.get(authority.url + path) as response:
        assert (response.status, await response.json()) == (status, {"error": code})


async def test_wrong_method_is_refused_with_405(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    async with http.delete(authority.url + "/checkpoint") as response:
        assert (response.status, await response.json()) == (405, {"error": "method_not_allowed"})


async def test_full_queue_is_refused_with_503_and_retry_after(
    authority_files: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    authority_files.extra_args = ["--max-pending", "1", "--batch-interval-ms", "1000"]
    authority_files.start()
    try:
        bodies = [make_envelope(publisher, seq).canonical_bytes() for seq in range(1, 6)]

        async def send(body: bytes) -> tuple[int, str | None, bytes]:
            async with http.post(authority_files.url + "/v1/notices", data=body, headers=JSON) as r:
                return r.status, r.headers.get("Retry-After"), await r.read()

        results = await asyncio.gather(*(send(b) for b in bodies))
        refused = [(s, ra, b) for s, ra, b in results if s == 503]
        assert refused, "some submissions must overflow a one-slot queue"
        assert all(ra == "1" and json.loads(b) == {"error": "overloaded"} for _, ra, b in refused)
        assert all(s in (201, 503) for s, _, _ in results)
    finally:
        authority_files.stop()


async def test_refusals_never_echo_submitted_values(
    post: Post, publisher: Signer, unchanged: None
) -> None:
    marker = "SECRET-MARKER-93f1"
    status, body = await post(tampered(make_envelope(publisher, 1), **{marker: marker}))
    assert status == 400
    assert marker not in json.dumps(body)
