"""Storage faults: a full disk, altered or truncated files.

Expected: a stable 503 while the fault lasts, no partial entry, no checkpoint
that disagrees with storage, recovery when the fault is cleared, and a refusal
to start, naming the problem, when stored data no longer matches what was
signed. The full disk is a real filesystem (a small tmpfs mounted by the
test), so it needs root, which CI and the development machines have.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess

pytestmark = pytest.mark.slow  # real authority processes over damaged files

JSON = {"Content-Type": "application/json"}
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


async def post(http: aiohttp.ClientSession, url: str, body: bytes) -> tuple[int, dict]:
    async with http.post(url + "/v1/notices", data=body, headers=JSON) as response:
        return response.status, (await response.json() if response.status >= 400 else {})


async def size_of(http: aiohttp.ClientSession, authority: AuthorityProcess) -> int:
    async with http.get(authority.url + "/checkpoint") as response:
        checkpoint, _ = open_checkpoint(await response.read(), authority.log_verifier)
        return checkpoint.size


def alter_leaf(authority: AuthorityProcess, index: int) -> None:
    """Change one byte of a stored leaf behind the authority's back (it is stopped)."""
    conn = sqlite3.connect(authority.data / "log.db")
    conn.execute("DROP TRIGGER leaves_append_only_update")
    data = conn.execute("SELECT data FROM leaves WHERE idx = ?", (index,)).fetchone()[0]
    altered = data.replace(b"superseded", b"supersedeD", 1)
    conn.execute("UPDATE leaves SET data = ? WHERE idx = ?", (altered, index))
    conn.commit()
    conn.close()


@pytest.fixture
def with_notices(authority_files: AuthorityProcess, publisher: Signer) -> AuthorityProcess:
    """An authority (stopped) whose log holds the registration and three notices."""
    authority_files.start()
    try:

        async def publish() -> None:
            async with aiohttp.ClientSession() as http:
                for n in range(1, 4):
                    body = make_envelope(publisher, n).canonical_bytes()
                    assert (await post(http, authority_files.url, body))[0] == 201

        asyncio.run(publish())
    finally:
        authority_files.stop()
    return authority_files


def test_verify_on_start_refuses_to_start_naming_the_altered_leaf(
    with_notices: AuthorityProcess,
) -> None:
    alter_leaf(with_notices, 2)
    with_notices.extra_args = ["--verify-on-start"]
    with pytest.raises(RuntimeError) as refused:
        with_notices.start()
    assert "storage_corrupt: the stored data is corrupt (proven)" in str(refused.value)
    assert "(leaf 2 does not match its stored hash, 4 leaves)" in str(refused.value)


async def test_background_audit_finds_an_altered_leaf_and_stops_appends(
    with_notices: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    alter_leaf(with_notices, 2)
    with_notices.start()
    try:

        async def unhealthy() -> dict:
            async with http.get(with_notices.url + "/healthz") as response:
                return await response.json() if response.status == 503 else {}

        for _ in range(100):
            report = await unhealthy()
            if report:
                break
            await asyncio.sleep(0.05)
        assert report == {
            "status": "storage_corrupt",
            "problem": "leaf 2 does not match its stored hash",
        }
        body = make_envelope(publisher, 9).canonical_bytes()
        assert await post(http, with_notices.url, body) == (503, {"error": "storage_corrupt"})
        async with http.get(with_notices.url + "/v1/entries?start=0&end=4") as response:
            assert (response.status, await response.json()) == (503, {"error": "storage_corrupt"})
    finally:
        with_notices.stop()


def test_a_tampered_subtree_hash_refuses_start(with_notices: AuthorityProcess) -> None:
    conn = sqlite3.connect(with_notices.data / "log.db")
    conn.execute("DROP TRIGGER nodes_append_only_update")
    conn.execute("UPDATE nodes SET hash = zeroblob(32) WHERE level = 2 AND idx = 0")
    conn.commit()
    conn.close()
    with pytest.raises(RuntimeError) as refused:
        with_notices.start()
    assert "stored_root_mismatch" in str(refused.value)


def test_a_truncated_database_refuses_start(with_notices: AuthorityProcess) -> None:
    path = with_notices.data / "log.db"
    os.truncate(path, path.stat().st_size // 2)
    with pytest.raises(RuntimeError) as refused:
        with_notices.start()
    assert "storage_corrupt" in str(refused.value)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs: a real filesystem that really fills up."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "deplog-test", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@needs_root
async def test_full_disk_answers_503_and_recovers_when_space_is_freed(
    small_disk: Path, publisher: Signer, http: aiohttp.ClientSession
) -> None:
    authority = AuthorityProcess(small_disk / "authority")
    authority.init()
    authority.add_publisher(publisher, "org.acme")
    authority.start()
    filler = small_disk / "filler"
    try:
        assert (await post(http, authority.url, make_envelope(publisher, 1).canonical_bytes()))[
            0
        ] == 201
        before = await size_of(http, authority)
        with open(filler, "wb") as f:  # fill the disk to the last byte
            while True:
                try:
                    f.write(b"\0" * 65536)
                    f.flush()
                except OSError:
                    break
        statuses = []
        for n in range(2, 40):
            status, payload = await post(
                http, authority.url, make_envelope(publisher, n).canonical_bytes()
            )
            statuses.append(status)
            if status == 503:
                assert payload == {"error": "storage_full"}
                break
        assert statuses[-1] == 503, "a full disk must refuse appends"
        refused_at = await size_of(http, authority)
        filler.unlink()
        body = make_envelope(publisher, 100).canonical_bytes()
        assert (await post(http, authority.url, body))[0] == 201
        assert await size_of(http, authority) > refused_at >= before
    finally:
        filler.unlink(missing_ok=True)
        authority.stop()
