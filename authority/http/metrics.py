"""Prometheus metrics of one HTTP application: its registry, its requests, its exposition.

Rules:
  * Every application has its own ``CollectorRegistry`` (with the process, platform and
    GC collectors), never the process-wide default: each ``/metrics`` shows its own.
  * Labels are route *templates*, methods and status codes, never request values.
  * What the application already counts is registered by its owner on ``registry``
    (``authority/collectors.py``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Upper bounds, in seconds, of ``deplog_http_request_duration_seconds`` (``+Inf`` added)."""


class Metrics:
    """An application's registry, its request counts and latencies, and their exposition."""

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
        """Every metric (running every collector), and its content type for ``accept``."""
        encode, content_type = choose_encoder(accept)
        return encode(self.registry), content_type
