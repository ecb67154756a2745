"""The error classes are the identity: every code has exactly one class, every class its codes.

The classes are found by importing every module of both packages, so a class
added anywhere is held to the same rules: the codes classes own are disjoint
and together are exactly ``ErrorCode``; a class refuses to carry another's
code. The commands' one failure type, ``CLIError``, is checked on each of the
three commands.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

import deplog.authority
import deplog.client
from deplog.authority import cli as authority_cli
from deplog.authority.witness import cli as witness_cli
from deplog.client.cli import main as deplog_cli
from deplog.client.errors import (
    CLIError,
    DeplogError,
    ErrorCode,
    FormatError,
    TooLargeError,
    VerificationError,
)
from deplog.client.model.notice import NoticeError, NoticeSignatureError
from deplog.client.tlog.proofs import TreeMismatchError


def _every_module() -> None:
    for package in (deplog.client, deplog.authority):
        for found in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(found.name)


def _subclasses(cls: type[DeplogError]) -> Iterator[type[DeplogError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def error_classes() -> list[type[DeplogError]]:
    """Every DeplogError class of deplog, private ones included."""
    _every_module()
    return sorted(
        {c for c in _subclasses(DeplogError) if c.__module__.startswith("deplog.")},
        key=lambda c: (c.__module__, c.__qualname__),
    )


def owners() -> dict[ErrorCode, type[DeplogError]]:
    """The class that owns each code."""
    return {code: cls for cls in error_classes() for code in cls.codes}


CLASSES = error_classes()


def test_no_two_classes_share_a_code() -> None:
    seen: dict[ErrorCode, str] = {}
    for cls in CLASSES:
        for code in cls.codes:
            assert code not in seen, f"{code} is carried by {seen[code]} and {cls.__qualname__}"
            seen[code] = cls.__qualname__


def test_every_code_has_a_class() -> None:
    assert set(owners()) == set(ErrorCode)


def test_codes_are_their_own_names_in_lower_case() -> None:
    """One spelling per code: the member name is the value, upper-cased."""
    assert all(code.name == code.value.upper() for code in ErrorCode)


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__qualname__ for c in CLASSES])
def test_a_class_refuses_the_codes_of_other_classes(cls: type[DeplogError]) -> None:
    foreign = next(code for code in ErrorCode if code not in cls.codes)
    # Through the base constructor, which every class's own constructor ends in.
    with pytest.raises(TypeError):
        DeplogError.__init__(cls.__new__(cls), foreign)


@pytest.mark.parametrize("base", [DeplogError, FormatError, VerificationError])
def test_a_base_class_owns_no_code_and_cannot_be_raised(base: type[DeplogError]) -> None:
    assert base.codes == frozenset()
    with pytest.raises(TypeError):
        base()


def test_a_class_with_several_codes_and_no_default_needs_one_named() -> None:
    with pytest.raises(TypeError):
        NoticeError()
    assert NoticeError(ErrorCode.BAD_TOOL_ID).code == "bad_tool_id"


def test_the_default_code_is_the_one_declared() -> None:
    assert NoticeSignatureError().code is ErrorCode.BAD_SIGNATURE
    assert TooLargeError().code is ErrorCode.TOO_LARGE


def test_codes_are_owned_not_inherited() -> None:
    """A subclass that declares nothing owns nothing: it cannot carry its base's codes."""

    class Narrower(NoticeError):
        pass

    assert Narrower.codes == frozenset()
    with pytest.raises(TypeError):
        Narrower(ErrorCode.BAD_TOOL_ID)


def test_a_default_outside_the_declared_codes_is_refused_at_class_creation() -> None:
    with pytest.raises(TypeError):

        class Inconsistent(DeplogError):
            codes = frozenset({ErrorCode.FORK})
            code = ErrorCode.ROLLBACK


def test_an_error_reads_as_its_code_without_a_message() -> None:
    err = TreeMismatchError(ErrorCode.MISSING_ENTRIES, 6)
    assert (err.code, err.index) == ("missing_entries", 6)
    assert str(NoticeError(ErrorCode.BAD_RANGE)) == "bad_range"
    assert f"{ErrorCode.BAD_RANGE}" == "bad_range"


def test_cli_error_carries_its_message_and_exit_status() -> None:
    assert (CLIError("no data").message, CLIError("no data").exit_status) == ("no data", 1)
    assert CLIError("usage", exit_status=2).exit_status == 2
    assert not issubclass(CLIError, DeplogError)


Main = Callable[[Sequence[str] | None], int]


@pytest.mark.parametrize(
    ("main", "argv", "printed"),
    [
        (
            deplog_cli.main,
            ["status", "tool:org.acme/search", "--state", "{tmp}/none.db"],
            "deplog: {tmp}/none.db: no such state file",
        ),
        (authority_cli.main, ["check", "--data", "{tmp}"], "authority: {tmp} holds no authority"),
        (witness_cli.main, ["list-logs", "--data", "{tmp}"], "witness: {tmp} holds no witness"),
    ],
    ids=["deplog", "authority", "witness"],
)
def test_every_command_prints_a_cli_error_and_exits_with_its_status(
    main: Main,
    argv: list[str],
    printed: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main([arg.format(tmp=tmp_path) for arg in argv])
    assert status == 1
    assert capsys.readouterr().err.startswith(printed.format(tmp=tmp_path))
