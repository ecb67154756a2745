"""Bench only: ``authority`` with the tool-status map's fold replaced by a bare size update.

The baseline of ``bench/bench_map_append.py``: everything else of the append path (HTTP,
signature checks, the log's tables, the checkpoint, the embedded witness) is unchanged.
Its checkpoints carry the empty map's root, so it must never serve a real log.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deplog.authority import log as log_module


class NoMapLog(log_module.Log):
    """The log with ``_fold_map`` a bare size update (what ``map_state`` needs at start)."""

    def _fold_map(self, start: int, notices: Sequence[Any], *rest: Any) -> None:
        self.conn.execute("UPDATE map_state SET size = ? WHERE id = 1", (self.tree.size,))


if __name__ == "__main__":
    log_module.Log._fold_map = NoMapLog._fold_map  # type: ignore[method-assign]
    from deplog.authority.cli import main

    sys.exit(main())
