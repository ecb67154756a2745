"""Fuzz cosignature extraction: ``client.cosignature.cosignatures`` on any note.

Invariants: only DeplogError escapes; every cosignature returned is by one of
the given witness keys (Ed25519, one of them accepted in the tree-lines form, and
ML-DSA-44), at most one per key, with a timestamp below 2^63, and a tree-lines
statement only from the tree-lines key or the ML-DSA-44 one.

    python bench/fuzz/fuzz_cosignature.py -atheris_runs=100000
"""

from __future__ import annotations

import atheris
from _fuzzlib import derive, main

with atheris.instrument_imports(include=["deplog.client"]):
    from deplog.client.errors import DeplogError
    from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
    from deplog.client.tlog.cosignature import cosign, cosignatures, cosigner
    from deplog.client.tlog.note import Signer, add_signature_lines

ORIGIN = "example.org/log"
LOG = Signer.from_seed(ORIGIN, bytes(range(32)))
W1 = cosigner(Signer.from_seed("witness.example/w1", bytes([1]) * 32))
W2 = cosigner(Signer.from_seed("witness.example/w2", bytes([2]) * 32))
W3 = Signer.from_seed("witness.example/w3", bytes([3]) * 32, 0x06)
VERIFIERS = [W1.verifier(), W2.verifier(), W3.verifier()]
TREE_LINES = [W2.verifier()]
_CHECKPOINT = Checkpoint(ORIGIN, 10, bytes(range(32)), ("deplog-map/v1 " + "A" * 43 + "=",))
_TEXT = _CHECKPOINT.to_text()
_NOTE = sign_checkpoint(_CHECKPOINT, LOG)
SAMPLES = [
    _NOTE,
    add_signature_lines(_NOTE, cosign(_TEXT, W1, 1_700_000_000)),
    add_signature_lines(_NOTE, cosign(_TEXT, W1, 0), cosign(_TEXT, W2, 2**63 - 1)),
    add_signature_lines(_NOTE, cosign(_TEXT, W3, 1_700_000_000)),
]


def test_one_input(data: bytes) -> None:
    note = derive(data, SAMPLES)
    try:
        found = cosignatures(note, VERIFIERS, tree_lines=TREE_LINES)
    except DeplogError:
        return
    keys = [(c.name, c.key_id) for c in found]
    assert len(set(keys)) == len(keys)
    assert set(keys) <= {(v.name, v.key_id) for v in VERIFIERS}
    assert all(0 <= c.timestamp < 2**63 for c in found)
    lenient = {W2.name, W3.name}
    assert all(c.statement == "full_body" or c.name in lenient for c in found)


if __name__ == "__main__":
    main(test_one_input)
