"""The authority's HTTP API as a ``LogSource``: every response bound and wire check, once.

The follower and ``deplog export`` read a log through ``HttpLogSource``; every refusal is
a ``FetchError``. Rules:

1. Every request has a total timeout (``DEFAULT_TIMEOUT``); a stall, a connection
   failure or any status but 200 is ``fetch_failed``, whose message says which, value-free
   (``unreachable``): connection refused, a TLS failure, an unknown host, a timeout,
   ``HTTP <status>``, or ``NOT_A_LOG`` for a ``/checkpoint`` that is missing or a web page.
2. Every body is read against its bound (``MAX_*_BYTES``) on its decoded bytes, while it
   streams, and on its Content-Length when it is not compressed (a gzip-encoded body may
   be longer than the bytes it decodes to); past it is ``response_too_large``, unread.
3. JSON is parsed strictly (``canonical.loads``); a proof must be a
   ``ConsistencyProof``, an entries page start at the index asked with canonical base64
   entries: else ``bad_response``.
4. Entries are asked ``PAGE_SIZE`` at a time, the authority's limit.
5. ``checkpoints`` reads the Server-Sent Events stream, one note an event; an event over
   1 MiB is ``response_too_large``, 60 s of silence ``fetch_failed``.
6. Redirects are followed only within one origin (scheme, host, port), with no
   credentials in the location, at most ``MAX_REDIRECTS`` hops, and a POST only by 307
   or 308; anything else is ``redirect_refused``, and nothing is asked of another
   origin. ``HttpClient.request`` is this rule for every request the client makes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final, Self

import aiohttp
from aiohttp import hdrs
from aiohttp.http_exceptions import LineTooLong
from yarl import URL

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.source import PAGE_SIZE, FetchError
from deplog.client.model import canonical
from deplog.client.model.canonical import JSONFormatError
from deplog.client.tlog.note import MAX_NOTE_SIZE, decode_base64
from deplog.client.tlog.proofs import ConsistencyProof

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_CHECKPOINT_BYTES",
    "MAX_EVENT_BYTES",
    "MAX_MAP_PROOF_BYTES",
    "MAX_PAGE_BYTES",
    "MAX_PROOF_BYTES",
    "MAX_REDIRECTS",
    "NOT_A_LOG",
    "HttpClient",
    "HttpLogSource",
    "read_bounded",
    "redirect_target",
    "unreachable",
]

DEFAULT_TIMEOUT: Final = 10.0
"""Seconds one request may take, from connecting to the last byte of its body."""
MAX_CHECKPOINT_BYTES: Final = MAX_NOTE_SIZE
"""A checkpoint is a signed note, and no note may be longer."""
MAX_PROOF_BYTES: Final = 64 * 1024
"""A proof of at most 64 hashes in base64 JSON is under 4 KiB; the bound leaves room."""
MAX_MAP_PROOF_BYTES: Final = 1024 * 1024
"""A binary map proof: a path under 9 KiB and one tool's record (thousands of notices)."""
MAX_PAGE_BYTES: Final = 128 * 1024 * 1024
"""Above the largest honest page: 1000 entries of 65535 bytes in base64 JSON (about 83 MiB)."""
MAX_EVENT_BYTES: Final = MAX_CHECKPOINT_BYTES
"""A pushed event carries one checkpoint note."""
PUSH_READ_TIMEOUT: Final = 60.0
"""Seconds of silence after which the checkpoint stream counts as lost."""
MAX_REDIRECTS: Final = 3
"""Redirects one request may follow (rule 6); one more is ``redirect_refused``."""
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
_METHOD_KEEPING: Final = frozenset({307, 308})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}

_MAX_JSON_DEPTH: Final = 4
_PROOF_SIZE_HEADER: Final = "Deplog-Checkpoint-Size"
_CHUNK: Final = 64 * 1024
NOT_A_LOG: Final = "not a deplog authority: no signed checkpoint at /checkpoint"
"""Why a server whose ``/checkpoint`` is missing (404) or a web page is not followed."""


