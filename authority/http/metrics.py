"""Prometheus metrics of one HTTP application, kept and exposed by prometheus-client.

Rules:
  * Every application has its own ``CollectorRegistry``, never the library's
    process-wide default: tests and embedders run several applications in one
    process, and each ``/metrics`` shows its own application only. Each
    registry carries the process, platform and garbage-collector collectors.
  * Labels are route *templates*, methods, status codes and names from the
    operator's configuration, never request values, so the number of series is
    fixed by the code and the configuration, not by clients.
  * What the application already counts (queue depths, a hot path's plain
    integer) is read by a callback at scrape time, never copied per event;
    callbacks are cheap reads of in-memory state, made on the scraping thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

__all__ = [
    "LATENCY_BUCKETS",
    "Metrics",
]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Upper bounds, in seconds, of ``deplog_http_request_duration_seconds`` (``+Inf`` added)."""

_Samples = Callable[[], Iterable[tuple[tuple[str, ...], float]]]


class _ReadAtScrape:
    """One metric family whose samples are read from their owner when scraped."""

    def __init__(
        self,
        family: type[CounterMetricFamily | GaugeMetricFamily],
        name: str,
        help_text: str,
        labels: tuple[str, ...],
        samples: _Samples,
    ) -> None:
        self._family, self._name, self._help = family, name, help_text
        self._labels, self._samples = labels, samples

    def _empty(self) -> CounterMetricFamily | GaugeMetricFamily:
        return self._family(self._name, self._help, labels=self._labels)

    def describe(self) -> list[Metric]:
        """The family without samples: lets the registry refuse a duplicate name."""
        return [self._empty()]

    def collect(self) -> list[Metric]:
        metric = self._empty()
        for label_values, value in self._samples():
            metric.add_metric(label_values, value)
        return [metric]


class Metrics:
    """An application's registry: request counts and latencies, plus values read at scrape time.

    ``registry`` is public so a server can register a collector of its own (the
    witness reads all its per-log gauges from one database read).
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

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        """A value read at scrape time."""
        self.registry.register(
            _ReadAtScrape(GaugeMetricFamily, name, help_text, (), lambda: [((), read())])
        )

    def counter(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        """A monotonic count kept by its owner and read at scrape time (``name`` ends in
        ``_total``)."""
        self.registry.register(
            _ReadAtScrape(CounterMetricFamily, name, help_text, (), lambda: [((), read())])
        )

    def labeled_gauge(
        self, name: str, help_text: str, label: str, read: Callable[[], Mapping[str, float]]
    ) -> None:
        """A gauge per label value; values are names from configuration, never requests."""
        self._labeled(GaugeMetricFamily, name, help_text, label, read)

    def labeled_counter(
        self, name: str, help_text: str, label: str, read: Callable[[], Mapping[str, float]]
    ) -> None:
        """A count per label value, kept by its owner; values are names from the code
        (task names, error codes), never requests."""
        self._labeled(CounterMetricFamily, name, help_text, label, read)

    def _labeled(
        self,
        family: type[CounterMetricFamily | GaugeMetricFamily],
        name: str,
        help_text: str,
        label: str,
        read: Callable[[], Mapping[str, float]],
    ) -> None:
        def samples() -> list[tuple[tuple[str, ...], float]]:
            return [((value_label,), value) for value_label, value in sorted(read().items())]

        self.registry.register(_ReadAtScrape(family, name, help_text, (label,), samples))

    def exposition(self, accept: str) -> tuple[bytes, str]:
        """Every metric, and its content type: OpenMetrics if ``accept`` asks for it, else
        the Prometheus text format. Runs every collector, so call it where they may run."""
        encode, content_type = choose_encoder(accept)
        return encode(self.registry), content_type
