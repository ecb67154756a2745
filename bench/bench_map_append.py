"""Append throughput over HTTP with the tool-status map, against the same authority without it.

Run by hand (not in CI):
    python bench/bench_map_append.py [--tools-before 10000] [--requests 3000] [--rounds 3]
        [--publishers 50] [--tools-per-publisher 4] [--proof-readers 0] [--max-batch N]
        [--wait-instead US_PER_NOTICE,US_PER_BATCH | --control]

What a publisher sees: real ``authority serve`` processes on 127.0.0.1, 50 publishers
(``--publishers``) posting pre-signed notices (closed loop, each sequentially) about 4
tools each (``--tools-per-publisher``), receipts returned after the embedded witness
cosigned. The baseline is the same authority with the map's fold
replaced by a bare size update (``bench/nomap_authority.py``, bench only: its
checkpoints carry the empty map's root), so the ratio is the map's share of the whole
append path, HTTP and signatures included. ``bench/bench_vmap.py --append`` gives the
map's share of ``Log.sequence`` alone (no HTTP, no signature checks), the tighter figure.

Both logs are first filled offline with ``--tools-before`` notices about as many tools (so
the map has that many keys, and its paths their depth), then each round starts both
authorities on fresh copies, map first and baseline second, then the other order in the
next round. Reported: notices/s of each, the median of the rounds' ratios with a 95 %
bootstrap interval (the rounds resampled: how far the median would move in another run
like this one) and the ratio of bests, the CPU seconds the server process spent per
notice, and receipt latency (p50 / p99 / p99.9 a round; the rounds' median p99.9 of
each): a batch that writes many of the map's rows at once shows in the tail, not in the
throughput.

``--proof-readers K`` adds, after the rounds, one more round of the authority with the map
in which K clients also read ``GET /v1/tools/{id}/proof`` (JSON, one after another, about
the publishers' tools) while the notices go in: those proofs' latency p50 / p99, each
checked against the checkpoint it carries.

``--wait-instead US_PER_NOTICE,US_PER_BATCH`` replaces the authority with the map by the
baseline sleeping that long where the fold ran: what the fold would cost if it took no
CPU in the server but still sat on the batch's cycle (as in a helper process).
``--control`` replaces it by the baseline itself (an A/A run): the ratio's spread on this
machine when nothing differs, to read the other runs' intervals against. ``--max-batch``
is passed to both servers (smaller batches: several in flight at once).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_append import load
from bench.common import pct
from bench.nomap_authority import NoMapLog
from deplog.authority.log import Log
from deplog.client import verify_tool_status
from deplog.client.map.proof import MapProofDocument
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.keyfile import load_signer
from deplog.client.tlog.note import Signer, Verifier
from tests.builders import make_envelope, register
from tests.integration.harness import ORIGIN, AuthorityProcess

PUBLISHERS = 50
BOOTSTRAP = 10_000
"""Resamples of the rounds for the interval of a median ratio (``median_interval``)."""
LAUNCHER = Path(__file__).resolve().parent / "nomap_authority.py"


@dataclass
class NoMapAuthority(AuthorityProcess):
    """``authority serve`` through the bench-only launcher without the map's fold."""

    wait: str | None = None
    """``DEPLOG_BENCH_FOLD_WAIT`` for the launcher: a sleep where the fold ran."""

    def command(self) -> list[str]:
        return [sys.executable, str(LAUNCHER), *super().command()[3:]]

    def start(self, port: int = 0) -> str:
        if self.wait is None:
            return super().start(port)
        os.environ["DEPLOG_BENCH_FOLD_WAIT"] = self.wait
        try:
            return super().start(port)
        finally:
            del os.environ["DEPLOG_BENCH_FOLD_WAIT"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks / 100.0


def prefill(template: Path, cls: type[Log], tools: int, signers: Sequence[Signer]) -> None:
    """An initialized authority whose log holds ``tools`` notices about ``tools`` tools."""
    authority = AuthorityProcess(template)
    with contextlib.redirect_stdout(io.StringIO()):
        authority.init()
        for signer in signers:
            authority.add_publisher(signer, f"org.{signer.name}")
    if tools == 0:
        return
    stem = ORIGIN.replace("/", "_")
    log_key = load_signer(authority.keys, stem)
    log = cls(authority.data / "log.db", log_key, ORIGIN)
    filler = Signer.generate("filler")
    register(log, filler)
    envelopes = [make_envelope(filler, i + 1, tool=f"tool:org.filler/t{i}") for i in range(tools)]
    for i in range(0, tools, 512):
        log.sequence(envelopes[i : i + 512])
    log.close()


def bodies_for(
    signers: Sequence[Signer], per: int, first: int, tools: int = 4
) -> list[list[bytes]]:
    """Each publisher's notices, sequentially numbered from ``first``, about ``tools`` tools
    each, in turn."""
    return [
        [
            make_envelope(
                s, first + k, tool=f"tool:org.{s.name}/t{(first + k) % tools}"
            ).canonical_bytes()
            for k in range(per)
        ]
        for s in signers
    ]


def run_once(
    process: AuthorityProcess, bodies: list[list[bytes]]
) -> tuple[float, float, list[float]]:
    """Notices/s, server CPU ms per notice and receipt latencies (s) of one authority
    under the load."""
    process.start()
    try:
        assert process.process is not None
        before = cpu_seconds(process.process.pid)
        seconds, latencies = asyncio.run(load(process.url, bodies))
        spent = cpu_seconds(process.process.pid) - before
    finally:
        process.stop()
    total = sum(len(b) for b in bodies)
    return total / seconds, 1000 * spent / total, latencies


async def load_with_proofs(
    url: str, bodies: list[list[bytes]], tools: list[str], readers: int, verifier: Verifier
) -> tuple[float, list[float]]:
    """``load`` with ``readers`` clients reading proofs meanwhile: (seconds, proof latencies),
    every proof verified against the checkpoint it carries."""
    latencies: list[float] = []
    done = asyncio.Event()

    async def read(http: aiohttp.ClientSession, seed: int) -> None:
        rng = random.Random(seed)
        while not done.is_set():
            tool_id = rng.choice(tools)
            started = time.perf_counter()
            async with http.get(f"{url}/v1/tools/{tool_id}/proof") as response:
                body = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"unexpected status {response.status}")
            latencies.append(time.perf_counter() - started)
            document = MapProofDocument.parse(body)
            checkpoint, _ = open_checkpoint(document.checkpoint, verifier)
            verify_tool_status(body, checkpoint, tool_id, "1.0.0", datetime.now(UTC))

    async with aiohttp.ClientSession() as http:
        tasks = [asyncio.create_task(read(http, k)) for k in range(readers)]
        try:
            seconds, _ = await load(url, bodies)
        finally:
            done.set()
            await asyncio.gather(*tasks)
    return seconds, latencies


