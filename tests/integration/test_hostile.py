"""Hostile clients as real sockets against a real authority: bounded, answered, no traceback."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import socket
import time

import aiohttp
import pytest

from deplog.client.follow.http import HttpLogSource
from deplog.client.follow.source import fetch_page
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess, publish

pytestmark = pytest.mark.slow  # real authority processes

JSON = {"Content-Type": "application/json"}


def connect(url: str, source: str = "127.0.0.1") -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))


def answer_to(sock: socket.socket, request: bytes) -> bytes:
    sock.sendall(request)
    return sock.recv(65536)


def quiet(authority: AuthorityProcess) -> None:
    """The server printed no traceback and no error line."""
    printed = authority.output.read_text()
    assert "Traceback" not in printed
    assert "ERROR" not in printed


async def test_a_gzip_encoded_post_whose_body_is_not_gzip_gets_400(
    authority: AuthorityProcess,
) -> None:
    with connect(authority.url) as sock:
        answer = answer_to(
            sock,
            b"POST /v1/notices HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Encoding: gzip\r\nContent-Length: 9\r\n\r\nnot gzip!",
        )
    assert answer.split(b" ")[1] == b"400"
    quiet(authority)


async def test_a_gzip_encoded_post_is_read_as_its_decoded_body(
    authority: AuthorityProcess, publisher, http: aiohttp.ClientSession
) -> None:
    body = gzip.compress(make_envelope(publisher, 1).canonical_bytes())
    headers = {**JSON, "Content-Encoding": "gzip"}
    async with http.post(authority.url + "/v1/notices", data=body, headers=headers) as response:
        assert response.status == 201
    quiet(authority)


async def test_a_client_vanishing_mid_body_is_closed_quietly(authority: AuthorityProcess) -> None:
    for _ in range(10):
        with connect(authority.url) as sock:
            sock.sendall(
                b"POST /v1/notices HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 1000\r\n\r\n{"notice":'
            )
            time.sleep(0.05)
    time.sleep(0.5)
    quiet(authority)


def probe(url: str, path: str = "/healthz", source: str = "127.0.0.1") -> tuple[bytes, float]:
    """The status of one GET on a fresh connection, and how long it took."""
    started = time.monotonic()
    with connect(url, source) as sock:
        answer = answer_to(sock, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return answer.split(b" ")[1], time.monotonic() - started


def test_1100_slow_connections_from_one_address_leave_healthz_answering(
    authority_files: AuthorityProcess,
) -> None:
    """The issue's reproduction: 1,100 header-trickling connections at 1,024 open files."""
    authority_files.wrapper = ["prlimit", "--nofile=1024:1024", "--"]
    authority_files.start()
    hostile: list[socket.socket] = []
    try:
        for _ in range(1100):
            sock = connect(authority_files.url, "127.0.0.2")
            with contextlib.suppress(OSError):  # refused at once
                sock.sendall(b"GET /checkpoint HTTP/1.1\r\nHo")
            hostile.append(sock)
        probes = [probe(authority_files.url) for _ in range(8)]
        assert [status for status, _ in probes] == [b"200"] * 8
        assert max(took for _, took in probes) < 1
    finally:
        for sock in hostile:
            sock.close()
        authority_files.stop()
    printed = authority_files.output.read_text()
    assert "Traceback" not in printed
    assert printed.count("refused") <= 2


def test_a_connection_whose_headers_come_too_slowly_is_closed(
    authority_files: AuthorityProcess,
) -> None:
    authority_files.extra_args = ["--header-timeout", "0.5"]
    authority_files.start()
    try:
        with connect(authority_files.url) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
            for _ in range(4):
                time.sleep(0.3)
                try:
                    sock.sendall(b"X-A: b\r\n")
                except OSError:
                    break
            assert sock.recv(100) == b""
    finally:
        authority_files.stop()


def test_connections_past_one_address_bound_are_closed_at_once(
    authority_files: AuthorityProcess,
) -> None:
    authority_files.extra_args = ["--max-connections-per-address", "3"]
    authority_files.start()
    try:
        held = [connect(authority_files.url, "127.0.0.2") for _ in range(3)]
        with connect(authority_files.url, "127.0.0.2") as extra:
            extra.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                assert extra.recv(100) == b""
        assert probe(authority_files.url)[0] == b"200"  # another address
        for sock in held:
            sock.close()
    finally:
        authority_files.stop()


def test_the_reserve_serves_healthz_and_appends_but_not_reads(
    authority_files: AuthorityProcess,
) -> None:
    authority_files.extra_args = ["--max-connections", "6", "--connection-reserve", "2"]
    authority_files.start()
    try:
        held = [connect(authority_files.url, f"127.0.0.{n}") for n in range(2, 6)]
        assert probe(authority_files.url, "/checkpoint")[0] == b"503"
        assert probe(authority_files.url, "/healthz")[0] == b"200"
        for sock in held:
            sock.close()
        time.sleep(0.2)
        assert probe(authority_files.url, "/checkpoint")[0] == b"200"
    finally:
        authority_files.stop()


