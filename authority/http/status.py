"""The HTTP status of every error code a server answers: one table, for both servers.

The error class and its code name what went wrong; how that travels is decided here, once,
and applied by the shared error middleware (``plumbing.py``). What each status means is in
docs/errors.md ("Codes by HTTP status"); the witness's follow C2SP tlog-witness v1.0.0.

Rules:

* One code has one status: a code that would need two has two meanings, so it is two
  codes. Building the table refuses a code listed twice.
* A code without a status is not something a request can cause: the middleware answers it
  as 500 ``internal`` and logs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from deplog.client.errors import ErrorCode


def _by_status(groups: Mapping[int, tuple[ErrorCode, ...]]) -> Mapping[ErrorCode, int]:
    table: dict[ErrorCode, int] = {}
    for status, codes in groups.items():
        for code in codes:
            if code in table:
                raise ValueError(f"{code} is listed under {table[code]} and {status}")
            table[code] = status
    return MappingProxyType(table)


HTTP_STATUS: Final[Mapping[ErrorCode, int]] = _by_status(
    {
        400: (
            # the envelope (and publisher statement) schema
            ErrorCode.MALFORMED_JSON,
            ErrorCode.DUPLICATE_FIELD,
            ErrorCode.UNKNOWN_FIELD,
            ErrorCode.MISSING_FIELD,
            ErrorCode.WRONG_TYPE,
            ErrorCode.EMPTY_LIST,
            ErrorCode.TOO_LONG,
            ErrorCode.DUPLICATE_VALUE,
            ErrorCode.FIELD_NOT_ALLOWED,
            ErrorCode.BAD_NAMESPACE,
            ErrorCode.BAD_TOOL_ID,
            ErrorCode.BAD_PUBLISHER,
            ErrorCode.BAD_VERSION,
            ErrorCode.BAD_RANGE,
            ErrorCode.BAD_TIMESTAMP,
            ErrorCode.SUNSET_BEFORE_EFFECTIVE,
            ErrorCode.BAD_DIGEST,
            ErrorCode.BAD_ACTION,
            ErrorCode.BAD_REASON,
            ErrorCode.BAD_ADVISORY,
            ErrorCode.ADVISORY_REQUIRED,
            ErrorCode.BAD_WITHDRAW_INDEX,
            ErrorCode.BAD_MESSAGE,
            ErrorCode.BAD_SEQUENCE,
            ErrorCode.BAD_SIGNATURE_ENCODING,
            ErrorCode.BAD_KEY,
            ErrorCode.LEAF_TOO_LARGE,
            # an entry the verifiers' own decoder refuses (the one validator)
            ErrorCode.MALFORMED_ENTRY,
            ErrorCode.NONCANONICAL_ENTRY,
            # reads
            ErrorCode.BAD_PARAMETER,
            ErrorCode.REPEATED_PARAMETER,
            ErrorCode.OUT_OF_RANGE,
            ErrorCode.SIZE_NOT_PUBLISHED,
            ErrorCode.RANGE_TOO_LARGE,
            ErrorCode.MALFORMED_TILE_PATH,
            # both servers' HTTP layer, then the witness's tlog-witness checks
            ErrorCode.BAD_REQUEST,
            ErrorCode.MALFORMED_REQUEST,
            ErrorCode.OLD_SIZE_TOO_LARGE,
        ),
        401: (
            ErrorCode.BAD_SIGNATURE,
            ErrorCode.UNKNOWN_KEY,
            ErrorCode.UNKNOWN_PUBLISHER,
        ),
        403: (
            ErrorCode.NAMESPACE_NOT_AUTHORIZED,
            ErrorCode.KEY_REVOKED,
            ErrorCode.PUBLISHER_REVOKED,
            ErrorCode.UNTRUSTED_CHECKPOINT,
        ),
        404: (ErrorCode.NOT_FOUND, ErrorCode.UNKNOWN_LOG),
        405: (ErrorCode.METHOD_NOT_ALLOWED,),
        408: (ErrorCode.REQUEST_TIMEOUT,),
        409: (
            ErrorCode.SEQUENCE_REUSED,
            ErrorCode.BAD_WITHDRAW_TARGET,
            # the admin socket: publisher statements against the registry
            ErrorCode.PUBLISHER_EXISTS,
            ErrorCode.NAMESPACE_IN_USE,
            ErrorCode.PUBLISHER_NOT_REGISTERED,
            ErrorCode.PUBLISHER_ALREADY_REVOKED,
            ErrorCode.KEY_NOT_REGISTERED,
            ErrorCode.KEY_ALREADY_REVOKED,
            ErrorCode.KEY_IN_USE,
            # the witness
            ErrorCode.OLD_SIZE_MISMATCH,
            ErrorCode.ROOT_MISMATCH,
        ),
        413: (ErrorCode.TOO_LARGE,),
        415: (ErrorCode.UNSUPPORTED_MEDIA_TYPE,),
        422: (ErrorCode.BAD_CONSISTENCY_PROOF, ErrorCode.MAP_NOT_REPRODUCED),
        429: (ErrorCode.RATE_LIMITED, ErrorCode.PUBLISHER_RATE_LIMITED),
        500: (ErrorCode.INTERNAL,),
        503: (
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
        ),
    }
)
"""Every code a server answers, with its status."""


def http_status(code: ErrorCode) -> int | None:
    """The status a server answers ``code`` with, or None if no request can cause it."""
    return HTTP_STATUS.get(code)
