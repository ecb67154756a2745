"""Reading a ``/metrics`` scrape as Prometheus does: samples by name and labels, in any order."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name{labels}`` in Prometheus text, or None if there is none.

    Parsing (rather than matching lines) also checks that the scrape is valid
    exposition text, and does not depend on the order labels are written in.
    """
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return float(found.value)
    return None


def names(text: str) -> set[str]:
    """Every sample name in a scrape."""
    return {
        found.name for family in text_string_to_metric_families(text) for found in family.samples
    }
