"""Fuzz the authority's integer query parameters: ``authority.server._int_param``.

The parser takes an aiohttp request, so each input becomes the value of
``index`` in a request built with aiohttp's ``make_mocked_request`` (the
query string is percent-encoded, so any text reaches the parser intact).
Invariants: only DeplogError escapes (``bad_parameter``); an accepted value
is a canonical decimal (``str(value) == raw``) within 0..2^63-1.

    python bench/fuzz/fuzz_int_param.py -atheris_runs=100000
"""

from __future__ import annotations

from urllib.parse import urlencode

import atheris
from _fuzzlib import main

with atheris.instrument_imports(include=["deplog.authority.http.server"]):
    from aiohttp.test_utils import make_mocked_request

    from deplog.authority.http.server import _int_param
    from deplog.client.errors import DeplogError


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    raw = fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes())
    request = make_mocked_request("GET", "/v1/proofs/inclusion?" + urlencode({"index": raw}))
    assert request.query.get("index") == raw
    try:
        value = _int_param(request, "index")
    except DeplogError as err:
        assert err.code == "bad_parameter"
        return
    assert str(value) == raw
    assert 0 <= value < 2**63


if __name__ == "__main__":
    main(test_one_input)
