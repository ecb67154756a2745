"""``authority`` and ``witness`` operator commands: what they print, as text and as JSON,
and the sentences that say what to do when they refuse."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from deplog.authority.cli import ADMIN_SOCKET, LOCK_FILE
from deplog.authority.cli import main as authority_main
from deplog.authority.config import CONFIG_FILE, AuthorityConfig
from deplog.authority.witness.cli import main as witness_main
from deplog.client.plumbing.files import exclusive_lock
from deplog.client.tlog.cosignature import cosigner
from deplog.client.tlog.note import Signer
from tests.conftest import BACKENDS
from tests.map_formats import write_format_two_tables

WITNESS_A = cosigner(Signer.generate("a.witness.example")).verifier().vkey()
PUBLISHER = Signer.generate("acme-key")


@dataclass
class Authority:
    """An initialized authority's directories, and its command run in-process."""

    data: Path
    keys: Path
    capsys: pytest.CaptureFixture[str]
    db: str | None = None
    """``--db`` (a PostgreSQL URL), given to the commands that read or write the log."""

    def run(self, *args: str) -> tuple[int, str, str]:
        where = ["--data", str(self.data), "--keys", str(self.keys)]
        if self.db is not None and args[0] in ("init", "check", "publisher"):
            where += ["--db", self.db]
        status = authority_main([*args, *where])
        out, err = self.capsys.readouterr()
        return status, out, err

    def config(self) -> AuthorityConfig:
        return AuthorityConfig.load(self.data / CONFIG_FILE)

    @property
    def log_name(self) -> str:
        """How the commands name the log's database."""
        return self.db if self.db is not None else str(self.data / "log.db")


