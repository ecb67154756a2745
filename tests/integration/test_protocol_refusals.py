"""What aiohttp's parser refuses before any handler runs is answered like every other
refusal: the server's own error shape, status 400, a stable code, and no traceback in
the server's log (a client's malformed request is not the server's fault)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.integration.harness import AuthorityProcess, ServiceProcess, WitnessProcess

pytestmark = pytest.mark.slow  # real authority and witness processes

MALFORMED = {
    "65 headers": b"GET /checkpoint HTTP/1.1\r\nHost: x\r\n"
    + b"".join(b"X-%d: a\r\n" % i for i in range(65))
    + b"\r\n",
    "over-long request line": b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "over-long header": b"GET /checkpoint HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 9000 + b"\r\n\r\n",
    "bad method": b"G@T /checkpoint HTTP/1.1\r\nHost: x\r\n\r\n",
    "bad chunk": b"POST /v1/notices HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
    "not HTTP": b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 40 + b"\r\n\r\n",
}


async def exchange(url: str, request: bytes) -> tuple[int, bytes]:
    """Send raw bytes, read until the server closes: the status and the body."""
    where = urlsplit(url)
    assert where.hostname is not None and where.port is not None
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.fixture(params=["authority", "witness"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServiceProcess]:
    process: AuthorityProcess | WitnessProcess
    if request.param == "authority":
        process = AuthorityProcess(tmp_path / "authority")
    else:
        process = WitnessProcess(tmp_path / "witness")
    process.init()
    process.start()
    yield process
    process.stop()


@pytest.mark.parametrize("request_bytes", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_request_the_parser_refuses_gets_400_bad_request_and_no_traceback(
    server: ServiceProcess, request_bytes: bytes
) -> None:
    status, body = await exchange(server.url, request_bytes)
    expected = (
        b"bad_request\n" if isinstance(server, WitnessProcess) else b'{"error": "bad_request"}'
    )
    assert (status, body) == (400, expected)
    server.stop()
    logged = server.output.read_text()
    assert "Traceback" not in logged and "ERROR" not in logged
