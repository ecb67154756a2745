"""``/healthz`` of a real authority tells the truth under real faults, and recovers.

States (docs/operators.md, "Health"): 200 ``ok``; 503 ``degraded`` with stable ``reasons``
while appends fail (``storage_unavailable``), while the embedded witness cannot
cosign (``embedded_witness_unavailable``), or while the served embedded
cosignature is older than three refresh intervals (``cosignatures_stale``); ``can`` says
what the process still does. A front-end cut off from PostgreSQL is test_netbed.py's.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.attached_faults import injected, needs_strace
from tests.integration.harness import AuthorityProcess
from tests.integration.test_publication import healthz, locked_database, post

pytestmark = pytest.mark.slow  # real authority processes

REFRESH = 0.3
EVERYTHING = {"append": True, "read": True, "checkpoint": True}


async def test_health_is_ok_with_the_existing_fields(
    authority: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    assert await healthz(http, authority.url) == (
        200,
        {"status": "ok", "size": 1, "pending": 0, "can": EVERYTHING},
    )


@needs_strace
async def test_failing_appends_make_health_degraded_until_one_succeeds(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    url = authority.url
    assert authority.process is not None
    log_files = [authority.data / f"log.db{s}" for s in ("", "-wal")]
    with injected(authority.process.pid, log_files, ["pwrite64", "fdatasync", "fsync"], "ENOSPC"):
        body = make_envelope(publisher, 1).canonical_bytes()
        assert await post(http, url, body) == (503, b'{"error": "storage_full"}')
        status, report = await healthz(http, url)
    assert (status, report["status"], report["reasons"]) == (503, "degraded", ["storage_full"])
    assert report["can"] == {"append": False, "read": True, "checkpoint": True}
    assert {"size", "pending"} <= report.keys()
    assert (await healthz(http, url))[0] == 503  # no append succeeded since
    assert (await post(http, url, body))[0] == 201
    assert await healthz(http, url) == (
        200,
        {"status": "ok", "size": 2, "pending": 0, "can": EVERYTHING},
    )


async def test_an_embedded_witness_that_cannot_cosign_makes_health_degraded_and_stale(
    authority_files: AuthorityProcess, http: aiohttp.ClientSession
) -> None:
    authority_files.extra_args = ["--witness-refresh", str(REFRESH), "--witness-timeout", "0.5"]
    authority_files.start()
    try:
        url = authority_files.url
        assert (await healthz(http, url))[0] == 200
        with locked_database(str(authority_files.data / "embedded-witness.db")):
            await asyncio.sleep(1.5)  # several refresh rounds time out
            status, report = await healthz(http, url)
        assert (status, report["status"], report["reasons"]) == (
            503,
            "degraded",
            ["cosignatures_stale", "embedded_witness_unavailable"],
        )
        assert report["can"] == {"append": False, "read": True, "checkpoint": True}
        for _ in range(100):
            if (await healthz(http, url))[0] == 200:
                break
            await asyncio.sleep(0.05)
        assert (await healthz(http, url))[1]["status"] == "ok"
    finally:
        assert authority_files.stop() == 0
