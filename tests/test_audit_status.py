"""``deplog audit status``: a tool-status proof as a real authority serves it, checked
offline against the checkpoint it was made at (log key, or a whole witness policy), with
the verdict table's exit statuses; every tampered, mismatched or missing input refused."""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deplog.client.cli import audit
from deplog.client.cli.main import main
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.cosignature import cosign, cosigner
from deplog.client.tlog.note import Signer, add_signature_lines, parse_note
from tests.builders import make_envelope, serving_log

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
    async with serving_log(tmp_path, "status.test/log") as served_log:
        client, publisher, log_key = served_log.client, served_log.publisher, served_log.log_key

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
    files = Proofs(tmp_path, log_key, {}, Path(), Path(), Path())
    files.json = {tool: files.file(f"{tool[14:]}.json", data) for tool, data in served.items()}
    files.binary = files.file("search.bin", binary)
    files.checkpoint = files.file("checkpoint", note)
    files.earlier = files.file("earlier.json", earlier)
    yield files


Checked = Callable[..., tuple[int, str, str]]


@pytest.fixture
def checked(proofs: Proofs, capsys: pytest.CaptureFixture[str]) -> Checked:
    """``deplog audit status [--log-key KEY] FLAGS... PROOF TOOL VERSION``: its exit status,
    stdout and stderr. ``PROOF`` is the tool's served JSON proof unless ``proof`` is given."""

    def run(
        *flags: str | Path,
        tool: str = SEARCH,
        version: str = "1.0.0",
        proof: Path | str | None = None,
        log_key: bool = True,
    ) -> tuple[int, str, str]:
        trust = ["--log-key", key(proofs)] if log_key else []
        given = proofs.json[tool] if proof is None else proof
        status = main(["audit", "status", *trust, *map(str, (*flags, given, tool, version))])
        out, err = capsys.readouterr()
        return status, out, err

    return run


def key(proofs: Proofs) -> str:
    return proofs.log_key.verifier().vkey()


def cosigned_with_policy(proofs: Proofs, timestamp: int, quorum: str = "w") -> tuple[Path, Path]:
    """The served checkpoint cosigned by witness ``w`` at ``timestamp``, and a policy naming
    the log and ``w`` with quorum ``quorum``."""
    witness = cosigner(Signer.generate("w.witness.example"))
    note = proofs.checkpoint.read_bytes()
    cosigned = add_signature_lines(note, cosign(parse_note(note)[0], witness, timestamp))
    text = f"log {key(proofs)}\nwitness w {witness.verifier().vkey()}\nquorum {quorum}\n"
    return proofs.file("cosigned", cosigned), proofs.file("policy", text.encode())


def code_of(err: str) -> str:
    """The error code of a one-line failure: ``deplog audit status: <code>`` and what
    follows it (``; <sentence>`` or ``: <message>``)."""
    return err.removeprefix("deplog audit status: ").split(";")[0].split(":")[0]


def test_a_deprecated_version_is_proven_and_served(checked: Checked) -> None:
    status, out, _ = checked()
    first, second = out.splitlines()
    assert status == 0
    assert first.startswith(f"ok: {SEARCH} 1.0.0: deprecated since ")
    assert "proven (present) by the map " in second
    assert "status.test/log size " in second


def test_a_revoked_version_is_proven_and_exits_refuse(checked: Checked) -> None:
    status, out, _ = checked(tool=GONE)
    assert (status, out.startswith(f"ok: {GONE} 1.0.0: revoked")) == (5, True)


def test_a_version_no_notice_names_is_active(checked: Checked) -> None:
    status, out, _ = checked(version="2.0.0")
    assert (status, out.splitlines()[0]) == (0, f"ok: {SEARCH} 2.0.0: active")


def test_an_absent_tool_is_proven_active(checked: Checked) -> None:
    status, out, _ = checked("--json", tool=NEVER)
    shape = json.loads(out)
    assert status == 0
    assert (shape["result"], shape["status"]["status"], shape["status"]["notices"]) == (
        "absent",
        "active",
        [],
    )


