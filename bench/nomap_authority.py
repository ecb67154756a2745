"""Bench only: ``authority`` with the tool-status map's fold replaced by a bare size update.

The baseline of ``bench/bench_map_append.py``: everything else of the append path (HTTP,
signature checks, the log's tables, the checkpoint, the embedded witness) is unchanged.
Its checkpoints carry the empty map's root, so it must never serve a real log.

With ``DEPLOG_BENCH_FOLD_WAIT=US_PER_NOTICE,US_PER_BATCH`` in its environment it sleeps
that long where the fold ran: the fold's time on the batch's cycle without its CPU (a
sleep holds no interpreter lock), what ``bench_map_append.py --wait-instead`` measures.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deplog.authority import log as log_module


class NoMapLog(log_module.Log):
    """The log with ``_fold_map`` a bare size update (what ``map_state`` needs at start)."""

    def _fold_map(self, start: int, notices: Sequence[Any], *rest: Any) -> None:
        self.conn.execute("UPDATE map_state SET size = ? WHERE id = 1", (self.tree.size,))
        if _WAIT is not None:
            time.sleep((_WAIT[0] * len(notices) + _WAIT[1]) / 1e6)


def _fold_wait() -> tuple[float, float] | None:
    """``DEPLOG_BENCH_FOLD_WAIT`` as microseconds (per notice, per batch), if set."""
    value = os.environ.get("DEPLOG_BENCH_FOLD_WAIT")
    if not value:
        return None
    per_notice, per_batch = value.split(",")
    return float(per_notice), float(per_batch)


_WAIT = _fold_wait()


if __name__ == "__main__":
    log_module.Log._fold_map = NoMapLog._fold_map  # type: ignore[method-assign]
    from deplog.authority.cli import main

    sys.exit(main())
