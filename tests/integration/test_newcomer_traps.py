"""A newcomer's traps on the command lines, each walked into as a new user would (issue 37,
section 4): ``deplog``, ``authority`` and ``witness`` in processes of their own, against a
real authority, each asserting one line on stderr, no traceback and a documented status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from deplog.client.tlog.keyfile import create_signer
from deplog.client.tlog.note import Signer
from tests.integration.harness import AuthorityProcess
from tests.integration.test_newcomer_operator import MODULES as SERVERS

pytestmark = pytest.mark.slow  # real authority processes

NO_SCHEME = "127.0.0.1:7460"
MODULES = {"deplog": "deplog.client.cli.main", **SERVERS}


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
