"""Syscall faults under the real servers: ``strace -e inject`` on the log's and witnesses' files.

Each scenario runs the real ``authority serve`` (or ``witness serve``) under
strace, failing fsync/fdatasync, pwrite64 or openat with EIO, ENOSPC or
EACCES once, in a burst or for good, on one database's files only; then it
restarts without the fault and checks what clients were told against what is
stored (tests/integration/syscall_faults.py). The long campaign is
bench/fault_campaign.py.

strace is an apt package that CI installs (.ci/run): without it this module
skips loudly, and under CI=true it fails instead, so CI can never skip it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from deplog.client.model.notice import Envelope
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.campaign import witness_log
from tests.integration.harness import AuthorityProcess, WitnessProcess
from tests.integration.syscall_faults import (
    EMBEDDED_FILES,
    JSON,
    LOG_FILES,
    STRACE,
    SYNCS,
    WITNESS_FILES,
    Fault,
    FaultRun,
    WitnessFaultRun,
    embedded_witness_key,
    is_cosigned,
    logged_notices,
    refused_start,
    run_authority_fault,
    run_witness_fault,
)

pytestmark = pytest.mark.slow  # strace fault injection into real processes

if STRACE is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("strace is missing: CI must install it (.ci/run) and run this module")
    pytest.skip(
        "SYSCALL FAULT INJECTION NOT RUN: strace is not installed (apt-get install strace)",
        allow_module_level=True,
    )

PUBLISHERS = 3
NOTICES = 15
"""Notices per publisher in a run with a transient fault (5 under a persistent one)."""

# strace counts per syscall and per thread. Start-up does 2 fdatasyncs and 5 pwrite64s on
# log.db on its own thread, so faults counted from 3 (syncs) or 20 (writes) land on the
# sequencer's appends; the embedded witness's thread only writes once the log publishes.
AUTHORITY_FAULTS = {
    "log-fsync-EIO-once": Fault("log fsync EIO once", SYNCS, "EIO", "3", LOG_FILES),
    "log-pwrite-ENOSPC-burst": Fault(
        "log pwrite64 ENOSPC burst", ("pwrite64",), "ENOSPC", "20..29", LOG_FILES
    ),
    "log-fsync-EIO-persistent": Fault("log fsync EIO for good", SYNCS, "EIO", "5+", LOG_FILES),
    "witness-pwrite-ENOSPC-once": Fault(
        "embedded witness pwrite64 ENOSPC once", ("pwrite64",), "ENOSPC", "12", EMBEDDED_FILES
    ),
    "witness-fsync-EIO-persistent": Fault(
        "embedded witness fsync EIO for good", SYNCS, "EIO", "3+", EMBEDDED_FILES
    ),
}
TRANSIENT = [name for name, fault in AUTHORITY_FAULTS.items() if not fault.persistent]


class _AuthorityRuns(dict[str, FaultRun]):
    """Each authority scenario runs once, when a check first asks for it."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        super().__init__()
        self.tmp = tmp

    def __missing__(self, name: str) -> FaultRun:
        run = asyncio.run(_authority_run(self.tmp.mktemp(name), name))
        self[name] = run
        return run


@pytest.fixture(scope="module")
def authority_runs(tmp_path_factory: pytest.TempPathFactory) -> _AuthorityRuns:
    return _AuthorityRuns(tmp_path_factory)


async def _authority_run(tmp: Path, name: str) -> FaultRun:
    fault = AUTHORITY_FAULTS[name]
    authority = AuthorityProcess(tmp / "authority")
    authority.init()
    signers = [Signer.generate(f"pub{n}") for n in range(PUBLISHERS)]
    for signer in signers:
        authority.add_publisher(signer, f"org.{signer.name}")
    authority.start()  # the first start creates the embedded witness's database
    authority.stop()
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        notices = 5 if fault.persistent else NOTICES
        return await run_authority_fault(authority, http, signers, fault, notices)


