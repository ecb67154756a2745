"""HTTP plumbing shared by the authority and the witness servers.

Rules:

* **Codes, not tracebacks.** Every failure is answered with a stable, value-free code (the
  authority as JSON, the witness as text) and the status ``status.py`` gives it: the
  middleware makes everything a ``DeplogError`` (what aiohttp refuses,
  :class:`HTTPRequestError`; anything unexpected, :class:`InternalError`), and so do
  :class:`ServingRunner`'s connections for what aiohttp's parser refuses before routing.
* **One value a parameter.** A query parameter given twice is ``repeated_parameter``
  (:func:`query_param`), for the API and the explorer alike.
* **Bounded metrics.** Every request is counted by route template and status.
* **Bind first.** A server binds its port (:func:`bind`) before it creates anything, so a
  busy port changes nothing; once listening it prints one "serving on <url>" line, then
  serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Middleware
from aiohttp.web_request import BaseRequest

from deplog.authority.http.metrics import Metrics
from deplog.authority.http.status import HTTP_STATUS, http_status
from deplog.authority.options import option
from deplog.client.errors import CLIError, DeplogError, ErrorCode, TooLargeError

__all__ = [
    "ADDRESS_UNAVAILABLE_EXIT",
    "MAX_HEADERS",
    "MAX_LINE",
    "METRICS",
    "YOUNG_COLLECTION_EVERY",
    "ErrorRenderer",
    "HTTPRequestError",
    "Handler",
    "InternalError",
    "Listen",
    "RequestError",
    "ServingRunner",
    "bind",
    "errors_and_metrics",
    "query_param",
    "serve_until_signalled",
    "settle_collector",
]

log = logging.getLogger("deplog.http")

METRICS = web.AppKey("metrics", Metrics)

ErrorRenderer = Callable[[DeplogError, int], web.Response]
"""Renders an error with the status of its code (the witness renders some specially)."""
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HTTPRequestError(DeplogError):
    """A request either server refuses at the HTTP level, before its own checks."""

    codes = frozenset(
        {
            ErrorCode.NOT_FOUND,
            ErrorCode.METHOD_NOT_ALLOWED,
            ErrorCode.REQUEST_TIMEOUT,
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            ErrorCode.BAD_REQUEST,
        }
    )


class RequestError(DeplogError):
    """A read the API cannot answer: a malformed parameter, or a range the log cannot serve."""

    codes = frozenset(
        {
            ErrorCode.BAD_PARAMETER,
            ErrorCode.REPEATED_PARAMETER,
            ErrorCode.OUT_OF_RANGE,
            ErrorCode.SIZE_NOT_PUBLISHED,
            ErrorCode.RANGE_TOO_LARGE,
        }
    )


def query_param(request: web.Request, name: str) -> str | None:
    """The query parameter ``name``, or None; given twice it is refused, since a cache or
    proxy in front may honour the other."""
    given = request.query.getall(name, [])
    if len(given) > 1:
        raise RequestError(ErrorCode.REPEATED_PARAMETER, "a query parameter is given twice")
    return given[0] if given else None


class InternalError(DeplogError):
    """A failure inside a server, never the request's doing: answered without detail."""

    code = ErrorCode.INTERNAL


_AIOHTTP_REFUSALS = {
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    408: ErrorCode.REQUEST_TIMEOUT,
    415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
}


def _refusal(status: int) -> DeplogError:
    """What an error status aiohttp raised (a route, a method, a body over the limit) means."""
    if status == 413:
        return TooLargeError()
    code = _AIOHTTP_REFUSALS.get(status)
    if code is not None:
        return HTTPRequestError(code)
    return HTTPRequestError(ErrorCode.BAD_REQUEST) if status < 500 else InternalError()


def _route_of(request: web.Request) -> str:
    """The route template (never the request path): a bounded metrics label."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def errors_and_metrics(render: ErrorRenderer, hot_handlers: Iterable[Handler] = ()) -> Middleware:
    """A middleware answering every failure by ``render`` and counting the requests."""
    hot = frozenset(hot_handlers or ())

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if handler in hot:
            return await handler(request)
        started = time.perf_counter()
        try:
            response = await handler(request)
        except DeplogError as err:
            response = _answer(render, err, request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = _answer(render, _refusal(exc.status), request)
            if exc.status == 405 and "Allow" in exc.headers:
                response.headers["Allow"] = exc.headers["Allow"]
        except HttpProcessingError:
            # a bad chunk while a handler read the body
            response = _answer(render, HTTPRequestError(ErrorCode.BAD_REQUEST), request)
            response.force_close()
        except asyncio.CancelledError:
            raise
        except Exception:
            # The type only: an exception's text may carry request values.
            log.exception("internal error on %s", _route_of(request))
            response = _answer(render, InternalError(), request)
        if response.status == 503:
            response.headers.setdefault("Retry-After", "1")
        request.app[METRICS].observe(
            request.method, _route_of(request), response.status, time.perf_counter() - started
        )
        return response

    return middleware


def _answer(render: ErrorRenderer, err: DeplogError, request: web.Request) -> web.Response:
    """``err`` rendered with its code's status (and ``Retry-After`` if it says when)."""
    status = http_status(err.code)
    if status is None:  # no request can cause this code: a fault of the server
        log.error("%s on %s has no HTTP status: answered as internal", err.code, _route_of(request))
        err = InternalError()
        status = HTTP_STATUS[err.code]
    response = render(err, status)
    retry_after = getattr(err, "retry_after", None)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


