"""RFC 3339 timestamps in the one form deplog writes: ``YYYY-MM-DDTHH:MM:SSZ``.

UTC, whole seconds, upper-case ``T`` and ``Z``: one spelling per instant, so a
timestamp compares as text and re-encodes byte for byte. Parsing, with its
stable error code, belongs to the model (``deplog.client.model.notice``).
"""

from __future__ import annotations

from datetime import UTC, datetime


def format_timestamp(dt: datetime) -> str:
    """Format an aware datetime as ``YYYY-MM-DDTHH:MM:SSZ`` (the only form we accept)."""
    if dt.tzinfo is None:
        raise ValueError("naive datetime")
    u = dt.astimezone(UTC)
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"


def now_timestamp() -> str:
    """The current time in the one timestamp form deplog writes."""
    return format_timestamp(datetime.now(UTC))
