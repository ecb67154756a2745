"""A map-verifying witness as the whole publication quorum: real processes, an authority
with ``--publication-quorum 1`` whose only external witness is ``witness serve
--verify-map`` on that authority. It fetches the entries of the checkpoint it is asked to
cosign before that checkpoint is published (server rule 4), so appends get receipts
carrying its cosignature; an authority that misfolds its map gets none, and 503."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.cosignature import cosignatures
from deplog.client.tlog.note import Signer
from deplog.client.tlog.receipt import Receipt, verify_receipt
from tests.builders import make_envelope, notice_leaf
from tests.integration.harness import AuthorityProcess, WitnessProcess

pytestmark = pytest.mark.slow  # real witness and authority processes

JSON = {"Content-Type": "application/json"}
NAME = "map.witness.test/quorum"


class MisfoldingAuthority(AuthorityProcess):
    """The real authority with its map fold leaving out each batch's last notice."""

    def command(self) -> list[str]:
        real = super().command()
        assert real[1:3] == ["-m", "deplog.authority.cli"]
        return [sys.executable, "-m", "tests.integration.misfolding_authority", *real[3:]]


def quorum_of_one_map_witness(
    authority: AuthorityProcess, tmp_path: Path, port: int
) -> Iterator[tuple[AuthorityProcess, WitnessProcess]]:
    """Start a map-verifying witness on the authority's (future) URL, on ``port``, make it
    the authority's only external witness under a publication quorum of 1, start both."""
    witness = WitnessProcess(
        tmp_path / "map-witness",
        name=NAME,
        extra_args=["--verify-map", f"http://127.0.0.1:{port}"],
    )
    witness.init()
    verifier = authority.log_verifier
    assert witness.cli("add-log", "--origin", verifier.name, "--key", verifier.vkey()) == 0
    witness.start()
    authority.add_witness(witness.url, witness.verifier)
    authority.extra_args = ["--publication-quorum", "1", "--witness-timeout", "5"]
    authority.start(port)
    try:
        yield authority, witness
    finally:
        authority.stop()
        witness.stop()


@pytest.fixture
def honest(
    authority_files: AuthorityProcess, tmp_path: Path, free_port: int
) -> Iterator[tuple[AuthorityProcess, WitnessProcess]]:
    yield from quorum_of_one_map_witness(authority_files, tmp_path, free_port)


@pytest.fixture
def misfolding(
    tmp_path: Path, publisher: Signer, free_port: int
) -> Iterator[tuple[AuthorityProcess, WitnessProcess]]:
    authority = MisfoldingAuthority(tmp_path / "authority")
    authority.init()
    authority.add_publisher(publisher, "org.acme")
    yield from quorum_of_one_map_witness(authority, tmp_path, free_port)


async def test_appends_get_receipts_cosigned_by_the_map_verifying_witness(
    honest: tuple[AuthorityProcess, WitnessProcess],
    publisher: Signer,
    http: aiohttp.ClientSession,
) -> None:
    authority, witness = honest
    for sequence in (1, 2, 3):
        envelope = make_envelope(publisher, sequence, tool=f"tool:org.acme/t{sequence % 2}")
        async with http.post(
            authority.url + "/v1/notices", data=envelope.canonical_bytes(), headers=JSON
        ) as response:
            assert response.status == 201, await response.text()
            receipt = Receipt.parse(await response.read())
        checkpoint = verify_receipt(receipt, notice_leaf(envelope), authority.log_verifier)
        assert checkpoint.size == receipt.index + 1
        assert [c.name for c in cosignatures(receipt.checkpoint, [witness.verifier])] == [NAME]
    async with http.get(authority.url + "/checkpoint") as response:
        note = await response.read()
    served, _ = open_checkpoint(note, authority.log_verifier)
    assert served.size == checkpoint.size
    assert [c.name for c in cosignatures(note, [witness.verifier])] == [NAME]


async def test_a_misfolding_authority_gets_no_cosignature_and_answers_503(
    misfolding: tuple[AuthorityProcess, WitnessProcess],
    publisher: Signer,
    http: aiohttp.ClientSession,
) -> None:
    authority, witness = misfolding
    async with http.get(authority.url + "/checkpoint") as response:
        before = await response.read()
    served_before, _ = open_checkpoint(before, authority.log_verifier)
    envelope = make_envelope(publisher, 1)
    async with http.post(
        authority.url + "/v1/notices", data=envelope.canonical_bytes(), headers=JSON
    ) as response:
        assert response.status == 503
        assert await response.json() == {"error": "witness_quorum_unavailable"}
    async with http.get(authority.url + "/checkpoint") as response:
        after = await response.read()
    assert open_checkpoint(after, authority.log_verifier)[0].size == served_before.size
    assert not cosignatures(after, [witness.verifier])
    # 422: a consistency proof that fails or a map root not reproduced; the tree is honest.
    refused = f"witness {NAME} cannot cosign: witness_refused (the witness answered 422)"
    assert refused in authority.output.read_text()