class _Connection(web.RequestHandler):
    """One client connection whose protocol-level refusals are answered as API errors."""

    def __init__(self, manager: web.Server, render: ErrorRenderer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._render = render

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """aiohttp's answer to a request it could not parse (never its ``message``)."""
        if status < 500:
            self.logger.debug("refused before routing: %d %s", status, type(exc).__name__)
        else:
            self.logger.error("internal error outside the middleware", exc_info=exc)
        if request.writer.output_size > 0:
            raise ConnectionError("a response already started: no error answer can follow")
        err = _refusal(status)
        response = self._render(err, HTTP_STATUS[err.code])
        response.force_close()
        return response


class _Server(web.Server):
    """aiohttp's low-level server, making :class:`_Connection` connections."""

    def __init__(self, render: ErrorRenderer, built: web.Server) -> None:
        self._connection_args: dict[str, Any] = dict(built._kwargs)
        super().__init__(
            built.request_handler,
            request_factory=built.request_factory,
            handler_cancellation=built.handler_cancellation,
            loop=asyncio.get_running_loop(),
            **self._connection_args,
        )
        self._render = render

    def __call__(self) -> web.RequestHandler:
        return _Connection(self, self._render, loop=self._loop, **self._connection_args)


MAX_HEADERS = 64
"""Request headers a server parses at most; more is ``400 bad_request``."""
MAX_LINE = 8190
"""Bytes in a request line or one header at most; more is ``400 bad_request``."""


class ServingRunner(web.AppRunner):
    """An ``AppRunner`` whose protocol-level refusals are answered by ``render``."""

    def __init__(self, app: web.Application, render: ErrorRenderer, **kwargs: Any) -> None:
        super().__init__(
            app, max_line_size=MAX_LINE, max_field_size=MAX_LINE, max_headers=MAX_HEADERS, **kwargs
        )
        self._render = render

    async def _make_server(self) -> web.Server:
        return _Server(self._render, await super()._make_server())


@dataclass(frozen=True)
class Listen:
    """Where a server listens: loopback unless the operator exposes it (SECURITY.md)."""

    host: str = option("127.0.0.1", "listen address")


ADDRESS_UNAVAILABLE_EXIT = 69
"""Exit status when the listen address cannot be had (sysexits ``EX_UNAVAILABLE``)."""
_BACKLOG = 1024


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or a one-line CLIError naming it."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror:
        raise CLIError(
            f"cannot listen on {where}: no such address; give --host an address of this machine",
            ADDRESS_UNAVAILABLE_EXIT,
        ) from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(_BACKLOG)
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise CLIError(
                f"cannot listen on {where}: the address is already in use; stop the process "
                "using it or choose another --port",
                ADDRESS_UNAVAILABLE_EXIT,
            ) from None
        if err.errno in (errno.EACCES, errno.EPERM):
            raise CLIError(
                f"cannot listen on {where}: permission denied; choose a --port above 1023",
                77,
            ) from None
        raise CLIError(
            f"cannot listen on {where}: {err.strerror or type(err).__name__}; give --host an "
            "address of this machine",
            ADDRESS_UNAVAILABLE_EXIT,
        ) from None
    return sock


YOUNG_COLLECTION_EVERY = 20_000
"""Net container allocations between two young-generation collections (CPython's
default is 700)."""


def settle_collector() -> None:
    """Once a server has started: collect, freeze what start-up left (it lives as long as
    the process), and collect the young generation every ``YOUNG_COLLECTION_EVERY``
    allocations. The default rescans long-lived state and the map cache's churn: 3,000
    notices over HTTP spent 0.27-0.30 s collecting at the default, 0.09-0.12 s settled."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, 20, 10)


async def serve_until_signalled(
    runner: web.AppRunner,
    sock: socket.socket,
    banner: str,
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve on ``sock``, print ``<banner> serving on <url>``, run until SIGINT/SIGTERM."""
    await web.SockSite(runner, sock, backlog=_BACKLOG).start()
    settle_collector()
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"{banner} serving on http://{shown}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if on_stop is not None:
        await on_stop()
    await runner.cleanup()
