"""The one table of HTTP statuses (authority/http/status.py): complete, exact, and used.

The oracle is written apart from the table: for each server, the error classes
its handlers can raise (read from the handlers and what they call), with the
codes a request can reach where a class owns others too. Every such code must
have a status and the table must hold nothing else. The servers' own raise
sites are walked to keep the oracle honest, and the witness's statuses are
checked against C2SP tlog-witness itself.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from deplog.authority.http.limits import RateLimitedError
from deplog.authority.http.metrics import Metrics
from deplog.authority.http.plumbing import (
    METRICS,
    HTTPRequestError,
    InternalError,
    RequestError,
    errors_and_metrics,
)
from deplog.authority.http.push import TooManySubscribersError
from deplog.authority.http.status import HTTP_STATUS, http_status
from deplog.authority.publication import MapNotPublishedError
from deplog.authority.sequencer import OverloadedError, ShuttingDownError
from deplog.authority.storage.errors import IntegrityError, StorageError
from deplog.authority.witness.core import (
    ConflictingRootError,
    LogConfigError,
    MalformedRequestError,
    OldSizeTooLargeError,
    SizeConflictError,
    StorageUnavailableError,
    UnknownLogError,
    UntrustedCheckpointError,
)
from deplog.authority.witness.mapverify import EntriesUnavailableError, MapNotReproducedError
from deplog.authority.witness.server import BusyError
from deplog.authority.witnessing import (
    EmbeddedWitnessUnavailableError,
    QuorumUnavailableError,
    WitnessAnswerError,
)
from deplog.client.errors import DeplogError, ErrorCode, TooLargeError
from deplog.client.model.canonical import JSONFormatError
from deplog.client.model.entries import EntryFormatError
from deplog.client.model.notice import NoticeError, NoticeSignatureError
from deplog.client.model.registry import AuthorizationError, ConflictError, RegistryError
from deplog.client.model.semver import SemverError
from deplog.client.model.status import StatusError
from deplog.client.tlog.note import KeyFormatError
from deplog.client.tlog.proofs import ProofError
from deplog.client.tlog.tiles import TilePathError

ROOT = Path(__file__).resolve().parents[1]

Raises = Mapping[type[DeplogError], frozenset[ErrorCode] | None]
"""Error classes a server's handlers can raise; None: every code of the class."""

AUTHORITY_RAISES: Raises = {
    # both servers' HTTP layer, and the request body
    HTTPRequestError: None,
    InternalError: None,
    TooLargeError: None,
    # POST /v1/notices: the envelope (and, on the admin socket, the publisher statement)
    JSONFormatError: None,
    NoticeError: None,
    SemverError: None,
    KeyFormatError: frozenset({ErrorCode.BAD_KEY}),  # one key at a time: never ambiguous
    # admission: the key is found by the signature's key id, so it never mismatches
    NoticeSignatureError: frozenset({ErrorCode.BAD_SIGNATURE}),
    AuthorizationError: None,
    ConflictError: None,
    # the one validator: the verifiers' own decoder runs on the leaf a notice makes
    EntryFormatError: None,
    # the admin socket: the registry snapshot is the server's own, never refused
    RegistryError: frozenset(RegistryError.codes - {ErrorCode.BAD_SNAPSHOT}),
    # reads, limits, the push stream
    RequestError: None,
    TilePathError: None,  # GET /tile/...: a path that is not a tile's
    RateLimitedError: None,
    TooManySubscribersError: None,
    # the log: queue, storage, publication
    OverloadedError: None,
    ShuttingDownError: None,
    StorageError: None,
    IntegrityError: frozenset({ErrorCode.STORAGE_CORRUPT, ErrorCode.STORED_ROOT_MISMATCH}),
    QuorumUnavailableError: None,
    EmbeddedWitnessUnavailableError: None,
    # GET /v1/tools/{tool_id}/proof while the map's batch is not yet published
    MapNotPublishedError: None,
}

