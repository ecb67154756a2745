"""``deplog export --tiles-dir`` and ``deplog audit replay`` over a tiles directory.

An auditor's archive is the format the log publishes: the mirror is checked
tile by tile against the checkpoint, resumes after a kill fetching only what
is missing, and replays to exactly what the export file of the same log
replays to.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deplog.client.audit.offline import AuditInputError
from deplog.client.audit.tiledir import mirror_tiles, tiles_dir_leaves
from deplog.client.cli.export import mirror
from deplog.client.cli.main import main
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.tiles import TilesLogSource
from deplog.client.tlog.note import Signer
from deplog.client.tlog.tiles import EntryTile, HashTile
from tests.builders import LocalLog, sign_tree, write_tiles
from tests.integration.scripted_authority import ScriptedAuthority, running
from tests.integration.tiles_server import in_thread, static_server, tampering_proxy


def leaves(count: int) -> list[bytes]:
    return [b"mirrored leaf %d" % i for i in range(count)]


def files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in directory.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }


def test_a_mirror_is_the_published_directory_byte_for_byte(
    tmp_path: Path, log_signer: Signer
) -> None:
    data = leaves(1000)
    write_tiles(tmp_path / "origin", sign_tree(log_signer, data), data)
    with in_thread(static_server(tmp_path / "origin")) as url:
        report, verified = mirror(url, tmp_path / "copy", log_signer.verifier())
    assert verified and report.checkpoint.size == 1000 and report.kept == 0
    assert files(tmp_path / "copy") == files(tmp_path / "origin")
    assert (
        list(tiles_dir_leaves(tmp_path / "copy", (tmp_path / "copy/checkpoint").read_bytes()))
        == data
    )


@pytest.mark.slow  # deplog export in a process, killed
def test_a_mirror_killed_midway_resumes_fetching_only_what_is_missing(
    tmp_path: Path, log_signer: Signer
) -> None:
    data = leaves(20 * 256 + 7)
    write_tiles(tmp_path / "origin", sign_tree(log_signer, data), data)
    copy = tmp_path / "copy"
    with (
        in_thread(static_server(tmp_path / "origin")) as url,
        in_thread(tampering_proxy(url)) as proxy,
    ):
        proxy.stall[EntryTile(12).path] = 60.0  # the second window of bundles hangs
        mirroring = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "deplog.client.cli.main",
                "export",
                proxy.url,
                "--tiles-dir",
                str(copy),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while not (copy / EntryTile(7).path).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(mirroring.pid, signal.SIGKILL)
        finally:
            mirroring.wait()
        assert (copy / EntryTile(7).path).exists(), "the first window was never written"
        assert not (copy / "checkpoint").exists()
        proxy.stall.clear()
        proxy.requests.clear()
        report, _ = mirror(proxy.url, copy, None)
    assert report.kept >= 8  # the first window's bundles at least, read from disk
    assert all(not path.startswith(EntryTile(3).path) for path in proxy.requests)
    assert files(copy) == files(tmp_path / "origin")


def test_a_corrupt_tile_in_the_source_writes_nothing_of_its_window(
    tmp_path: Path, log_signer: Signer
) -> None:
    data = leaves(600)
    write_tiles(tmp_path / "origin", sign_tree(log_signer, data), data)
    bad = tmp_path / "origin" / EntryTile(1).path
    bad.write_bytes(bad.read_bytes()[:-1] + b"!")
    with (
        in_thread(static_server(tmp_path / "origin")) as url,
        pytest.raises(DeplogError) as refused,
    ):
        mirror(url, tmp_path / "copy", None)
    assert refused.value.code == ErrorCode.BAD_TILE
    assert not (tmp_path / "copy" / EntryTile(1).path).exists()
    assert not (tmp_path / "copy" / "checkpoint").exists()


def test_reading_a_tiles_directory_refuses_a_tampered_or_missing_tile(
    tmp_path: Path, log_signer: Signer
) -> None:
    data = leaves(600)
    note = sign_tree(log_signer, data)
    write_tiles(tmp_path, note, data)
    level1 = tmp_path / HashTile(1, 0, 2).path
    level1.write_bytes(bytes(64))
    with pytest.raises(DeplogError) as refused:
        list(tiles_dir_leaves(tmp_path, note))
    assert refused.value.code == ErrorCode.BAD_TILE
    level1.unlink()
    with pytest.raises(AuditInputError) as missing:
        list(tiles_dir_leaves(tmp_path, note))
    assert missing.value.code == ErrorCode.MISSING_INPUT


def test_audit_replay_of_a_mirrored_directory_equals_that_of_an_export_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "log").mkdir()
    local = LocalLog(tmp_path / "log")
    local.publish_many(600)
    local.write_tiles(tmp_path / "origin")
    key = local.signer.verifier().vkey()
    with (
        in_thread(static_server(tmp_path / "origin")) as tiles_url,
        in_thread(running(ScriptedAuthority(local.snapshot()))) as api,
    ):
        assert main(["export", api.url, "--out", str(tmp_path / "file"), "--log-key", key]) == 0
        assert (
            main(
                [
                    "export",
                    api.url,
                    "--tiles",
                    tiles_url,
                    "--tiles-dir",
                    str(tmp_path / "dir"),
                    "--log-key",
                    key,
                ]
            )
            == 0
        )
    capsys.readouterr()
    assert main(["audit", "replay", str(tmp_path / "file"), "--log-key", key]) == 0
    from_file = capsys.readouterr().out
    assert main(["audit", "replay", str(tmp_path / "dir"), "--log-key", key]) == 0
    from_tiles = capsys.readouterr().out
    assert from_tiles == from_file and "replayed 601 entries" in from_tiles


async def test_mirroring_an_empty_log_writes_its_checkpoint_only(
    tmp_path: Path, log_signer: Signer
) -> None:
    write_tiles(tmp_path / "origin", sign_tree(log_signer, []), [])
    async with static_server(tmp_path / "origin") as url, TilesLogSource(url) as source:
        note = await source.checkpoint()
        report = await mirror_tiles(tmp_path / "copy", note, source.fetch_tile)
    assert (report.fetched, report.kept) == (0, 0)
    assert files(tmp_path / "copy") == {"checkpoint": note}


async def test_a_stale_copys_older_checkpoint_does_not_replace_a_newer_one(
    tmp_path: Path, log_signer: Signer
) -> None:
    data = leaves(600)
    newer = sign_tree(log_signer, data)
    write_tiles(tmp_path / "copy", newer, data)
    write_tiles(tmp_path / "stale", sign_tree(log_signer, data[:300]), data[:300])
    async with static_server(tmp_path / "stale") as url, TilesLogSource(url) as source:
        report = await mirror_tiles(tmp_path / "copy", await source.checkpoint(), source.fetch_tile)
    assert report.checkpoint.size == 300
    assert (tmp_path / "copy" / "checkpoint").read_bytes() == newer