async def test_x_forwarded_for_names_the_client_only_behind_a_trusted_proxy(
    authority_files: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    authority_files.extra_args = ["--rate-per-address", "1/1", "--trusted-proxy", "127.0.0.1/32"]
    authority_files.start()

    async def status(forwarded_for: str) -> int:
        headers = {**JSON, "X-Forwarded-For": forwarded_for}
        async with http.post(authority_files.url + "/v1/notices", data=b"{}", headers=headers) as r:
            return r.status

    try:
        assert [await status("192.0.2.1"), await status("192.0.2.2")] == [400, 400]
        assert await status("192.0.2.1") == 429
        assert await status("192.0.2.9, 127.0.0.1") == 400  # trusted hops are skipped
    finally:
        authority_files.stop()


async def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(
    authority_files: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    authority_files.extra_args = ["--rate-per-address", "1/1"]
    authority_files.start()
    try:
        statuses = []
        for forwarded_for in ("192.0.2.1", "192.0.2.2"):
            headers = {**JSON, "X-Forwarded-For": forwarded_for}
            url = authority_files.url + "/v1/notices"
            async with http.post(url, data=b"{}", headers=headers) as response:
                statuses.append(response.status)
        assert statuses == [400, 429]
    finally:
        authority_files.stop()


LARGE = {"affected": {"versions": [f"1.0.{n}-{'x' * 115}" for n in range(256)]}}
"""A notice of about 32 KB: 256 long versions."""


async def publish_large(http: aiohttp.ClientSession, url: str, publisher, count: int) -> None:
    for sequence in range(1, count + 1):
        await publish(http, url, publisher, sequence, **LARGE)


async def test_a_page_stops_at_its_byte_bound_and_a_follower_reads_every_entry(
    authority_files: AuthorityProcess, publisher, http: aiohttp.ClientSession
) -> None:
    authority_files.extra_args = ["--max-page-mb", "0.5"]
    authority_files.start()
    try:
        await publish_large(http, authority_files.url, publisher, 24)
        async with http.get(authority_files.url + "/v1/entries?start=0&end=25") as response:
            page = await response.read()
        assert 1 < len(json.loads(page)["entries"]) < 25
        assert len(page) < 0.5 * 1024 * 1024 + 100
        source = HttpLogSource(authority_files.url, session=http)
        leaves: list[bytes] = []
        while len(leaves) < 25:
            leaves.extend(await fetch_page(source, len(leaves), 25))
        assert len(leaves) == 25
    finally:
        authority_files.stop()


async def test_a_client_that_does_not_read_its_page_is_disconnected(
    authority_files: AuthorityProcess, publisher, http: aiohttp.ClientSession
) -> None:
    authority_files.extra_args = ["--write-timeout", "1"]
    authority_files.start()
    try:
        await publish_large(http, authority_files.url, publisher, 130)
        host, port = authority_files.url.removeprefix("http://").split(":")
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((host, int(port)))
            sock.sendall(b"GET /v1/entries?start=0&end=131 HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(4)
            received = 0
            with contextlib.suppress(ConnectionResetError):
                while chunk := sock.recv(1 << 20):
                    received += len(chunk)
        assert received < 3 * 1024 * 1024  # the 4 MiB page was cut off
        quiet(authority_files)
    finally:
        authority_files.stop()


async def test_a_page_past_its_address_share_waits_while_another_address_is_served(
    authority_files: AuthorityProcess, publisher, http: aiohttp.ClientSession
) -> None:
    # Pages of 100 KiB at most, 10 KiB/s to an address: after one notice of about 45 KB
    # of base64, the next page to that address waits about 4 s for its share.
    authority_files.extra_args = ["--max-page-mb", "0.1", "--entries-mb-per-address", "0.01"]
    authority_files.start()
    try:
        await publish_large(http, authority_files.url, publisher, 1)
        url = authority_files.url + "/v1/entries?start=1&end=2"

        async def status(session: aiohttp.ClientSession) -> int:
            async with session.get(url) as response:
                await response.read()
                return response.status

        assert await status(http) == 200
        waiting = asyncio.create_task(status(http))
        await asyncio.sleep(0.5)  # the second page from 127.0.0.1 is asked for
        connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
        async with aiohttp.ClientSession(connector=connector) as other:
            assert await status(other) == 200
        assert not waiting.done()
        assert await waiting == 200
        quiet(authority_files)
    finally:
        authority_files.stop()


def subscribe(url: str, source: str) -> socket.socket:
    """A push stream, its headers and the current checkpoint read."""
    sock = connect(url, source)
    sock.sendall(b"GET /v1/checkpoints/stream HTTP/1.1\r\nHost: x\r\n\r\n")
    received = b""
    while b"\n\n" not in received.split(b"\r\n\r\n", 1)[-1]:
        chunk = sock.recv(65536)
        assert chunk, received.split(b"\r\n", 1)[0]  # refused: the status line
        received += chunk
    return sock


def test_one_address_cannot_hold_every_push_slot(authority_files: AuthorityProcess) -> None:
    authority_files.extra_args = ["--max-subscribers-per-address", "2"]
    authority_files.start()
    try:
        held = [subscribe(authority_files.url, "127.0.0.2") for _ in range(2)]
        assert probe(authority_files.url, "/v1/checkpoints/stream", "127.0.0.2")[0] == b"503"
        held.append(subscribe(authority_files.url, "127.0.0.3"))
        for sock in held:
            sock.close()
    finally:
        authority_files.stop()


def test_a_push_slot_is_free_again_as_soon_as_its_client_goes(
    authority_files: AuthorityProcess,
) -> None:
    authority_files.extra_args = ["--max-subscribers-per-address", "1"]
    authority_files.start()
    try:
        subscribe(authority_files.url, "127.0.0.2").close()
        time.sleep(0.5)
        subscribe(authority_files.url, "127.0.0.2").close()  # not 503 until a keep-alive
    finally:
        authority_files.stop()
