"""``deplog audit status``: a tool-status proof as a real authority serves it, checked
offline against the checkpoint it was made at (log key, or a whole witness policy), with
the verdict table's exit statuses; every tampered, mismatched or missing input refused."""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deplog.authority.http.server import ServerConfig, build_app
from deplog.client.cli import audit
from deplog.client.cli.main import main
from deplog.client.model import canonical
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.cosignature import cosign, cosigner
from deplog.client.tlog.note import Signer, add_signature_lines, parse_note
from tests.builders import make_envelope, register_statement, serving

JSON = {"Content-Type": "application/json"}
SEARCH = "tool:org.acme/search"  # version 1.0.0 deprecated
GONE = "tool:org.acme/gone"  # version 1.0.0 revoked
NEVER = "tool:org.acme/never"  # no notice
T = 1_767_225_600  # 2026-01-01T00:00:00Z


@dataclass
class Proofs:
    """What a real authority served: JSON proofs by tool, one binary proof, its checkpoint."""

    dir: Path
    log_key: Signer
    json: dict[str, Path]
    binary: Path
    checkpoint: Path
    earlier: Path
    """A JSON proof of ``SEARCH`` served at the checkpoint before the last."""

    def file(self, name: str, data: bytes) -> Path:
        path = self.dir / name
        path.write_bytes(data)
        return path


