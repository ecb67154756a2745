"""The ``deplog`` command as a newcomer meets it: every error a sentence, nothing created by
a read, exit statuses a script can branch on, and help for every argument."""

from __future__ import annotations

import argparse
import errno
import importlib.metadata
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from deplog.client.cli import main as deplog_main_module
from deplog.client.cli import monitor as monitorcli
from deplog.client.cli import verdicts
from deplog.client.cli.audit import EXIT_NOT_PROVEN
from deplog.client.cli.main import main as deplog_main
from deplog.client.cli.main import parser
from deplog.client.cli.messages import NO_STATE_YET, SENTENCES, explain
from deplog.client.cli.trust import fork_error
from deplog.client.cli.verdicts import EXIT_REFUSE, EXIT_STALE, EXIT_UNKNOWN
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import ForkError, SuspectedForkError, TrustedState
from deplog.client.plumbing.storage_faults import file_fault
from tests.builders import ORIGIN, LocalLog

TOOL = "tool:org.acme/search"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = deplog_main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def synced(tmp_path: Path, local: LocalLog) -> Iterator[Path]:
    """A follower state verified just now: 1.0.0 revoked, 2.0.0 deprecated, the rest active."""
    path = tmp_path / "state.db"
    state = LocalState(path, ORIGIN)
    local.publish(action="revoke", reasons=["other"], affected={"versions": ["1.0.0"]})
    local.publish(affected={"versions": ["2.0.0"]})
    local.sync(TrustedState(state, local.signer.verifier()))
    state.close()
    yield path


# --- sentences ------------------------------------------------------------------


def test_every_error_code_has_a_sentence_of_one_line() -> None:
    assert set(SENTENCES) == set(ErrorCode)
    assert all(s and "\n" not in s and "``" not in s for s in SENTENCES.values())


def test_an_error_prints_its_code_then_its_sentence() -> None:
    class Missing(DeplogError):
        code = ErrorCode.KEY_MISSING

    assert explain(Missing()) == f"key_missing: {SENTENCES[ErrorCode.KEY_MISSING]}"


# --- keygen -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Bad Name", "org.acme/pub", "acme_co", ""])
def test_keygen_refuses_a_name_no_publisher_id_can_have_and_writes_nothing(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, "keygen", "--name", name, "--out", str(tmp_path / "keys"))
    assert status == 2
    assert err.startswith("deplog: --name: bad_key: ") and "lower-case letters" in err
    assert not (tmp_path / "keys").exists()


def test_keygen_never_overwrites_a_key_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "keys"
    assert run(capsys, "keygen", "--name", "acme", "--out", str(out))[0] == 0
    first = (out / "acme.key").read_bytes()
    status, _, err = run(capsys, "keygen", "--name", "acme", "--out", str(out))
    assert status == 2 and f"{out / 'acme.key'} already exists" in err
    assert (out / "acme.key").read_bytes() == first


@pytest.mark.parametrize(
    ("number", "status"),
    [(errno.EACCES, 77), (errno.EROFS, 77), (errno.ENOSPC, 73), (errno.EIO, 74), (errno.ENOENT, 1)],
)
def test_a_refused_file_exits_with_the_storage_fault_status(number: int, status: int) -> None:
    assert file_fault(OSError(number, os.strerror(number), "some.file")).exit_status == status


# --- read-only commands on no state ------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["status", TOOL],
        ["check", TOOL, "1.0.0"],
        ["inventory", "check", "{inventory}"],
    ],
    ids=["status", "check", "inventory-check"],
)
def test_a_read_only_command_before_any_follow_says_so_and_creates_nothing(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "inventory.json"
    inventory.write_text("[]")
    state = tmp_path / "state.db"
    args = [a.format(inventory=inventory) for a in argv]
    status, out, err = run(capsys, *args, "--state", str(state))
    assert (status, out) == (1, "")
    assert err == f"deplog: {state}: no such state file; {NO_STATE_YET}\n"
    assert sorted(tmp_path.iterdir()) == [inventory]


def test_inventory_diff_before_any_follow_says_so_and_creates_nothing(
    tmp_path: Path, local: LocalLog, capsys: pytest.CaptureFixture[str]
) -> None:
    assert local.log.published is not None
    note = tmp_path / "checkpoint"
    note.write_bytes(local.log.published.note)
    inventory = tmp_path / "inventory.json"
    inventory.write_text("[]")
    before = sorted(tmp_path.iterdir())
    status, _, err = run(
        capsys,
        *("inventory", "diff", str(inventory), "--state", str(tmp_path / "state.db")),
        *("--from", str(note), "--to", str(note), "--log-key", local.signer.verifier().vkey()),
    )
    assert status == 1 and NO_STATE_YET in err and "bad_range" not in err
    assert sorted(tmp_path.iterdir()) == before


def test_inventory_diff_takes_the_log_key_as_a_file(
    tmp_path: Path, synced: Path, local: LocalLog, capsys: pytest.CaptureFixture[str]
) -> None:
    assert local.log.published is not None
    note = tmp_path / "checkpoint"
    note.write_bytes(local.log.published.note)
    key_file = tmp_path / "log.pub"
    key_file.write_text(local.signer.verifier().vkey() + "\n")
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps([{"tool_id": TOOL, "version": "1.0.0"}]))
    status, out, err = run(
        capsys,
        *("inventory", "diff", str(inventory), "--state", str(synced)),
        *("--from", str(note), "--to", str(note), "--log-key", str(key_file)),
    )
    assert (status, err) == (0, "")
    assert json.loads(out)["report"] == "inventory-diff"


