"""Background work of a real authority survives storage faults, and shutdown stays clean.

A burst of read errors used to end the cosignature refresh loop for good: the
served cosignatures froze while the server looked healthy, and SIGTERM then
exited 1 with a traceback (issue 12, defect 3). Faults here are real: EIO from
the kernel's ``pread64`` on the log's files, injected by an attached ``strace``
while the refresh loop reads a consistency proof for a witness that fell behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from deplog.client.tlog.cosignature import cosignatures
from deplog.client.tlog.note import Signer, Verifier
from tests.builders import make_envelope
from tests.integration.attached_faults import injected, needs_strace
from tests.integration.harness import AuthorityProcess, WitnessProcess
from tests.integration.test_publication import embedded_witness, healthz, post
from tests.integration.test_witnessed import configure, eventually
from tests.scrape import sample

pytestmark = pytest.mark.slow  # real authority processes

REFRESH = 0.3
FAULT_SECONDS = 2.0


@pytest.fixture
def witness(tmp_path: Path, authority_files: AuthorityProcess) -> Iterator[WitnessProcess]:
    """A running external witness of the authority's log (the authority is not started)."""
    witness = WitnessProcess(tmp_path / "witness", name="witness.test/w0")
    witness.init()
    log_key = authority_files.log_verifier
    assert witness.cli("add-log", "--origin", log_key.name, "--key", log_key.vkey()) == 0
    witness.start()
    configure(authority_files, [witness])
    yield witness
    witness.stop()


async def cosigned_at(
    http: aiohttp.ClientSession, authority: AuthorityProcess, verifier: Verifier
) -> int | None:
    """The timestamp of ``verifier``'s cosignature on the served checkpoint, if it has one."""
    async with http.get(authority.url + "/checkpoint") as response:
        note = await response.read()
    found = cosignatures(note, [verifier])
    return found[0].timestamp if found else None


@needs_strace
async def test_refresh_survives_a_burst_of_proof_read_errors_and_shutdown_exits_0(
    authority_files: AuthorityProcess,
    witness: WitnessProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
) -> None:
    authority_files.extra_args = ["--witness-refresh", str(REFRESH), "--witness-timeout", "1"]
    authority_files.start()
    url = authority_files.url
    embedded = embedded_witness(authority_files)
    port = witness.port
    witness.stop()  # falls behind: catching it up takes a consistency proof
    for sequence in range(1, 4):
        body = make_envelope(publisher, sequence).canonical_bytes()
        assert (await post(http, url, body))[0] == 201
    assert authority_files.process is not None
    log_files = [authority_files.data / f"log.db{s}" for s in ("", "-wal", "-shm")]
    # Reads fail whether or not the reader's page cache holds the pages: every read
    # transaction takes a lock on the shared-memory file with fcntl.
    storage_failure = f"witness {witness.verifier.name} cannot cosign: storage_unavailable"
    with injected(authority_files.process.pid, log_files, ["pread64", "fcntl"]):
        witness.start(port)
        await asyncio.sleep(FAULT_SECONDS)
        # Under load (a traced process is slow) the first rounds may time out before a
        # read fails: the faults stay on until one has reached the witness track.
        await eventually(lambda: storage_failure in authority_files.output.read_text(), 30)
    before = await cosigned_at(http, authority_files, embedded)
    await eventually(lambda: cosigned_at(http, authority_files, witness.verifier))
    await asyncio.sleep(2.5)
    after = await cosigned_at(http, authority_files, embedded)
    assert before is not None and after is not None and after > before  # refresh still runs
    assert (await healthz(http, url))[0] == 200
    async with http.get(url + "/metrics") as response:
        metrics = await response.text()
    assert sample(metrics, "deplog_background_failures_total", task="cosignature_refresh") == 0
    assert authority_files.stop() == 0
    out = authority_files.output.read_text()
    assert "Traceback" not in out
    # The read failure reaches the witness track as the reader's stable code.
    assert storage_failure in out
