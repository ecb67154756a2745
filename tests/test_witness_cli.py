"""``witness`` files: witness.json as always written, refused in one line when malformed,
and one server per data directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from deplog.authority.witness.cli import CONFIG_FILE, LOCK_FILE, main
from deplog.client.plumbing.files import exclusive_lock

NAME = "witness.example/w1"


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """An initialized witness: its data and keys directories."""
    data, keys = tmp_path / "data", tmp_path / "keys"
    assert main(["init", "--data", str(data), "--keys", str(keys), "--name", NAME]) == 0
    return data, keys


def test_init_writes_todays_witness_json(dirs: tuple[Path, Path]) -> None:
    data, _ = dirs
    expected = '{\n  "name": "witness.example/w1",\n  "key": "witness.example_w1"\n}\n'
    assert (data / CONFIG_FILE).read_text() == expected
    assert (data / CONFIG_FILE).stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[]",
        '{"name": "witness.example/w1"}',
        '{"name": 7, "key": "witness.example_w1"}',
        '{"name": "witness.example/w1", "key": "../elsewhere"}',
        '{"name": "witness.example/w1", "key": ""}',
    ],
    ids=["not JSON", "not an object", "no key", "name not text", "key a path", "key empty"],
)
def test_a_malformed_witness_json_is_refused_in_one_line_naming_it(
    dirs: tuple[Path, Path], content: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data, _ = dirs
    (data / CONFIG_FILE).write_text(content)
    capsys.readouterr()
    assert main(["list-logs", "--data", str(data)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"witness: {data / CONFIG_FILE} is malformed")
    assert err.count("\n") == 1


def test_serve_refuses_a_data_directory_another_process_serves(
    dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    data, keys = dirs
    with exclusive_lock(data / LOCK_FILE) as owned:
        assert owned
        served = main(["serve", "--data", str(data), "--keys", str(keys), "--port", "0"])
    assert served == 1
    assert "another witness is already serving" in capsys.readouterr().err


def test_an_unusable_data_directory_is_one_line_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from deplog.authority.cli import main as authority_main

    missing = tmp_path / "file"
    missing.write_text("not a directory")
    for main_, prog in ((authority_main, "authority"), (main, "witness")):
        args = ["init", "--data", str(missing / "data"), "--keys", str(tmp_path / "keys")]
        if prog == "witness":
            args += ["--name", "w.example/w"]
        assert main_(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert err.startswith(f"{prog}: cannot use {missing / 'data'}")


def test_init_type_ml_dsa_44_makes_a_type_6_key_and_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from deplog.client.tlog.note import Verifier

    data, keys = tmp_path / "data", tmp_path / "keys"
    args = ["init", "--data", str(data), "--keys", str(keys), "--name", NAME]
    assert main([*args, "--type", "ml-dsa-44"]) == 0
    out = capsys.readouterr().out
    assert "created ml-dsa-44 witness key" in out
    vkey = out.strip().splitlines()[-1].removeprefix("witness verifier key: ")
    assert Verifier.parse_cosigner(vkey).sig_type == 0x06
    assert (keys / "witness.example_w1.key").stat().st_mode & 0o777 == 0o600
    assert main([*args, "--type", "ml-dsa-44"]) == 0  # idempotent
    assert main(args) == 1  # the default type is ed25519: another key
    err = capsys.readouterr().err
    assert "is an ml-dsa-44 key, not ed25519" in err and err.count("\n") == 1


def test_serve_refuses_verify_map_with_an_mldsa_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, keys = tmp_path / "data", tmp_path / "keys"
    args = ["init", "--data", str(data), "--keys", str(keys), "--name", NAME, "--type"]
    assert main([*args, "ml-dsa-44"]) == 0
    capsys.readouterr()
    serve = ["serve", "--data", str(data), "--keys", str(keys), "--port", "0"]
    assert main([*serve, "--verify-map", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("witness: --verify-map needs an Ed25519 witness key")
    assert "witness init --type ed25519" in err and err.count("\n") == 1