def test_the_json_shape_names_status_checkpoint_map_root_and_time(
    checked: Checked, proofs: Proofs
) -> None:
    status, out, _ = checked("--json", "--at", "2026-06-01T00:00:00Z", tool=GONE)
    shape = json.loads(out)
    checkpoint = Checkpoint.from_text(parse_note(proofs.checkpoint.read_bytes())[0])
    assert status == 5
    assert shape["ok"] is True
    assert (shape["at"], shape["result"]) == ("2026-06-01T00:00:00Z", "present")
    assert shape["status"]["advisories"] == ["CVE-2026-1234"]
    assert shape["checkpoint"]["size"] == checkpoint.size
    assert f"deplog-map/v1 {shape['map_root']}" in checkpoint.extensions


def test_before_its_effective_time_a_notice_is_pending(checked: Checked) -> None:
    status, out, _ = checked("--json", "--at", "2025-06-01T00:00:00Z")
    shape = json.loads(out)["status"]
    assert status == 0
    assert (shape["status"], shape["notices"], len(shape["pending"])) == ("active", [], 1)


def test_a_binary_proof_verifies_against_the_checkpoint_given(
    checked: Checked, proofs: Proofs
) -> None:
    status, out, _ = checked("--checkpoint", proofs.checkpoint, proof=proofs.binary)
    assert (status, out.startswith(f"ok: {SEARCH} 1.0.0: deprecated")) == (0, True)


def test_a_binary_proof_without_its_checkpoint_is_missing_input(
    checked: Checked, proofs: Proofs
) -> None:
    status, out, err = checked(proof=proofs.binary)
    assert (status, out, code_of(err)) == (1, "", "missing_input")


def test_a_proof_read_from_standard_input_verifies(
    checked: Checked, proofs: Proofs, monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(proofs.json[SEARCH].read_bytes()))
    monkeypatch.setattr(sys, "stdin", stdin)
    status, out, _ = checked(proof="-")
    assert (status, out.startswith(f"ok: {SEARCH} 1.0.0: deprecated")) == (0, True)


def test_a_proof_about_another_tool_is_bad_map_proof(checked: Checked, proofs: Proofs) -> None:
    status, out, err = checked(tool=GONE, proof=proofs.json[SEARCH])
    assert (status, out, code_of(err)) == (1, "", "bad_map_proof")


@pytest.mark.parametrize("at", [-40, -1, 3, 20])
def test_a_tampered_binary_proof_is_refused(checked: Checked, proofs: Proofs, at: int) -> None:
    data = bytearray(proofs.binary.read_bytes())
    data[at] ^= 0x01
    tampered = proofs.file("tampered.bin", bytes(data))
    status, out, err = checked("--checkpoint", proofs.checkpoint, proof=tampered)
    assert (status, out) == (1, "")
    assert code_of(err) in {"bad_map_proof", "malformed_map_proof", "malformed_map_record"}


def test_a_checkpoint_not_signed_by_the_log_key_is_refused(checked: Checked) -> None:
    other = Signer.generate("status.test/log").verifier().vkey()
    status, out, err = checked("--log-key", other, log_key=False)
    assert (status, out) == (1, "")
    assert err.startswith("deplog audit status: ")


def test_a_json_proof_made_at_another_checkpoint_than_the_one_given_is_refused(
    checked: Checked, proofs: Proofs
) -> None:
    status, out, err = checked("--checkpoint", proofs.checkpoint, proof=proofs.earlier)
    assert (status, out, code_of(err)) == (1, "", "map_checkpoint_mismatch")


def test_a_witness_policy_met_adds_its_quorum_and_cosigners(
    checked: Checked, proofs: Proofs
) -> None:
    note, policy = cosigned_with_policy(proofs, T)
    status, out, _ = checked("--policy", policy, "--checkpoint", note, log_key=False)
    lines = out.splitlines()
    assert status == 0
    assert lines[1].endswith("; quorum met at 2026-01-01T00:00:00Z")
    assert lines[2] == "  cosigned by w.witness.example at 2026-01-01T00:00:00Z"


