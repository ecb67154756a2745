"""The auditor's commands on files from a real authority: export, then audit offline."""

from __future__ import annotations

import base64
import http.server
import json
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deplog.client.audit.bundle import read_entries
from deplog.client.cli.audit import export
from deplog.client.model.entries import NoticeEntry, encode_entry
from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.keyfile import key_file_name
from deplog.client.tlog.note import Signer
from deplog.client.tlog.proofs import TreeMismatchError, leaf_hash, root_from_leaf_hashes
from tests.integration.harness import ORIGIN, AuthorityProcess, make_envelope


def deplog(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deplog.client.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


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


def test_replay_names_the_index_of_a_tampered_byte(published: Published, tmp_path: Path) -> None:
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
    assert replayed.stderr.strip().endswith("at index 2"), replayed.stderr
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
    other.write_bytes(encode_entry(NoticeEntry(make_envelope(publisher, 2))))
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


# --- export paging, against a stub that serves arbitrary leaves ---------------------


@dataclass
class StubLog:
    """An authority stand-in: a signed checkpoint over ``leaves``, served 1000 at a time."""

    signer: Signer
    leaves: list[bytes]
    served: list[bytes] = field(default_factory=list)
    requests: list[tuple[int, int]] = field(default_factory=list)
    url: str = ""

    @property
    def note(self) -> bytes:
        root = root_from_leaf_hashes([leaf_hash(leaf) for leaf in self.leaves])
        return sign_checkpoint(Checkpoint(ORIGIN, len(self.leaves), root), self.signer)


@pytest.fixture
def stub() -> Iterator[StubLog]:
    log = StubLog(Signer.generate(ORIGIN), [f"leaf {i}".encode() for i in range(2345)])
    log.served = list(log.leaves)
    note = log.note

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/checkpoint":
                return self.reply(note)
            query = {k: int(v[0]) for k, v in urllib.parse.parse_qs(url.query).items()}
            start, end = query["start"], query["end"]
            log.requests.append((start, end))
            if end - start > 1000 or end > len(log.leaves):
                self.send_error(400)
                return None
            page = [base64.b64encode(leaf).decode() for leaf in log.served[start:end]]
            return self.reply(json.dumps({"start": start, "entries": page}).encode())

        def reply(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    log.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield log
    server.shutdown()
    server.server_close()
    thread.join()


def test_export_fetches_every_leaf_in_pages_of_1000(stub: StubLog, tmp_path: Path) -> None:
    checkpoint, verified = export(stub.url, tmp_path, stub.signer.verifier())
    assert (checkpoint.size, verified) == (2345, True)
    assert stub.requests == [(0, 1000), (1000, 2000), (2000, 2345)]
    assert list(read_entries(tmp_path / "entries")) == stub.leaves
    assert (tmp_path / "checkpoint").read_bytes() == stub.note


def test_export_refuses_leaves_that_miss_the_checkpoint_root(stub: StubLog, tmp_path: Path) -> None:
    stub.served[1500] = b"substituted"
    with pytest.raises(TreeMismatchError) as caught:
        export(stub.url, tmp_path, None)
    assert caught.value.code == "entries_root_mismatch"
    assert list(tmp_path.iterdir()) == []
