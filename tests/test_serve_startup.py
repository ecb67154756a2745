"""``authority serve`` and ``witness serve`` bind their port before anything else: a busy
port is one line naming it and what to do, exit 69, and nothing is created."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from deplog.authority.cli import main as authority_main
from deplog.authority.http.plumbing import ADDRESS_UNAVAILABLE_EXIT
from deplog.authority.witness.cli import main as witness_main


def files_under(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


def test_authority_serve_on_a_busy_port_exits_69_and_creates_nothing(
    tmp_path: Path, busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    data, keys = tmp_path / "data", tmp_path / "keys"
    args = ["serve", "--data", str(data), "--keys", str(keys), "--port", str(busy_port)]
    assert authority_main(args) == ADDRESS_UNAVAILABLE_EXIT == 69
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and f"127.0.0.1:{busy_port}" in err and "--port" in err
    assert files_under(tmp_path) == []


def test_witness_serve_on_a_busy_port_exits_69_and_creates_nothing(
    tmp_path: Path, busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    data, keys = tmp_path / "data", tmp_path / "keys"
    init = ["init", "--data", str(data), "--keys", str(keys), "--name", "w.example/w"]
    assert witness_main(init) == 0
    before = files_under(tmp_path)
    capsys.readouterr()
    args = ["serve", "--data", str(data), "--keys", str(keys), "--port", str(busy_port)]
    assert witness_main(args) == 69
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and f"127.0.0.1:{busy_port}" in err and "--port" in err
    assert files_under(tmp_path) == before


@pytest.mark.parametrize("main", [authority_main, witness_main], ids=["authority", "witness"])
def test_a_host_that_is_not_an_address_here_exits_69_naming_it(
    tmp_path: Path, main: Callable[[list[str]], int], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["serve", "--data", str(tmp_path / "d"), "--keys", str(tmp_path / "k")]
    assert main([*args, "--host", "192.0.2.1", "--port", "0"]) == 69
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "192.0.2.1:0" in err and "--host" in err
    assert files_under(tmp_path) == []
