"""Canonical JSON (RFC 8785) and a strict JSON parser.

Rules:

1. Everything deplog signs or hashes is RFC 8785 canonical JSON, so two honest parties
   produce the same bytes for the same value.
2. The parser refuses every input whose meaning could differ between two JSON
   implementations (``malformed_json``): invalid UTF-8, a byte order mark,
   NaN/Infinity, any fraction or exponent, integers beyond 2^53 - 1, lone surrogates,
   nesting past the depth asked; duplicate keys are ``duplicate_field``.
3. Only dicts with str keys, lists, str, safe ints, bool and None are encoded; anything
   else is ``JSONFormatError``, never coerced.
4. Bytes are canonical exactly when they are the encoding of their value; the faster
   paths (the C encoder and parser) never change which bytes that is.
"""

from __future__ import annotations

import json
from typing import Any

import rfc8785

from deplog.client.errors import ErrorCode, FormatError

# RFC 8785 section 3.2.2.3 / I-JSON (RFC 7493 section 2.2): integers beyond
# this magnitude are not exactly representable in every implementation.
MAX_SAFE_INTEGER = 2**53 - 1
_MAX_INT_DIGITS = len(str(MAX_SAFE_INTEGER)) + 1  # room for a minus sign


class JSONFormatError(FormatError):
    """Bytes that are not strict, interoperable JSON."""

    code = ErrorCode.MALFORMED_JSON


def dumps(obj: object) -> bytes:
    """The RFC 8785 canonical encoding of ``obj`` (rule 3)."""
    if _check_value(obj, depth=0, max_depth=None):
        # RFC 8785's bytes, 10x faster: ASCII keys sort in UTF-16 order (3.2.3), no floats
        # (3.2.2.3), Python escapes as 3.2.2.2 does; property tests compare with rfc8785.
        return _encode(obj)
    try:
        return rfc8785.dumps(obj)  # type: ignore[arg-type]
    except rfc8785.CanonicalizationError:
        raise JSONFormatError() from None


def _encode(obj: object) -> bytes:
    return _ENCODER.encode(obj).encode("utf-8")


def _encodes_to(value: object, data: bytes) -> bool:
    """Whether ``data`` is exactly the canonical encoding of ``value``, parsed from it."""
    if bytes(data).isascii():
        return _encode(value) == data
    return dumps(value) == data


def loads_checked(data: bytes, *, max_depth: int = 16) -> tuple[object, bool]:
    """Parse ``data`` that ought to be canonical: the value, and whether ``data`` is exactly
    its encoding; refuses what ``loads`` refuses. Canonical bytes need only the C parser
    (duplicate keys would encode shorter, lone surrogates not at all)."""
    text = _text(data)
    try:
        value = _CANONICAL_DECODER.decode(text)
    except (ValueError, RecursionError):
        value = _UNPARSED  # the strict path below says why
    if value is not _UNPARSED and _is_encoding_of(value, data):
        if text.count("[") + text.count("{") > max_depth:  # else too few to nest that deep
            _check_depth(value, max_depth)
        return value, True
    return loads(data, max_depth=max_depth), False


def _is_encoding_of(value: object, data: bytes) -> bool:
    try:
        return _encodes_to(value, data)
    except (UnicodeEncodeError, JSONFormatError):  # a lone surrogate: never canonical
        return False


_UNPARSED = object()
_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def loads(data: bytes, *, max_depth: int = 16) -> object:
    """Parse ``data`` as strict JSON (rule 2; nesting past ``max_depth``, a scalar being 0)."""
    text = _text(data)
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object_no_duplicates,
            parse_float=_refuse,
            parse_int=_parse_safe_int,
            parse_constant=_refuse,
        )
    except JSONFormatError:
        raise
    except (ValueError, RecursionError):
        raise JSONFormatError() from None
    if "\\u" in text:  # only an escape can spell a lone surrogate
        _check_value(value, depth=0, max_depth=max_depth)
    elif text.count("[") + text.count("{") > max_depth:  # else too few to nest that deep
        _check_depth(value, max_depth)
    return value


def _text(data: bytes) -> str:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise JSONFormatError()
    try:
        return bytes(data).decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        raise JSONFormatError() from None


def _check_depth(value: object, max_depth: int) -> None:
    """Refuse nesting deeper than ``max_depth``, counted level by level over containers."""
    level = [value]
    depth = 0
    while True:
        containers = [item for item in level if isinstance(item, dict | list)]
        if not containers:
            return
        depth += 1
        if depth > max_depth:
            raise JSONFormatError()
        level = [
            item
            for container in containers
            for item in (container.values() if isinstance(container, dict) else container)
        ]


class _DuplicateKeyError(JSONFormatError):
    code = ErrorCode.DUPLICATE_FIELD


def _object_no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError()
        out[key] = value
    return out


def _refuse(_text: str) -> object:
    raise JSONFormatError()


def _parse_safe_int(text: str) -> int:
    # Length first: int() refuses very long digit strings, slowly.
    if len(text) > _MAX_INT_DIGITS:
        raise JSONFormatError()
    value = int(text)
    if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise JSONFormatError()
    return value


def _check_str(s: str) -> None:
    try:
        s.encode("utf-8", errors="strict")
    except UnicodeEncodeError:  # a lone surrogate from a \uXXXX escape
        raise JSONFormatError() from None


def _check_value(value: object, *, depth: int, max_depth: int | None) -> bool:
    """Check ``value`` as rule 3 says (and its depth); whether every object key is ASCII."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise JSONFormatError()
        return True
    if isinstance(value, str):
        _check_str(value)
        return True
    if isinstance(value, dict | list):
        if max_depth is not None and depth + 1 > max_depth:
            raise JSONFormatError()
        ascii_keys = True
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise JSONFormatError()
                _check_str(key)
                ascii_keys = key.isascii() and ascii_keys
                ascii_keys = _check_value(item, depth=depth + 1, max_depth=max_depth) and ascii_keys
        else:
            for item in value:
                ascii_keys = _check_value(item, depth=depth + 1, max_depth=max_depth) and ascii_keys
        return ascii_keys
    raise JSONFormatError()


# Built once: json.loads builds a decoder on every call that passes hooks.
_CANONICAL_DECODER = json.JSONDecoder(
    parse_float=_refuse, parse_int=_parse_safe_int, parse_constant=_refuse
)
