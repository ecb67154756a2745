"""The README's cache example runs as printed against a real authority."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
