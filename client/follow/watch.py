"""A follower state file watched by path, for a worker that must run whatever the file does.

A long-lived worker (a gateway plugin) may start before ``deplog follow`` first synced,
be given a path with a typo, or see the file deleted, replaced or damaged.
``WatchedState`` is a guard's state over the path. Rules:

1. Fail closed, never raise for the file: whatever is wrong, ``trusted`` is None (the
   guard's ``not_synced``) and ``problem`` says what (``PROBLEMS``, and a message naming
   the path and what to do); a fold asked for meanwhile is ``StateError`` ``no_state``.
2. It looks at the path at most once per ``interval``, on a read: a state that appears
   is used without a restart, one that vanished is dropped within an interval, one
   replaced is opened afresh.
3. A replacement is pinned to the log first opened (``another_log`` otherwise).
4. Between looks every read goes through the open ``StateReader`` (its rule 2).
5. ``on_change`` hears each transition once, never once per read.
"""

from __future__ import annotations

import math
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deplog.client.errors import ErrorCode
from deplog.client.follow.reader import StateReader
from deplog.client.follow.state import Folded, StateError, TrustedCheckpoint

__all__ = ["LOOK_INTERVAL", "PROBLEMS", "StateProblem", "WatchedState"]

LOOK_INTERVAL = 1.0
"""Seconds between two looks at the path (rule 2)."""

PROBLEMS = ("missing", "not_a_file", "unreadable", "not_a_state", "no_checkpoint", "another_log")
"""The codes of ``StateProblem``, one meaning each (``docs/contextforge.md`` lists them)."""

_FOLLOW = "deplog follow URL --log-key KEY --state {path}"
_UNREPORTED = ""


@dataclass(frozen=True)
class StateProblem:
    """Why there is no verified state to decide from (rule 1)."""

    code: str
    message: str


def _missing(path: Path) -> StateProblem:
    return StateProblem(
        "missing",
        f"no follower state at {path}: run `{_FOLLOW.format(path=path)}` on this host, "
        "or correct the path if it is a typo",
    )


def _no_checkpoint(path: Path) -> StateProblem:
    return StateProblem(
        "no_checkpoint",
        f"the follower state at {path} holds no verified checkpoint yet: wait for "
        "`deplog follow` to finish its first sync (it prints `trusted ...`), and read its "
        "log if it does not",
    )


def _classify(path: Path, error: Exception, size: int) -> StateProblem:
    """The problem behind an error opening or reading the state (``size``: the file's)."""
    if isinstance(error, StateError) and error.code == ErrorCode.NO_STATE:
        return _missing(path)
    if isinstance(error, StateError) and error.code == ErrorCode.STATE_FOR_ANOTHER_LOG:
        return StateProblem(
            "another_log",
            f"the follower state at {path} changed to another log's: restore this log's "
            "state, or restart this process to follow the other",
        )
    text = str(error)
    if "no such table" in text and size == 0:  # the follower is creating it
        return _no_checkpoint(path)
    if "no such table" in text or "not a database" in text:
        return StateProblem(
            "not_a_state",
            f"{path} is not a follower state ({text}): point the state path at the file "
            f"`{_FOLLOW.format(path='PATH')}` writes",
        )
    return StateProblem(
        "unreadable",
        f"cannot read the follower state at {path} ({text}): check that this process's "
        "user may read it and its directory",
    )


class WatchedState:
    """A ``GuardState`` over a path whose file may be missing, unusable or replaced (rules)."""

    def __init__(
        self,
        path: Path | str,
        *,
        interval: float = LOOK_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[StateProblem | None], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.interval = interval
        self.clock = clock
        self.on_change = on_change
        self.origin: str | None = None
        self._reader: StateReader | None = None
        self._file: tuple[int, int] | None = None  # (device, inode) of the open file
        self._problem: StateProblem | None = _missing(self.path)
        self._reported: str | None = _UNREPORTED  # the code on_change last heard
        self._looked = -math.inf
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            self._close()

    def problem(self) -> StateProblem | None:
        """What keeps the state from deciding now, after a look if one is due (rule 1)."""
        with self._lock:
            self._read()
            return self._problem

    @property
    def last_problem(self) -> StateProblem | None:
        """The problem as of the last read, without another look."""
        return self._problem

    @property
    def trusted(self) -> TrustedCheckpoint | None:
        return self._read()

    def _read(self) -> TrustedCheckpoint | None:
        """The trusted checkpoint after a look if one is due, classifying what it finds."""
        with self._lock:
            self._look_if_due()
            reader = self._reader
            if reader is None:
                return None
            try:
                trusted = reader.trusted
            except (StateError, sqlite3.Error, OSError) as error:
                self._lose(_classify(self.path, error, -1))
                return None
            if trusted is None:
                self._set(_no_checkpoint(self.path))
            elif self.origin is None or reader.origin == self.origin:
                self.origin = reader.origin
                self._set(None)
            else:  # rule 3
                self._lose(_classify(self.path, StateError(ErrorCode.STATE_FOR_ANOTHER_LOG), -1))
                return None
            return trusted

    def tool_status(self, tool_id: str) -> Folded:
        with self._lock:
            reader = self._reader
            if reader is not None:
                try:
                    return reader.tool_status(tool_id)
                except (StateError, sqlite3.Error, OSError) as error:
                    self._lose(_classify(self.path, error, -1))
            raise StateError(ErrorCode.NO_STATE, "the follower state is unavailable")

    def _look_if_due(self) -> None:
        now = self.clock()
        if now - self._looked < self.interval:
            return
        self._looked = now
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            self._lose(_missing(self.path))
            return
        except OSError as error:
            self._lose(_classify(self.path, error, -1))
            return
        if not stat.S_ISREG(found.st_mode):
            kind = "a directory" if stat.S_ISDIR(found.st_mode) else "not a regular file"
            self._lose(
                StateProblem(
                    "not_a_file",
                    f"{self.path} is {kind}, not a follower state file: point the state "
                    f"path at the file `{_FOLLOW.format(path='PATH')}` writes",
                )
            )
            return
        file = (found.st_dev, found.st_ino)
        if self._reader is not None and file == self._file:
            return
        self._close()
        try:
            self._reader = StateReader(self.path)
        except (StateError, sqlite3.Error, OSError) as error:
            self._lose(_classify(self.path, error, found.st_size))
            return
        # Stat before open: a file replaced in between is reopened at the next look.
        self._file = file

    def _close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        self._reader, self._file = None, None

    def _lose(self, problem: StateProblem) -> None:
        self._close()
        self._set(problem)

    def _set(self, problem: StateProblem | None) -> None:
        """Record the state's problem (None: available), telling ``on_change`` of a new one."""
        self._problem = problem
        code = None if problem is None else problem.code
        if code != self._reported:
            self._reported = code
            if self.on_change is not None:
                self.on_change(problem)
