"""One follower per host, many workers: ``deplog follow`` writes, four processes read.

A real authority, a real ``deplog follow`` process keeping the state file
current with push, and four worker processes each opening the guard
read-only on that file: a published revoke reaches every worker's guard
by push, all at the same checkpoint.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess, wait_for_push_subscribers

pytestmark = pytest.mark.slow  # deplog follow and its readers in processes

WORKERS = 4
PUSH_BOUND = 10.0
TOOL = "tool:org.acme/search"


def wait_for_line(process: subprocess.Popen[str], prefix: str) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith(prefix), line
    return line


async def test_four_workers_refuse_a_revoke_pushed_to_the_host_follower(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    state = tmp_path / "host-state.db"
    follow = [
        sys.executable, "-m", "deplog.client.cli.main", "follow", authority.url,
        "--log-key", authority.log_verifier.vkey(), "--state", str(state), "--interval", "3600",
    ]  # fmt: skip
    follower = subprocess.Popen(follow, stdout=subprocess.PIPE, text=True)
    workers: list[subprocess.Popen[str]] = []
    try:
        wait_for_line(follower, "trusted ")
        for _ in range(WORKERS):
            worker = [sys.executable, "-m", "tests.integration.guard_worker", str(state), TOOL]
            workers.append(subprocess.Popen([*worker, "1.0.0"], stdout=subprocess.PIPE, text=True))
        for worker in workers:
            assert wait_for_line(worker, "ready ") == "ready serve\n"
        await wait_for_push_subscribers(http, authority.url, 1)
        body = make_envelope(
            publisher, 1, action="revoke", reasons=["other"], affected={"versions": ["1.0.0"]}
        ).canonical_bytes()
        async with http.post(
            authority.url + "/v1/notices",
            data=body,
            headers={"Content-Type": "application/json"},
        ) as response:
            assert response.status == 201
        published = time.time()
        refusals = [wait_for_line(worker, "refused ").split() for worker in workers]
        for worker in workers:
            assert worker.wait(timeout=10) == 0
    finally:
        for process in [*workers, follower]:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=10)
    assert {size for _, _, size in refusals} == {"2"}
    # The follower polls once an hour, so only push can have brought the revoke. How fast
    # is a figure (bench/bench_propagation.py), not a timed test: this bound only catches
    # a push that never came.
    assert max(float(at) for _, at, _ in refusals) - published < PUSH_BOUND
