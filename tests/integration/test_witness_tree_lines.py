"""Every witness can cosign deplog: a litewitness-like witness that signs a checkpoint's
first three lines only, and an ML-DSA-44 witness, both real processes speaking
tlog-witness, in an authority's publication quorum and in a follower's policy.

deplog's checkpoints always carry a ``deplog-map/v1`` line, so a three-line Ed25519
cosignature is not the spec's form; it counts only for a witness configured so
(``authority witness add --tree-lines``, a policy's ``#deplog: tree-lines``), and every
other witness keeps the full-body rule.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from deplog.authority.cli import main as authority_main
from deplog.client.cli.main import main as deplog_main
from deplog.client.follow.follower import Follower
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.cosignature import CosignatureError, cosigner
from deplog.client.tlog.note import Signer, Verifier
from deplog.client.tlog.policy import Policy
from deplog.client.tlog.receipt import Receipt, verify_receipt_with_policy
from tests.builders import make_envelope, notice_leaf
from tests.integration.harness import AuthorityProcess, ServiceProcess, WitnessProcess

pytestmark = pytest.mark.slow  # real witness and authority processes

JSON = {"Content-Type": "application/json"}
LITE = "lite.witness.test/w1"
PQ = "pq.witness.test/w1"


@dataclass
class ThreeLineWitnessProcess(ServiceProcess):
    """tests/integration/three_line_witness.py, with a fresh Ed25519 cosigner key."""

    log_key: str = ""
    signer: Signer | None = None

    def command(self) -> list[str]:
        assert self.signer is not None
        key_file = self.root / "witness.key"
        key_file.write_text(self.signer.skey() + "\n")
        return [
            sys.executable,
            "-m",
            "tests.integration.three_line_witness",
            "--key-file",
            str(key_file),
            "--log-key",
            self.log_key,
        ]

    @property
    def verifier(self) -> Verifier:
        assert self.signer is not None
        return self.signer.verifier()


@dataclass
class Setup:
    authority: AuthorityProcess
    lite: ThreeLineWitnessProcess
    pq: WitnessProcess

    def policy(self, capsys: pytest.CaptureFixture[str]) -> str:
        """What ``authority policy --quorum 3`` prints: embedded, lite and pq, all three."""
        capsys.readouterr()
        where = ["--data", str(self.authority.data), "--keys", str(self.authority.keys)]
        assert authority_main(["policy", *where, "--quorum", "3"]) == 0
        return capsys.readouterr().out


def start_witnesses(
    authority: AuthorityProcess, tmp_path: Path
) -> tuple[ThreeLineWitnessProcess, WitnessProcess]:
    lite = ThreeLineWitnessProcess(
        tmp_path / "lite",
        log_key=authority.log_verifier.vkey(),
        signer=cosigner(Signer.generate(LITE)),
    )
    lite.root.mkdir(parents=True)
    lite.start()
    pq = WitnessProcess(tmp_path / "pq", name=PQ)
    assert pq.cli("init", "--keys", str(pq.keys), "--name", PQ, "--type", "ml-dsa-44") == 0
    log = authority.log_verifier
    assert pq.cli("add-log", "--origin", log.name, "--key", log.vkey()) == 0
    pq.start()
    return lite, pq


@pytest.fixture
def setup(authority_files: AuthorityProcess, tmp_path: Path) -> Iterator[Setup]:
    """An authority whose publication quorum is both external witnesses: the three-line
    one (added with --tree-lines) and an ML-DSA-44 ``witness serve``."""
    lite, pq = start_witnesses(authority_files, tmp_path)
    authority_files.add_witness(lite.url, lite.verifier, "--tree-lines")
    authority_files.add_witness(pq.url, pq.verifier)
    authority_files.extra_args = ["--publication-quorum", "2", "--witness-timeout", "5"]
    authority_files.start()
    try:
        yield Setup(authority_files, lite, pq)
    finally:
        authority_files.stop()
        lite.stop()
        pq.stop()


async def test_a_mixed_publication_quorum_cosigns_and_receipts_verify_by_policy(
    setup: Setup,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    authority = setup.authority
    envelope = make_envelope(publisher, 1)
    async with http.post(
        authority.url + "/v1/notices", data=envelope.canonical_bytes(), headers=JSON
    ) as response:
        assert response.status == 201, await response.text()
        body = await response.read()
    receipt = Receipt.parse(body)
    policy_text = setup.policy(capsys)
    assert f"#deplog: tree-lines {LITE}\n" in policy_text
    policy = Policy.parse(policy_text)
    verified = verify_receipt_with_policy(receipt, notice_leaf(envelope), policy, now=1e10)
    assert verified.checkpoint.extensions[0].startswith("deplog-map/v1 ")
    shown = {c.name: (c.algorithm, c.statement) for c in verified.cosignatures}
    assert shown[LITE] == ("ed25519", "tree_lines")
    assert shown[PQ] == ("ml-dsa-44", "tree_lines")
    assert shown["test.deplog.example/log/witness"] == ("ed25519", "full_body")
    # The same with the command line, from files.
    (tmp_path / "policy").write_text(policy_text)
    (tmp_path / "receipt").write_bytes(body)
    (tmp_path / "leaf").write_bytes(notice_leaf(envelope))
    args = ["verify-receipt", "--policy", str(tmp_path / "policy"), str(tmp_path / "receipt")]
    assert deplog_main([*args, "--leaf", str(tmp_path / "leaf")]) == 0
    out = capsys.readouterr().out
    assert f"cosigned by {LITE} at " in out and "(ed25519, tree lines only)" in out
    assert "(ml-dsa-44, tree lines only)" in out
    # Without the tree-lines line, the policy holds the three-line cosignature bad.
    strict = Policy.parse(policy_text.replace(f"#deplog: tree-lines {LITE}\n", ""))
    with pytest.raises(CosignatureError) as refused:
        verify_receipt_with_policy(receipt, notice_leaf(envelope), strict, now=1e10)
    assert refused.value.code == "bad_cosignature"


async def test_a_follower_with_a_mixed_policy_syncs(
    setup: Setup,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    authority = setup.authority
    envelope = make_envelope(publisher, 1)
    async with http.post(
        authority.url + "/v1/notices", data=envelope.canonical_bytes(), headers=JSON
    ) as response:
        assert response.status == 201
    policy = Policy.parse(setup.policy(capsys))
    async with Follower(authority.url, policy, tmp_path / "state.db") as follower:
        result = await follower.sync()
        assert follower.state.trusted is not None
        assert follower.state.trusted.size >= 2
    assert result is not None
    strict = Policy.parse(setup.policy(capsys).replace(f"#deplog: tree-lines {LITE}\n", ""))
    async with Follower(authority.url, strict, tmp_path / "strict.db") as follower:
        with pytest.raises(CosignatureError) as refused:
            await follower.sync()
        assert refused.value.code == "bad_cosignature"
        assert follower.state.trusted is None


async def test_a_three_line_witness_not_marked_so_never_meets_the_publication_quorum(
    authority_files: AuthorityProcess,
    publisher: Signer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    lite, pq = start_witnesses(authority_files, tmp_path)
    pq.stop()
    authority_files.add_witness(lite.url, lite.verifier)  # no --tree-lines: the spec's rule
    authority_files.extra_args = ["--publication-quorum", "1", "--witness-timeout", "5"]
    authority_files.start()
    try:
        envelope = make_envelope(publisher, 1)
        async with http.post(
            authority_files.url + "/v1/notices", data=envelope.canonical_bytes(), headers=JSON
        ) as response:
            assert response.status == 503
            assert await response.json() == {"error": "witness_quorum_unavailable"}
        async with http.get(authority_files.url + "/checkpoint") as response:
            served, _ = open_checkpoint(await response.read(), authority_files.log_verifier)
        assert served.size == 1  # the registration only: nothing unwitnessed was published
    finally:
        authority_files.stop()
        lite.stop()
    assert f"witness {LITE} cannot cosign: bad_cosignature" in authority_files.output.read_text()
