"""HTTP plumbing shared by the authority and the witness servers.

Both answer every failure with a stable, value-free code (the authority as
JSON, the witness as the short text the tlog-witness protocol uses), never a
traceback, and count every request by route template and status. Both serve
until SIGINT or SIGTERM and print one "serving on <url>" line once bound, so
operators and tests learn the port even when it was chosen by the kernel.
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
from deplog.authority.options import option
from deplog.client.errors import DeplogError

__all__ = [
    "METRICS",
    "ErrorRenderer",
    "Handler",
    "Listen",
    "errors_and_metrics",
    "serve_until_signalled",
]

log = logging.getLogger("deplog.http")

METRICS = web.AppKey("metrics", Metrics)

ErrorRenderer = Callable[[str, int], web.Response]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_HTTP_ERROR_CODES = {
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    413: "too_large",
    415: "unsupported_media_type",
}


def _route_of(request: web.Request) -> str:
    """The route template (never the request path): a bounded metrics label."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def errors_and_metrics(render: ErrorRenderer, hot_handlers: Iterable[Handler] = ()) -> Middleware:
    """A middleware turning every failure into ``render(code, status)`` and counting requests.

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
            response = render(err.code, getattr(err, "http_status", 400))
            retry_after = getattr(err, "retry_after", None)
            if retry_after is not None:
                response.headers["Retry-After"] = str(retry_after)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = render(_HTTP_ERROR_CODES.get(exc.status, "bad_request"), exc.status)
            if exc.status == 405 and "Allow" in exc.headers:
                response.headers["Allow"] = exc.headers["Allow"]
        except asyncio.CancelledError:
            raise
        except Exception:
            # The type only: an exception's text may carry request values.
            log.exception("internal error on %s", _route_of(request))
            response = render("internal", 500)
        if response.status == 503:
            response.headers.setdefault("Retry-After", "1")
        request.app[METRICS].observe(
            request.method, _route_of(request), response.status, time.perf_counter() - started
        )
        return response

    return middleware


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