def unreachable(err: Exception) -> FetchError:
    """``fetch_failed`` saying how a request failed to get an answer (rule 1)."""
    if isinstance(err, aiohttp.ClientSSLError):
        why = "TLS failed: an untrusted certificate, or https:// to a server without TLS"
    elif isinstance(err, aiohttp.ClientConnectorDNSError):
        why = "the host name does not resolve"
    elif isinstance(err, aiohttp.ClientConnectorError) and isinstance(
        err.os_error, ConnectionRefusedError
    ):
        why = "connection refused: nothing listens at that host and port"
    elif isinstance(err, TimeoutError):
        why = "no answer within the timeout"
    else:
        why = "the connection failed"
    return FetchError(ErrorCode.FETCH_FAILED, why)


def _origin(url: URL) -> tuple[str, str, int]:
    """``url``'s (scheme, host, port), the port its scheme's default if none is given."""
    scheme, host = url.scheme.lower(), (url.host or "").lower()
    if scheme not in _DEFAULT_PORTS or not host:
        raise ValueError("not an http or https URL")
    return scheme, host, url.port or _DEFAULT_PORTS[scheme]


def _refused(why: str) -> FetchError:
    """A redirect not followed (rule 6); ``why`` is value-free and says what to do."""
    return FetchError(ErrorCode.REDIRECT_REFUSED, f"{why}, not followed: give the URL it leads to")


def redirect_target(url: URL | str, location: str) -> URL:
    """Where a redirect from ``url`` to ``location`` leads, if rule 6 allows it."""
    base = URL(url)
    try:
        target = base.join(URL(location)).with_fragment(None)
        here, there = _origin(base), _origin(target)
    except ValueError:
        raise _refused("redirected to a malformed URL") from None
    if here[0] == "https" and there[0] == "http":
        raise _refused("redirected from https to http")
    if there != here:
        raise _refused("redirected to another origin")
    if target.user is not None or target.password is not None:
        raise _refused("redirected to a URL with credentials")
    return target


