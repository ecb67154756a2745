"""A newcomer's traps on the command lines, each walked into as a new user would (issue 37,
section 4): ``deplog``, ``authority`` and ``witness`` in processes of their own, against a
real authority, each asserting one line on stderr, no traceback and a documented status."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from deplog.client.tlog.keyfile import create_signer
from deplog.client.tlog.note import Signer
from tests.doctext import ROOT, exit_statuses
from tests.integration.harness import AuthorityProcess
from tests.integration.test_newcomer_operator import MODULES as SERVERS

pytestmark = pytest.mark.slow  # real authority processes

NO_SCHEME = "127.0.0.1:7460"
MODULES = {"deplog": "deplog.client.cli.main", **SERVERS}
DOCUMENTED_EXITS = exit_statuses(ROOT / "docs" / "deplog-command.md", "## Exit statuses")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The newcomer's working directory, empty."""
    (tmp_path / "newcomer").mkdir()
    return tmp_path / "newcomer"


def run(program: str, *args: str | Path, cwd: Path) -> tuple[int, str]:
    """``program ARGS`` in ``cwd``: its exit status and its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", MODULES[program], *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )
    return done.returncode, done.stderr


def _url_commands(url: str, key: str) -> list[tuple[str, ...]]:
    """Every command that takes a URL, with ``{}`` where the URL goes."""
    tool = "tool:org.acme/search"
    return [
        ("deplog", "follow", "{}", "--once", "--log-key", key),
        ("deplog", "follow", url, "--once", "--log-key", key, "--tiles", "{}"),
        ("deplog", "monitor", "{}", "--namespace", "org.acme", "--key-id", key, "--once"),
        ("deplog", "export", "{}", "--out", "out"),
        ("deplog", "export", url, "--tiles-dir", "tiles", "--tiles", "{}"),
        ("deplog", "publish", "--url", "{}", "--key", "acme.key", "--tool", tool),
        ("deplog", "check", tool, "1.0.0", "--url", "{}"),
        ("deplog", "status", tool, "--url", "{}"),
        ("deplog", "inventory", "check", "inventory.json", "--url", "{}"),
        ("authority", "witness", "add", "--url", "{}", "--key", key),
        ("witness", "serve", "--data", "w", "--keys", "k", "--verify-map", "{}"),
    ]


@pytest.mark.parametrize("bad", [NO_SCHEME, "http://127.0.0.1:70000"])
def test_a_url_without_http_is_a_usage_error_naming_it_in_every_command(
    authority: AuthorityProcess, home: Path, bad: str
) -> None:
    key = authority.log_verifier.vkey()
    for program, *args in _url_commands(authority.url, key):
        argv = [bad if arg == "{}" else arg for arg in args]
        status, err = run(program, *argv, cwd=home)
        shown = f"{program} {argv}: {status} {err!r}"
        assert status == 2 and err.count("\n") == 1 and "Traceback" not in err, shown
        assert f"{bad} is not a URL" in err, shown
        assert list(home.iterdir()) == [], shown


@pytest.mark.parametrize("program", ["authority", "witness"])
@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_port_out_of_range_is_a_usage_error_naming_it(
    program: str, port: str, tmp_path: Path
) -> None:
    status, err = run(program, "serve", "--data", "d", "--keys", "k", "--port", port, cwd=tmp_path)
    assert status == 2 and err.count("\n") == 1, err
    assert f"--port: {port} is not a port: give 0 to 65535" in err
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def publisher(tmp_path: Path) -> Signer:
    """``acme``'s key, on disk beside the newcomer's directory as ``deplog keygen`` writes it."""
    return create_signer(tmp_path / "keys", "acme", "acme")


def test_a_permanent_refusal_never_advises_resubmit(
    authority: AuthorityProcess, publisher: Signer, home: Path, tmp_path: Path
) -> None:
    beta = create_signer(tmp_path / "keys", "beta", "beta")
    assert authority.run_cli(*_register(beta, "org.beta")).returncode == 0

    def publish(who: str, tool: str) -> tuple[int, str]:
        flags = ("--action", "deprecate", "--version", "1.0.0", "--reason", "other")
        key = tmp_path / "keys" / f"{who}.key"
        return run(
            "deplog",
            "publish",
            "--url",
            authority.url,
            "--key",
            key,
            "--tool",
            tool,
            *flags,
            cwd=home,
        )

    def revoke(*args: str) -> None:
        assert authority.run_cli("publisher", *args).returncode == 0

    refusals = [(publish("acme", "tool:org.beta/search"), "403 namespace_not_authorized")]
    revoke("revoke-key", "acme", "--key", publisher.verifier().vkey())
    refusals.append((publish("acme", "tool:org.acme/search"), "403 key_revoked"))
    revoke("revoke", "beta")
    refusals.append((publish("beta", "tool:org.beta/search"), "403 publisher_revoked"))
    for (status, err), answer in refusals:
        assert status == 1 and err.count("\n") == 1, err
        assert f"refused ({answer})" in err and "the envelope is saved in " in err, err
        assert "resubmit" not in err, err


def _register(signer: Signer, namespace: str) -> tuple[str, ...]:
    key = signer.verifier().vkey()
    return ("publisher", "add", signer.name, "--namespace", namespace, "--key", key)


def test_a_mistyped_log_key_file_is_named_in_every_command(
    authority: AuthorityProcess, home: Path
) -> None:
    typo, url = "keys/localhost_deplg.pub", authority.url
    for argv in (
        ("follow", url, "--once", "--log-key", typo),
        ("monitor", url, "--namespace", "org.acme", "--key-id", "0a0b0c0d", "--log-key", typo),
        ("export", url, "--out", "out", "--log-key", typo),
        ("publish", "--url", url, "--key", "acme.key", "--log-key", typo),
        ("verify-receipt", "r.tlog-proof", "--leaf", "leaf", "--log-key", typo),
        ("audit", "replay", "out", "--log-key", typo),
        ("audit", "map", "out", "--log-key", typo),
    ):
        status, err = run("deplog", *argv, cwd=home)
        assert status == 2 and err.count("\n") == 1, f"{argv}: {err}"
        assert f"--log-key: {typo}: no such file" in err, f"{argv}: {err}"


def test_publisher_add_where_there_is_no_authority_suggests_data_not_init(
    publisher: Signer, home: Path
) -> None:
    status, err = run("authority", *_register(publisher, "org.acme"), cwd=home)
    assert status == 1 and err.count("\n") == 1, err
    assert "data holds no authority" in err and "give --data" in err, err
    assert "init" not in err and list(home.iterdir()) == []


def _mistakes(url: str, vkey: str, key: Path) -> list[tuple[str, str, tuple[str | Path, ...]]]:
    """(what is wrong, program, argv): one of the three mistakes in each command."""
    notice = ("--action", "deprecate", "--version", "1.0.0", "--reason", "other")
    tool = "tool:org.acme/search"
    return [
        ("bad tool id", "deplog", ("publish", "--url", url, "--key", key, "--tool", "s", *notice)),
        ("bad tool id", "deplog", ("status", "search")),
        ("bad tool id", "deplog", ("check", "search", "1.0.0")),
        ("bad tool id", "deplog", ("audit", "status", "proof.json", "search", "1.0.0")),
        ("missing file", "deplog", ("inventory", "check", "nowhere.json")),
        ("missing file", "deplog", ("verify-receipt", "nowhere.tlog-proof", "--log-key", vkey)),
        ("missing file", "deplog", ("audit", "replay", "nowhere", "--log-key", vkey)),
        ("missing file", "deplog", ("audit", "status", "nowhere.json", tool, "1.0.0")),
        ("missing file", "deplog", ("follow", url, "--once", "--policy", "nowhere.policy")),
        ("missing file", "deplog", ("publish", "--url", url, "--resubmit", "nowhere.json")),
        ("missing file", "deplog", ("publish", "--url", url, "--key", "nowhere.key", *notice)),
        ("missing file", "witness", ("add-log", "--data", "../w", "--logs", "nowhere.policy")),
        ("usage error", "deplog", ("follow",)),
        ("usage error", "deplog", ("check", tool, "one")),
        ("usage error", "deplog", ("frobnicate",)),
        ("usage error", "authority", ("serve", "--port", "http")),
        ("usage error", "authority", ("publisher", "add", "acme")),
        ("usage error", "witness", ("serve", "--data", "../w")),
    ]


def test_a_bad_tool_id_a_missing_file_and_a_usage_error_exit_2_in_every_command(
    authority: AuthorityProcess, publisher: Signer, home: Path, tmp_path: Path
) -> None:
    witness = ("init", "--data", tmp_path / "w", "--keys", tmp_path / "wk", "--name", "w.ex/w")
    assert run("witness", *witness, cwd=tmp_path)[0] == 0
    key = tmp_path / "keys" / "acme.key"
    for what, program, argv in _mistakes(authority.url, authority.log_verifier.vkey(), key):
        status, err = run(program, *argv, cwd=home)
        shown = f"{what}: {program} {argv}: {status} {err!r}"
        assert status == 2 and status in DOCUMENTED_EXITS, shown
        assert err.startswith(f"{program}") and err.count("\n") == 1, shown
        assert "Traceback" not in err and list(home.iterdir()) == [], shown


@contextlib.asynccontextmanager
async def _web_server(status: int, content_type: str) -> AsyncIterator[str]:
    """A real HTTP server on 127.0.0.1 answering every GET with ``status``: its URL."""

    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=status, text="<html></html>", content_type=content_type)

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_fetch_failed_says_which_failure_it_was(
    authority: AuthorityProcess, home: Path, free_port: int
) -> None:
    key = authority.log_verifier.vkey()
    async with (
        _web_server(503, "text/plain") as failing,
        _web_server(200, "text/html") as website,
    ):
        cases = {
            f"http://127.0.0.1:{free_port}": "(connection refused: nothing listens at that",
            authority.url.replace("http://", "https://"): "(TLS failed: ",
            failing: "(HTTP 503)",
            website: "(not a deplog authority: no signed checkpoint at /checkpoint)",
            authority.url + "/v1": "(not a deplog authority: ",
        }
        for url, why in cases.items():
            argv = ("follow", url, "--once", "--log-key", key, "--tiles", "off")
            status, err = await asyncio.to_thread(run, "deplog", *argv, cwd=home)
            assert status == 1 and err.count("\n") == 1, f"{url}: {err}"
            assert err.startswith("deplog: fetch_failed: no usable answer from the authority ")
            assert why in err, f"{url}: {err}"


def test_follow_prints_its_progress_once(authority: AuthorityProcess, home: Path) -> None:
    key = authority.log_verifier.vkey()
    status, err = run("deplog", "follow", authority.url, "--once", "--log-key", key, cwd=home)
    assert status == 0, err
    assert err.count("verifying entries: 1/1 entries") == 1, err
