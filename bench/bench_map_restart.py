"""What a crash costs the tool-status map at the next start, against a clean stop.

Run by hand (not in CI):
    python bench/bench_map_restart.py [--tools 10000 100000] [--held 4071] [--rounds 3]

On SQLite the authority holds the map rows of up to ``MAP_LAYER_ENTRIES`` entries in
memory (``client.map.stored`` rule *rows held back*); a kill loses them, and the next
``Log`` open folds those entries again from the log before it serves. For each log of
``--tools`` notices about as many tools (built offline through ``Log.sequence``, batches
of 512), then ``--held`` more notices in batches of 25 about tools already in the map:
the open time after a clean close (the rows written), and after the connection was
dropped with the rows held (what a SIGKILL leaves), each the median of ``--rounds`` opens
of fresh copies, in turn. The difference is the crash's cost; each open also fills the writer's
map cache (``Log.warm_map``) as a server's does.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deplog.authority.log import MAP_LAYER_ENTRIES, Log
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope, register

ORIGIN = "bench.deplog.example/log"


def build(path: Path, signer: Signer, tools: int, held: int) -> tuple[Path, Path, int]:
    """Two copies of one log: closed cleanly, and dropped with the rows of its last
    ``held`` entries held (fewer if a batch wrote them: another bound of the layer); the
    entries held at the drop."""
    publisher = Signer.generate("filler")
    log = Log(path / "log.db", signer, ORIGIN)
    register(log, publisher, "org.filler")
    sequence = 0
    for start in range(0, tools, 512):
        batch = []
        for i in range(start, min(tools, start + 512)):
            sequence += 1
            batch.append(make_envelope(publisher, sequence, tool=f"tool:org.filler/t{i}"))
        log.sequence(batch)
    log.flush_map()
    rng = random.Random(1)
    for _ in range(0, held, 25):
        batch = []
        for _ in range(25):
            sequence += 1
            tool = f"tool:org.filler/t{rng.randrange(tools)}"
            batch.append(make_envelope(publisher, sequence, tool=tool))
        log.sequence(batch)
    lost = log.map.unwritten
    log.conn.close()  # as a kill: the held rows go
    dropped = path / "dropped"
    dropped.mkdir()
    for name in ("log.db", "log.db-wal", "log.db-shm"):
        if (path / name).exists():
            shutil.copy(path / name, dropped / name)
    Log(path / "log.db", signer, ORIGIN).close()  # folds them again, then writes them
    clean = path / "clean"
    clean.mkdir()
    for name in ("log.db", "log.db-wal", "log.db-shm"):
        if (path / name).exists():
            shutil.copy(path / name, clean / name)
    return clean, dropped, lost


def open_seconds(template: Path, signer: Signer, work: Path) -> float:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(template, work)
    began = time.perf_counter()
    log = Log(work / "log.db", signer, ORIGIN)
    log.warm_map()  # as a server starts
    log.conn.close()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--held", type=int, default=MAP_LAYER_ENTRIES - 25)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    signer = Signer.generate(ORIGIN)
    for tools in args.tools:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            clean, dropped, lost = build(root, signer, tools, args.held)
            times: dict[str, list[float]] = {"clean": [], "dropped": []}
            for round_ in range(args.rounds):
                order = ("clean", "dropped") if round_ % 2 == 0 else ("dropped", "clean")
                for name in order:
                    template = clean if name == "clean" else dropped
                    times[name].append(open_seconds(template, signer, root / "work"))
            a, b = statistics.median(times["clean"]), statistics.median(times["dropped"])
            print(
                f"{tools} tools, {lost} entries held: open after a clean stop "
                f"{a * 1000:.0f} ms, after a kill {b * 1000:.0f} ms "
                f"(the fold again: {(b - a) * 1000:.0f} ms), medians of {args.rounds}"
            )


if __name__ == "__main__":
    main()
