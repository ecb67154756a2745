"""The witness's HTTP server: tlog-witness ``POST /add-checkpoint``, ``/healthz``, ``/metrics``.

Rules:

* **Off the loop.** The add-checkpoint work runs on a small thread pool and, once started,
  to completion even if the client goes away: the record and the cosignature stay in step.
* **Bounded.** Body size (``too_large``), time to send it (``request_timeout``), requests
  in flight, bodies being read included, in total and from one client address (``busy``,
  with ``Retry-After``): slow bodies from one address cannot keep others out.
* **Answers.** A refusal is its tlog-witness status with the code as text, but
  ``old_size_mismatch``, whose body is the recorded size as ``text/x.tlog.size``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections import Counter

from aiohttp import hdrs, web
from prometheus_client.metrics_core import GaugeMetricFamily

from deplog.authority.http.metrics import Metrics
from deplog.authority.http.plumbing import METRICS, HTTPRequestError, errors_and_metrics
from deplog.authority.http.status import HTTP_STATUS
from deplog.authority.witness.core import MAX_BODY_SIZE, SizeConflictError, Witness
from deplog.client.errors import DeplogError, ErrorCode, TooLargeError

BODY_TIMEOUT = 10.0
"""Seconds a client has to send its add-checkpoint body."""
MAX_IN_FLIGHT = 64
MAX_IN_FLIGHT_PER_ADDRESS = 8
WORKER_THREADS = 4

SIZE_CONTENT_TYPE = "text/x.tlog.size"
"""Content type of an old-size conflict body: the recorded size."""
SIZE_CONFLICT_STATUS = HTTP_STATUS[ErrorCode.OLD_SIZE_MISMATCH]
"""The status of an old-size conflict (409), from the one table."""
TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"

WITNESS = web.AppKey("witness", Witness)
_EXECUTOR = web.AppKey("executor", concurrent.futures.ThreadPoolExecutor)
_IN_FLIGHT = web.AppKey("in_flight", Counter)


class BusyError(DeplogError):
    """As many add-checkpoint requests as the witness takes at once are in flight: retry."""

    code = ErrorCode.BUSY


def render_error(err: DeplogError, status: int) -> web.Response:
    """A refusal as tlog-witness answers it: the code as text, or the recorded size."""
    body: str = err.code
    content_type = TEXT_CONTENT_TYPE
    if isinstance(err, SizeConflictError):
        body, content_type = str(err.recorded_size), SIZE_CONTENT_TYPE
    return web.Response(
        status=status, body=f"{body}\n".encode(), headers={"Content-Type": content_type}
    )


async def _post_add_checkpoint(request: web.Request) -> web.Response:
    """tlog-witness add-checkpoint: read the bounded body, then check and cosign on a thread."""
    if request.content_length is not None and request.content_length > MAX_BODY_SIZE:
        raise TooLargeError(message="add-checkpoint body over 1 MiB")
    in_flight: Counter[str] = request.app[_IN_FLIGHT]
    address = request.remote or "unknown"
    if in_flight.total() >= MAX_IN_FLIGHT or in_flight[address] >= MAX_IN_FLIGHT_PER_ADDRESS:
        raise BusyError()
    in_flight[address] += 1
    try:
        try:
            body = await asyncio.wait_for(request.read(), BODY_TIMEOUT)
        except TimeoutError:
            raise HTTPRequestError(ErrorCode.REQUEST_TIMEOUT) from None
        witness = request.app[WITNESS]
        loop = asyncio.get_running_loop()
        line = await loop.run_in_executor(
            request.app[_EXECUTOR], lambda: witness.add_checkpoint(body, int(time.time()))
        )
    finally:
        in_flight[address] -= 1
        if not in_flight[address]:
            del in_flight[address]
    return web.Response(status=200, body=line, headers={"Content-Type": TEXT_CONTENT_TYPE})


async def _get_healthz(request: web.Request) -> web.Response:
    """200 ``ok``; 503 ``degraded`` (``storage_unavailable``, or ``storage_full``) while the
    database fails."""
    witness = request.app[WITNESS]
    report: dict[str, object] = {"status": "ok", "witness": witness.verifier().vkey()}
    if witness.state.failing is not None:
        full = witness.state.failing == ErrorCode.STORAGE_FULL
        report.update(
            status="degraded", reasons=["storage_full" if full else "storage_unavailable"]
        )
        return web.json_response(report, status=503)
    return web.json_response(report)


_LOG_GAUGES = (
    ("deplog_witness_log_size", "Tree size of the latest checkpoint cosigned per log."),
    (
        "deplog_witness_log_cosigned_timestamp_seconds",
        "POSIX time of the latest cosignature per log.",
    ),
    ("deplog_witness_log_lag_seconds", "Seconds since the latest cosignature per log."),
)


class _LogGauges:
    """Per-log gauges from one read of the state per scrape."""

    def __init__(self, witness: Witness) -> None:
        self._witness = witness

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        return tuple(
            GaugeMetricFamily(name, text, labels=("origin",)) for name, text in _LOG_GAUGES
        )

    def describe(self) -> tuple[GaugeMetricFamily, ...]:
        return self._families()

    def collect(self) -> tuple[GaugeMetricFamily, ...]:
        size, cosigned_at, lag = families = self._families()
        now = int(time.time())
        for status in self._witness.state.logs():
            recorded, seconds_behind = status.recorded, status.lag(now)
            if recorded is None or seconds_behind is None:
                continue
            size.add_metric((status.origin,), recorded.size)
            cosigned_at.add_metric((status.origin,), recorded.updated_at)
            lag.add_metric((status.origin,), seconds_behind)
        return families


async def _get_metrics(request: web.Request) -> web.Response:
    """Scraped on the worker threads: the per-log gauges read the database."""
    accept = request.headers.get(hdrs.ACCEPT, "")
    loop = asyncio.get_running_loop()
    body, content_type = await loop.run_in_executor(
        request.app[_EXECUTOR], request.app[METRICS].exposition, accept
    )
    return web.Response(body=body, headers={hdrs.CONTENT_TYPE: content_type})


def build_app(witness: Witness, threads: int = WORKER_THREADS) -> web.Application:
    """The witness HTTP application; its thread pool shuts down on cleanup."""
    app = web.Application(
        client_max_size=MAX_BODY_SIZE, middlewares=[errors_and_metrics(render_error)]
    )
    app[WITNESS] = witness
    metrics = Metrics()
    metrics.registry.register(_LogGauges(witness))
    app[METRICS] = metrics
    app[_IN_FLIGHT] = Counter()
    executor = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="witness")
    app[_EXECUTOR] = executor

    async def shutdown(app: web.Application) -> None:
        executor.shutdown(wait=True)

    app.on_cleanup.append(shutdown)
    app.router.add_post("/add-checkpoint", _post_add_checkpoint)
    app.router.add_get("/healthz", _get_healthz)
    app.router.add_get("/metrics", _get_metrics)
    return app
