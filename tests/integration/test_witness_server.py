"""A real ``witness serve`` process on 127.0.0.1, spoken to over HTTP (C2SP tlog-witness).

Checkpoints come from the spec-only ``MinimalLog`` of the unit tests and from a
real deplog authority process, so the wire format is shown to interoperate in
both directions. The witness is SIGKILLed between requests to show that its
record is durable before it answers and that no rollback is accepted after a
restart.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from deplog.authority.witness.core import MAX_BODY_SIZE
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.cosignature import cosignatures
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import ConsistencyProof
from tests import sumdb
from tests.builders import make_envelope
from tests.integration.attached_faults import injected, needs_strace
from tests.integration.harness import AuthorityProcess, WitnessProcess
from tests.scrape import names, sample
from tests.test_witness import MinimalLog, add_checkpoint_body, verify_cosignature

pytestmark = pytest.mark.slow  # real witness and authority processes

NAME = "witness.test/w1"
STARTUP_TIMEOUT = 20.0


@pytest.fixture
def log() -> MinimalLog:
    return MinimalLog()


@pytest.fixture
def witness_files(tmp_path: Path, log: MinimalLog) -> WitnessProcess:
    """An initialized witness that trusts the minimal log."""
    witness = WitnessProcess(tmp_path / "witness", name=NAME)
    witness.init()
    assert witness.cli("add-log", "--origin", log.origin, "--key", log.vkey) == 0
    return witness


@pytest.fixture
def witness(witness_files: WitnessProcess) -> Iterator[WitnessProcess]:
    witness_files.start()
    yield witness_files
    witness_files.stop()


async def add_checkpoint(
    http: aiohttp.ClientSession, witness: WitnessProcess, body: bytes
) -> tuple[int, str, bytes]:
    async with http.post(witness.url + "/add-checkpoint", data=body) as response:
        return response.status, response.headers["Content-Type"], await response.read()


async def test_add_checkpoint_over_http_returns_a_cosignature(
    witness: WitnessProcess, log: MinimalLog, http: aiohttp.ClientSession
) -> None:
    before = int(time.time())
    status, content_type, body = await add_checkpoint(http, witness, log.request(0, 5))
    assert (status, content_type) == (200, "text/plain; charset=utf-8")
    timestamp = verify_cosignature(body, log.checkpoint(5), NAME, witness.verifier.public_key)
    assert before <= timestamp <= int(time.time())


async def test_conflict_answer_is_the_recorded_size_as_text_x_tlog_size(
    witness: WitnessProcess, log: MinimalLog, http: aiohttp.ClientSession
) -> None:
    await add_checkpoint(http, witness, log.request(0, 5))
    status, content_type, body = await add_checkpoint(http, witness, log.request(3, 8))
    assert (status, content_type, body) == (409, "text/x.tlog.size", b"5\n")


async def test_oversized_body_is_413_over_http(
    witness: WitnessProcess, http: aiohttp.ClientSession
) -> None:
    status, _, body = await add_checkpoint(http, witness, b"old 0\n\n" + b"x" * MAX_BODY_SIZE)
    assert (status, body) == (413, b"too_large\n")


async def test_slow_bodies_from_one_address_leave_add_checkpoint_to_others(
    witness: WitnessProcess, log: MinimalLog, http: aiohttp.ClientSession
) -> None:
    """The issue's reproduction: 96 bodies that never finish, from one address."""
    host, port = witness.url.removeprefix("http://").split(":")
    slow = []
    for _ in range(96):
        sock = socket.create_connection((host, int(port)), source_address=("127.0.0.2", 0))
        sock.sendall(b"POST /add-checkpoint HTTP/1.1\r\nHost: x\r\nContent-Length: 99\r\n\r\no")
        slow.append(sock)
    try:
        time.sleep(0.5)
        assert (await add_checkpoint(http, witness, log.request(0, 5)))[0] == 200
    finally:
        for sock in slow:
            sock.close()


