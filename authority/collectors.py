"""Values their owners keep, read by Prometheus when ``/metrics`` is scraped.

Each part of a server registers what it measures, beside the code that measures it, on
the registry it is given (an application's, ``http/metrics.py``). Rules:
  * A value is read by a callback at scrape time (on the event loop), never copied per
    event; callbacks are cheap reads of in-memory state.
  * Labels are names from the code or the operator's configuration, never request
    values, so the number of series is fixed.
  * A name registered twice on one registry is refused (``ValueError``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

_Samples = Callable[[], Iterable[tuple[tuple[str, ...], float]]]


@dataclass(frozen=True)
class _ReadAtScrape:
    """One metric family whose samples are read from their owner when scraped."""

    family: type[CounterMetricFamily | GaugeMetricFamily]
    name: str
    help_text: str
    labels: tuple[str, ...]
    samples: _Samples

    def describe(self) -> list[Metric]:
        """The family without samples: lets the registry refuse a duplicate name."""
        return [self.family(self.name, self.help_text, labels=self.labels)]

    def collect(self) -> list[Metric]:
        metric = self.family(self.name, self.help_text, labels=self.labels)
        for label_values, value in self.samples():
            metric.add_metric(label_values, value)
        return [metric]


def gauge(
    registry: CollectorRegistry, name: str, help_text: str, read: Callable[[], float]
) -> None:
    """A value read at scrape time."""
    registry.register(_ReadAtScrape(GaugeMetricFamily, name, help_text, (), lambda: [((), read())]))


def counter(
    registry: CollectorRegistry, name: str, help_text: str, read: Callable[[], float]
) -> None:
    """A monotonic count read at scrape time (``name`` ends in ``_total``)."""
    registry.register(
        _ReadAtScrape(CounterMetricFamily, name, help_text, (), lambda: [((), read())])
    )


def labeled_gauge(
    registry: CollectorRegistry,
    name: str,
    help_text: str,
    label: str,
    read: Callable[[], Mapping[str, float]],
) -> None:
    """A gauge per label value (names from configuration, never requests)."""
    registry.register(_ReadAtScrape(GaugeMetricFamily, name, help_text, (label,), _by(read)))


def labeled_counter(
    registry: CollectorRegistry,
    name: str,
    help_text: str,
    label: str,
    read: Callable[[], Mapping[str, float]],
) -> None:
    """A count per label value (names from the code, never requests)."""
    registry.register(_ReadAtScrape(CounterMetricFamily, name, help_text, (label,), _by(read)))


def _by(read: Callable[[], Mapping[str, float]]) -> _Samples:
    """One sample per label value, in label order."""
    return lambda: [((value_label,), value) for value_label, value in sorted(read().items())]