def test_a_bad_log_key_names_the_flag_and_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, "follow", "http://127.0.0.1:9", "--once", "--log-key", "not a key")
    assert status == 2 and err.startswith("deplog: --log-key: bad_key: ")
    assert not Path("deplog-state.db").exists()


def test_a_missing_input_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "gone.json"
    status, _, err = run(capsys, "inventory", "check", str(missing))
    assert status == 1 and err.startswith(
        f"deplog: cannot use {missing}: No such file or directory"
    )


# --- state files a follow cannot use ---------------------------------------------


def test_follow_into_a_corrupt_state_is_one_line_naming_it_with_exit_65(
    tmp_path: Path, local: LocalLog, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state.db"
    state.write_bytes(b"this is not a database, it is a file someone overwrote" * 100)
    key = local.signer.verifier().vkey()
    status, _, err = run(
        capsys, "follow", "http://127.0.0.1:9", "--once", "--log-key", key, "--state", str(state)
    )
    assert status == 65
    assert err.startswith(
        f"deplog: storage_corrupt: the stored data is corrupt (proven) on {state}"
    )
    assert "deplog follow again into a new --state" in err and err.count("\n") == 1
    assert state.exists()  # the operator's file is never removed


@pytest.mark.parametrize(
    "where", ["missing-dir/state.db", "."], ids=["no-directory", "a-directory"]
)
def test_follow_into_an_impossible_state_path_names_the_flag(
    where: str, tmp_path: Path, local: LocalLog, capsys: pytest.CaptureFixture[str]
) -> None:
    key = local.signer.verifier().vkey()
    state = tmp_path / where
    status, _, err = run(
        capsys, "follow", "http://127.0.0.1:9", "--once", "--log-key", key, "--state", str(state)
    )
    assert status == 2 and err.startswith("deplog: --state: ")


def another_log_key(tmp_path: Path) -> str:
    """The key of an authority started over under the same origin (a fresh log key)."""
    (tmp_path / "started-over").mkdir()
    return LocalLog(tmp_path / "started-over").signer.verifier().vkey()


def refused_as_another_log(err: str, state: Path, local: LocalLog) -> None:
    """The one line of ``state_for_another_log``: the file, the key it was built for, the fix."""
    assert err == (
        f"deplog: --state: state_for_another_log: {state} was built for the log key "
        f"{local.signer.verifier().vkey()}, not for the log key given (an authority started "
        "over with new keys is another log, not a fork of the old one); follow into a new "
        f"--state FILE, or delete {state} to start over\n"
    )


@pytest.mark.parametrize(
    "command",
    [
        ["follow", "http://127.0.0.1:9", "--once", "--tiles", "off"],
        [
            "monitor",
            "http://127.0.0.1:9",
            "--once",
            "--tiles",
            "off",
            "--namespace",
            "org.acme",
            "--key-id",
            "00000000",
        ],
    ],
    ids=["follow", "monitor"],
)
def test_following_into_a_state_of_another_log_key_is_a_usage_error_naming_it(
    command: list[str],
    tmp_path: Path,
    synced: Path,
    local: LocalLog,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused before anything is fetched (nothing listens at the URL), with no evidence."""
    key = another_log_key(tmp_path)
    before = sorted(tmp_path.iterdir())
    status, _, err = run(capsys, *command, "--log-key", key, "--state", str(synced))
    assert status == 2
    refused_as_another_log(err, synced, local)
    assert sorted(tmp_path.iterdir()) == before


def test_inventory_diff_refuses_a_state_of_another_log_key_naming_it(
    tmp_path: Path, synced: Path, local: LocalLog, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "started-over").mkdir()
    restarted = LocalLog(tmp_path / "started-over")
    assert restarted.log.published is not None
    note = tmp_path / "checkpoint"
    note.write_bytes(restarted.log.published.note)
    inventory = tmp_path / "inventory.json"
    inventory.write_text("[]")
    status, _, err = run(
        capsys,
        *("inventory", "diff", str(inventory), "--state", str(synced)),
        *("--from", str(note), "--to", str(note)),
        *("--log-key", restarted.signer.verifier().vkey()),
    )
    assert status == 2
    refused_as_another_log(err, synced, local)


# --- verdicts and exit statuses ------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "expected", "verdict"),
    [
        ("1.0.0", EXIT_REFUSE, "refuse (revoked)"),
        ("2.0.0", 0, "serve_with_warning (deprecated)"),
        ("3.0.0", 0, "serve (active)"),
        ("not-a-version", EXIT_UNKNOWN, "unknown (bad_identifier)"),
    ],
)
def test_check_prints_the_guards_verdict_and_exits_by_it(
    version: str,
    expected: int,
    verdict: str,
    synced: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = run(capsys, "check", TOOL, version, "--state", str(synced))
    assert status == expected
    assert out.startswith(f"{verdict}: {TOOL} {version}; processed through size ")


def test_check_json_carries_the_processed_through_checkpoint(
    synced: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "check", TOOL, "1.0.0", "--state", str(synced), "--json")
    answer = json.loads(out)
    assert status == EXIT_REFUSE
    assert (answer["verdict"], answer["reason"], answer["may_serve"]) == (
        "refuse",
        "revoked",
        False,
    )
    assert answer["status"]["status"] == "revoked"
    assert answer["processed_through"]["checkpoint"].startswith(ORIGIN + "\n")


@pytest.mark.parametrize(("version", "expected"), [("1.0.0", EXIT_REFUSE), ("2.0.0", 0)])
def test_check_writes_the_proof_behind_its_verdict_for_audit_status(
    version: str,
    expected: int,
    synced: Path,
    local: LocalLog,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    proof = tmp_path / "search.proof.json"
    checked = run(capsys, "check", TOOL, version, "--state", str(synced), "--proof", str(proof))
    key = local.signer.verifier().vkey()
    audited = run(capsys, "audit", "status", "--log-key", key, str(proof), TOOL, version)
    assert (checked[0], checked[2], audited[0]) == (expected, "", expected)
    assert audited[1].startswith(f"ok: {TOOL} {version}: ")


def test_check_json_names_the_proof_file(
    synced: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proof = tmp_path / "proof.json"
    _, out, _ = run(
        capsys, "check", TOOL, "3.0.0", "--state", str(synced), "--proof", str(proof), "--json"
    )
    assert json.loads(out)["proof_file"] == str(proof)
    assert json.loads(proof.read_bytes())["result"] == "present"


def test_a_stale_check_writes_no_proof_and_says_so(
    synced: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proof = tmp_path / "proof.json"
    status, _, err = run(
        capsys, "check", TOOL, "3.0.0", "--state", str(synced), "--max-age", "0.000001",
        "--proof", str(proof),
    )  # fmt: skip
    assert (status, proof.exists()) == (EXIT_STALE, False)
    assert err == f"deplog: no proof written to {proof}: the verdict is stale (checkpoint_stale)\n"


def test_a_proof_file_that_cannot_be_written_is_named(
    synced: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "no-such-dir" / "proof.json"
    status, _, err = run(
        capsys, "check", TOOL, "3.0.0", "--state", str(synced), "--proof", str(where)
    )
    assert status == 1
    assert err.startswith(f"deplog: --proof: cannot write {where}: ")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("number", "status", "advice"),
    [
        (errno.EACCES, 77, "give the user running this command access"),
        (errno.ENOSPC, 73, "free space on its file system"),
        (errno.EIO, 74, "check the device"),
    ],
)
def test_a_proof_file_that_cannot_be_written_exits_with_its_storage_fault_status(
    synced: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    number: int,
    status: int,
    advice: str,
) -> None:
    """The fault is the file system's (a full disk, a denied directory, a failing device):
    the exit status says which, as for the state file, and the line names the file given
    (not the temporary one beside it) and what to do."""
    where = tmp_path / "proof.json"

    def refuse(path: Path, chunks: object) -> None:
        raise OSError(number, os.strerror(number), str(path.with_name(".proof.json.tmp")))

    monkeypatch.setattr(verdicts, "write_atomic", refuse)
    code, _, err = run(
        capsys, "check", TOOL, "3.0.0", "--state", str(synced), "--proof", str(where)
    )
    assert code == status
    assert err.startswith(f"deplog: --proof: cannot write {where}: {os.strerror(number)} (")
    assert advice in err and len(err.splitlines()) == 1 and not where.exists()


def test_a_state_older_than_max_age_is_stale(
    synced: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(
        capsys, "check", TOOL, "3.0.0", "--state", str(synced), "--max-age", "0.000001"
    )
    assert status == EXIT_STALE and out.startswith("stale (checkpoint_stale)")


def test_status_is_text_by_default_and_exits_5_when_a_version_is_refused(
    synced: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "status", TOOL, "--state", str(synced))
    assert status == EXIT_REFUSE
    lines = out.splitlines()
    assert lines[0] == f"{TOOL}: revoked (the worst of 2 rows)"
    assert lines[1].startswith(f"{TOOL} 1.0.0: revoked since ")
    assert lines[2].startswith(f"{TOOL} 2.0.0: deprecated since ")
    assert lines[-1].startswith("processed through size ")


def test_status_shows_a_revoked_range_with_its_advisories_and_exits_5(
    tmp_path: Path, local: LocalLog, capsys: pytest.CaptureFixture[str]
) -> None:
    """The weather example: 1.0.0 to 2.0.0 revoked for security, 2.3.1 deprecated."""
    state = tmp_path / "state.db"
    local.publish(
        action="revoke",
        reasons=["security"],
        advisories=["CVE-2026-1234", "GHSA-23cf-gh45-mpqr"],
        affected={
            "ranges": [{"type": "SEMVER", "events": [{"introduced": "1.0.0"}, {"fixed": "2.0.0"}]}]
        },
        message="remote code execution",
    )
    local.publish(affected={"versions": ["2.3.1"]})
    local.sync(TrustedState(LocalState(state, ORIGIN), local.signer.verifier()))
    status, out, _ = run(capsys, "status", TOOL, "--state", str(state))
    assert status == EXIT_REFUSE
    assert out.splitlines()[2].startswith(
        f"{TOOL} 1.0.0 up to 2.0.0 (not included): revoked since "
    )
    row = out.splitlines()[2]
    assert "; reasons security; advisories CVE-2026-1234, GHSA-23cf-gh45-mpqr;" in row
    assert '; the publisher says "remote code execution"' in row


def test_status_of_a_tool_no_notice_names_says_so_and_exits_0(
    synced: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "status", "tool:org.acme/other", "--state", str(synced))
    assert status == 0
    assert out.splitlines()[0] == "no notice names tool:org.acme/other as of checkpoint 3"


def test_status_of_a_served_version_exits_0_and_json_is_one_object(
    synced: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "status", TOOL, "2.0.0", "--state", str(synced), "--json")
    answer = json.loads(out)
    assert status == 0
    assert answer["status"] == "deprecated" and "processed_through" in answer


# --- help and version --------------------------------------------------------------------


def _parsers(p: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _parsers(child)


_WALKED = list(_parsers(parser()))


@pytest.mark.parametrize("p", _WALKED, ids=[p.prog for p in _WALKED])
def test_every_argument_has_help_and_shows_its_default(p: argparse.ArgumentParser) -> None:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        assert action.help, f"{p.prog} {action.dest} has no help text"
        default = action.default
        if default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0:
            assert "default" in action.help, f"{p.prog} {action.dest} hides its default"
    text = p.format_help()
    assert "``" not in text and "`" not in text


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        deplog_main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out == f"deplog {importlib.metadata.version('deplog')}\n"


def test_follow_and_monitor_word_a_suspected_fork_alike_and_exit_not_proven(
    tmp_path: Path,
) -> None:
    evidence = tmp_path / "suspected.evidence"
    error = fork_error(SuspectedForkError("proof fails", evidence))
    assert error.exit_status == EXIT_NOT_PROVEN
    assert str(error).startswith("suspected_fork: ")
    assert "not proven" in str(error) and str(evidence) in str(error)
    assert "follow_log" in vars(monitorcli) and "follow_log" in vars(deplog_main_module)


def test_a_proven_fork_names_its_evidence_with_the_default_failure_status(
    tmp_path: Path,
) -> None:
    evidence = tmp_path / "fork.evidence"
    error = fork_error(ForkError("two roots", evidence))
    assert error.exit_status == 1
    assert str(error) == f"fork detected; evidence saved to {evidence}"
