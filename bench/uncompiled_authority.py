"""Bench only: ``authority`` with the tool-status map's batch update in its Python.

What an install without a C compiler runs (``client/model/vmap.py``'s ``_Batch``, the
update's definition, and ``client/mapstore.py``'s grouping of its rows) in place of
``client/model/_prefixtree.c``: the same roots and rows.
``bench/bench_map_append.py --uncompiled`` measures the two against the baseline.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deplog.client import mapstore
from deplog.client.model import vmap


def uncompiled() -> None:
    """Run this process's map updates in their Python, as without a C compiler."""
    vmap._compiled = None
    mapstore._compiled = None


if __name__ == "__main__":
    uncompiled()
    from deplog.authority.cli import main

    sys.exit(main())