@pytest.mark.parametrize("name", AUTHORITY_FAULTS)
def test_each_scenario_really_injects_its_fault(
    authority_runs: dict[str, FaultRun], name: str
) -> None:
    assert authority_runs[name].injected > 0


@pytest.mark.parametrize("name", AUTHORITY_FAULTS)
def test_every_acknowledged_notice_is_in_the_log_exactly_once(
    authority_runs: dict[str, FaultRun], name: str
) -> None:
    run = authority_runs[name]
    assert (run.lost, run.duplicated) == (0, 0)


@pytest.mark.parametrize("name", [n for n in AUTHORITY_FAULTS if n.startswith("log-")])
def test_a_log_storage_fault_is_refused_as_storage_unavailable(
    authority_runs: dict[str, FaultRun], name: str
) -> None:
    """ENOSPC is evidence of a full disk: ``storage_full``, a kind of the same failure."""
    full = AUTHORITY_FAULTS[name].error == "ENOSPC"
    assert set(authority_runs[name].refusals) == {"storage_full" if full else "storage_unavailable"}


@pytest.mark.parametrize("name", TRANSIENT)
def test_appends_succeed_again_in_the_same_process_after_a_transient_fault(
    authority_runs: dict[str, FaultRun], name: str
) -> None:
    run = authority_runs[name]
    assert run.last_append_ok
    assert len(run.acknowledged) == PUBLISHERS * NOTICES


def test_a_persistent_log_fault_acknowledges_nothing_more(
    authority_runs: dict[str, FaultRun],
) -> None:
    run = authority_runs["log-fsync-EIO-persistent"]
    assert not run.last_append_ok
    assert len(run.acknowledged) < PUBLISHERS * 5


@pytest.mark.parametrize("name", AUTHORITY_FAULTS)
def test_no_receipt_without_the_embedded_cosignature(
    authority_runs: dict[str, FaultRun], name: str
) -> None:
    assert authority_runs[name].receipts_without_cosignature == 0


@pytest.mark.parametrize("name", AUTHORITY_FAULTS)
def test_no_served_checkpoint_without_the_embedded_cosignature(
    authority_runs: dict[str, FaultRun], name: str
) -> None:
    run = authority_runs[name]
    assert run.checkpoints_served > 0
    assert run.checkpoints_without_cosignature == 0


def test_healthz_is_not_ok_while_every_append_fails(
    authority_runs: dict[str, FaultRun],
) -> None:
    health = authority_runs["log-fsync-EIO-persistent"].health_while_failing
    assert health and "ok" not in health


@pytest.mark.parametrize("name", AUTHORITY_FAULTS)
def test_shutdown_under_a_fault_completes_and_the_restart_serves_a_cosigned_checkpoint(
    authority_runs: dict[str, FaultRun], name: str
) -> None:
    run = authority_runs[name]
    assert run.stop_status == 0
    assert run.served_after_restart_cosigned


