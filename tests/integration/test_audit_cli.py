"""The auditor's commands on files from a real authority: export, then audit offline."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deplog.client.audit.bundle import read_entries
from deplog.client.cli.export import export
from deplog.client.follow.http import MAX_PAGE_BYTES
from deplog.client.follow.source import FetchError
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.keyfile import key_file_name
from deplog.client.tlog.note import Signer, Verifier
from deplog.client.tlog.proofs import TreeMismatchError
from tests.builders import make_envelope, notice_leaf
from tests.integration.harness import ORIGIN, AuthorityProcess, deplog
from tests.integration.scripted_authority import (
    Raw,
    ScriptedAuthority,
    running,
    signed_log,
    unreachable_url,
)

pytestmark = pytest.mark.slow  # a real authority and deplog commands in processes


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read())


@dataclass
class Published:
    """Files a publisher and an auditor would hold after three notices were logged."""

    log_key_file: Path
    first_checkpoint: Path
    receipt: Path
    envelope: Path
    export_dir: Path


@pytest.fixture
def published(authority: AuthorityProcess, publisher: Signer, tmp_path: Path) -> Published:
    """Three notices logged (indexes 1-3), a checkpoint kept after the first, then an export."""
    files = Published(
        log_key_file=authority.keys / f"{key_file_name(ORIGIN)}.pub",
        first_checkpoint=tmp_path / "checkpoint-2",
        receipt=tmp_path / "notice-1.tlog-proof",
        envelope=tmp_path / "notice-1.json",
        export_dir=tmp_path / "export",
    )
    for sequence in (1, 2, 3):
        envelope = make_envelope(publisher, sequence)
        request = urllib.request.Request(
            authority.url + "/v1/notices",
            data=envelope.canonical_bytes(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            receipt = response.read()
        if sequence == 1:
            files.receipt.write_bytes(receipt)
            files.envelope.write_bytes(envelope.canonical_bytes())
            files.first_checkpoint.write_bytes(get(authority.url + "/checkpoint"))
    exported = deplog(
        "export",
        authority.url,
        "--out",
        files.export_dir,
        "--log-key",
        files.log_key_file,
        cwd=tmp_path,
    )
    assert exported.returncode == 0, exported.stderr
    assert "exported 4 entries" in exported.stdout and "(verified)" in exported.stdout
    proof = get(authority.url + "/v1/proofs/consistency?old=2&new=4")
    (tmp_path / "proof.json").write_bytes(proof)
    authority.stop()  # everything below works from files alone
    return files


def test_exported_log_replays_offline(published: Published, tmp_path: Path) -> None:
    replayed = deplog(
        "audit", "replay", "--log-key", published.log_key_file, published.export_dir, cwd=tmp_path
    )
    assert replayed.returncode == 0, replayed.stderr
    assert "replayed 4 entries" in replayed.stdout
    assert "1 publisher entries, notices: 3 deprecate" in replayed.stdout
    assert "replaying entries: 4/4 entries" in replayed.stderr  # progress, off a terminal


def test_audit_commands_print_one_json_object_with_json(
    published: Published, tmp_path: Path
) -> None:
    replayed = deplog(
        "audit",
        "replay",
        "--json",
        "--log-key",
        published.log_key_file,
        published.export_dir,
        cwd=tmp_path,
    )
    assert (replayed.returncode, replayed.stderr) == (0, "")  # --json: no progress either
    report = json.loads(replayed.stdout)
    assert report["ok"] is True and report["checkpoint"]["size"] == 4
    assert (report["notices"], report["publisher_entries"]) == ({"deprecate": 3}, 1)
    checked = deplog(
        "audit",
        "receipt",
        "--json",
        "--log-key",
        published.log_key_file,
        published.receipt,
        "--envelope",
        published.envelope,
        cwd=tmp_path,
    )
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["index"] == 1


def test_replay_refuses_a_tampered_byte_as_not_the_signed_tree(
    published: Published, tmp_path: Path
) -> None:
    entries = published.export_dir / "entries"
    lengths = [len(leaf) for leaf in read_entries(entries)]
    data = bytearray(entries.read_bytes())
    start_of_leaf_2 = sum(2 + n for n in lengths[:2]) + 2
    data[start_of_leaf_2 + lengths[2] // 2] ^= 0x01
    tampered = tmp_path / "tampered"
    tampered.write_bytes(bytes(data))
    replayed = deplog(
        "audit",
        "replay",
        "--log-key",
        published.log_key_file,
        "--checkpoint",
        published.export_dir / "checkpoint",
        "--entries",
        tampered,
        cwd=tmp_path,
    )
    assert replayed.returncode == 1
    assert "entries_root_mismatch" in replayed.stderr, replayed.stderr
    assert replayed.stdout == ""


def test_audit_checkpoint_verifies_the_exported_checkpoint(
    published: Published, tmp_path: Path
) -> None:
    checked = deplog(
        "audit",
        "checkpoint",
        "--log-key",
        published.log_key_file,
        published.export_dir / "checkpoint",
        cwd=tmp_path,
    )
    assert checked.returncode == 0, checked.stderr
    assert f"ok: checkpoint {ORIGIN} size 4" in checked.stdout


def test_audit_consistency_links_an_old_checkpoint_to_the_export(
    published: Published, tmp_path: Path
) -> None:
    checked = deplog(
        "audit",
        "consistency",
        "--log-key",
        published.log_key_file,
        published.first_checkpoint,
        published.export_dir / "checkpoint",
        tmp_path / "proof.json",
        cwd=tmp_path,
    )
    assert checked.returncode == 0, checked.stderr
    assert "size 4 is consistent with size 2" in checked.stdout


def test_audit_consistency_refuses_a_proof_for_other_sizes(
    published: Published, tmp_path: Path
) -> None:
    proof = json.loads((tmp_path / "proof.json").read_bytes())
    (tmp_path / "other.json").write_text(json.dumps(proof | {"old": 3}))
    checked = deplog(
        "audit",
        "consistency",
        "--log-key",
        published.log_key_file,
        published.first_checkpoint,
        published.export_dir / "checkpoint",
        tmp_path / "other.json",
        cwd=tmp_path,
    )
    assert checked.returncode == 1
    assert "proof_size_mismatch" in checked.stderr


def test_audit_receipt_proves_the_published_envelope(published: Published, tmp_path: Path) -> None:
    checked = deplog(
        "audit",
        "receipt",
        "--log-key",
        published.log_key_file,
        published.receipt,
        "--envelope",
        published.envelope,
        cwd=tmp_path,
    )
    assert checked.returncode == 0, checked.stderr
    assert f"ok: entry 1 is included in {ORIGIN} size 2" in checked.stdout


def test_audit_receipt_refuses_another_leaf(
    published: Published, publisher: Signer, tmp_path: Path
) -> None:
    other = tmp_path / "other.leaf"
    other.write_bytes(notice_leaf(make_envelope(publisher, 2)))
    checked = deplog(
        "audit",
        "receipt",
        "--log-key",
        published.log_key_file,
        published.receipt,
        "--leaf",
        other,
        cwd=tmp_path,
    )
    assert checked.returncode == 1
    assert "bad_inclusion_proof" in checked.stderr


def test_export_with_the_wrong_log_key_writes_nothing(
    authority: AuthorityProcess, tmp_path: Path
) -> None:
    wrong = Signer.generate(ORIGIN).verifier().vkey()
    exported = deplog(
        "export", authority.url, "--out", tmp_path / "out", "--log-key", wrong, cwd=tmp_path
    )
    assert exported.returncode == 1
    assert "unverified_note" in exported.stderr
    assert not (tmp_path / "out" / "checkpoint").exists()


def test_export_failures_are_printed_with_the_followers_codes(tmp_path: Path) -> None:
    exported = deplog("export", unreachable_url(), "--out", tmp_path / "out", cwd=tmp_path)
    assert exported.returncode == 1
    assert exported.stderr.startswith("deplog export: fetch_failed")
    assert not (tmp_path / "out").exists()


# --- export paging and refusals, against a scripted authority serving chosen leaves --------

LEAVES = [f"leaf {i}".encode() for i in range(2345)]


@pytest.fixture
async def stub(log_signer: Signer) -> AsyncIterator[ScriptedAuthority]:
    """A signed log of 2345 short leaves, served as the authority serves them."""
    async with running(ScriptedAuthority(signed_log(log_signer, LEAVES))) as authority:
        yield authority


async def export_from(
    url: str, out: Path, log_key: Verifier | None = None
) -> tuple[Checkpoint, bool]:
    """``export`` in a worker thread: it runs its own event loop, the server runs in ours."""
    return await asyncio.to_thread(export, url, out, log_key)


async def test_export_fetches_every_leaf_in_pages_of_1000(
    stub: ScriptedAuthority, log_signer: Signer, tmp_path: Path
) -> None:
    checkpoint, verified = await export_from(stub.url, tmp_path, log_signer.verifier())
    assert (checkpoint.size, verified) == (2345, True)
    assert stub.ranges == [(0, 1000), (1000, 2000), (2000, 2345)]
    assert list(read_entries(tmp_path / "entries")) == LEAVES
    assert stub.source is not None
    assert (tmp_path / "checkpoint").read_bytes() == await stub.source.checkpoint()


async def test_export_refuses_leaves_that_miss_the_checkpoint_root(
    stub: ScriptedAuthority, tmp_path: Path
) -> None:
    stub.rewrite_page = lambda start, leaves: [
        b"substituted" if i == 1500 else leaf for i, leaf in enumerate(leaves, start)
    ]
    with pytest.raises(TreeMismatchError) as caught:
        await export_from(stub.url, tmp_path)
    assert caught.value.code == "entries_root_mismatch"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("route", "response", "code"),
    [
        ("/checkpoint", Raw(b"", status=503), "fetch_failed"),
        ("/v1/entries", Raw(b"{}", status=500), "fetch_failed"),
        ("/v1/entries", Raw(b"{", declared_length=MAX_PAGE_BYTES + 1), "response_too_large"),
        ("/v1/entries", Raw(b'{"start": 0, "entries": []}'), "bad_response"),
        ("/v1/entries", Raw(b'{"start": 0, "entries": ["YR=="]}'), "bad_response"),
    ],
    ids=["checkpoint-503", "entries-500", "huge-page", "empty-page", "noncanonical-base64"],
)
async def test_export_refuses_what_the_follower_refuses_and_writes_nothing(
    stub: ScriptedAuthority, tmp_path: Path, route: str, response: Raw, code: str
) -> None:
    stub.raw[route] = response
    with pytest.raises(FetchError) as caught:
        await export_from(stub.url, tmp_path)
    assert caught.value.code == code
    assert list(tmp_path.iterdir()) == []


async def test_export_stopped_by_a_bad_page_after_good_ones_renames_nothing(
    stub: ScriptedAuthority, tmp_path: Path
) -> None:
    """The first 1000 leaves were streamed into a temporary bundle, which is removed."""
    stub.rewrite_page = lambda start, leaves: [] if start == 1000 else leaves
    with pytest.raises(FetchError) as caught:
        await export_from(stub.url, tmp_path)
    assert caught.value.code == "bad_response"
    assert stub.ranges == [(0, 1000), (1000, 2000)]
    assert list(tmp_path.iterdir()) == []
