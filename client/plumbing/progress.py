"""Progress of long work (first sync, replay, export, start-up checks), for a person watching.

On a terminal a live bar (tqdm); elsewhere (a log, systemd, CI) a plain line at most
every ``interval`` seconds and one at the end, unless the last line already said it.
Always on stderr: stdout is for results. Work reports through a plain ``(done, total)``
callback, so library code never imports this module.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from tqdm import tqdm


class Progress:
    """A context manager whose ``update`` is the work's ``(done, total)`` callback."""

    def __init__(
        self,
        label: str,
        *,
        unit: str = "entries",
        stream: TextIO | None = None,
        quiet: bool = False,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._label = label
        self._unit = unit
        self._stream = stream if stream is not None else sys.stderr
        self._quiet = quiet
        self._interval = interval
        self._clock = clock
        self._bar: tqdm[None] | None = None
        self._started = clock()
        self._last_line = -interval
        self._shown: tuple[int, int] | None = None
        self._done = 0
        self._total = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close(finished=kind is None)

    def update(self, done: int, total: int) -> None:
        """Records that ``done`` of ``total`` units are finished (both may grow)."""
        self._done, self._total = done, total
        if self._quiet:
            return
        if self._stream.isatty():
            self._draw(done, total)
        else:
            now = self._clock()
            if now - self._last_line >= self._interval:
                self._last_line = now
                self._line(done, total, now)

    def close(self, *, finished: bool = True) -> None:
        """Ends the bar; off a terminal, prints a last line when any work was reported."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif (
            finished
            and not self._quiet
            and self._total
            and not self._stream.isatty()
            and self._shown != (self._done, self._total)
        ):
            self._line(self._done, self._total, self._clock())

    def _draw(self, done: int, total: int) -> None:
        if self._bar is None:
            self._bar = tqdm(
                total=total,
                desc=self._label,
                unit=f" {self._unit}",
                file=self._stream,
                dynamic_ncols=True,
                leave=False,
            )
        if self._bar.total != total:
            self._bar.total = total
        self._bar.n = done
        self._bar.refresh()

    def _line(self, done: int, total: int, now: float) -> None:
        self._shown = (done, total)
        elapsed = max(now - self._started, 1e-9)
        rate = done / elapsed
        left = (total - done) / rate if rate > 0 and total >= done else None
        eta = f", about {_duration(left)} left" if left is not None and done < total else ""
        print(
            f"{self._label}: {done}/{total} {self._unit} ({rate:,.0f}/s{eta})",
            file=self._stream,
            flush=True,
        )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
