"""A fault-injected authority: ``python -m tests.integration.misfolding_authority ARGS``
runs ``authority ARGS`` with a map fold that leaves out each batch's last notice, so every
checkpoint after a notice carries a ``deplog-map/v1`` root that is not the fold of its
entries (a misfolded notice). Everything else is the real authority."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from deplog.authority.cli import main
from deplog.authority.log import Log
from deplog.client.model.notice import Notice


def _misfold(self: Log, start: int, notices: Sequence[Notice]) -> None:
    end = self.tree.size
    if start == end:
        return
    rows = self.conn.execute(
        "SELECT hash FROM leaves WHERE idx >= ? ORDER BY idx", (start,)
    ).fetchall()
    folded = [
        (start + i, bytes(row[0]), notice)
        for i, (row, notice) in enumerate(zip(rows, notices, strict=False))
    ]
    self.map.advance_notices(start, end, folded[:-1])


if __name__ == "__main__":
    Log._fold_map = _misfold  # type: ignore[method-assign]
    sys.exit(main(sys.argv[1:]))