WITNESS_RAISES: Raises = {
    # no handler checks a media type: aiohttp never answers 415 by itself
    HTTPRequestError: frozenset(HTTPRequestError.codes - {ErrorCode.UNSUPPORTED_MEDIA_TYPE}),
    InternalError: None,
    TooLargeError: None,
    BusyError: None,
    MalformedRequestError: None,
    UnknownLogError: None,
    UntrustedCheckpointError: None,
    OldSizeTooLargeError: None,
    SizeConflictError: None,
    ProofError: frozenset({ErrorCode.BAD_CONSISTENCY_PROOF}),  # the only proof it checks
    ConflictingRootError: None,
    StorageUnavailableError: None,
    # serve --verify-map: the additional statement (authority/witness/mapverify.py)
    MapNotReproducedError: None,
    EntriesUnavailableError: None,
}

NOT_FROM_REQUESTS: Raises = {
    # the authority refuses to start on these; no handler runs
    IntegrityError: frozenset(
        {ErrorCode.CHECKPOINT_INVALID, ErrorCode.TREE_TRUNCATED, ErrorCode.REGISTRY_MISMATCH}
    ),
    # the log's reading of its witnesses' answers: logged and counted, never answered
    WitnessAnswerError: None,
    # `witness add-log`: the operator's input
    LogConfigError: None,
}

# Raised in a server's modules but caught there: the log reads a witness's 409 answer
# into the witness's own error and retries from the size it names (authority/witnessing.py).
CAUGHT_INSIDE: dict[str, Raises] = {"authority": {SizeConflictError: None}, "witness": {}}

# The servers' own modules, by whose oracle their raise sites are judged.
SERVER_MODULES = {
    "authority": (
        "authority/http/plumbing.py",
        "authority/http/server.py",
        "authority/http/limits.py",
        "authority/http/push.py",
        "authority/log.py",
        "authority/replay.py",
        "authority/publication.py",
        "authority/sequencer.py",
        "authority/storage/reader.py",
        "authority/witnessing.py",
    ),
    "witness": (
        "authority/witness/core.py",
        "authority/witness/server.py",
        "authority/witness/mapverify.py",
    ),
}

# C2SP tlog-witness v1.0.0, "add-checkpoint", written down from the spec.
TLOG_WITNESS_STATUS = {
    ErrorCode.MALFORMED_REQUEST: 400,
    ErrorCode.OLD_SIZE_TOO_LARGE: 400,
    ErrorCode.UNTRUSTED_CHECKPOINT: 403,
    ErrorCode.UNKNOWN_LOG: 404,
    ErrorCode.OLD_SIZE_MISMATCH: 409,
    ErrorCode.ROOT_MISMATCH: 409,
    ErrorCode.TOO_LARGE: 413,
    ErrorCode.BAD_CONSISTENCY_PROOF: 422,
}


def _codes_of(cls: type[DeplogError]) -> frozenset[ErrorCode]:
    """A class's codes and its subclasses' (a private subclass may own one)."""
    return frozenset(cls.codes).union(*(_codes_of(sub) for sub in cls.__subclasses__()))


def codes(raises: Raises) -> frozenset[ErrorCode]:
    return frozenset().union(
        *(_codes_of(cls) if subset is None else subset for cls, subset in raises.items())
    )


AUTHORITY_CODES = codes(AUTHORITY_RAISES)
WITNESS_CODES = codes(WITNESS_RAISES)


def test_every_code_a_handler_can_raise_has_a_status() -> None:
    assert not (AUTHORITY_CODES | WITNESS_CODES) - set(HTTP_STATUS)


def test_the_table_holds_only_codes_a_handler_can_raise() -> None:
    assert not set(HTTP_STATUS) - (AUTHORITY_CODES | WITNESS_CODES)


def test_the_witness_answers_with_the_statuses_of_tlog_witness() -> None:
    assert {code: http_status(code) for code in TLOG_WITNESS_STATUS} == TLOG_WITNESS_STATUS


def test_codes_no_request_can_cause_have_no_status() -> None:
    assert all(http_status(code) is None for code in codes(NOT_FROM_REQUESTS))


