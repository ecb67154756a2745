"""A server settles the garbage collector once listening (``settle_collector``): what
start-up built is frozen, and the young generation is collected less often."""

from __future__ import annotations

import json
import subprocess
import sys

from deplog.authority.http.plumbing import YOUNG_COLLECTION_EVERY

PROBE = """
import gc, json
from deplog.authority.http.plumbing import settle_collector
kept = [[i] for i in range(1000)]  # start-up state
settle_collector()
seen = any(o is kept for o in gc.get_objects())
print(json.dumps({"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count(),
                  "seen": seen, "enabled": gc.isenabled()}))
"""


def settled() -> dict[str, object]:
    """The collector's state in a fresh interpreter just after ``settle_collector``."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_start_up_state_is_frozen_out_of_the_collectors_sight() -> None:
    state = settled()
    assert isinstance(state["frozen"], int) and state["frozen"] >= 1000
    assert state["seen"] is False


def test_the_young_generation_is_collected_every_so_many_allocations() -> None:
    state = settled()
    assert state["threshold"] == [YOUNG_COLLECTION_EVERY, 20, 10]
    assert state["enabled"] is True