async def test_record_survives_sigkill_and_no_rollback_is_accepted_after_restart(
    witness: WitnessProcess, log: MinimalLog, http: aiohttp.ClientSession
) -> None:
    assert (await add_checkpoint(http, witness, log.request(0, 5)))[0] == 200
    assert (await add_checkpoint(http, witness, log.request(5, 9)))[0] == 200
    witness.kill()
    witness.start()
    assert (await add_checkpoint(http, witness, log.request(5, 7)))[2] == b"9\n"
    assert (await add_checkpoint(http, witness, log.request(0, 3)))[2] == b"9\n"
    fork = MinimalLog(log.origin, log.key, salt="fork ")
    assert (await add_checkpoint(http, witness, fork.request(9, 9)))[0] == 409
    status, _, body = await add_checkpoint(http, witness, log.request(9, 12))
    assert status == 200
    verify_cosignature(body, log.checkpoint(12), NAME, witness.verifier.public_key)


async def test_deplog_authority_checkpoints_are_witnessed(
    witness_files: WitnessProcess,
    authority: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
) -> None:
    assert witness_files.cli("add-log", "--key", authority.log_verifier.vkey()) == 0
    witness_files.start()
    try:

        async def publish_and_fetch(sequence: int) -> bytes:
            envelope = make_envelope(publisher, sequence)
            headers = {"Content-Type": "application/json"}
            url = authority.url + "/v1/notices"
            async with http.post(url, data=envelope.canonical_bytes(), headers=headers) as r:
                assert r.status == 201
            async with http.get(authority.url + "/checkpoint") as r:
                return await r.read()

        first = await publish_and_fetch(1)
        first_cp, _ = open_checkpoint(first, authority.log_verifier)
        status, _, line = await add_checkpoint(
            http, witness_files, add_checkpoint_body(0, [], first)
        )
        assert status == 200
        # As the spec suggests, a log adds the answer to its note and verifies it.
        [cosig] = cosignatures(first + line, [witness_files.verifier])
        assert cosig.name == NAME

        second = await publish_and_fetch(2)
        second_cp, _ = open_checkpoint(second, authority.log_verifier)
        url = f"{authority.url}/v1/proofs/consistency?old={first_cp.size}&new={second_cp.size}"
        async with http.get(url) as r:
            proof = ConsistencyProof.from_json(await r.json())
        body = add_checkpoint_body(first_cp.size, list(proof.hashes), second)
        status, _, line = await add_checkpoint(http, witness_files, body)
        assert status == 200
        [cosig] = cosignatures(second + line, [witness_files.verifier])
        assert cosig.name == NAME
    finally:
        witness_files.stop()


async def test_healthz_and_metrics_report_the_witness_and_its_logs(
    witness: WitnessProcess, log: MinimalLog, http: aiohttp.ClientSession
) -> None:
    await add_checkpoint(http, witness, log.request(0, 5))
    async with http.get(witness.url + "/healthz") as response:
        assert await response.json() == {"status": "ok", "witness": witness.verifier.vkey()}
    async with http.get(witness.url + "/metrics") as response:
        text = await response.text()
    assert sample(text, "deplog_witness_log_size", origin=log.origin) == 5
    cosigned_at = sample(text, "deplog_witness_log_cosigned_timestamp_seconds", origin=log.origin)
    lag = sample(text, "deplog_witness_log_lag_seconds", origin=log.origin)
    assert cosigned_at is not None and abs(cosigned_at - time.time()) < 60
    assert lag is not None and 0 <= lag < 60
    added = {"method": "POST", "route": "/add-checkpoint", "code": "200"}
    assert sample(text, "deplog_http_requests_total", **added) == 1
    assert "process_cpu_seconds_total" in names(text)


def test_sigterm_stops_the_witness_cleanly(witness: WitnessProcess) -> None:
    assert witness.stop() == 0


def test_init_creates_a_private_cosigning_key_and_prints_its_verifier_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = WitnessProcess(tmp_path)
    assert files.cli("init", "--keys", str(files.keys), "--name", NAME) == 0
    printed = capsys.readouterr().out
    key = files.keys / "witness.test_w1.key"
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.read_text().startswith(f"PRIVATE+KEY+{NAME}+")
    assert f"witness verifier key: {files.verifier.vkey()}" in printed
    assert files.cli("init", "--keys", str(files.keys), "--name", NAME) == 0
    assert f"witness verifier key: {files.verifier.vkey()}" in capsys.readouterr().out


