"""Prometheus text-format metrics, kept in memory with bounded label sets.

Labels are route *templates* and status codes, never request values, so the
number of series is fixed by the code, not by clients.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable

__all__ = [
    "LATENCY_BUCKETS",
    "Histogram",
    "Metrics",
]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Histogram:
    """Cumulative-bucket latency histogram in seconds."""

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds
        self.n += 1


class Metrics:
    """Request counters and latency histograms, plus gauges read at scrape time."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.latency: dict[tuple[str, str], Histogram] = defaultdict(Histogram)
        self.gauges: dict[str, tuple[str, Callable[[], float]]] = {}
        self.counters: dict[str, tuple[str, Callable[[], float]]] = {}
        self.labeled: dict[str, tuple[str, str, Callable[[], dict[str, float]]]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests[(method, route, status)] += 1
        self.latency[(method, route)].observe(seconds)

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        self.gauges[name] = (help_text, read)

    def counter(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        """A monotonic count kept by its owner and read at scrape time."""
        self.counters[name] = (help_text, read)

    def labeled_gauge(
        self, name: str, help_text: str, label: str, read: Callable[[], dict[str, float]]
    ) -> None:
        """A gauge per label value; values are names from configuration, never requests."""
        self.labeled[name] = (help_text, label, read)

    def render(self) -> str:
        lines = [
            "# HELP deplog_http_requests_total HTTP requests by route template and status.",
            "# TYPE deplog_http_requests_total counter",
        ]
        for (method, route, status), count in sorted(self.requests.items()):
            lines.append(
                f'deplog_http_requests_total{{method="{method}",route="{route}",'
                f'code="{status}"}} {count}'
            )
        lines += [
            "# HELP deplog_http_request_duration_seconds HTTP request latency.",
            "# TYPE deplog_http_request_duration_seconds histogram",
        ]
        for (method, route), hist in sorted(self.latency.items()):
            labels = f'method="{method}",route="{route}"'
            cumulative = 0
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), hist.counts, strict=True):
                cumulative += count
                le = "+Inf" if bound == float("inf") else repr(bound)
                lines.append(
                    f'deplog_http_request_duration_seconds_bucket{{{labels},le="{le}"}} '
                    f"{cumulative}"
                )
            lines.append(f"deplog_http_request_duration_seconds_sum{{{labels}}} {hist.total}")
            lines.append(f"deplog_http_request_duration_seconds_count{{{labels}}} {hist.n}")
        for kind, table in (("counter", self.counters), ("gauge", self.gauges)):
            for name, (help_text, read) in sorted(table.items()):
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {read()}"]
        for name, (help_text, label, read_all) in sorted(self.labeled.items()):
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
            for value_label, value in sorted(read_all().items()):
                escaped = value_label.replace("\\", "\\\\").replace('"', '\\"')
                lines.append(f'{name}{{{label}="{escaped}"}} {value}')
        return "\n".join(lines) + "\n"
