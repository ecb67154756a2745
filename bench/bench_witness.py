"""Witnessing: add-checkpoint requests/s, and what witnessing adds to a receipt.

Run by hand (not in CI):  python bench/bench_witness.py [--requests 2000]

1. The witness core on one thread (one core): add-checkpoint requests that
   refresh the cosignature of the current checkpoint, and requests that grow
   it with a consistency proof. Each one verifies the log signature, checks
   the proof, compare-and-swaps the SQLite record (a durable commit) and signs.
   Baseline in the same run: Ed25519 sign + verify alone (pynacl), the floor.
2. ``witness serve`` over HTTP pinned to one core (taskset, when available),
   from a client on the other core, 1 and 8 concurrent submitters.
3. Receipt latency (POST /v1/notices, one publisher at a time) with the
   embedded witness on against an authority started with --no-embedded-witness,
   measured in the same run: the added latency of witnessing on a receipt.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deplog.authority.log import Log
from deplog.authority.witness.core import Witness, WitnessState
from deplog.authority.witnessing import request_body
from deplog.client.tlog.cosignature import cosigner
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope, register
from tests.integration.harness import AuthorityProcess, WitnessProcess

ORIGIN = "bench.deplog.example/log"


def ms(seconds: float) -> str:
    return f"{1000 * seconds:.2f} ms"


def floor_rate(n: int = 5000) -> float:
    """Ed25519 sign + verify per second: what any cosignature costs at least."""
    signer = Signer.generate("floor")
    verifier = signer.verifier()
    message = b"x" * 120
    started = time.perf_counter()
    for _ in range(n):
        verifier.verify(message, signer.sign(message))
    return n / (time.perf_counter() - started)


def core_rates(tmp: Path, requests: int) -> tuple[float, float]:
    """(refresh requests/s, growth requests/s) of the witness core on this thread."""
    log_signer = Signer.generate(ORIGIN)
    log = Log(tmp / "log.db", log_signer, ORIGIN)
    publisher = Signer.generate("acme")
    register(log, publisher, "org.acme")
    log.publish()
    state = WitnessState(tmp / "witness.db")
    state.add_log(log_signer.verifier().vkey(), int(time.time()))
    witness = Witness(state, cosigner(Signer.generate("bench.witness/w")))
    assert log.published is not None
    witness.add_checkpoint(request_body(0, [], log.published.note), int(time.time()))
    size = log.published.size
    body = request_body(size, [], log.published.note)
    started = time.perf_counter()
    for _ in range(requests):
        witness.add_checkpoint(body, int(time.time()))  # raises if refused
    refresh = requests / (time.perf_counter() - started)

    bodies = []
    for sequence in range(1, requests // 4 + 1):
        log.sequence([make_envelope(publisher, sequence)])
        assert log.published is not None
        proof = log.tree.consistency_proof(size, log.published.size)
        bodies.append(request_body(size, proof, log.published.note))
        size = log.published.size
    started = time.perf_counter()
    for body in bodies:
        witness.add_checkpoint(body, int(time.time()))  # raises if refused
    growth = len(bodies) / (time.perf_counter() - started)
    return refresh, growth


async def http_rate(url: str, body: bytes, requests: int, concurrency: int) -> float:
    async with aiohttp.ClientSession() as http:

        async def submitter(count: int) -> None:
            for _ in range(count):
                async with http.post(url + "/add-checkpoint", data=body) as response:
                    await response.read()
                    assert response.status == 200

        started = time.perf_counter()
        await asyncio.gather(*(submitter(requests // concurrency) for _ in range(concurrency)))
        return (requests // concurrency * concurrency) / (time.perf_counter() - started)


async def receipt_latencies(url: str, publisher: Signer, first: int, n: int) -> list[float]:
    out = []
    async with aiohttp.ClientSession() as http:
        for sequence in range(first, first + n):
            body = make_envelope(publisher, sequence).canonical_bytes()
            started = time.perf_counter()
            async with http.post(
                url + "/v1/notices", data=body, headers={"Content-Type": "application/json"}
            ) as response:
                await response.read()
                assert response.status == 201
            out.append(time.perf_counter() - started)
    return out


def pinned(command: list[str]) -> list[str]:
    return ["taskset", "-c", "0", *command] if shutil.which("taskset") else command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        floor = floor_rate()
        refresh, growth = core_rates(tmp, args.requests)
        print(
            f"witness core, one thread: refresh {refresh:.0f} req/s, growth {growth:.0f} req/s; "
            f"Ed25519 sign+verify alone {floor:.0f}/s (ratios {refresh / floor:.2f}, "
            f"{growth / floor:.2f})"
        )

        authority = AuthorityProcess(tmp / "authority")
        authority.init()
        publisher = Signer.generate("acme")
        authority.add_publisher(publisher, "org.acme")
        witness = WitnessProcess(tmp / "witness", name="bench.witness/w1")
        witness.init()
        witness.cli(
            "add-log",
            "--origin",
            authority.log_verifier.name,
            "--key",
            authority.log_verifier.vkey(),
        )
        original = witness.command
        witness.command = lambda: pinned(original())  # type: ignore[method-assign]
        witness.start()
        authority.start()
        try:
            note = asyncio.run(_note(authority.url))
            first = asyncio.run(http_rate(witness.url, request_body(0, [], note), 1, 1))
            del first
            size = int(note.split(b"\n")[1])
            body = request_body(size, [], note)
            for concurrency in (1, 8):
                rate = asyncio.run(http_rate(witness.url, body, args.requests, concurrency))
                print(
                    f"witness serve over HTTP, one core, {concurrency} submitters: "
                    f"{rate:.0f} add-checkpoint/s"
                )
            with_witness = asyncio.run(receipt_latencies(authority.url, publisher, 1, 200))
        finally:
            authority.stop()
            witness.stop()
        authority.extra_args = ["--no-embedded-witness"]
        authority.start()
        try:
            without = asyncio.run(receipt_latencies(authority.url, publisher, 1000, 200))
        finally:
            authority.stop()
        added = statistics.median(with_witness) - statistics.median(without)
        print(
            f"receipt latency p50: {ms(statistics.median(with_witness))} with the embedded "
            f"witness, {ms(statistics.median(without))} without: witnessing adds {ms(added)}"
        )


async def _note(url: str) -> bytes:
    async with aiohttp.ClientSession() as http, http.get(url + "/checkpoint") as response:
        text = await response.read()
    # The log's own signature only: a witness request carries the checkpoint as signed.
    head, _, signatures = text.partition(b"\n\n")
    return head + b"\n\n" + signatures.split(b"\n")[0] + b"\n"


if __name__ == "__main__":
    main()
