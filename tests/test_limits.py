"""Token buckets: a burst, then one request per refill interval, in bounded memory."""

from __future__ import annotations

import pytest

from deplog.authority.http.limits import Rate, RateLimitedError, RateLimiter
from tests.builders import Clock


def test_a_burst_is_allowed_then_refused_with_the_wait(clock: Clock) -> None:
    limiter = RateLimiter(Rate(1, 3), "rate_limited", clock=clock)
    for _ in range(3):
        limiter.take("a")
    with pytest.raises(RateLimitedError) as refused:
        limiter.take("a")
    assert (refused.value.code, refused.value.retry_after) == ("rate_limited", 1)


def test_tokens_refill_at_the_rate(clock: Clock) -> None:
    limiter = RateLimiter(Rate(2, 2), "rate_limited", clock=clock)
    limiter.take("a")
    limiter.take("a")
    clock.now += 0.5
    limiter.take("a")
    with pytest.raises(RateLimitedError):
        limiter.take("a")


def test_keys_have_separate_buckets(clock: Clock) -> None:
    limiter = RateLimiter(Rate(1, 1), "rate_limited", clock=clock)
    limiter.take("a")
    limiter.take("b")
    with pytest.raises(RateLimitedError):
        limiter.take("a")


def test_check_takes_nothing(clock: Clock) -> None:
    limiter = RateLimiter(Rate(1, 1), "rate_limited", clock=clock)
    for _ in range(5):
        limiter.check("a")
    limiter.charge("a")
    with pytest.raises(RateLimitedError):
        limiter.check("a")


def test_a_charge_of_many_tokens_is_waited_for_and_its_unused_part_given_back(
    clock: Clock,
) -> None:
    limiter = RateLimiter(Rate(100, 400), "rate_limited", clock=clock)
    limiter.charge("a", 400)
    assert limiter.delay("a", 400) == 4.0
    limiter.charge("a", -100)
    assert limiter.delay("a", 400) == 3.0


def test_a_zero_rate_disables_the_limit(clock: Clock) -> None:
    limiter = RateLimiter(Rate(0, 1), "rate_limited", clock=clock)
    for _ in range(1000):
        limiter.take("a")
    assert len(limiter) == 0


def test_memory_is_bounded_by_max_keys(clock: Clock) -> None:
    limiter = RateLimiter(Rate(1, 1), "rate_limited", max_keys=100, clock=clock)
    for n in range(10_000):
        limiter.take(f"address-{n}")
    assert len(limiter) == 100


@pytest.mark.parametrize(
    ("text", "rate"), [("5", Rate(5, 10)), ("5/7", Rate(5, 7)), ("0", Rate(0, 1))]
)
def test_rates_parse_from_flags(text: str, rate: Rate) -> None:
    assert Rate.parse(text) == rate


@pytest.mark.parametrize("text", ["-1", "x", "5/0", "nan", "inf"])
def test_bad_rates_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Rate.parse(text)


@pytest.mark.parametrize("rate", [Rate(2000, 4000), Rate(2.5, 7), Rate(0, 1)])
def test_a_rate_prints_as_its_flag_reads_it(rate: Rate) -> None:
    assert Rate.parse(str(rate)) == rate


def test_a_whole_rate_prints_without_decimals() -> None:
    assert str(Rate(2000, 4000)) == "2000/4000"
