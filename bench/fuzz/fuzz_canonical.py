"""Fuzz the strict JSON parser: ``client.canonical.loads``.

Invariants: only DeplogError escapes; every value it accepts has a canonical
encoding that parses back to an equal value (``loads(dumps(v)) == v``) and is
a fixed point of ``dumps(loads(...))``.

    python bench/fuzz/fuzz_canonical.py -atheris_runs=100000
"""

from __future__ import annotations

import atheris
from _fuzzlib import derive, main

with atheris.instrument_imports(include=["deplog.client", "json"]):
    from deplog.client.errors import DeplogError
    from deplog.client.model.canonical import dumps, loads

SAMPLES = [
    b'{"a":[1,-2,true,false,null],"b":{"c":"d\\u00e9\\n\\ud83d\\ude00"},"\xc3\xa9":""}',
    b'[9007199254740991,-9007199254740991,0,"\\\\\\"",[[[[]]]],{}]',
    b' { "z" : 1 , "a" : [ ] } ',
    b'"\\u0000\\u001f\\u007f\\u2028"',
]


def test_one_input(data: bytes) -> None:
    raw = derive(data, SAMPLES)
    try:
        value = loads(raw)
    except DeplogError:
        return
    encoded = dumps(value)
    assert loads(encoded) == value
    assert dumps(loads(encoded)) == encoded


if __name__ == "__main__":
    main(test_one_input)
