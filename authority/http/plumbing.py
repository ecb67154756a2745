"""HTTP plumbing shared by the authority and the witness servers.

Both answer every failure with a stable, value-free code (the authority as
JSON, the witness as the short text the tlog-witness protocol uses), never a
traceback, and count every request by route template and status. The
middleware turns every failure into a ``DeplogError`` (what aiohttp refuses
itself becomes :class:`HTTPRequestError`, anything unexpected
:class:`InternalError`) and answers it with the status of its code from the one
table, ``status.py``. Both serve until SIGINT or SIGTERM and print one "serving
on <url>" line once bound, so operators and tests learn the port even when it
was chosen by the kernel.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Middleware

from deplog.authority.http.metrics import Metrics
from deplog.authority.http.status import HTTP_STATUS, http_status
from deplog.authority.options import option
from deplog.client.errors import DeplogError, ErrorCode, TooLargeError

__all__ = [
    "METRICS",
    "ErrorRenderer",
    "HTTPRequestError",
    "Handler",
    "InternalError",
    "Listen",
    "errors_and_metrics",
    "serve_until_signalled",
]

log = logging.getLogger("deplog.http")

METRICS = web.AppKey("metrics", Metrics)

ErrorRenderer = Callable[[DeplogError, int], web.Response]
"""Renders an error with the status of its code (the witness renders some specially)."""
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HTTPRequestError(DeplogError):
    """A request either server refuses at the HTTP level, before its own checks: no such
    route or method, a body too slow to arrive or not of the declared type, or anything
    else aiohttp refuses (``bad_request``)."""

    codes = frozenset(
        {
            ErrorCode.NOT_FOUND,
            ErrorCode.METHOD_NOT_ALLOWED,
            ErrorCode.REQUEST_TIMEOUT,
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            ErrorCode.BAD_REQUEST,
        }
    )


class InternalError(DeplogError):
    """A failure inside a server, never the request's doing: answered without detail."""

    code = ErrorCode.INTERNAL


_AIOHTTP_REFUSALS = {
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    408: ErrorCode.REQUEST_TIMEOUT,
    415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
}


def _refusal(exc: web.HTTPException) -> DeplogError:
    """What an error status aiohttp raised (a route, a method, a body over the limit) means."""
    if exc.status == 413:
        return TooLargeError()
    code = _AIOHTTP_REFUSALS.get(exc.status)
    if code is not None:
        return HTTPRequestError(code)
    return HTTPRequestError(ErrorCode.BAD_REQUEST) if exc.status < 500 else InternalError()


def _route_of(request: web.Request) -> str:
    """The route template (never the request path): a bounded metrics label."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def errors_and_metrics(render: ErrorRenderer, hot_handlers: Iterable[Handler] = ()) -> Middleware:
    """A middleware turning every failure into ``render(error, status)`` and counting requests.

    ``hot_handlers`` only serve prepared bytes and cannot fail (``GET
    /checkpoint``): they pass straight through, recognized by identity, and
    count their own requests; that keeps them close to a bare aiohttp handler.
    """
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
            response = _answer(render, _refusal(exc), request)
            if exc.status == 405 and "Allow" in exc.headers:
                response.headers["Allow"] = exc.headers["Allow"]
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
    if status is None:
        # No request can cause this code: a fault of the server, answered as one.
        log.error("%s on %s has no HTTP status: answered as internal", err.code, _route_of(request))
        err = InternalError()
        status = HTTP_STATUS[err.code]
    response = render(err, status)
    retry_after = getattr(err, "retry_after", None)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


@dataclass(frozen=True)
class Listen:
    """Where a server listens: loopback unless the operator exposes it (SECURITY.md).

    Each server's serve options extend it with their own ``port``.
    """

    host: str = option("127.0.0.1", "listen address")


async def serve_until_signalled(
    runner: web.AppRunner,
    host: str,
    port: int,
    banner: str,
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Bind, print ``<banner> serving on http://host:port``, run until SIGINT/SIGTERM."""
    await web.TCPSite(runner, host, port, backlog=1024).start()
    bound = [a for a in runner.addresses if isinstance(a, tuple)]
    actual_port = bound[0][1] if bound else port
    print(f"{banner} serving on http://{host}:{actual_port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if on_stop is not None:
        await on_stop()
    await runner.cleanup()