@pytest.fixture
def authority(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Authority:
    files = Authority(tmp_path / "data", tmp_path / "keys", capsys)
    assert files.run("init", "--origin", "cli.deplog.example/log")[0] == 0
    return files


@pytest.fixture(params=BACKENDS)
def log_authority(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Authority:
    """``authority`` on both backends: on PostgreSQL ``authority migrate`` then ``init``
    with ``--db`` on a fresh database (the publisher and check commands' subject is the
    log)."""
    db: str | None = None
    if request.param == "postgresql":
        db = request.getfixturevalue("pg_url")
        assert authority_main(["migrate", "--db", db]) == 0
    files = Authority(tmp_path / "data", tmp_path / "keys", capsys, db)
    assert files.run("init", "--origin", "cli.deplog.example/log")[0] == 0
    return files


def test_a_quorum_above_the_witnesses_says_how_to_add_witnesses(authority: Authority) -> None:
    status, out, err = authority.run("policy", "--quorum", "5")
    assert (status, out) == (1, "")
    assert err.startswith("authority: --quorum 5 needs 5 witnesses, but this authority has 1")
    assert "authority witness add" in err and err.count("\n") == 1


def test_witness_add_of_a_known_key_with_a_new_url_says_it_replaced_it(
    authority: Authority,
) -> None:
    add = ("witness", "add", "--key", WITNESS_A, "--url")
    assert authority.run(*add, "https://old.example/")[1].startswith(
        "witness a.witness.example added"
    )
    status, out, _ = authority.run(*add, "https://new.example/")
    assert status == 0
    assert "https://old.example/ replaced by https://new.example/" in out
    assert [w.url for w in authority.config().witnesses] == ["https://new.example/"]


def test_witness_list_prints_text_and_the_documented_json(authority: Authority) -> None:
    assert authority.run("witness", "list")[1] == (
        "no external witnesses: add one with 'authority witness add'\n"
    )
    authority.run("witness", "add", "--key", WITNESS_A, "--url", "https://a.example/")
    assert authority.run("witness", "list")[1] == (
        f"a.witness.example  https://a.example/  {WITNESS_A}\n"
    )
    listed = json.loads(authority.run("witness", "list", "--json")[1])
    assert listed == {
        "witnesses": [
            {
                "name": "a.witness.example",
                "url": "https://a.example/",
                "key": WITNESS_A,
                "tree_lines": False,
            }
        ]
    }


@pytest.mark.parametrize("named_by", ["name", "key"])
def test_witness_remove_takes_its_name_or_its_key(authority: Authority, named_by: str) -> None:
    authority.run("witness", "add", "--key", WITNESS_A, "--url", "https://a.example/")
    status, out, _ = authority.run(
        "witness", "remove", "a.witness.example" if named_by == "name" else WITNESS_A
    )
    assert status == 0 and "removed" in out
    assert authority.config().witnesses == ()


def test_witness_remove_of_an_unknown_witness_changes_nothing(authority: Authority) -> None:
    authority.run("witness", "add", "--key", WITNESS_A, "--url", "https://a.example/")
    before = (authority.data / CONFIG_FILE).read_bytes()
    status, _, err = authority.run("witness", "remove", "b.witness.example")
    assert status == 1 and "'authority witness list' shows them" in err
    assert (authority.data / CONFIG_FILE).read_bytes() == before


def test_publisher_list_prints_text_and_json_with_the_api_shape(log_authority: Authority) -> None:
    authority = log_authority
    assert "no publishers registered" in authority.run("publisher", "list")[1]
    vkey = PUBLISHER.verifier().vkey()
    register = ("publisher", "add", "acme", "--namespace", "org.acme", "--key", vkey)
    assert authority.run(*register)[0] == 0
    status, out, _ = authority.run("publisher", "list")
    key_id = PUBLISHER.verifier().key_id.hex()
    assert (status, out.splitlines()) == (
        0,
        ["acme (active)", "  namespaces: org.acme", f"  key {key_id} (active): {vkey}"],
    )
    listed = json.loads(authority.run("publisher", "list", "--json")[1])
    assert [p["publisher"] for p in listed["publishers"]] == ["acme"]
    assert listed["publishers"][0]["keys"][0]["key"] == vkey


def test_init_refuses_an_origin_that_is_no_key_name_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, keys = tmp_path / "data", tmp_path / "keys"
    args = ["init", "--data", str(data), "--keys", str(keys), "--origin", "Bad Name"]
    assert authority_main(args) == 1
    assert capsys.readouterr().err.startswith("authority: --origin must be a key name")
    assert list(tmp_path.iterdir()) == []


def test_witness_init_refuses_a_name_that_is_no_key_name_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["init", "--data", str(tmp_path / "d"), "--keys", str(tmp_path / "k")]
    assert witness_main([*args, "--name", "org.acme/w+1"]) == 1
    assert capsys.readouterr().err.startswith("witness: --name must be a key name")
    assert list(tmp_path.iterdir()) == []


def test_a_refusal_prints_its_code_and_its_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "d"
    witness_main(["init", "--data", str(data), "--keys", str(tmp_path / "k"), "--name", "w.ex/w"])
    capsys.readouterr()
    assert witness_main(["add-log", "--data", str(data), "--key", "garbage"]) == 1
    assert capsys.readouterr().err == (
        "witness: bad_log_key: not a type 0x01 Ed25519 log verifier key\n"
    )


def test_list_logs_json_has_the_documented_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "d"
    witness_main(["init", "--data", str(data), "--keys", str(tmp_path / "k"), "--name", "w.ex/w"])
    log_key = Signer.generate("log.example/l").verifier().vkey()
    assert witness_main(["add-log", "--data", str(data), "--key", log_key]) == 0
    capsys.readouterr()
    assert witness_main(["list-logs", "--data", str(data), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "logs": [{"origin": "log.example/l", "vkey": log_key, "size": None, "cosigned_at": None}]
    }


def test_check_shows_its_progress_on_stderr_and_its_result_on_stdout(
    log_authority: Authority,
) -> None:
    authority = log_authority
    status, out, err = authority.run("check")
    assert status == 0 and out.startswith("ok: 0 leaves")
    vkey = PUBLISHER.verifier().vkey()
    authority.run("publisher", "add", "acme", "--namespace", "org.acme", "--key", vkey)
    status, out, err = authority.run("check")
    assert status == 0 and out.startswith("ok: 1 leaves")
    lines = err.splitlines()
    assert lines[0].startswith(f"checking {authority.log_name}: 0/1 leaves (")
    assert lines[-1].startswith(f"checking {authority.log_name}: 1/1 leaves (")


def test_a_publisher_change_while_the_server_cannot_be_reached_says_so(
    authority: Authority,
) -> None:
    vkey = PUBLISHER.verifier().vkey()
    with exclusive_lock(authority.data / LOCK_FILE) as owned:  # as a serving authority does
        assert owned
        status, _, err = authority.run(
            "publisher", "add", "acme", "--namespace", "org.acme", "--key", vkey
        )
    assert status == 1
    assert err.startswith(
        f"authority: cannot reach the authority serving this data directory through "
        f"{authority.data / ADMIN_SOCKET}"
    )


def test_publisher_changes_and_check_print_their_json_shapes(log_authority: Authority) -> None:
    authority = log_authority
    vkey = PUBLISHER.verifier().vkey()
    register = ("publisher", "add", "acme", "--namespace", "org.acme", "--key", vkey)
    status, out, _ = authority.run(*register, "--json")
    assert (status, json.loads(out)) == (0, {"publisher": "acme", "action": "register", "index": 0})
    status, out, _ = authority.run("check", "--json")
    assert (status, json.loads(out)) == (0, {"size": 1, "problem": None})


def test_copy_into_a_directory_that_does_not_exist_is_one_line_and_writes_nothing(
    authority: Authority, tmp_path: Path
) -> None:
    target = tmp_path / "no" / "such" / "copy.db"
    status, _, err = authority.run("copy", "--from", authority.log_name, "--to", str(target))
    assert status != 0 and "Traceback" not in err
    assert err.strip().count("\n") == 0 and str(target.parent) in err
    assert not (tmp_path / "no").exists()


def test_copy_of_a_log_whose_map_is_of_an_older_format_is_one_line(
    authority: Authority, tmp_path: Path
) -> None:
    conn = sqlite3.connect(authority.data / "log.db")
    write_format_two_tables(conn)  # an older deplog's empty map tables
    conn.close()
    status, _, err = authority.run(
        "copy", "--from", authority.log_name, "--to", str(tmp_path / "copy.db")
    )
    assert status != 0 and "Traceback" not in err
    assert "start the authority on it once" in err and err.strip().count("\n") == 0
    assert not (tmp_path / "copy.db").exists()


WITNESS_PQ = Signer.generate("pq.witness.example", 0x06).verifier().vkey()


def test_witness_add_takes_mldsa_and_tree_lines_witnesses_and_policy_names_them(
    authority: Authority,
) -> None:
    from deplog.client.tlog.policy import Policy

    assert (
        authority.run("witness", "add", "--key", WITNESS_PQ, "--url", "https://pq.example/")[0] == 0
    )
    status, out, _ = authority.run(
        "witness", "add", "--key", WITNESS_A, "--url", "https://a.example/", "--tree-lines"
    )
    assert status == 0 and "added" in out
    saved = json.loads((authority.data / CONFIG_FILE).read_text())
    assert saved["witnesses"] == [
        {"url": "https://pq.example/", "key": WITNESS_PQ},
        {"url": "https://a.example/", "key": WITNESS_A, "tree_lines": True},
    ]
    assert (
        authority.run("witness", "list")[1].splitlines()[1].endswith("(signs the tree lines only)")
    )
    status, out, _ = authority.run("policy", "--quorum", "3")
    assert status == 0
    assert "#deplog: tree-lines a.witness.example\n" in out
    policy = Policy.parse(out)
    assert policy.witnesses["pq.witness.example"].verifier.sig_type == 0x06
    assert policy.witnesses["a.witness.example"].tree_lines
    # Adding it again without the flag changes how it is accepted, and says so.
    status, out, _ = authority.run(
        "witness", "add", "--key", WITNESS_A, "--url", "https://a.example/"
    )
    assert "now accepted signing the whole checkpoint" in out
    assert not authority.config().witnesses[1].tree_lines


def test_tree_lines_is_refused_for_an_mldsa_witness(authority: Authority) -> None:
    status, _, err = authority.run(
        "witness", "add", "--key", WITNESS_PQ, "--url", "https://pq.example/", "--tree-lines"
    )
    assert status == 1 and err.count("\n") == 1
    assert "--tree-lines applies to Ed25519 (type 0x04) witness keys" in err
    assert authority.config().witnesses == ()
