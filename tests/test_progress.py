"""Progress output: plain lines off a terminal, nothing when quiet, never on stdout."""

from __future__ import annotations

import io

from deplog.client.plumbing.progress import Progress


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_prints_at_most_one_line_per_interval_and_a_last_one() -> None:
    stream, clock = io.StringIO(), _Clock()
    with Progress("sync", stream=stream, interval=10.0, clock=clock) as progress:
        for done in range(0, 901, 100):
            clock.now = done / 50  # 0 .. 18 s
            progress.update(done, 1000)
        progress.update(1000, 1000)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("sync: 0/1000 entries")
    assert lines[-1].startswith("sync: 1000/1000 entries")
    assert len(lines) == 3  # at 0 s, 10 s and the closing line


def test_the_closing_line_never_repeats_the_last_one() -> None:
    stream = io.StringIO()
    with Progress("sync", stream=stream) as progress:
        progress.update(1, 1)  # the first line, already the whole work
    assert stream.getvalue().count("sync: 1/1 entries") == 1


def test_a_line_states_rate_and_time_left() -> None:
    stream, clock = io.StringIO(), _Clock()
    progress = Progress("replay", stream=stream, interval=0.0, clock=clock)
    clock.now = 10.0
    progress.update(500, 1000)
    assert stream.getvalue().strip() == "replay: 500/1000 entries (50/s, about 10 s left)"


def test_quiet_prints_nothing() -> None:
    stream = io.StringIO()
    with Progress("sync", stream=stream, quiet=True) as progress:
        progress.update(5, 10)
    assert stream.getvalue() == ""


def test_a_terminal_gets_a_bar_that_is_cleared_at_the_end() -> None:
    stream = _Terminal()
    with Progress("sync", stream=stream) as progress:
        progress.update(5, 10)
    drawn = stream.getvalue()
    assert "5/10" in drawn
    assert drawn.endswith(" \r")  # leave=False wipes the bar off the line


def test_work_that_failed_gets_no_closing_line() -> None:
    stream, clock = io.StringIO(), _Clock()
    try:
        with Progress("sync", stream=stream, interval=100.0, clock=clock) as progress:
            progress.update(0, 10)
            clock.now = 1.0
            progress.update(3, 10)
            raise RuntimeError
    except RuntimeError:
        pass
    assert stream.getvalue().splitlines() == ["sync: 0/10 entries (0/s)"]
