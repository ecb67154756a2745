"""Prometheus metrics of one HTTP application: its registry, its requests, its exposition.

Rules:
  * Every application has its own ``CollectorRegistry``, never the library's
    process-wide default: tests and embedders run several applications in one
    process, and each ``/metrics`` shows its own application only. Each
    registry carries the process, platform and garbage-collector collectors.
  * Labels are route *templates*, methods and status codes, never request values,
    so the number of series is fixed by the code, not by clients.
  * What the application already counts (queue depths, a hot path's plain integer)
    is registered by its owner, beside the code that counts it, on ``registry``
    (``authority/collectors.py``: read at scrape time, never copied per event).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

__all__ = [
    "LATENCY_BUCKETS",
    "Metrics",
]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Upper bounds, in seconds, of ``deplog_http_request_duration_seconds`` (``+Inf`` added)."""


class Metrics:
    """An application's registry, its request counts and latencies, and their exposition.

    ``registry`` is public: the parts of a server register what they measure on it
    (``authority/collectors.py``), and the witness a collector of its own (it reads
    all its per-log gauges from one database read).
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._requests = Counter(
            "deplog_http_requests",
            "HTTP requests by route template and status.",
            ("method", "route", "code"),
            registry=self.registry,
        )
        self._latency = Histogram(
            "deplog_http_request_duration_seconds",
            "HTTP request latency.",
            ("method", "route"),
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        # Label lookups cost more than the counting itself; the label set is bounded.
        self._series: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request and its latency (on the event loop, once per request)."""
        key = (method, route, status)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = (
                self._requests.labels(method, route, str(status)),
                self._latency.labels(method, route),
            )
        series[0].inc()
        series[1].observe(seconds)

    def exposition(self, accept: str) -> tuple[bytes, str]:
        """Every metric, and its content type: OpenMetrics if ``accept`` asks for it, else
        the Prometheus text format. Runs every collector, so call it where they may run."""
        encode, content_type = choose_encoder(accept)
        return encode(self.registry), content_type
