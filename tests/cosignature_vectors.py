"""Generates tests/vectors/tlog-cosignature-v1.1.json: cosignature test vectors.

Run ``python -m tests.cosignature_vectors`` to rewrite the file; tests/test_cosignature.py
checks every deterministic field against what this module computes, and the message
bytes against a layout assembled field by field from the spec text (tlog-cosignature
v1.1, "ML-DSA-44 signed message"), independently of ``client.tlog.note``.

Keys come from fixed seeds. Ed25519 is deterministic, so its lines are byte-stable.
ML-DSA-44 signing is hedged (randomized): a rewrite keeps the stored ML-DSA-44 line if
it still verifies and makes a new one otherwise, and the test checks that the stored
line verifies, not that it is reproduced.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.cosignature import cosign, tree_lines_text
from deplog.client.tlog.note import (
    SIG_TYPE_COSIGNATURE_MLDSA44,
    SIG_TYPE_COSIGNATURE_V1,
    NoteSignature,
    Signer,
    add_signature_lines,
    cosigned_message,
    encode_base64,
    parse_note,
    subtree_cosigned_message,
)

PATH = Path(__file__).resolve().parent / "vectors" / "tlog-cosignature-v1.1.json"

LOG_SEED = bytes(range(32))
ED25519_SEED = bytes(range(32, 64))
MLDSA44_SEED = bytes(range(64, 96))
LOG_NAME = "example.org/deplog"
ED25519_NAME = "witness.example/ed25519"
MLDSA44_NAME = "witness.example/ml-dsa-44"
TIMESTAMP = 1_767_225_600  # 2026-01-01T00:00:00Z
CHECKPOINT = Checkpoint(
    LOG_NAME,
    20852163,
    bytes.fromhex("0ac5186a91863e8e1d90c8080142a89bf5da8e3ee1d9f07630f0378f68f1ab62"),
    ("deplog-map/v1 " + encode_base64(bytes(range(32))),),
)


def log_signer() -> Signer:
    return Signer.from_seed(LOG_NAME, LOG_SEED)


def ed25519_signer() -> Signer:
    return Signer.from_seed(ED25519_NAME, ED25519_SEED, SIG_TYPE_COSIGNATURE_V1)


def mldsa44_signer() -> Signer:
    return Signer.from_seed(MLDSA44_NAME, MLDSA44_SEED, SIG_TYPE_COSIGNATURE_MLDSA44)


def tree_lines_line(signer: Signer, text: str, timestamp: int) -> NoteSignature:
    """An Ed25519 cosignature over the first three lines only (litewitness's form)."""
    prefix = tree_lines_text(text.encode())
    assert prefix is not None
    signature = signer.sign(cosigned_message(prefix, timestamp))
    return NoteSignature(signer.name, signer.key_id, timestamp.to_bytes(8, "big") + signature)


def message_fields(name: str, timestamp: int, checkpoint: Checkpoint) -> list[list[str]]:
    """The ``cosigned_message`` of a checkpoint, field by field, as (field, hex) pairs."""
    origin = checkpoint.origin.encode()
    return [
        ["label", b"subtree/v1\n\0".hex()],
        ["cosigner_name", (bytes([len(name.encode())]) + name.encode()).hex()],
        ["timestamp", timestamp.to_bytes(8, "big").hex()],
        ["log_origin", (bytes([len(origin)]) + origin).hex()],
        ["start", (0).to_bytes(8, "big").hex()],
        ["end", checkpoint.size.to_bytes(8, "big").hex()],
        ["hash", checkpoint.root_hash.hex()],
    ]


def generate(previous: dict[str, Any] | None = None) -> dict[str, Any]:
    text = CHECKPOINT.to_text()
    note = sign_checkpoint(CHECKPOINT, log_signer())
    ed, ml = ed25519_signer(), mldsa44_signer()
    full = cosign(text, ed, TIMESTAMP)
    lines = tree_lines_line(ed, text, TIMESTAMP)
    message = subtree_cosigned_message(
        ml.name, TIMESTAMP, CHECKPOINT.origin.encode(), 0, CHECKPOINT.size, CHECKPOINT.root_hash
    )
    ml_line = None
    if previous is not None:
        stored = previous["ml_dsa_44"]["signature_line"]
        _, (candidate,) = parse_note(text.encode() + b"\n" + stored.encode())
        if ml.verifier().verify_note_signature(text.encode(), candidate.signature):
            ml_line = candidate
    if ml_line is None:
        ml_line = cosign(text, ml, TIMESTAMP)
    return {
        "description": "C2SP tlog-cosignature v1.1 cosignatures on one checkpoint that "
        "carries a deplog-map/v1 extension line: Ed25519 cosignature/v1 over the whole "
        "body and over the first three lines only (litewitness's form, accepted for a "
        "witness marked tree-lines), and ML-DSA-44 over the cosigned_message. Seeds are "
        "hex; ML-DSA-44 signing is randomized, so its line is checked by verification.",
        "log": {"seed": LOG_SEED.hex(), "vkey": log_signer().verifier().vkey()},
        "checkpoint": text,
        "signed_note": note.decode(),
        "timestamp": TIMESTAMP,
        "ed25519": {
            "seed": ED25519_SEED.hex(),
            "vkey": ed.verifier().vkey(),
            "skey": ed.skey(),
            "full_body_message": cosigned_message(text.encode(), TIMESTAMP).decode(),
            "full_body_line": full.line(),
            "tree_lines_message": cosigned_message(
                tree_lines_text(text.encode()) or b"", TIMESTAMP
            ).decode(),
            "tree_lines_line": lines.line(),
        },
        "ml_dsa_44": {
            "seed": MLDSA44_SEED.hex(),
            "public_key": ml.public_key.hex(),
            "key_id": ml.key_id.hex(),
            "vkey": ml.verifier().vkey(),
            "skey": ml.skey(),
            "message_fields": message_fields(ml.name, TIMESTAMP, CHECKPOINT),
            "message": message.hex(),
            "signature_line": ml_line.line(),
            "cosigned_note": add_signature_lines(note, ml_line, full).decode(),
        },
    }


def render(vectors: dict[str, Any]) -> str:
    return json.dumps(vectors, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    old = json.loads(PATH.read_text()) if PATH.exists() else None
    PATH.write_text(render(generate(old)))
    sys.exit(0)