def test_statuses_are_errors_and_503_means_try_again() -> None:
    assert all(400 <= status <= 599 for status in HTTP_STATUS.values())
    unavailable = {code for code, status in HTTP_STATUS.items() if status == 503}
    assert unavailable == {
        ErrorCode.OVERLOADED,
        ErrorCode.SHUTTING_DOWN,
        ErrorCode.STORAGE_UNAVAILABLE,
        ErrorCode.STORAGE_FULL,
        ErrorCode.STORAGE_CORRUPT,
        ErrorCode.STORED_ROOT_MISMATCH,
        ErrorCode.WITNESS_QUORUM_UNAVAILABLE,
        ErrorCode.EMBEDDED_WITNESS_UNAVAILABLE,
        ErrorCode.MAP_NOT_PUBLISHED,
        ErrorCode.TOO_MANY_SUBSCRIBERS,
        ErrorCode.TOO_MANY_CONNECTIONS,
        ErrorCode.UNAVAILABLE,
        ErrorCode.BUSY,
        ErrorCode.ENTRIES_UNAVAILABLE,
    }


def _raised(path: Path) -> Iterator[tuple[str, int, ast.Call]]:
    """Every ``raise SomeError(...)`` in a module, by class name."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            func = node.exc.func
            if isinstance(func, ast.Name) and func.id.endswith("Error"):
                yield func.id, node.lineno, node.exc


def _codes_raised(cls: type[DeplogError], call: ast.Call) -> frozenset[ErrorCode]:
    """The codes one raise site can carry: the ErrorCode named, the default, or any."""
    named = [
        arg.attr
        for arg in call.args[:1]
        if isinstance(arg, ast.Attribute)
        and isinstance(arg.value, ast.Name)
        and arg.value.id == "ErrorCode"
    ]
    if named:
        return frozenset({ErrorCode[named[0]]})
    if call.args:  # a code from a variable: any of the class's
        return cls.codes
    return frozenset({cls.__dict__["code"]}) if "code" in cls.__dict__ else cls.codes


def _sites(server: str) -> Iterator[tuple[str, type[DeplogError], frozenset[ErrorCode]]]:
    for relative in SERVER_MODULES[server]:
        path = ROOT / relative
        module = importlib.import_module("deplog." + relative.removesuffix(".py").replace("/", "."))
        for name, line, call in _raised(path):
            cls = getattr(module, name, None)  # None: a builtin such as ValueError
            if isinstance(cls, type) and issubclass(cls, DeplogError):
                yield f"{relative}:{line}", cls, _codes_raised(cls, call)


@pytest.mark.parametrize(
    ("server", "raises"), [("authority", AUTHORITY_RAISES), ("witness", WITNESS_RAISES)]
)
def test_every_raise_site_of_a_server_is_in_its_oracle(server: str, raises: Raises) -> None:
    allowed = codes(raises) | codes(NOT_FROM_REQUESTS) | codes(CAUGHT_INSIDE[server])
    outside = {where: sorted(found - allowed) for where, _, found in _sites(server)}
    assert not {where: found for where, found in outside.items() if found}


# -- the middleware applies the table ----------------------------------------------------


def _render(err: DeplogError, status: int) -> web.Response:
    return web.json_response({"error": err.code}, status=status)


async def _serve(raising: DeplogError) -> tuple[int, dict[str, str]]:
    """Answer one request whose handler raises ``raising``, from a real local server."""

    async def handler(request: web.Request) -> web.Response:
        raise raising

    app = web.Application(middlewares=[errors_and_metrics(_render)])
    app[METRICS] = Metrics()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/") as r:
            return r.status, await r.json()
    finally:
        await runner.cleanup()


async def test_the_middleware_answers_a_code_with_its_status() -> None:
    assert await _serve(ConflictError(ErrorCode.SEQUENCE_REUSED)) == (
        409,
        {"error": "sequence_reused"},
    )


async def test_a_code_no_request_can_cause_is_answered_as_internal() -> None:
    """A stored notice that no longer folds is the server's fault, not the client's."""
    assert await _serve(StatusError(ErrorCode.INDEX_NOT_INCREASING)) == (
        500,
        {"error": "internal"},
    )
