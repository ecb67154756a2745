"""Rate limits: token buckets per client address and per publisher, in bounded memory.

A bucket holds up to ``burst`` tokens and refills at ``rate`` a second; a request takes a
token or is refused with the seconds until the next (a 429's ``Retry-After``). Buckets live
in an LRU of ``max_keys``: a flood of distinct keys costs bounded memory, and an evicted key
starts again with a full bucket.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from deplog.client.errors import DeplogError, ErrorCode

MAX_KEYS = 65536


class RateLimitedError(DeplogError):
    """Too many requests from one address or for one publisher; retry later."""

    codes = frozenset({ErrorCode.RATE_LIMITED, ErrorCode.PUBLISHER_RATE_LIMITED})

    def __init__(self, code: ErrorCode, retry_after: int) -> None:
        super().__init__(code, "rate limit exceeded")
        self.retry_after = retry_after


@dataclass(frozen=True)
class Rate:
    """``rate`` tokens a second, at most ``burst`` at once; a rate of 0 disables the limit."""

    rate: float
    burst: float

    @classmethod
    def parse(cls, text: str) -> Rate:
        """``RATE`` or ``RATE/BURST`` (a burst defaults to two seconds' worth)."""
        rate_text, _, burst_text = text.partition("/")
        rate = float(rate_text)
        burst = float(burst_text) if burst_text else max(1.0, 2 * rate)
        if not (math.isfinite(rate) and math.isfinite(burst)) or rate < 0 or burst < 1:
            raise ValueError("a rate is RATE[/BURST] with RATE >= 0 and BURST >= 1")
        return cls(rate, burst)

    def __str__(self) -> str:
        """``RATE/BURST``, as :meth:`parse` reads it."""
        return f"{self.rate:g}/{self.burst:g}"


@dataclass
class RateLimiter:
    """Token buckets keyed by a string (an address, a publisher id)."""

    limit: Rate
    code: ErrorCode
    _: KW_ONLY
    max_keys: int = MAX_KEYS
    clock: Callable[[], float] = time.monotonic
    _buckets: OrderedDict[str, tuple[float, float]] = field(default_factory=OrderedDict, init=False)

    def _tokens(self, key: str, now: float) -> float:
        tokens, stamp = self._buckets.get(key, (self.limit.burst, now))
        return min(self.limit.burst, tokens + (now - stamp) * self.limit.rate)

    def delay(self, key: str, need: float = 1.0) -> float:
        """Seconds until ``key`` has ``need`` tokens (0: it has them now)."""
        if self.limit.rate <= 0:
            return 0.0
        return max(0.0, (need - self._tokens(key, self.clock())) / self.limit.rate)

    def check(self, key: str) -> None:
        """Refuse (``RateLimitedError``) if ``key`` has no token left; takes none."""
        if (delay := self.delay(key)) > 0:
            raise RateLimitedError(self.code, math.ceil(delay))

    def charge(self, key: str, cost: float = 1.0) -> None:
        """Take ``cost`` tokens for ``key`` (down to zero at most; a negative cost gives
        tokens back)."""
        if self.limit.rate <= 0:
            return
        now = self.clock()
        tokens = self._tokens(key, now)
        self._buckets.pop(key, None)
        self._buckets[key] = (max(0.0, tokens - cost), now)
        if len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)

    def take(self, key: str) -> None:
        """Check, then charge: one token per request."""
        self.check(key)
        self.charge(key)

    def __len__(self) -> int:
        return len(self._buckets)
