"""Tests for client/canonical.py: RFC 8785 output and the strict parser."""

from __future__ import annotations

import contextlib

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from deplog.client.errors import DeplogError
from deplog.client.model import canonical
from deplog.client.model.canonical import JSONFormatError, dumps, loads


def test_rfc8785_sorting_example_matches_spec() -> None:
    # RFC 8785 section 3.2.3: keys sort by UTF-16 code units.
    obj = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    expected = (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control",'
        '"\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign",'
        '"\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
    ).encode()
    assert dumps(obj) == expected


def test_rfc8785_string_and_literals_example_matches_spec() -> None:
    # RFC 8785 section 3.2.2 example, without the floats deplog never uses.
    source = (
        b'{"string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        b' "literals": [null, true, false]}'
    )
    expected = '{"literals":[null,true,false],"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    assert dumps(loads(source)) == expected.encode()


def test_dumps_integers_are_plain_decimal() -> None:
    assert dumps({"b": -(2**53 - 1), "a": 0}) == b'{"a":0,"b":-9007199254740991}'


def test_dumps_refuses_float() -> None:
    with pytest.raises(JSONFormatError):
        dumps({"x": 1.5})


def test_dumps_refuses_unsafe_integer() -> None:
    with pytest.raises(JSONFormatError):
        dumps(2**53)


def test_loads_accepts_ordinary_json() -> None:
    assert loads(b' {"a": [1, "x", null, true]} ') == {"a": [1, "x", None, True]}


def test_loads_duplicate_key_has_its_own_code() -> None:
    with pytest.raises(JSONFormatError) as e:
        loads(b'{"a": 1, "a": 2}')
    assert e.value.code == "duplicate_field"


@pytest.mark.parametrize(
    "data",
    [
        b"\xff",  # invalid UTF-8
        b'"\xed\xa0\x80"',  # UTF-8 encoded surrogate
        b'\xef\xbb\xbf{"a":1}',  # byte order mark
        b"NaN",
        b"Infinity",
        b"-Infinity",
        b"1.0",
        b"1e3",
        b"9007199254740992",
        b"-9007199254740992",
        b"1" * 5000,
        b'"\\ud800"',  # lone high surrogate
        b'"\\udc00x"',  # lone low surrogate
        b'{"\\ud800": 1}',
        b"[",
        b"",
        b'{"a":1} x',
        b'"tab\there"',  # raw control character in a string
    ],
)
def test_loads_refuses_non_interoperable_json(data: bytes) -> None:
    with pytest.raises(JSONFormatError) as e:
        loads(data)
    assert e.value.code == "malformed_json"


def test_loads_accepts_safe_integer_bounds() -> None:
    assert loads(b"[9007199254740991, -9007199254740991]") == [2**53 - 1, -(2**53 - 1)]


def test_loads_accepts_surrogate_pair_escape() -> None:
    assert loads(b'"\\ud83d\\ude00"') == "\U0001f600"


def test_loads_depth_limit_is_inclusive() -> None:
    assert loads(b"[" * 16 + b"]" * 16) is not None
    with pytest.raises(JSONFormatError):
        loads(b"[" * 17 + b"]" * 17)


def test_loads_custom_depth_limit() -> None:
    with pytest.raises(JSONFormatError):
        loads(b'{"a": {"b": 1}}', max_depth=1)


def test_loads_very_deep_nesting_is_refused_not_crashing() -> None:
    with pytest.raises(JSONFormatError):
        loads(b"[" * 100_000 + b"]" * 100_000)


def test_loads_refuses_non_bytes() -> None:
    with pytest.raises(JSONFormatError):
        loads("{}")  # type: ignore[arg-type]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-canonical.MAX_SAFE_INTEGER, canonical.MAX_SAFE_INTEGER)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_dumps_then_loads_round_trips(value: object) -> None:
    assert loads(dumps(value)) == value


ascii_keyed_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-canonical.MAX_SAFE_INTEGER, canonical.MAX_SAFE_INTEGER)
    | st.text(st.characters(codec="utf-8")),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(st.characters(codec="ascii"), max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_dumps_equals_the_reference_rfc8785_implementation(value: object) -> None:
    assert dumps(value) == rfc8785.dumps(value)


@given(ascii_keyed_values)
def test_fast_path_with_ascii_keys_equals_the_reference_implementation(value: object) -> None:
    assert dumps(value) == rfc8785.dumps(value)


def test_dumps_escapes_every_control_character_like_rfc8785() -> None:
    value = {"s": "".join(chr(c) for c in range(0x20)) + '"\\\x7f\u2028\u00e9\U0001f600'}
    assert dumps(value) == rfc8785.dumps(value)


@given(json_values)
def test_dumps_is_idempotent_on_its_output(value: object) -> None:
    assert dumps(loads(dumps(value))) == dumps(value)


@given(json_values)
def test_loads_checked_finds_every_canonical_encoding_canonical(value: object) -> None:
    assert canonical.loads_checked(dumps(value), max_depth=64) == (value, True)


@pytest.mark.parametrize(
    "value",
    [
        {"ranges": [{"events": [{"introduced": "1.0.0"}, {"fixed": "1.1.0"}]}] * 9},
        {"message": "moved to C:\\users\\shared"},
        {"message": "bell \x07, unit separator \x1f, delete \x7f"},
        {"s": "[[[[[[[[[[[[[[[[[[{{{{{{{{{"},
    ],
    ids=["many-brackets", "backslashes", "control-escapes", "brackets-in-a-string"],
)
def test_loads_checked_canonical_regressions(value: object) -> None:
    assert canonical.loads_checked(dumps(value)) == (value, True)


def test_loads_checked_refuses_nesting_deeper_than_the_limit_even_when_canonical() -> None:
    data = dumps([[[["x"]]]])
    assert canonical.loads_checked(data, max_depth=4) == ([[[["x"]]]], True)
    with pytest.raises(JSONFormatError):
        canonical.loads_checked(data, max_depth=3)


@pytest.mark.parametrize(
    "data",
    [b'{"a":1,"a":1}', b'{"b":1, "a":2}', b'"\\u0041"', b'"\\ud800"', b'{"a":"\\u001F"}'],
)
def test_loads_checked_never_calls_other_bytes_canonical(data: bytes) -> None:
    with contextlib.suppress(DeplogError):
        assert canonical.loads_checked(data)[1] is False


@given(st.binary(max_size=200))
def test_loads_arbitrary_bytes_raises_only_deplog_errors(data: bytes) -> None:
    with contextlib.suppress(DeplogError):
        loads(data)
