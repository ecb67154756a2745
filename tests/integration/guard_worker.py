"""A gateway worker for the tests: a guard over the host follower's state file, read-only.

``python -m tests.integration.guard_worker STATE TOOL_ID VERSION`` prints
``ready <verdict>`` once its guard answers, then ``refused <epoch seconds>
<checkpoint size>`` as soon as the guard refuses the version, and exits.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta

from deplog.client.cache.guard import Guard, Verdict
from deplog.client.follow.reader import StateReader


def main(state: str, tool_id: str, version: str) -> None:
    guard = Guard(StateReader(state))
    cached_at = datetime.now(UTC) + timedelta(days=1)  # never older than a notice
    decision = guard.check(tool_id, version, cached_at=cached_at)
    print(f"ready {decision.verdict.value}", flush=True)
    while decision.verdict != Verdict.REFUSE:
        time.sleep(0.002)
        decision = guard.check(tool_id, version, cached_at=cached_at)
    assert decision.processed_through is not None
    print(f"refused {time.time()} {decision.processed_through.size}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