def median_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """A bootstrap interval of the median of ``values`` (the rounds' ratios): how far the
    median could move if the same run were made again on this machine. Seeded, so one
    run's figures print the same interval every time they are summarized."""
    rng = random.Random(0)
    medians = sorted(
        statistics.median(rng.choices(values, k=len(values))) for _ in range(BOOTSTRAP)
    )
    cut = int((1 - level) / 2 * BOOTSTRAP)
    return medians[cut], medians[BOOTSTRAP - 1 - cut]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools-before", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=3000, help="notices per round")
    parser.add_argument("--rounds", type=int, default=3)
    instead = parser.add_mutually_exclusive_group()
    instead.add_argument(
        "--wait-instead",
        metavar="US_PER_NOTICE,US_PER_BATCH",
        help="in place of the map, the baseline sleeping this long where the fold ran",
    )
    instead.add_argument(
        "--control",
        action="store_true",
        help="in place of the map, the baseline itself: the bench's own spread (A/A)",
    )
    parser.add_argument("--publishers", type=int, default=PUBLISHERS)
    parser.add_argument(
        "--max-batch", type=int, help="both servers' --max-batch (default: theirs, 512)"
    )
    parser.add_argument(
        "--proof-readers", type=int, default=0, help="proof readers in one more round"
    )
    parser.add_argument(
        "--tools-per-publisher",
        type=int,
        default=4,
        help="tools each publisher's notices name in turn (more: fewer notices per tool)",
    )
    args = parser.parse_args()
    signers = [Signer.generate(f"bench{i}") for i in range(args.publishers)]
    per = max(1, args.requests // args.publishers)
    baseline_tried = bool(args.wait_instead or args.control)
    tried = "with wait" if args.wait_instead else "control" if args.control else "with map"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        templates = {tried: root / "tried", "without": root / "without"}
        prefill(templates[tried], NoMapLog if baseline_tried else Log, args.tools_before, signers)
        prefill(templates["without"], NoMapLog, args.tools_before, signers)
        rates: dict[str, list[float]] = {name: [] for name in templates}
        cpu: dict[str, list[float]] = {name: [] for name in templates}
        tails: dict[str, list[float]] = {name: [] for name in templates}
        for round_ in range(args.rounds):
            bodies = bodies_for(signers, per, 1, args.tools_per_publisher)
            order = list(templates) if round_ % 2 == 0 else list(reversed(templates))
            for name in order:
                copy = root / f"round{round_}-{name.replace(' ', '-')}"
                shutil.copytree(templates[name], copy)
                if name == "without":
                    process: AuthorityProcess = NoMapAuthority(copy)
                elif baseline_tried:
                    process = NoMapAuthority(copy, wait=args.wait_instead)
                else:
                    process = AuthorityProcess(copy)
                if args.max_batch:
                    process.extra_args = ["--max-batch", str(args.max_batch)]
                rate, ms, latencies = run_once(process, bodies)
                rates[name].append(rate)
                cpu[name].append(ms)
                tails[name].append(pct(latencies, 99.9))
                print(
                    f"round {round_ + 1} {name:>9}: {rate:7.0f} notices/s, "
                    f"server CPU {ms:.2f} ms/notice, receipts p50 "
                    f"{pct(latencies, 50) * 1000:.1f} / p99 {pct(latencies, 99) * 1000:.1f} / "
                    f"p99.9 {pct(latencies, 99.9) * 1000:.1f} ms",
                    flush=True,
                )
        if args.proof_readers:
            copy = root / "proofs"
            shutil.copytree(templates[tried], copy)
            process = AuthorityProcess(copy)
            process.start()
            try:
                tools = sorted(
                    {
                        f"tool:org.{s.name}/t{k}"
                        for s in signers
                        for k in range(min(args.tools_per_publisher, per))
                    }
                )
                seconds, proofs = asyncio.run(
                    load_with_proofs(
                        process.url,
                        bodies_for(signers, per, 1, args.tools_per_publisher),
                        tools,
                        args.proof_readers,
                        process.log_verifier,
                    )
                )
            finally:
                process.stop()
            print(
                f"with {args.proof_readers} proof readers: {per * args.publishers / seconds:.0f} "
                f"notices/s; {len(proofs)} proofs, p50 {pct(proofs, 50) * 1000:.2f} ms, "
                f"p99 {pct(proofs, 99) * 1000:.2f} ms",
                flush=True,
            )
        ratios = [a / b for a, b in zip(rates[tried], rates["without"], strict=True)]
        cpu_ratios = [b / a for a, b in zip(cpu[tried], cpu["without"], strict=True)]
        low, high = median_interval(ratios)
        cpu_low, cpu_high = median_interval(cpu_ratios)
        print(
            f"{args.tools_before} tools before, {per * args.publishers} notices per round "
            f"from {args.publishers} publishers about {args.tools_per_publisher} tools each, "
            f"{args.rounds} rounds: {tried} best "
            f"{max(rates[tried]):.0f}/s, without best {max(rates['without']):.0f}/s; "
            f"throughput ratio median {statistics.median(ratios):.3f} "
            f"[{low:.3f}, {high:.3f}] (all {', '.join(f'{r:.2f}' for r in ratios)}), "
            f"ratio of bests "
            f"{max(rates[tried]) / max(rates['without']):.3f}; server CPU per notice "
            f"ratio (without / {tried.removeprefix('with ')}) median "
            f"{statistics.median(cpu_ratios):.3f} "
            f"[{cpu_low:.3f}, {cpu_high:.3f}]; "
            f"receipts p99.9 median {statistics.median(tails[tried]) * 1000:.1f} ms "
            f"(without: {statistics.median(tails['without']) * 1000:.1f} ms)"
        )


if __name__ == "__main__":
    main()
