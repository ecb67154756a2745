"""A command whose output's reader goes away (``deplog ... | head``) ends quietly with
status 141, as a tool stopped by SIGPIPE would: no traceback, no "cannot use" message."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deplog.authority.command import run
from deplog.client.cache.mcp import IDENTITY_KEY
from deplog.client.plumbing.files import EXIT_OUTPUT_CLOSED
from deplog.client.tlog.note import Signer

pytestmark = pytest.mark.slow  # deplog and authority commands in processes


def first_line_then_close(command: list[str]) -> tuple[int, str, str]:
    """Run ``command``, read one line of its output, close the pipe: (status, line, stderr)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    line = process.stdout.readline()
    process.stdout.close()
    err = process.stderr.read()
    return process.wait(timeout=60), line, err


def test_deplog_ends_quietly_when_its_reader_goes_away(tmp_path: Path) -> None:
    unproven = [
        {
            "name": f"t{i}",
            "inputSchema": {"type": "object"},
            "_meta": {IDENTITY_KEY: {"tool_id": f"tool:org.a/t{i}", "version": "1.0.0"}},
        }
        for i in range(5000)
    ]  # 5,000 lines of output: more than a pipe holds
    listing = tmp_path / "listing.json"
    listing.write_text(json.dumps({"tools": unproven}))
    key = Signer.generate("log.example/log").verifier().vkey()
    command = [sys.executable, "-m", "deplog.client.cli.main", "audit", "tools"]
    status, line, err = first_line_then_close([*command, "--log-key", key, str(listing)])
    assert (status, err) == (EXIT_OUTPUT_CLOSED, "")
    assert line.startswith("not proven: 5000 of 5000 deplog tools")


def test_authority_commands_end_quietly_when_their_reader_goes_away() -> None:
    parser = argparse.ArgumentParser(prog="authority")
    parser.set_defaults(func=lambda _: print("row\n" * 100_000) or 0)
    read, write = os.pipe()
    os.close(read)
    saved = sys.stdout
    sys.stdout = os.fdopen(write, "w")
    try:
        assert run("authority", parser, []) == EXIT_OUTPUT_CLOSED
    finally:
        sys.stdout.close()
        sys.stdout = saved