def test_add_log_from_a_policy_file_and_list_logs(
    witness_files: WitnessProcess, log: MinimalLog, capsys: pytest.CaptureFixture[str]
) -> None:
    other = MinimalLog("other.example/log")
    policy = witness_files.root / "policy.txt"
    policy.write_text(f"log {log.vkey}\nlog {other.vkey} https://other.example/\nquorum none\n")
    capsys.readouterr()
    assert witness_files.cli("add-log", "--logs", str(policy)) == 0
    assert capsys.readouterr().out == f"known log {log.origin}\nadded log {other.origin}\n"
    assert witness_files.cli("list-logs") == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[1:] == [
        f"{log.origin}\t-\t-\t{log.vkey}",
        f"other.example/log\t-\t-\t{other.vkey}",
    ]


def test_add_log_of_an_origin_that_is_not_the_key_name_is_honoured(
    witness_files: WitnessProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    assert witness_files.cli("add-log", "--origin", sumdb.ORIGIN, "--key", sumdb.KEY) == 0
    assert capsys.readouterr().out == f"added log {sumdb.ORIGIN} (key sum.golang.org)\n"
    assert witness_files.cli("list-logs") == 0
    assert f"{sumdb.ORIGIN}\t-\t-\t{sumdb.KEY}" in capsys.readouterr().out.splitlines()


async def test_genuine_sum_golang_org_tree_heads_are_cosigned_and_tampered_ones_refused(
    witness_files: WitnessProcess, http: aiohttp.ClientSession
) -> None:
    """The issue's reproduction: the same commands, now with real tree heads cosigned."""
    assert witness_files.cli("add-log", "--origin", sumdb.ORIGIN, "--key", sumdb.KEY) == 0
    witness_files.start()
    try:
        first, *later = sumdb.checkpoints()
        tampered = add_checkpoint_body(0, [], sumdb.tampered(first))
        assert (await add_checkpoint(http, witness_files, tampered))[0] == 403
        status, _, body = await add_checkpoint(
            http, witness_files, add_checkpoint_body(0, [], first)
        )
        assert status == 200
        verify_cosignature(body, first, NAME, witness_files.verifier.public_key)
        # The record is now at the first size: a later head needs a proof from it, which
        # these fixtures do not carry, so it is refused with the recorded size.
        refused = await add_checkpoint(http, witness_files, add_checkpoint_body(0, [], later[0]))
        assert refused[0] == 409
    finally:
        witness_files.stop()


async def witness_health(http: aiohttp.ClientSession, witness: WitnessProcess) -> tuple[int, dict]:
    async with http.get(witness.url + "/healthz") as response:
        return response.status, await response.json()


@needs_strace
async def test_a_failing_database_is_503_and_degraded_health_until_it_works_again(
    witness: WitnessProcess, log: MinimalLog, http: aiohttp.ClientSession
) -> None:
    assert (await add_checkpoint(http, witness, log.request(0, 5)))[0] == 200
    assert witness.process is not None
    files = [witness.data / f"witness.db{s}" for s in ("", "-wal")]
    with injected(witness.process.pid, files, ["fsync", "fdatasync"]):
        assert (await add_checkpoint(http, witness, log.request(5, 9)))[::2] == (
            503,
            b"unavailable\n",
        )
        status, report = await witness_health(http, witness)
    assert (status, report["status"], report["reasons"]) == (
        503,
        "degraded",
        ["storage_unavailable"],
    )
    status, _, body = await add_checkpoint(http, witness, log.request(5, 9))
    assert status == 200
    verify_cosignature(body, log.checkpoint(9), NAME, witness.verifier.public_key)
    assert (await witness_health(http, witness))[1]["status"] == "ok"
    assert witness.stop() == 0
    out = witness.output.read_text()
    assert "Traceback" not in out
    assert out.count("witness database error: OperationalError: disk I/O error") == 1
