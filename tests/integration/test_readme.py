"""The README's cache example and its walkthrough run as printed against a real authority."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess

pytestmark = pytest.mark.slow  # a real authority process

README = Path(__file__).resolve().parents[2] / "README.md"


def cache_example() -> str:
    section = README.read_text().split("## Use it in your cache", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the README lost its cache example"
    return match.group(1)


def run_example(authority: AuthorityProcess, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEPLOG_URL=authority.url, DEPLOG_LOG_KEY=authority.log_verifier.vkey())
    return subprocess.run(
        [sys.executable, "-c", cache_example()],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cache_example_is_under_30_lines() -> None:
    assert len(cache_example().splitlines()) < 30


async def test_cache_example_serves_then_refuses_a_revoked_version(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    served = run_example(authority, tmp_path)
    assert served.returncode == 0, served.stderr
    assert served.stdout.strip() == "{'name': 'search'}"

    revoke = make_envelope(
        publisher,
        1,
        action="revoke",
        reasons=["security"],
        advisories=["CVE-2026-1234"],
        affected={"versions": ["1.2.0"]},
    )
    async with http.post(
        authority.url + "/v1/notices",
        data=revoke.canonical_bytes(),
        headers={"Content-Type": "application/json"},
    ) as response:
        assert response.status == 201
    refused = run_example(authority, tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.strip().endswith("LookupError: refuse: revoked")


def walkthrough(port: int) -> str:
    """The README's five-minute walkthrough, against an authority on ``port``."""
    section = README.read_text().split("## Five-minute walkthrough", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the README lost its walkthrough"
    return match.group(1).replace("127.0.0.1:7460", f"127.0.0.1:{port}")


def test_the_walkthrough_runs_as_printed_and_again_for_a_second_notice(
    tmp_path: Path, free_port: int
) -> None:
    """Steps 3 and 4 again publish and verify a second notice: the names the walkthrough
    uses still name one file each, as a glob would not."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    serve = [sys.executable, "-m", "deplog.authority.cli", "serve", "--port", str(free_port)]
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(serve, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "serving on" not in (tmp_path / "serve.log").read_text():
            assert server.poll() is None and time.monotonic() < deadline, "no authority"
            time.sleep(0.1)
        script = walkthrough(free_port)
        second = script[script.index("# 3.") : script.index("# 5.")]
        for part in (script, second):
            ran = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", part],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert ran.returncode == 0, ran.stdout + ran.stderr
            assert "Traceback" not in ran.stderr
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
    assert ran.stdout.count("ok: entry 2 is in localhost/deplog") == 1
    assert "envelope: receipts/acme-" in ran.stdout
    assert "(also receipts/acme-latest.tlog-proof)" in ran.stdout
