"""Where the map's share of a sequencer batch goes: thread CPU per step of ``Log.sequence``.

Run by hand (not in CI):
    python bench/bench_map_share.py [--tools-before 10000] [--publishers 50]
        [--tools-per-publisher 4] [--batches 100] [--warmup 20] [--rounds 3]

No HTTP: ``Log.sequence`` in this process on batches shaped as ``bench_map_append.py``
sends them (one notice from each of ``--publishers`` publishers a batch, each naming its
``--tools-per-publisher`` tools in turn; ``--tools-per-publisher`` at least the batches
gives every notice a new key), over a log first filled with ``--tools-before`` tools,
the writer's map cache filled and the collector settled as a server does
(``Log.warm_map``, ``settle_collector``). The authority with the map and the same
authority without its fold (``bench/nomap_authority.py``) run in turn, ``--rounds``
times each, each on a fresh copy of its template, after ``--warmup`` batches.

Reported, per notice, the median of the rounds: the thread CPU of ``Log.sequence`` and
of its steps (timers wrapped around them: nested steps are inside their callers):
the fold (``Log._fold_map``), its tree update (``PrefixTree.update``) and the groups it
keeps (``SqliteNodeStore.keep``), the slices it writes (``StoredMap.write_slice``),
the commit (``Log._commit``, the SQL commit and ``MapCache.commit``), the latter alone,
the checkpoint (``Log.publish``), and the collector's passes by generation. Thread CPU,
not wall time: the fsync a commit waits for is not in it, and the machine's other work
moves it less. The difference of the two ``Log.sequence`` figures is the map's share.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_map_append import prefill
from bench.nomap_authority import NoMapLog
from deplog.authority.http.plumbing import settle_collector
from deplog.authority.log import Log
from deplog.client.map.cache import MapCache
from deplog.client.map.sqlstore import SqliteNodeStore
from deplog.client.map.stored import StoredMap
from deplog.client.map.tree import PrefixTree
from deplog.client.model.notice import Envelope
from deplog.client.tlog.keyfile import load_signer
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import ORIGIN, AuthorityProcess

STEPS: list[tuple[str, Any, str]] = [
    ("sequence", Log, "sequence"),
    ("fold", Log, "_fold_map"),
    ("  tree update", PrefixTree, "update"),
    ("    groups kept", SqliteNodeStore, "keep"),
    ("  slices", StoredMap, "write_slice"),
    ("commit", Log, "_commit"),
    ("  map cache commit", MapCache, "commit"),
    ("publish", Log, "publish"),
]
"""(label, owner, method): the steps timed; the fold of the baseline is its own method."""

spent: defaultdict[str, float] = defaultdict(float)


def timed(label: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            spent[label] += time.thread_time() - started

    return run


def instrument() -> None:
    """Wrap every step's method, and the baseline's fold, in a timer; count the collector."""
    for label, owner, name in STEPS:
        setattr(owner, name, timed(label, getattr(owner, name)))
    NoMapLog._fold_map = timed("fold", NoMapLog._fold_map)  # type: ignore[method-assign]
    began: list[float] = []

    def collector(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began.append(time.thread_time())
        elif began:
            spent[f"collector gen {info['generation']}"] += time.thread_time() - began.pop()

    gc.callbacks.append(collector)


def batches(signers: list[Signer], count: int, tools: int) -> list[list[Envelope]]:
    """``count`` batches, one notice from each publisher a batch, about its tools in turn."""
    return [
        [make_envelope(s, k + 1, tool=f"tool:org.{s.name}/t{(k + 1) % tools}") for s in signers]
        for k in range(count)
    ]


@contextlib.contextmanager
def opened(template: Path, copy: Path, cls: type[Log]) -> Iterator[Log]:
    shutil.copytree(template, copy)
    authority = AuthorityProcess(copy)
    log = cls(
        authority.data / "log.db", load_signer(authority.keys, ORIGIN.replace("/", "_")), ORIGIN
    )
    try:
        yield log
    finally:
        log.close()


def one_run(log: Log, work: list[list[Envelope]], warmup: int) -> dict[str, float]:
    """Microseconds of thread CPU per notice by step, after ``warmup`` batches."""
    log.warm_map()
    settle_collector()
    for batch in work[:warmup]:
        log.sequence(batch)
    spent.clear()
    for batch in work[warmup:]:
        log.sequence(batch)
    notices = sum(len(batch) for batch in work[warmup:])
    figures = {label: 1e6 * seconds / notices for label, seconds in spent.items()}
    gc.unfreeze()
    gc.collect()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools-before", type=int, default=10_000)
    parser.add_argument("--publishers", type=int, default=50)
    parser.add_argument("--tools-per-publisher", type=int, default=4)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    signers = [Signer.generate(f"bench{i}") for i in range(args.publishers)]
    work = batches(signers, args.warmup + args.batches, args.tools_per_publisher)
    instrument()
    kinds = {"with map": Log, "without": NoMapLog}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with contextlib.redirect_stdout(io.StringIO()):
            for name, cls in kinds.items():
                prefill(root / name.replace(" ", "-"), cls, args.tools_before, signers)
        for round_ in range(args.rounds):
            order = list(kinds) if round_ % 2 == 0 else list(reversed(kinds))
            for name in order:
                template = root / name.replace(" ", "-")
                copy = root / f"round{round_}-{name.replace(' ', '-')}"
                with opened(template, copy, kinds[name]) as log:
                    runs[name].append(one_run(log, work, args.warmup))
                shutil.rmtree(copy)
    labels = [label for label, _, _ in STEPS]
    labels += sorted({k for r in runs["with map"] + runs["without"] for k in r} - set(labels))
    print(
        f"{args.tools_before} tools before, batches of {args.publishers} notices about "
        f"{args.tools_per_publisher} tools a publisher, {args.batches} batches after "
        f"{args.warmup}, median of {args.rounds} rounds; thread CPU, us a notice:"
    )
    print(f"{'step':<22} {'with map':>9} {'without':>9}")
    medians = {
        name: {label: statistics.median(r.get(label, 0.0) for r in rs) for label in labels}
        for name, rs in runs.items()
    }
    for label in labels:
        print(f"{label:<22} {medians['with map'][label]:9.1f} {medians['without'][label]:9.1f}")
    share = medians["with map"]["sequence"] - medians["without"]["sequence"]
    print(
        f"the map's share: {share:.1f} us a notice "
        f"({100 * share / medians['with map']['sequence']:.0f} % of Log.sequence with it)"
    )


if __name__ == "__main__":
    main()
