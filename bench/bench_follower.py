"""Client: full sync (rate and whole-process max RSS) and incremental sync, against the
Ed25519-verify rate of this run.

Run by hand (not in CI):

    python bench/bench_follower.py [--entries 100000]          # in-process rate, incremental
    python bench/bench_follower.py --rss 10000 100000 1000000  # `deplog follow --once` RSS

Builds an authority database of N notices (one publisher, spread over 1000
tools), serves it on 127.0.0.1, and times a follower's first sync from
nothing (every checkpoint, proof, entry, signature and authorization
verified, every notice committed). ``--rss`` runs ``deplog follow --once`` as
a child process per size and reads the child's own max RSS (``os.wait4``).
Generating 10^6 signed notices takes minutes, so each log is built once into
``--fixtures`` (default /tmp/deplog-follower-fixtures) and reused. The
baseline, measured in the same run, is pynacl verifying the same kind of
signatures on canonical notice bytes: the floor any verifying follower pays
per notice.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest.mock import patch

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deplog.authority import replay
from deplog.authority.log import Log
from deplog.authority.storage.sqlite import SqliteDatabase
from deplog.authority.storage.tree import StoredHashTree
from deplog.client.follow.follower import Follower
from deplog.client.tlog.keyfile import load_signer
from deplog.client.tlog.note import Signer
from tests.builders import (
    make_envelope,
    notice_leaf,
    register,
)
from tests.integration.harness import ORIGIN, AuthorityProcess

BATCH = 1000
TOOLS = 1000  # notices spread over this many tools, as in a real registry
FOLD_CHUNK = 100_000
FIXTURES = Path("/tmp/deplog-follower-fixtures")
Clock = Callable[[], float]


UNTHROTTLED = ["--entries-mb-per-address", "0"]
"""The follower is measured, not the authority's share of pages for one address."""


def tool_of(sequence: int) -> str:
    return f"tool:org.bench/t{sequence % TOOLS}"


def build(authority: AuthorityProcess, entries: int) -> Signer:
    """Write ``entries`` notices straight through the authority's Log, before serving."""
    publisher = Signer.generate("bench")
    log = Log(authority.data / "log.db", load_log_signer(authority), ORIGIN)
    register(log, publisher, "org.bench")
    sequence = 0
    while sequence < entries:
        count = min(BATCH, entries - sequence)
        envelopes = [
            make_envelope(publisher, sequence + k + 1, tool=tool_of(sequence + k + 1))
            for k in range(count)
        ]
        log.sequence(envelopes)
        sequence += count
    log.close()
    return publisher


def build_fast(authority: AuthorityProcess, entries: int) -> Signer:
    """The same leaves as ``build``, appended straight to the stored tree (as
    bench_tree.py does) instead of through the sequencer's admission checks:
    10^6 notices in minutes rather than hours here. The authority then folds its
    map, ``FOLD_CHUNK`` entries at a time (its catch-up decodes every record it
    extends once a chunk: at its own 4096, 10^6 entries take hours), and signs
    the checkpoint of the tree; followers read it exactly as any other log."""
    publisher = Signer.generate("bench")
    log_signer = load_log_signer(authority)
    path = authority.data / "log.db"
    log = Log(path, log_signer, ORIGIN)  # the registration through the log: its registry too
    register(log, publisher, "org.bench")
    log.close()
    db = SqliteDatabase(path)
    conn = db.connect()
    db.prepare(conn)
    tree = StoredHashTree(conn)
    sequence = 0
    while sequence < entries:
        count = min(BATCH * 10, entries - sequence)
        conn.execute("BEGIN")
        for k in range(sequence + 1, sequence + count + 1):
            tree.append_entry(notice_leaf(make_envelope(publisher, k, tool=tool_of(k))))
        conn.execute("COMMIT")
        sequence += count
    conn.close()
    with patch.object(replay, "_CHUNK", FOLD_CHUNK):
        Log(path, log_signer, ORIGIN).close()  # folds the map, signs the built tree
    return publisher


def load_log_signer(authority: AuthorityProcess) -> Signer:
    return load_signer(authority.keys, ORIGIN.replace("/", "_"))


def fixture(root: Path, entries: int) -> tuple[AuthorityProcess, Signer]:
    """An authority directory holding ``entries`` notices: built once, then reused."""
    directory = root / str(entries)
    done = directory / "publisher.key"
    if not done.exists():
        shutil.rmtree(directory, ignore_errors=True)
        authority = AuthorityProcess(directory / "authority")
        authority.init()
        started = time.perf_counter()
        publisher = build_fast(authority, entries)
        print(f"built a log of {entries + 1} entries in {time.perf_counter() - started:.0f} s")
        done.write_text(publisher.skey())
    authority = AuthorityProcess(directory / "authority", extra_args=UNTHROTTLED)
    return authority, Signer.parse(done.read_text().strip())