async def test_a_restart_while_the_embedded_witness_cannot_write_serves_only_published(
    authority_files: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    """A checkpoint signed while the embedded witness could not write was never published:
    a restart under the same fault serves the last published one, with its cosignature."""
    authority = authority_files
    authority.start()
    for sequence in (1, 2):
        status, _ = await post(http, authority, make_envelope(publisher, sequence))
        assert status == 201
    published = await served(http, authority)
    authority.stop()
    fault = Fault("embedded ENOSPC", ("pwrite64", "write"), "ENOSPC", "1+", EMBEDDED_FILES)
    authority.wrapper = fault.strace(authority.data, tmp_path / "strace.txt")
    for _ in range(2):  # the second start finds the checkpoint signed under the first
        authority.start()
        status, answer = await post(http, authority, make_envelope(publisher, 3))
        assert (status, json.loads(answer)) == (503, {"error": "storage_full"})  # its disk
        assert await served(http, authority) == published
        authority.stop()
    witness = embedded_witness_key(authority)
    assert is_cosigned(published, witness)


async def post(
    http: aiohttp.ClientSession, authority: AuthorityProcess, envelope: Envelope
) -> tuple[int, bytes]:
    body = envelope.canonical_bytes()
    async with http.post(authority.url + "/v1/notices", data=body, headers=JSON) as answer:
        return answer.status, await answer.read()


async def served(http: aiohttp.ClientSession, authority: AuthorityProcess) -> bytes:
    async with http.get(authority.url + "/checkpoint") as answer:
        return await answer.read()


# Start-up: accurate one-line messages and exit statuses (issue 12 defect 4).


def advises_a_restore(line: str) -> bool:
    """Restoring a backup can fork the log: only proven corruption may suggest it."""
    return "restore" in line.replace("do not restore", "")


@pytest.fixture
def initialized(authority_files: AuthorityProcess) -> AuthorityProcess:
    """An authority that has served once (both databases exist), stopped."""
    authority_files.start()
    authority_files.stop()
    return authority_files


@pytest.mark.parametrize(
    ("files", "error", "status", "code"),
    [
        (LOG_FILES, "EACCES", 77, "storage_permission_denied"),
        (LOG_FILES, "EPERM", 77, "storage_permission_denied"),
        (LOG_FILES, "EIO", 74, "storage_io_error"),
        (EMBEDDED_FILES, "EACCES", 77, "storage_permission_denied"),
        (EMBEDDED_FILES, "EIO", 74, "storage_io_error"),
    ],
)
def test_serve_names_an_open_failure_and_exits_with_its_status(
    initialized: AuthorityProcess, files: tuple[str, ...], error: str, status: int, code: str
) -> None:
    fault = Fault(f"openat {error}", ("openat",), error, "1+", files)
    refused = refused_start(initialized.command(), fault, initialized.data)
    assert refused.status == status
    assert refused.line.startswith(f"authority: {code}: ")
    assert f"{initialized.data.absolute() / files[0]} (SQLITE_CANTOPEN, {error})" in refused.line
    assert not advises_a_restore(refused.line)


def test_check_shares_the_classification(initialized: AuthorityProcess) -> None:
    fault = Fault("openat EIO", ("openat",), "EIO", "1+", LOG_FILES)
    command = [sys.executable, "-m", "deplog.authority.cli", "check", "--data"]
    command += [str(initialized.data), "--keys", str(initialized.keys)]
    refused = refused_start(command, fault, initialized.data)
    assert refused.status == 74
    assert refused.line.startswith("authority: storage_io_error: an I/O error on ")
    assert not advises_a_restore(refused.line)


def test_a_refused_start_damages_nothing(initialized: AuthorityProcess) -> None:
    for error in ("EACCES", "EIO"):
        fault = Fault(f"openat {error}", ("openat",), error, "1+", LOG_FILES)
        assert refused_start(initialized.command(), fault, initialized.data).status != 0
    assert initialized.run_cli("check").returncode == 0
    initialized.start()
    assert initialized.stop() == 0


def test_witness_serve_names_an_open_failure_and_exits_with_its_status(tmp_path: Path) -> None:
    witness = WitnessProcess(tmp_path / "witness")
    witness.init()
    fault = Fault("openat EACCES", ("openat",), "EACCES", "1+", WITNESS_FILES)
    refused = refused_start(witness.command(), fault, witness.data)
    assert refused.status == 77
    assert refused.line.startswith("witness: storage_permission_denied: permission denied on ")


@pytest.fixture
def full_disk(tmp_path: Path, publisher: Signer) -> Iterator[tuple[AuthorityProcess, Path]]:
    """An authority whose data directory is a 4 MiB tmpfs, and the file that will fill it."""
    authority = AuthorityProcess(tmp_path / "authority")
    authority.data.mkdir(parents=True)
    mount = ["mount", "-t", "tmpfs", "-o", "size=4m", "deplog-test", str(authority.data)]
    subprocess.run(mount, check=True)
    try:
        authority.init()
        authority.add_publisher(publisher, "org.acme")
        yield authority, authority.data / "filler"
    finally:
        authority.stop()
        subprocess.run(["umount", "-l", str(authority.data)], check=False)


def fill(path: Path) -> None:
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")
async def test_a_full_disk_at_start_is_named_and_nothing_acknowledged_is_lost(
    full_disk: tuple[AuthorityProcess, Path], publisher: Signer, http: aiohttp.ClientSession
) -> None:
    authority, filler = full_disk
    authority.start()
    acknowledged = []
    for sequence in range(1, 6):
        body = make_envelope(publisher, sequence).canonical_bytes()
        async with http.post(authority.url + "/v1/notices", data=body, headers=JSON) as answer:
            assert answer.status == 201
        acknowledged.append(body)
    assert authority.stop() == 0
    fill(filler)
    started = subprocess.run(
        [*authority.command(), "--port", "0"], capture_output=True, text=True, timeout=60
    )
    assert started.returncode == 73, started.stderr
    line = started.stderr.splitlines()[-1]
    assert line.startswith("authority: storage_full: ") and not advises_a_restore(line)
    filler.unlink()
    authority.start()
    async with http.get(authority.url + "/checkpoint") as answer:
        note = await answer.read()
    assert set(acknowledged) <= set(await logged_notices(http, authority, note))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")
async def test_appends_on_a_full_disk_answer_storage_full_and_healthz_says_so(
    full_disk: tuple[AuthorityProcess, Path], publisher: Signer, http: aiohttp.ClientSession
) -> None:
    authority, filler = full_disk
    authority.start()
    fill(filler)
    status, answer = await post(http, authority, make_envelope(publisher, 1))
    assert (status, json.loads(answer)) == (503, {"error": "storage_full"})
    async with http.get(authority.url + "/healthz") as response:
        assert "storage_full" in (await response.json())["reasons"]
    filler.unlink()
    status, _ = await post(http, authority, make_envelope(publisher, 1))
    assert status == 201


# The standalone witness: every cosignature it returned is durable, and it recovers.

WITNESS_FAULTS = {
    "witness-fsync-EIO-burst": Fault(
        "witness fsync EIO burst", SYNCS, "EIO", "3..8", WITNESS_FILES
    ),
    "witness-pwrite-ENOSPC-persistent": Fault(
        "witness pwrite64 ENOSPC for good", ("pwrite64",), "ENOSPC", "4+", WITNESS_FILES
    ),
}


@pytest.fixture(scope="module")
def witness_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, WitnessFaultRun]:
    runs = {}
    for name, fault in WITNESS_FAULTS.items():
        tmp = tmp_path_factory.mktemp(name)
        publisher = Signer.generate("acme")
        log, signer = witness_log(tmp, publisher)
        witness = WitnessProcess(tmp / "witness", name="faults.witness/w")
        witness.init()
        assert witness.cli("add-log", "--key", signer.verifier().vkey()) == 0
        runs[name] = asyncio.run(run_witness_fault(witness, log, publisher, fault, 20))
        log.close()
    return runs


@pytest.mark.parametrize("name", WITNESS_FAULTS)
def test_every_cosignature_the_witness_returned_is_durable(
    witness_runs: dict[str, WitnessFaultRun], name: str
) -> None:
    run = witness_runs[name]
    assert run.injected > 0
    assert run.lost == 0


@pytest.mark.parametrize("name", WITNESS_FAULTS)
def test_the_witness_refuses_with_503_while_its_storage_fails(
    witness_runs: dict[str, WitnessFaultRun], name: str
) -> None:
    assert set(witness_runs[name].refusals) == {503}


def test_the_witness_cosigns_again_after_a_transient_fault(
    witness_runs: dict[str, WitnessFaultRun],
) -> None:
    assert witness_runs["witness-fsync-EIO-burst"].recovered
