"""``deplog publish``'s default sequence numbers: microseconds, never repeated in a process."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from deplog.client.cli.publish import SequenceClock
from deplog.client.model.notice import MAX_SAFE_INTEGER

NOW_NS = 1_796_000_000_123_456_789


def test_the_default_sequence_is_the_time_in_microseconds() -> None:
    assert SequenceClock(lambda: NOW_NS).next() == NOW_NS // 1000


def test_a_clock_standing_still_still_gives_increasing_numbers() -> None:
    clock = SequenceClock(lambda: NOW_NS)
    assert [clock.next() for _ in range(3)] == [NOW_NS // 1000 + k for k in range(3)]


def test_a_clock_stepping_back_never_repeats_a_number() -> None:
    times = iter([NOW_NS, NOW_NS - 5_000_000])
    clock = SequenceClock(lambda: next(times))
    first = clock.next()
    assert clock.next() == first + 1


def test_threads_asking_in_the_same_microsecond_get_distinct_numbers() -> None:
    clock = SequenceClock(lambda: NOW_NS)
    got: list[int] = []
    lock = threading.Lock()

    def ask() -> None:
        mine = [clock.next() for _ in range(500)]
        with lock:
            got.extend(mine)

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 16 * 500


def test_microseconds_stay_a_json_safe_integer_past_the_year_2200() -> None:
    later = int(datetime(2250, 1, 1, tzinfo=UTC).timestamp()) * 1_000_000_000
    assert SequenceClock(lambda: later).next() <= MAX_SAFE_INTEGER
