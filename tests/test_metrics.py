"""An application's metrics: its own registry, fixed names and buckets, values read when scraped."""

from __future__ import annotations

import pytest

from deplog.authority import collectors
from deplog.authority.http.metrics import LATENCY_BUCKETS, Metrics
from tests.scrape import names, sample

GET_HEALTHZ = {"method": "GET", "route": "/healthz"}


def scrape(metrics: Metrics) -> str:
    body, content_type = metrics.exposition("*/*")
    assert content_type.startswith("text/plain; version=0.0.4")
    return body.decode()


def test_each_application_shows_only_its_own_requests() -> None:
    counted, other = Metrics(), Metrics()
    counted.observe("GET", "/healthz", 200, 0.002)
    assert sample(scrape(counted), "deplog_http_requests_total", **GET_HEALTHZ, code="200") == 1
    assert "deplog_http_requests_total" not in names(scrape(other))


def test_every_registry_has_the_process_platform_and_gc_collectors() -> None:
    scraped = names(scrape(Metrics()))
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes"} <= scraped
    assert {"python_info", "python_gc_collections_total"} <= scraped


def test_requests_are_counted_by_method_route_and_code() -> None:
    metrics = Metrics()
    for status in (200, 200, 503):
        metrics.observe("GET", "/healthz", status, 0.002)
    text = scrape(metrics)
    assert sample(text, "deplog_http_requests_total", **GET_HEALTHZ, code="200") == 2
    assert sample(text, "deplog_http_requests_total", **GET_HEALTHZ, code="503") == 1


def test_latency_falls_in_the_fixed_cumulative_buckets() -> None:
    metrics = Metrics()
    metrics.observe("GET", "/healthz", 200, 0.003)
    metrics.observe("GET", "/healthz", 200, 7.0)
    text = scrape(metrics)
    bucket = "deplog_http_request_duration_seconds_bucket"
    counts = {
        bound: sample(text, bucket, **GET_HEALTHZ, le=bound)
        for bound in [*(str(b) for b in LATENCY_BUCKETS), "+Inf"]
    }
    assert counts == {
        **{str(b): (0 if b < 0.003 else 1) for b in LATENCY_BUCKETS},
        "+Inf": 2,
    }
    assert sample(text, "deplog_http_request_duration_seconds_count", **GET_HEALTHZ) == 2
    assert sample(text, "deplog_http_request_duration_seconds_sum", **GET_HEALTHZ) == pytest.approx(
        7.003
    )


def test_gauges_and_counters_are_read_when_scraped() -> None:
    metrics = Metrics()
    owner = {"pending": 4.0, "batches": 1.0}
    collectors.gauge(
        metrics.registry, "deplog_pending_submissions", "Queued.", lambda: owner["pending"]
    )
    collectors.counter(
        metrics.registry, "deplog_batches_total", "Batches.", lambda: owner["batches"]
    )
    assert sample(scrape(metrics), "deplog_pending_submissions") == 4
    owner.update(pending=0.0, batches=9.0)
    text = scrape(metrics)
    assert sample(text, "deplog_pending_submissions") == 0
    assert sample(text, "deplog_batches_total") == 9
    assert "# TYPE deplog_batches_total counter" in text


def test_labeled_gauges_carry_any_configured_name_escaped() -> None:
    metrics = Metrics()
    awkward = 'witness "one"\\with\nnewline'
    collectors.labeled_gauge(
        metrics.registry,
        "deplog_witness_lag_entries",
        "Lag.",
        "witness",
        lambda: {awkward: 3.0, "plain": 0.0},
    )
    text = scrape(metrics)
    assert sample(text, "deplog_witness_lag_entries", witness=awkward) == 3
    assert sample(text, "deplog_witness_lag_entries", witness="plain") == 0


def test_a_name_registered_twice_is_refused() -> None:
    metrics = Metrics()
    collectors.gauge(metrics.registry, "deplog_entries", "Leaves.", lambda: 1.0)
    with pytest.raises(ValueError, match="deplog_entries"):
        collectors.gauge(metrics.registry, "deplog_entries", "Leaves again.", lambda: 2.0)


def test_openmetrics_is_served_to_a_scraper_that_asks_for_it() -> None:
    metrics = Metrics()
    collectors.counter(metrics.registry, "deplog_batches_total", "Batches.", lambda: 2.0)
    body, content_type = metrics.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert b"deplog_batches_total 2.0\n" in body
    assert body.endswith(b"# EOF\n")
