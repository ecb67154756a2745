"""``deplog audit checkpoint --policy``: a witness policy checked offline, on real files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from deplog.client.cli.main import main
from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.cosignature import cosign, cosigner
from deplog.client.tlog.note import Signer, add_signature_lines

ORIGIN = "cli.deplog.example/log"
T1 = 1_767_225_600  # 2026-01-01T00:00:00Z
T2 = 1_767_225_700  # 2026-01-01T00:01:40Z


@dataclass
class Files:
    """A checkpoint cosigned by witnesses a and b (not c), and the keys to write policies with."""

    dir: Path
    log: Signer
    witnesses: list[Signer]
    checkpoint: Path

    def policy(self, text: str) -> Path:
        path = self.dir / "policy"
        path.write_text(text)
        return path

    def two_of_three(self) -> Path:
        lines = [f"log {self.log.verifier().vkey()}"]
        lines += [f"witness {w.name} {w.verifier().vkey()}" for w in self.witnesses]
        names = " ".join(w.name for w in self.witnesses)
        return self.policy("\n".join([*lines, f"group q 2 {names}", "quorum q", ""]))


@pytest.fixture
def files(tmp_path: Path) -> Files:
    log = Signer.generate(ORIGIN)
    witnesses = [cosigner(Signer.generate(f"{n}.witness.example")) for n in "abc"]
    checkpoint = Checkpoint(ORIGIN, 7, bytes(range(32)))
    text = checkpoint.to_text()
    note = add_signature_lines(
        sign_checkpoint(checkpoint, log),
        cosign(text, witnesses[0], T2),
        cosign(text, witnesses[1], T1),
    )
    path = tmp_path / "checkpoint"
    path.write_bytes(note)
    return Files(tmp_path, log, witnesses, path)


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    status = main(["audit", "checkpoint", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def test_policy_met_prints_origin_size_cosigners_and_quorum_time(
    files: Files, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(capsys, "--policy", files.two_of_three(), files.checkpoint)
    assert (status, err) == (0, "")
    first, *cosigned = out.splitlines()
    assert first.startswith(f"ok: checkpoint {ORIGIN} size 7 root ")
    assert first.endswith("; quorum met at 2026-01-01T00:00:00Z")
    assert sorted(cosigned) == [
        "  cosigned by a.witness.example at 2026-01-01T00:01:40Z",
        "  cosigned by b.witness.example at 2026-01-01T00:00:00Z",
    ]


def test_policy_not_met_exits_1_with_the_code(
    files: Files, capsys: pytest.CaptureFixture[str]
) -> None:
    c = files.witnesses[2]
    policy = files.policy(
        f"log {files.log.verifier().vkey()}\nwitness c {c.verifier().vkey()}\nquorum c\n"
    )
    status, out, err = run(capsys, "--policy", policy, files.checkpoint)
    assert (status, out) == (1, "")
    assert err == "deplog audit checkpoint: quorum_not_met: the witness quorum has not cosigned\n"


def test_checkpoint_of_a_log_missing_from_the_policy_is_log_not_in_policy(
    files: Files, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = files.policy("quorum none\n")
    status, _, err = run(capsys, "--policy", policy, files.checkpoint)
    assert status == 1
    assert err.startswith("deplog audit checkpoint: log_not_in_policy")


def test_log_key_supplies_the_log_of_a_policy_without_log_lines(
    files: Files, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = files.dir / "log.pub"
    key_file.write_text(files.log.verifier().vkey() + "\n")
    policy = files.policy("quorum none\n")
    status, out, _ = run(capsys, "--policy", policy, "--log-key", key_file, files.checkpoint)
    assert status == 0
    assert out.splitlines()[0].endswith("; quorum none required")


def test_malformed_policy_names_the_line(files: Files, capsys: pytest.CaptureFixture[str]) -> None:
    policy = files.policy("# fine\nquorum nobody\n")
    status, _, err = run(capsys, "--policy", policy, files.checkpoint)
    assert status == 1
    assert err == (
        "deplog audit checkpoint: malformed_policy: "
        "line 2: quorum is not defined on an earlier line\n"
    )


def test_without_policy_or_log_key_the_command_refuses(
    files: Files, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, files.checkpoint)
    assert status == 1
    assert err.startswith("deplog audit checkpoint: missing_input")


def test_log_key_alone_still_checks_only_the_log_signature(
    files: Files, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "--log-key", files.log.verifier().vkey(), files.checkpoint)
    assert status == 0
    assert out.startswith(f"ok: checkpoint {ORIGIN} size 7 root ")
    assert "quorum" not in out


# --- ML-DSA-44 and tree-lines witnesses, in checkpoints and in receipts ---------------

MAP_LINE = "deplog-map/v1 " + "A" * 43 + "="


@dataclass
class Mixed:
    """A one-leaf log whose checkpoint carries a map line and is cosigned by an Ed25519
    witness (full body), a tree-lines Ed25519 witness (three lines) and an ML-DSA-44 one."""

    policy: Path
    checkpoint: Path
    receipt: Path
    leaf: Path
    log: Signer


@pytest.fixture
def mixed(tmp_path: Path) -> Mixed:
    from deplog.client.tlog.note import NoteSignature, cosigned_message
    from deplog.client.tlog.proofs import leaf_hash
    from deplog.client.tlog.receipt import format_receipt
    from tests.builders import make_envelope, notice_leaf

    log = Signer.generate(ORIGIN)
    full = cosigner(Signer.generate("full.witness.example"))
    lines = cosigner(Signer.generate("lite.witness.example"))
    pq = Signer.generate("pq.witness.example", 0x06)
    leaf = notice_leaf(make_envelope(Signer.generate("acme-key"), 1))
    checkpoint = Checkpoint(ORIGIN, 1, leaf_hash(leaf), (MAP_LINE,))
    text = checkpoint.to_text()
    three = "".join(line + "\n" for line in text.split("\n")[:3]).encode()
    lite = NoteSignature(
        lines.name,
        lines.key_id,
        T1.to_bytes(8, "big") + lines.sign(cosigned_message(three, T1)),
    )
    note = add_signature_lines(
        sign_checkpoint(checkpoint, log), cosign(text, full, T2), lite, cosign(text, pq, T1)
    )
    (tmp_path / "checkpoint").write_bytes(note)
    (tmp_path / "receipt").write_bytes(format_receipt(0, [], note))
    (tmp_path / "leaf").write_bytes(leaf)
    policy = "\n".join(
        [
            f"log {log.verifier().vkey()}",
            f"witness full {full.verifier().vkey()}",
            f"witness lite {lines.verifier().vkey()}",
            "#deplog: tree-lines lite",
            f"witness pq {pq.verifier().vkey()}",
            "group q all full lite pq",
            "quorum q",
            "",
        ]
    )
    (tmp_path / "policy").write_text(policy)
    return Mixed(
        tmp_path / "policy", tmp_path / "checkpoint", tmp_path / "receipt", tmp_path / "leaf", log
    )


EXPECTED_COSIGNERS = [
    "  cosigned by full.witness.example at 2026-01-01T00:01:40Z",
    "  cosigned by lite.witness.example at 2026-01-01T00:00:00Z (ed25519, tree lines only)",
    "  cosigned by pq.witness.example at 2026-01-01T00:00:00Z (ml-dsa-44, tree lines only)",
]


def test_a_mixed_policy_names_each_cosignatures_type_and_statement(
    mixed: Mixed, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(capsys, "--policy", mixed.policy, mixed.checkpoint)
    assert (status, err) == (0, "")
    first, *cosigned = out.splitlines()
    assert first.endswith("; quorum met at 2026-01-01T00:00:00Z")
    assert sorted(cosigned) == EXPECTED_COSIGNERS
    status, out, _ = run(capsys, "--policy", mixed.policy, mixed.checkpoint, "--json")
    shown = {c["name"]: (c["algorithm"], c["statement"]) for c in json.loads(out)["cosignatures"]}
    assert shown == {
        "full.witness.example": ("ed25519", "full_body"),
        "lite.witness.example": ("ed25519", "tree_lines"),
        "pq.witness.example": ("ml-dsa-44", "tree_lines"),
    }


def test_without_the_tree_lines_line_the_three_line_cosignature_is_refused(
    mixed: Mixed, capsys: pytest.CaptureFixture[str]
) -> None:
    text = mixed.policy.read_text().replace("#deplog: tree-lines lite\n", "")
    mixed.policy.write_text(text)
    status, out, err = run(capsys, "--policy", mixed.policy, mixed.checkpoint)
    assert (status, out) == (1, "")
    assert err.startswith("deplog audit checkpoint: bad_cosignature")
    receipt_args = ["--policy", str(mixed.policy), str(mixed.receipt), "--leaf", str(mixed.leaf)]
    assert main(["verify-receipt", *receipt_args]) == 1
    assert "bad_cosignature" in capsys.readouterr().err


def test_receipts_verify_against_a_mixed_policy(
    mixed: Mixed, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["verify-receipt", "--policy", str(mixed.policy), str(mixed.receipt)]
    assert main([*args, "--leaf", str(mixed.leaf)]) == 0
    first, *cosigned = capsys.readouterr().out.splitlines()
    assert first == f"ok: entry 0 is in {ORIGIN} at tree size 1; quorum met at 2026-01-01T00:00:00Z"
    assert sorted(cosigned) == EXPECTED_COSIGNERS
    audit = ["audit", "receipt", str(mixed.receipt), "--leaf", str(mixed.leaf), "--json"]
    assert main([*audit, "--policy", str(mixed.policy)]) == 0
    shape = json.loads(capsys.readouterr().out)
    assert shape["quorum_met_at"] == "2026-01-01T00:00:00Z" and len(shape["cosignatures"]) == 3
    # The log key alone still checks the log signature and the proof only.
    key = mixed.log.verifier().vkey()
    assert main(["verify-receipt", "--log-key", key, *args[3:], "--leaf", str(mixed.leaf)]) == 0
    capsys.readouterr()
    assert main(["verify-receipt", str(mixed.receipt), "--leaf", str(mixed.leaf)]) == 2
    assert "--policy" in capsys.readouterr().err
