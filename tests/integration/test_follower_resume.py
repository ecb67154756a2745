"""A follower killed (SIGKILL) in the middle of a long first sync against a real authority:
the restarted ``deplog follow --once`` resumes from the last committed chunk and ends in
exactly the state of a sync never killed (client/follow/state.py invariants 1 to 3), its
tool-status map included: the map kept beside the chunks folds on to the root the
authority signed (client/follow/mapcheck.py rule 1)."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from deplog.authority.log import Log
from deplog.client.follow.state import LocalState
from deplog.client.map.line import require_map_root
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.keyfile import load_signer
from deplog.client.tlog.note import Signer, parse_note
from tests.builders import make_envelope
from tests.dbrows import follower_state as stored
from tests.integration.harness import ORIGIN, AuthorityProcess

pytestmark = pytest.mark.slow  # real authority processes

NOTICES = 1200
CHUNK = 100

# A follower that commits every CHUNK entries and says how far it got after each page.
FOLLOWER = textwrap.dedent(
    """
    import asyncio, sys
    from deplog.client.follow.follower import Follower
    from deplog.client.tlog.note import Verifier

    async def main(url, key, state):
        def progress(done, target):
            print(done, flush=True)
        async with Follower(url, Verifier.parse(key), state, page_size=50,
                            chunk_size=int(sys.argv[4])) as follower:
            await follower.sync(progress)

    asyncio.run(main(*sys.argv[1:4]))
    """
)


@pytest.fixture
def long_log(authority_files: AuthorityProcess, publisher: Signer) -> Iterator[AuthorityProcess]:
    """The authority, serving acme's registration and NOTICES notices over 10 tools."""
    signer = load_signer(authority_files.keys, ORIGIN.replace("/", "_"))
    log = Log(authority_files.data / "log.db", signer, ORIGIN)
    try:
        for first in range(1, NOTICES + 1, 200):
            log.sequence(
                [
                    make_envelope(publisher, k, tool=f"tool:org.acme/t{k % 10}")
                    for k in range(first, first + 200)
                ]
            )
    finally:
        log.close()
    authority_files.start()
    yield authority_files
    authority_files.stop()


def follow_once(authority: AuthorityProcess, state: Path) -> None:
    """The real command line, to the end."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "deplog.client.cli.main",
            "follow",
            authority.url,
            "--log-key",
            authority.log_verifier.vkey(),
            "--state",
            str(state),
            "--once",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def signed_map_root(path: Path) -> bytes:
    """The map root the trusted checkpoint of a state file signs (its deplog-map/v1 line)."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        (note,) = conn.execute("SELECT note FROM trusted").fetchone()
    text, _ = parse_note(bytes(note))
    return require_map_root(Checkpoint.from_text(text))


def test_a_follower_killed_mid_sync_resumes_and_ends_as_one_never_killed(
    long_log: AuthorityProcess, tmp_path: Path
) -> None:
    state = tmp_path / "killed.db"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            FOLLOWER,
            long_log.url,
            long_log.log_verifier.vkey(),
            str(state),
            str(CHUNK),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    try:
        for line in child.stdout:
            if int(line) >= NOTICES // 2:
                break
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL

    killed = LocalState(state, ORIGIN)
    try:
        assert killed.trusted is None  # processed through nothing yet
        pending = killed.pending()
        assert pending is not None and CHUNK <= pending.frontier.size < NOTICES + 1
        assert all(killed.notice_at(i) is None for i in range(pending.frontier.size))
        assert killed.tool_status("tool:org.acme/t1")[1] == {}
    finally:
        killed.close()

    follow_once(long_log, state)
    follow_once(long_log, tmp_path / "clean.db")
    resumed, clean = stored(state), stored(tmp_path / "clean.db")
    assert resumed == clean
    assert len(clean["notices"]) == NOTICES  # type: ignore[arg-type]
    assert clean["pending"] == []
    # The authority signs its map: the resumed fold reached the root it signed.
    assert resumed["map"] == [(NOTICES + 1, signed_map_root(state))]