class HttpClient:
    """An HTTP session held to rule 6; ``requests`` counts requests (redirect hops too)."""

    def __init__(self, timeout: float, session: aiohttp.ClientSession | None) -> None:
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._session = session
        self._own_session = session is None
        self.requests = 0

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
        self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    @asynccontextmanager
    async def request(
        self,
        url: str,
        *,
        method: str = hdrs.METH_GET,
        params: Mapping[str, int] | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The response to ``method url`` after the redirects rule 6 follows."""
        target: URL | str = url
        for _ in range(MAX_REDIRECTS + 1):
            self.requests += 1
            async with self._http().request(
                method,
                target,
                params=params,
                data=data,
                headers=headers,
                timeout=timeout or self.timeout,
                allow_redirects=False,
            ) as response:
                location = response.headers.get(hdrs.LOCATION)
                if response.status not in REDIRECT_STATUSES or location is None:
                    yield response
                    return
                target = redirect_target(response.url, location)
                if method != hdrs.METH_GET and response.status not in _METHOD_KEEPING:
                    raise _refused("redirected without the request's method and body")
            params = None  # the location is the whole URL of the next hop
        raise _refused(f"redirected more than {MAX_REDIRECTS} times")


async def read_bounded(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """``response``'s decoded body, up to ``limit`` bytes (rule 2)."""
    encoding = response.headers.get(hdrs.CONTENT_ENCODING, "identity").lower()
    if encoding == "identity" and (response.content_length or 0) > limit:
        raise FetchError(ErrorCode.RESPONSE_TOO_LARGE, "response exceeds its bound")
    body = bytearray()
    async for chunk in response.content.iter_chunked(_CHUNK):
        body += chunk
        if len(body) > limit:
            raise FetchError(ErrorCode.RESPONSE_TOO_LARGE, "response exceeds its bound")
    return bytes(body)


class HttpLogSource(HttpClient):
    """A log read over the authority's HTTP API, with rules 1 to 5."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        super().__init__(timeout, session)

    async def checkpoint(self) -> bytes:
        return await self._get("/checkpoint", {}, MAX_CHECKPOINT_BYTES)

    async def consistency(self, old: int, new: int) -> ConsistencyProof:
        body = await self._get_json(
            "/v1/proofs/consistency", {"old": old, "new": new}, MAX_PROOF_BYTES
        )
        try:
            return ConsistencyProof.from_json(body)
        except DeplogError:
            raise FetchError(ErrorCode.BAD_RESPONSE, "malformed consistency proof") from None

    async def entries(self, start: int, end: int) -> list[bytes]:
        end = min(end, start + PAGE_SIZE)
        page = await self._get_json("/v1/entries", {"start": start, "end": end}, MAX_PAGE_BYTES)
        first = page.get("start") if isinstance(page, dict) else None
        if isinstance(first, bool) or first != start:
            raise FetchError(ErrorCode.BAD_RESPONSE, "entries page starts elsewhere")
        items = page.get("entries")
        if not isinstance(items, list):
            raise FetchError(ErrorCode.BAD_RESPONSE, "entries page has no list of entries")
        leaves = []
        for item in items:
            leaf = decode_base64(item) if isinstance(item, str) else None
            if leaf is None:
                raise FetchError(ErrorCode.BAD_RESPONSE, "entry is not canonical base64")
            leaves.append(leaf)
        return leaves

    async def map_proof(self, tool_id: str) -> tuple[int, bytes]:
        url = f"{self.url}/v1/tools/{tool_id}/proof?format=binary"
        try:
            async with self.request(url) as response:
                if response.status != 200:
                    raise FetchError(ErrorCode.FETCH_FAILED, f"HTTP {response.status}")
                size = response.headers.get(_PROOF_SIZE_HEADER, "")
                if not size.isascii() or not size.isdigit() or len(size) > 20:
                    raise FetchError(ErrorCode.BAD_RESPONSE, "map proof names no checkpoint size")
                return int(size), await read_bounded(response, MAX_MAP_PROOF_BYTES)
        except (aiohttp.ClientError, TimeoutError):
            raise FetchError(ErrorCode.FETCH_FAILED, "authority unreachable") from None

    async def checkpoints(self) -> AsyncIterator[bytes]:
        """The notes of ``/v1/checkpoints/stream`` as they arrive (rule 5)."""
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeout.total, sock_read=PUSH_READ_TIMEOUT
        )
        try:
            async with self.request(
                self.url + "/v1/checkpoints/stream", timeout=timeout
            ) as response:
                if response.status != 200:
                    raise FetchError(ErrorCode.FETCH_FAILED, f"HTTP {response.status}")
                async for note in _sse_data(response.content):
                    yield note
        except (aiohttp.ClientError, TimeoutError) as err:
            raise unreachable(err) from None

    async def _get(self, path: str, query: dict[str, int], limit: int) -> bytes:
        """The body of a 200 answer to GET ``path``, read up to ``limit`` bytes (rules 1, 2)."""
        try:
            async with self.request(self.url + path, params=query) as response:
                if path == "/checkpoint" and (
                    response.status == 404 or response.content_type == "text/html"
                ):
                    raise FetchError(ErrorCode.FETCH_FAILED, NOT_A_LOG)
                if response.status != 200:
                    raise FetchError(ErrorCode.FETCH_FAILED, f"HTTP {response.status}")
                return await read_bounded(response, limit)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise unreachable(err) from None

    async def _get_json(self, path: str, query: dict[str, int], limit: int) -> Any:
        """A JSON answer, parsed strictly (rule 3)."""
        try:
            return canonical.loads(await self._get(path, query, limit), max_depth=_MAX_JSON_DEPTH)
        except JSONFormatError:
            raise FetchError(ErrorCode.BAD_RESPONSE, "response is not the expected JSON") from None


async def _sse_data(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The note of each Server-Sent Event in ``content``: its ``data:`` lines joined."""
    data: list[str] = []
    size = 0
    while True:
        try:
            line = await content.readline(max_line_length=MAX_EVENT_BYTES)
        except LineTooLong:
            raise FetchError(ErrorCode.RESPONSE_TOO_LARGE, "pushed event is too large") from None
        if not line:
            return
        text = line.decode("utf-8", "replace").rstrip("\r\n")
        if text.startswith("data:"):
            data.append(text[5:].removeprefix(" "))
            size += len(line)
            if size > MAX_EVENT_BYTES:
                raise FetchError(ErrorCode.RESPONSE_TOO_LARGE, "pushed event is too large")
        elif not text:
            if data:
                yield ("\n".join(data) + "\n").encode("utf-8")
            data, size = [], 0
