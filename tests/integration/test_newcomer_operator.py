"""A newcomer operating ``authority`` and ``witness`` from the docs, down every error path:
each ends in one line on stderr, no traceback, an exit status from the one table of
docs/deplog-command.md, and the file, flag or port it is about named in the message."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from deplog.client.tlog.note import Signer
from tests.doctext import ROOT, exit_statuses
from tests.integration.attached_faults import needs_strace
from tests.integration.harness import AuthorityProcess
from tests.integration.syscall_faults import Fault, refused_start

pytestmark = pytest.mark.slow  # authority and witness commands in processes

DOCUMENTED_EXITS = exit_statuses(ROOT / "docs" / "deplog-command.md", "## Exit statuses")
"""The one exit-status table of every command (docs/deplog-command.md), read from the page."""
NOT_A_KEY = "garbage"


@dataclass
class Ran:
    status: int
    out: str
    err: str


MODULES = {"authority": "deplog.authority.cli", "witness": "deplog.authority.witness.cli"}


def command(program: str, *args: str | Path) -> Ran:
    done = subprocess.run(
        [sys.executable, "-m", MODULES[program], *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def assert_one_clear_line(ran: Ran, status: int, program: str, *named: str) -> None:
    assert "Traceback" not in ran.err
    assert ran.status == status and status in DOCUMENTED_EXITS
    assert ran.err.startswith(f"{program}: ") and ran.err.count("\n") == 1
    for thing in named:
        assert thing in ran.err


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "data", tmp_path / "keys"


@pytest.mark.parametrize("program", ["authority", "witness"])
def test_serve_on_a_busy_port(program: str, dirs: tuple[Path, Path], busy_port: int) -> None:
    data, keys = dirs
    ran = command(program, "serve", "--data", data, "--keys", keys, "--port", busy_port)
    assert_one_clear_line(ran, 69, program, f"127.0.0.1:{busy_port}", "--port")
    assert not data.exists() and not keys.exists()


@pytest.mark.parametrize("program", ["authority", "witness"])
def test_serve_on_an_address_of_another_machine(program: str, dirs: tuple[Path, Path]) -> None:
    data, keys = dirs
    ran = command(program, "serve", "--data", data, "--keys", keys, "--host", "192.0.2.1")
    assert_one_clear_line(ran, 69, program, "192.0.2.1", "--host")


@pytest.mark.parametrize("program", ["authority", "witness"])
def test_init_under_a_file(program: str, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    name = ["--name", "w.example/w"] if program == "witness" else []
    ran = command(program, "init", "--data", blocker / "data", "--keys", tmp_path / "k", *name)
    assert_one_clear_line(ran, 2, program, str(blocker / "data"))


def test_check_before_init(dirs: tuple[Path, Path]) -> None:
    data, keys = dirs
    ran = command("authority", "check", "--data", data, "--keys", keys)
    assert_one_clear_line(ran, 1, "authority", str(data), "give --data")
    assert "authority init" not in ran.err  # that would start another log


def test_list_logs_before_init(dirs: tuple[Path, Path]) -> None:
    ran = command("witness", "list-logs", "--data", dirs[0])
    assert_one_clear_line(ran, 1, "witness", str(dirs[0]), "witness init")


def test_init_with_an_origin_that_is_no_key_name(dirs: tuple[Path, Path]) -> None:
    data, keys = dirs
    ran = command("authority", "init", "--data", data, "--keys", keys, "--origin", "Bad Name")
    assert_one_clear_line(ran, 1, "authority", "--origin", "nothing was created")
    assert not data.exists() and not keys.exists()


@pytest.fixture
def initialized(dirs: tuple[Path, Path]) -> tuple[Path, Path]:
    data, keys = dirs
    assert command("authority", "init", "--data", data, "--keys", keys).status == 0
    return data, keys


def test_a_keys_directory_without_the_log_key(initialized: tuple[Path, Path]) -> None:
    data, keys = initialized
    elsewhere = keys.parent / "elsewhere"
    ran = command("authority", "check", "--data", data, "--keys", elsewhere)
    named = str(elsewhere / "localhost_deplog.key")
    assert_one_clear_line(ran, 1, "authority", "key_missing: ", named, "authority init")


def test_a_log_key_others_can_read(initialized: tuple[Path, Path]) -> None:
    data, keys = initialized
    key = keys / "localhost_deplog.key"
    key.chmod(0o644)
    ran = command("authority", "check", "--data", data, "--keys", keys)
    assert_one_clear_line(ran, 1, "authority", "key_permissions: ", str(key), "chmod 600")


def test_a_witness_keys_directory_without_its_key(tmp_path: Path) -> None:
    data, keys = tmp_path / "w", tmp_path / "k"
    assert (
        command("witness", "init", "--data", data, "--keys", keys, "--name", "w.ex/w").status == 0
    )
    ran = command("witness", "serve", "--data", data, "--keys", tmp_path / "none", "--port", "0")
    named = str(tmp_path / "none" / "w.ex_w.key")
    assert_one_clear_line(ran, 1, "witness", "key_missing: ", named, "witness init")


def test_a_quorum_larger_than_the_witnesses(initialized: tuple[Path, Path]) -> None:
    data, keys = initialized
    ran = command("authority", "policy", "--data", data, "--keys", keys, "--quorum", "5")
    assert_one_clear_line(ran, 1, "authority", "--quorum 5", "authority witness add")


def test_a_witness_key_that_is_not_a_key(initialized: tuple[Path, Path]) -> None:
    data, keys = initialized
    add = ("witness", "add", "--data", data, "--keys", keys, "--url", "https://w.example/")
    ran = command("authority", *add, "--key", NOT_A_KEY)
    assert_one_clear_line(ran, 1, "authority", "bad_key: ")


def test_removing_a_witness_that_is_not_there(initialized: tuple[Path, Path]) -> None:
    data, keys = initialized
    ran = command("authority", "witness", "remove", "w.example", "--data", data, "--keys", keys)
    assert_one_clear_line(ran, 1, "authority", "authority witness list")


def test_registering_a_publisher_with_a_key_that_is_not_a_key(
    initialized: tuple[Path, Path],
) -> None:
    data, keys = initialized
    register = ("publisher", "add", "acme", "--namespace", "org.acme", "--key", NOT_A_KEY)
    ran = command("authority", *register, "--data", data, "--keys", keys)
    assert_one_clear_line(ran, 1, "authority", "bad_key")


def test_trusting_a_log_key_that_is_not_a_key(tmp_path: Path) -> None:
    data = tmp_path / "w"
    init = ("init", "--data", data, "--keys", tmp_path / "k", "--name", "w.example/w")
    assert command("witness", *init).status == 0
    ran = command("witness", "add-log", "--data", data, "--key", NOT_A_KEY)
    assert_one_clear_line(ran, 1, "witness", "bad_log_key: ")


@pytest.mark.parametrize("program", ["authority", "witness"])
def test_an_unknown_command_is_a_usage_error(program: str) -> None:
    ran = command(program, "frobnicate")
    assert "Traceback" not in ran.err and ran.status == 2 and "frobnicate" in ran.err


def test_verify_on_start_and_the_background_audit_show_progress(tmp_path: Path) -> None:
    authority = AuthorityProcess(tmp_path / "authority", extra_args=["--verify-on-start"])
    authority.init()
    authority.add_publisher(Signer.generate("acme-key"), "org.acme")
    authority.start()
    db = authority.data / "log.db"
    deadline = time.monotonic() + 30
    while f"storage audit of {db}: 1/1 leaves" not in authority.output.read_text():
        assert time.monotonic() < deadline, "the background audit showed no progress"
        time.sleep(0.05)
    assert authority.stop() == 0
    printed = authority.output.read_text()
    assert f"checking {db}: 1/1 leaves" in printed
    assert printed.index(f"checking {db}: 1/1 leaves") < printed.index("serving on")
    assert "Traceback" not in printed


@needs_strace
@pytest.mark.parametrize(
    ("program", "lock"), [("authority", "authority.lock"), ("witness", "witness.lock")]
)
def test_a_lock_file_the_server_may_not_open_exits_77_naming_it(
    program: str, lock: str, tmp_path: Path
) -> None:
    data, keys = tmp_path / "data", tmp_path / "keys"
    name = ["--name", "w.ex/w"] if program == "witness" else []
    assert command(program, "init", "--data", data, "--keys", keys, *name).status == 0
    serve = [sys.executable, "-m", MODULES[program], "serve", "--data", str(data)]
    denied = Fault("lock denied", ("openat",), "EACCES", "1+", (lock,))
    refused = refused_start([*serve, "--keys", str(keys), "--port", "0"], denied, data)
    assert refused.status == 77
    assert refused.line.startswith(f"{program}: cannot use {data / lock}: Permission denied")


@needs_strace
def test_a_log_key_the_authority_may_not_read_exits_77_naming_it(
    initialized: tuple[Path, Path],
) -> None:
    data, keys = initialized
    check = [sys.executable, "-m", MODULES["authority"], "check", "--data", str(data)]
    denied = Fault("key denied", ("openat",), "EACCES", "1+", ("localhost_deplog.key",))
    refused = refused_start([*check, "--keys", str(keys)], denied, keys)
    assert refused.status == 77
    assert refused.line.startswith(f"authority: cannot use {keys / 'localhost_deplog.key'}")


@needs_strace
@pytest.mark.parametrize("program", ["authority", "witness"])
def test_a_data_directory_the_server_may_not_write_exits_77_and_creates_no_keys(
    program: str, tmp_path: Path
) -> None:
    """The kernel answers EACCES for the data directory (strace, as a read-only or
    foreign-owned directory would for a non-root user): no key is created elsewhere."""
    data, keys = tmp_path / "data", tmp_path / "keys"
    data.mkdir()
    args = [sys.executable, "-m", MODULES[program], "init", "--data", str(data)]
    args += ["--keys", str(keys), *(["--name", "w.ex/w"] if program == "witness" else [])]
    denied = Fault("data denied", ("access", "faccessat", "faccessat2"), "EACCES", "1+", ("data",))
    refused = refused_start(args, denied, tmp_path)
    assert refused.status == 77
    assert refused.line.startswith(f"{program}: cannot use {data.absolute()}")
    assert not keys.exists() and list(data.iterdir()) == []