def test_a_witness_policy_not_met_is_refused(checked: Checked, proofs: Proofs) -> None:
    _, policy = cosigned_with_policy(proofs, T)  # the served note carries no such cosignature
    status, out, err = checked("--policy", policy, log_key=False)
    assert (status, out, code_of(err)) == (1, "", "quorum_not_met")


def test_neither_log_key_nor_policy_is_missing_input(checked: Checked) -> None:
    status, _, err = checked(log_key=False)
    assert (status, code_of(err)) == (1, "missing_input")


@pytest.mark.parametrize(
    ("tool_id", "version"), [("org.acme/search", "1.0.0"), (SEARCH, "1.0"), (SEARCH, "v1.0.0")]
)
def test_a_tool_id_or_version_that_is_not_one_exits_unknown(
    checked: Checked, proofs: Proofs, tool_id: str, version: str
) -> None:
    status, out, err = checked(tool=tool_id, version=version, proof=proofs.json[SEARCH])
    assert (status, out) == (7, "")
    assert err.startswith("deplog audit status: unknown: bad_")


def test_a_proof_file_over_the_bound_is_refused_unread(
    checked: Checked, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit, "MAX_MAP_PROOF_FILE", 100)
    status, _, err = checked()
    assert (status, code_of(err)) == (1, "file_too_large")


def test_a_proof_file_that_is_not_there_names_it(checked: Checked, proofs: Proofs) -> None:
    missing = proofs.dir / "nope.json"
    status, _, err = checked(proof=missing)
    assert status != 0
    assert str(missing) in err and "Traceback" not in err


def test_a_quorum_cosigned_within_max_age_is_fresh(checked: Checked, proofs: Proofs) -> None:
    note, policy = cosigned_with_policy(proofs, int(time.time()) - 10)
    flags = ("--policy", policy, "--checkpoint", note, "--max-age", "300")
    status, out, _ = checked(*flags, log_key=False)
    assert (status, out.startswith(f"ok: {SEARCH} 1.0.0: deprecated")) == (0, True)


def test_a_quorum_cosigned_longer_ago_than_max_age_is_stale(
    checked: Checked, proofs: Proofs
) -> None:
    note, policy = cosigned_with_policy(proofs, int(time.time()) - 3600)
    flags = ("--policy", policy, "--checkpoint", note, "--max-age", "300")
    status, out, err = checked(*flags, log_key=False)
    assert (status, out) == (6, "")
    assert err.startswith("deplog audit status: stale: stale_checkpoint")


def test_max_age_under_a_policy_without_witnesses_is_stale(
    checked: Checked, proofs: Proofs
) -> None:
    note, policy = cosigned_with_policy(proofs, int(time.time()), quorum="none")
    flags = ("--policy", policy, "--checkpoint", note, "--max-age", "300")
    status, _, err = checked(*flags, log_key=False)
    assert (status, err.startswith("deplog audit status: stale: stale_checkpoint")) == (6, True)


def test_max_age_without_a_policy_is_a_usage_error(checked: Checked) -> None:
    status, _, err = checked("--max-age", "300")
    assert (status, "--max-age needs --policy" in err) == (2, True)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.binary(max_size=40).map(lambda tail: b"\x01" + tail),
        st.text(max_size=200).map(lambda text: ("{" + text).encode()),
    )
)
def test_any_bytes_as_a_proof_are_refused_in_one_line(
    checked: Checked, proofs: Proofs, data: bytes
) -> None:
    hostile = proofs.file("hostile", data)
    status, out, err = checked("--checkpoint", proofs.checkpoint, proof=hostile)
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and err.startswith("deplog audit status: ")


def test_a_json_proof_reformatted_by_a_json_tool_still_verifies(
    checked: Checked, proofs: Proofs
) -> None:
    """An agent takes the proof out of ``_meta["dev.deplog/proof"]`` with a JSON tool, which
    re-indents it and may reorder its members: the proof is its values, not its bytes."""
    document = json.loads(proofs.json[SEARCH].read_bytes())
    pretty = json.dumps(dict(reversed(document.items())), indent=2).encode()
    status, out, _ = checked(proof=proofs.file("pretty.json", pretty))
    assert (status, out.startswith(f"ok: {SEARCH} 1.0.0: deprecated")) == (0, True)
