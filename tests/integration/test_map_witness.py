"""``witness serve --verify-map`` against a real authority: it fetches the log's entries
over HTTP, reproduces the map root and cosigns; a line it cannot reproduce is declined."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from deplog.client.tlog.note import Signer
from tests.builders import make_envelope
from tests.integration.harness import AuthorityProcess, map_witness

pytestmark = pytest.mark.slow  # real witness and authority processes

JSON = {"Content-Type": "application/json"}


async def test_a_map_verifying_witness_cosigns_the_served_checkpoint(
    authority: AuthorityProcess, publisher: Signer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    for sequence in (1, 2, 3):
        body = make_envelope(publisher, sequence).canonical_bytes()
        async with http.post(authority.url + "/v1/notices", data=body, headers=JSON) as r:
            assert r.status == 201
    async with http.get(authority.url + "/checkpoint") as response:
        note = await response.read()
    with map_witness(tmp_path / "map-witness", authority) as witness:
        async with http.post(witness.url + "/add-checkpoint", data=b"old 0\n\n" + note) as r:
            assert r.status == 200
            line = await r.read()
        assert line.startswith("— map.witness.test/w ".encode())
        # The same size again (a refresh): the mirror is already there.
        async with http.post(witness.url + "/add-checkpoint", data=b"old 4\n\n" + note) as r:
            assert r.status == 200