def verify_rate(publisher: Signer, n: int = 20_000, clock: Clock = time.perf_counter) -> float:
    """Ed25519 verifications per second over canonical notice bytes, pynacl only
    (per second of ``clock``: wall time, or this process's CPU time)."""
    envelopes = [make_envelope(publisher, k + 1) for k in range(200)]
    messages = [(e.notice.canonical_bytes(), e.signature) for e in envelopes]
    verifier = publisher.verifier()
    started = clock()
    for k in range(n):
        message, signature = messages[k % len(messages)]
        verifier.verify(message, signature)
    return n / (clock() - started)


async def timed_sync(follower: Follower) -> tuple[float, int]:
    started = time.perf_counter()
    result = await follower.sync()
    return time.perf_counter() - started, result.new_size - result.old_size


async def publish(url: str, publisher: Signer, first: int, count: int) -> None:
    async with aiohttp.ClientSession() as http:
        for sequence in range(first, first + count):
            body = make_envelope(publisher, sequence, tool=tool_of(sequence)).canonical_bytes()
            async with http.post(
                url + "/v1/notices", data=body, headers={"Content-Type": "application/json"}
            ) as r:
                assert r.status == 201, await r.text()


async def measure(authority: AuthorityProcess, publisher: Signer, last: int, state: Path) -> None:
    baseline = verify_rate(publisher)
    async with Follower(authority.url, authority.log_verifier, state) as follower:
        seconds, synced = await timed_sync(follower)
        rate = synced / seconds
        print(f"full sync: {synced} entries in {seconds:.2f} s = {rate:.0f} entries/s")
        print(
            f"Ed25519 verify alone (same run): {baseline:.0f} /s; "
            f"ratio sync/verify = {rate / baseline:.2f}"
        )
        incremental = []
        for round_ in range(5):
            await publish(authority.url, publisher, last + 1 + 10 * round_, 10)
            seconds, synced = await timed_sync(follower)
            assert synced == 10
            incremental.append(seconds)
        median = 1000 * statistics.median(incremental)
        low, high = 1000 * min(incremental), 1000 * max(incremental)
        print(
            f"incremental sync of 10 new entries: median {median:.1f} ms "
            f"(min {low:.1f}, max {high:.1f}, 5 rounds)"
        )


def follow_once(authority: AuthorityProcess, state: Path) -> tuple[float, float, float]:
    """Run ``deplog follow --once`` as a child: its wall time, its own CPU time and its
    own max RSS (MiB)."""
    deplog = Path(sys.executable).with_name("deplog")
    command = [
        str(deplog),
        "follow",
        authority.url,
        "--log-key",
        authority.log_verifier.vkey(),
        "--state",
        str(state),
        "--once",
        "--timeout",
        "60",
    ]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("deplog follow --once failed")
    # ru_maxrss is in KiB on Linux
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure_rss(root: Path, sizes: list[int]) -> None:
    """One `deplog follow --once` from nothing per log size: entries/s and max RSS.

    The ratio to the verify rate is given twice: per wall second (both measured
    in this run), and per CPU second of the follower process against per CPU
    second of verification, which a machine shared with other work distorts
    far less.
    """
    print(
        "| notices | full sync (wall) | entries/s | Ed25519 verify/s | ratio "
        "| follower CPU | entries/CPU-s | verify/CPU-s | CPU ratio | max RSS |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for entries in sizes:
        authority, publisher = fixture(root, entries)
        authority.start()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                baseline = verify_rate(publisher)
                cpu_baseline = verify_rate(publisher, clock=time.process_time)
                seconds, cpu, rss = follow_once(authority, Path(tmp) / "state.db")
        finally:
            authority.stop()
        rate, cpu_rate = (entries + 1) / seconds, (entries + 1) / cpu
        print(
            f"| {entries:,} | {seconds:.1f} s | {rate:,.0f} | {baseline:,.0f} | "
            f"{rate / baseline:.2f} | {cpu:.1f} s | {cpu_rate:,.0f} | {cpu_baseline:,.0f} | "
            f"{cpu_rate / cpu_baseline:.2f} | {rss:.0f} MiB |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--rss", type=int, nargs="+", metavar="N", help="log sizes to measure")
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    args = parser.parse_args()
    if args.rss:
        measure_rss(args.fixtures, args.rss)
        return
    with tempfile.TemporaryDirectory() as tmp:
        authority = AuthorityProcess(Path(tmp) / "authority", extra_args=UNTHROTTLED)
        authority.init()
        started = time.perf_counter()
        publisher = build(authority, args.entries)
        print(f"built a log of {args.entries + 1} entries in {time.perf_counter() - started:.1f} s")
        authority.start()
        try:
            asyncio.run(measure(authority, publisher, args.entries, Path(tmp) / "state.db"))
        finally:
            authority.stop()


if __name__ == "__main__":
    main()
