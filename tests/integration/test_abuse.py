"""Abuse: rate limits, slow clients, header floods; bounded, answered, nothing changed."""

from __future__ import annotations

import asyncio
import socket
import time

import aiohttp
import pytest

from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess

pytestmark = pytest.mark.slow  # real authority processes

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def strict(authority_files: AuthorityProcess) -> AuthorityProcess:
    authority_files.extra_args = ["--rate-per-address", "2/3", "--rate-per-publisher", "1/2"]
    authority_files.start()
    yield authority_files  # type: ignore[misc]
    authority_files.stop()


async def post(http: aiohttp.ClientSession, url: str, body: bytes) -> tuple[int, str | None, dict]:
    async with http.post(url + "/v1/notices", data=body, headers=JSON) as response:
        payload = await response.json() if response.status >= 400 else {}
        return response.status, response.headers.get("Retry-After"), payload


async def test_one_address_past_its_rate_gets_429_with_retry_after(
    strict: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    stranger = Signer.generate("stranger")  # refused anyway: only the rate matters here
    results = [
        await post(http, strict.url, make_envelope(stranger, n).canonical_bytes())
        for n in range(1, 6)
    ]
    statuses = [status for status, _, _ in results]
    assert statuses[:3] == [401, 401, 401]
    assert (429, "1", {"error": "rate_limited"}) in results


async def test_a_publisher_past_its_rate_gets_429_and_others_do_not(
    authority_files: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    other = Signer.generate("other")
    authority_files.add_publisher(other, "org.other")
    authority_files.extra_args = ["--rate-per-publisher", "1/2"]
    authority_files.start()
    try:
        url = authority_files.url
        statuses = [
            (await post(http, url, make_envelope(publisher, n).canonical_bytes()))[0]
            for n in range(1, 5)
        ]
        assert statuses[:2] == [201, 201]
        assert 429 in statuses[2:]
        assert (await post(http, url, make_envelope(other, 1).canonical_bytes()))[0] == 201
    finally:
        authority_files.stop()


async def test_forged_envelopes_naming_a_publisher_do_not_use_its_budget(
    authority_files: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    authority_files.extra_args = ["--rate-per-publisher", "1/2"]
    authority_files.start()
    try:
        impostor = Signer.generate("acme")  # same publisher id, unregistered key
        for n in range(1, 6):
            status, _, _ = await post(
                http, authority_files.url, make_envelope(impostor, n).canonical_bytes()
            )
            assert status == 401
        body = make_envelope(publisher, 1).canonical_bytes()
        assert (await post(http, authority_files.url, body))[0] == 201
    finally:
        authority_files.stop()


def raw_connection(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


async def test_a_body_that_never_arrives_times_out_with_408(
    authority_files: AuthorityProcess,
) -> None:
    authority_files.extra_args = ["--body-timeout", "1"]
    authority_files.start()
    try:
        with raw_connection(authority_files.url) as sock:
            sock.sendall(
                b"POST /v1/notices HTTP/1.1\r\nHost: x\r\nContent-Type: "
                b"application/json\r\nContent-Length: 100\r\n\r\n{"
            )
            sock.settimeout(20)
            answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408")
        assert b'{"error": "request_timeout"}' in answer
    finally:
        authority_files.stop()


async def test_a_header_flood_is_refused_and_the_server_keeps_serving(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    with raw_connection(authority.url) as sock:
        headers = b"".join(b"X-Flood-%d: y\r\n" % n for n in range(1000))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
        answer = sock.recv(4096)
    assert answer.split(b" ")[1] == b"400"
    async with http.get(authority.url + "/healthz") as response:
        assert response.status == 200


async def test_slow_clients_do_not_starve_others(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    """200 connections trickling a request line: the event loop still answers at once."""
    sockets = [raw_connection(authority.url) for _ in range(200)]
    try:
        for sock in sockets:
            sock.sendall(b"GET /checkpoint HTTP/1.1\r\nHo")
        started = time.monotonic()
        async with http.get(authority.url + "/healthz") as response:
            assert response.status == 200
        assert time.monotonic() - started < 5
    finally:
        for sock in sockets:
            sock.close()


async def test_a_burst_of_bad_requests_causes_no_500(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    bodies = [
        b"",
        b"{}",
        b"[]",
        b"null",
        b'{"notice":null,"signature":null}',
        b"\x00" * 100,
        b'{"notice":' * 50,
        "\u2028".encode(),
        b'{"a":1e309}',
        b"9" * 5000,
    ]

    async def send(body: bytes) -> int:
        async with http.post(authority.url + "/v1/notices", data=body, headers=JSON) as r:
            await r.read()
            return r.status

    statuses = await asyncio.gather(*(send(b) for b in bodies * 5))
    assert all(400 <= s < 500 for s in statuses), statuses