@pytest.fixture
async def proofs(tmp_path: Path) -> AsyncIterator[Proofs]:
    log_key = Signer.generate("status.test/log")
    app = build_app(ServerConfig(tmp_path / "log.db", log_key.name), log_key)
    async with serving(app) as (client, admin):
        publisher = Signer.generate("acme")
        body = canonical.dumps(register_statement("acme", ("org.acme",), (publisher,)).to_json())
        assert (await admin.post("/admin/publishers", data=body)).status == 201

        async def post(sequence: int, tool: str, **fields: object) -> None:
            envelope = make_envelope(publisher, sequence, tool=tool, **fields)
            response = await client.post(
                "/v1/notices", data=envelope.canonical_bytes(), headers=JSON
            )
            assert response.status == 201, await response.text()

        async def get(path: str) -> bytes:
            response = await client.get(path)
            assert response.status == 200, await response.text()
            return await response.read()

        await post(1, SEARCH)
        earlier = await get(f"/v1/tools/{SEARCH}/proof")
        await post(2, GONE, action="revoke", reasons=["security"], advisories=["CVE-2026-1234"])
        served = {tool: await get(f"/v1/tools/{tool}/proof") for tool in (SEARCH, GONE, NEVER)}
        binary = await get(f"/v1/tools/{SEARCH}/proof?format=binary")
        note = await get("/checkpoint")
    files = Proofs(
        tmp_path,
        log_key,
        {},
        tmp_path / "search.bin",
        tmp_path / "checkpoint",
        tmp_path / "earlier.json",
    )
    files.json = {
        tool: files.file(f"{tool.rsplit('/', 1)[1]}.json", data) for tool, data in served.items()
    }
    files.binary.write_bytes(binary)
    files.checkpoint.write_bytes(note)
    files.earlier.write_bytes(earlier)
    yield files


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    status = main(["audit", "status", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def key(proofs: Proofs) -> str:
    return proofs.log_key.verifier().vkey()


def test_a_deprecated_version_is_proven_and_served(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "--log-key", key(proofs), proofs.json[SEARCH], SEARCH, "1.0.0")
    assert status == 0
    first, second = out.splitlines()
    assert first.startswith(f"ok: {SEARCH} 1.0.0: deprecated (notices ")
    assert "proven (present) by the map " in second
    assert "status.test/log size " in second


def test_a_revoked_version_is_proven_and_exits_refuse(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "--log-key", key(proofs), proofs.json[GONE], GONE, "1.0.0")
    assert status == 5
    assert out.startswith(f"ok: {GONE} 1.0.0: revoked")


def test_a_version_no_notice_names_is_active(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "--log-key", key(proofs), proofs.json[SEARCH], SEARCH, "2.0.0")
    assert (status, out.splitlines()[0]) == (0, f"ok: {SEARCH} 2.0.0: active")


def test_an_absent_tool_is_proven_active(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(
        capsys, "--log-key", key(proofs), "--json", proofs.json[NEVER], NEVER, "1.0.0"
    )
    shape = json.loads(out)
    assert status == 0
    assert (shape["result"], shape["status"]["status"], shape["status"]["notices"]) == (
        "absent",
        "active",
        [],
    )


def test_the_json_shape_names_status_checkpoint_map_root_and_time(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(
        capsys,
        "--log-key",
        key(proofs),
        "--json",
        "--at",
        "2026-06-01T00:00:00Z",
        proofs.json[GONE],
        GONE,
        "1.0.0",
    )
    shape = json.loads(out)
    checkpoint = Checkpoint.from_text(parse_note(proofs.checkpoint.read_bytes())[0])
    assert status == 5
    assert shape["ok"] is True
    assert (shape["at"], shape["result"]) == ("2026-06-01T00:00:00Z", "present")
    assert shape["status"]["advisories"] == ["CVE-2026-1234"]
    assert shape["checkpoint"]["size"] == checkpoint.size
    assert f"deplog-map/v1 {shape['map_root']}" in checkpoint.extensions


def test_before_its_effective_time_a_notice_is_pending(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(
        capsys,
        "--log-key",
        key(proofs),
        "--json",
        "--at",
        "2025-06-01T00:00:00Z",
        proofs.json[SEARCH],
        SEARCH,
        "1.0.0",
    )
    shape = json.loads(out)["status"]
    assert status == 0
    assert (shape["status"], shape["notices"], len(shape["pending"])) == ("active", [], 1)


def test_a_binary_proof_verifies_against_the_checkpoint_given(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(
        capsys,
        "--log-key",
        key(proofs),
        "--checkpoint",
        proofs.checkpoint,
        proofs.binary,
        SEARCH,
        "1.0.0",
    )
    assert status == 0
    assert out.startswith(f"ok: {SEARCH} 1.0.0: deprecated")


def test_a_binary_proof_without_its_checkpoint_is_missing_input(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(capsys, "--log-key", key(proofs), proofs.binary, SEARCH, "1.0.0")
    assert (status, out) == (1, "")
    assert err.startswith("deplog audit status: missing_input")


def test_a_proof_read_from_standard_input_verifies(
    proofs: Proofs, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(proofs.json[SEARCH].read_bytes()))
    monkeypatch.setattr(sys, "stdin", stdin)
    status, out, _ = run(capsys, "--log-key", key(proofs), "-", SEARCH, "1.0.0")
    assert (status, out.startswith(f"ok: {SEARCH} 1.0.0: deprecated")) == (0, True)


def test_a_proof_about_another_tool_is_bad_map_proof(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(capsys, "--log-key", key(proofs), proofs.json[SEARCH], GONE, "1.0.0")
    assert (status, out) == (1, "")
    assert err.startswith("deplog audit status: bad_map_proof")


@pytest.mark.parametrize("at", [-40, -1, 3, 20])
def test_a_tampered_binary_proof_is_refused(
    proofs: Proofs, capsys: pytest.CaptureFixture[str], at: int
) -> None:
    data = bytearray(proofs.binary.read_bytes())
    data[at] ^= 0x01
    tampered = proofs.file("tampered.bin", bytes(data))
    status, out, err = run(
        capsys,
        "--log-key",
        key(proofs),
        "--checkpoint",
        proofs.checkpoint,
        tampered,
        SEARCH,
        "1.0.0",
    )
    assert (status, out) == (1, "")
    assert err.split(":")[1].split(";")[0].strip() in {
        "bad_map_proof",
        "malformed_map_proof",
        "malformed_map_record",
    }


def test_a_checkpoint_not_signed_by_the_log_key_is_refused(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    other = Signer.generate("status.test/log").verifier().vkey()
    status, out, err = run(capsys, "--log-key", other, proofs.json[SEARCH], SEARCH, "1.0.0")
    assert (status, out) == (1, "")
    assert "deplog audit status: " in err and "ok" not in err


def test_a_json_proof_made_at_another_checkpoint_than_the_one_given_is_refused(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(
        capsys,
        "--log-key",
        key(proofs),
        "--checkpoint",
        proofs.checkpoint,
        proofs.earlier,
        SEARCH,
        "1.0.0",
    )
    assert (status, out) == (1, "")
    assert err.startswith("deplog audit status: map_checkpoint_mismatch")


def test_a_witness_policy_met_adds_its_quorum_and_cosigners(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    note, policy = cosigned_with_policy(proofs, T)
    status, out, _ = run(
        capsys, "--policy", policy, "--checkpoint", note, proofs.json[SEARCH], SEARCH, "1.0.0"
    )
    assert status == 0
    lines = out.splitlines()
    assert lines[1].endswith("; quorum met at 2026-01-01T00:00:00Z")
    assert lines[2] == "  cosigned by w.witness.example at 2026-01-01T00:00:00Z"


def test_a_witness_policy_not_met_is_refused(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    witness = Signer.generate("w.witness.example")
    policy = proofs.file(
        "policy",
        f"log {key(proofs)}\nwitness w {cosigner(witness).verifier().vkey()}\nquorum w\n".encode(),
    )
    status, out, err = run(capsys, "--policy", policy, proofs.json[SEARCH], SEARCH, "1.0.0")
    assert (status, out) == (1, "")
    assert err.startswith("deplog audit status: ")


def test_neither_log_key_nor_policy_is_missing_input(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, proofs.json[SEARCH], SEARCH, "1.0.0")
    assert (status, err.startswith("deplog audit status: missing_input")) == (1, True)


@pytest.mark.parametrize(
    ("tool_id", "version"), [("org.acme/search", "1.0.0"), (SEARCH, "1.0"), (SEARCH, "v1.0.0")]
)
def test_a_tool_id_or_version_that_is_not_one_exits_unknown(
    proofs: Proofs, capsys: pytest.CaptureFixture[str], tool_id: str, version: str
) -> None:
    status, out, err = run(capsys, "--log-key", key(proofs), proofs.json[SEARCH], tool_id, version)
    assert (status, out) == (7, "")
    assert err.startswith("deplog audit status: unknown: bad_")


def test_a_proof_file_over_the_bound_is_refused_unread(
    proofs: Proofs, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit, "MAX_MAP_PROOF_FILE", 100)
    status, _, err = run(capsys, "--log-key", key(proofs), proofs.json[SEARCH], SEARCH, "1.0.0")
    assert (status, err.startswith("deplog audit status: file_too_large")) == (1, True)


def test_a_proof_file_that_is_not_there_names_it(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = proofs.dir / "nope.json"
    status, _, err = run(capsys, "--log-key", key(proofs), missing, SEARCH, "1.0.0")
    assert status != 0
    assert str(missing) in err and "Traceback" not in err


def cosigned_with_policy(proofs: Proofs, timestamp: int, quorum: str = "w") -> tuple[Path, Path]:
    """The served checkpoint cosigned by witness ``w`` at ``timestamp``, and a policy naming
    the log and ``w`` with quorum ``quorum``."""
    witness = cosigner(Signer.generate("w.witness.example"))
    note = proofs.checkpoint.read_bytes()
    cosigned = add_signature_lines(note, cosign(parse_note(note)[0], witness, timestamp))
    text = f"log {key(proofs)}\nwitness w {witness.verifier().vkey()}\nquorum {quorum}\n"
    return proofs.file("cosigned", cosigned), proofs.file("policy", text.encode())


def test_a_quorum_cosigned_within_max_age_is_fresh(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    note, policy = cosigned_with_policy(proofs, int(time.time()) - 10)
    status, out, _ = run(
        capsys,
        *("--policy", policy, "--checkpoint", note, "--max-age", "300"),
        *(proofs.json[SEARCH], SEARCH, "1.0.0"),
    )
    assert (status, out.startswith(f"ok: {SEARCH} 1.0.0: deprecated")) == (0, True)


def test_a_quorum_cosigned_longer_ago_than_max_age_is_stale(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    note, policy = cosigned_with_policy(proofs, int(time.time()) - 3600)
    status, out, err = run(
        capsys,
        *("--policy", policy, "--checkpoint", note, "--max-age", "300"),
        *(proofs.json[SEARCH], SEARCH, "1.0.0"),
    )
    assert (status, out) == (6, "")
    assert err.startswith("deplog audit status: stale: stale_checkpoint")


def test_max_age_under_a_policy_without_witnesses_is_stale(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    note, policy = cosigned_with_policy(proofs, int(time.time()), quorum="none")
    status, _, err = run(
        capsys,
        *("--policy", policy, "--checkpoint", note, "--max-age", "300"),
        *(proofs.json[SEARCH], SEARCH, "1.0.0"),
    )
    assert (status, err.startswith("deplog audit status: stale: stale_checkpoint")) == (6, True)


def test_max_age_without_a_policy_is_a_usage_error(
    proofs: Proofs, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(
        capsys, "--log-key", key(proofs), "--max-age", "300", proofs.json[SEARCH], SEARCH, "1.0.0"
    )
    assert (status, "--max-age needs --policy" in err) == (2, True)
