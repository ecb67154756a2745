"""Fuzz cosignature extraction: ``client.cosignature.cosignatures`` on any note.

Invariants: only DeplogError escapes; every cosignature returned is by one of
the given witness keys, at most one per key, with a timestamp below 2^63.

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
VERIFIERS = [W1.verifier(), W2.verifier()]
_CHECKPOINT = Checkpoint(ORIGIN, 10, bytes(range(32)))
_TEXT = _CHECKPOINT.to_text()
_NOTE = sign_checkpoint(_CHECKPOINT, LOG)
SAMPLES = [
    _NOTE,
    add_signature_lines(_NOTE, cosign(_TEXT, W1, 1_700_000_000)),
    add_signature_lines(_NOTE, cosign(_TEXT, W1, 0), cosign(_TEXT, W2, 2**63 - 1)),
]


def test_one_input(data: bytes) -> None:
    note = derive(data, SAMPLES)
    try:
        found = cosignatures(note, VERIFIERS)
    except DeplogError:
        return
    keys = [(c.name, c.key_id) for c in found]
    assert len(set(keys)) == len(keys)
    assert set(keys) <= {(v.name, v.key_id) for v in VERIFIERS}
    assert all(0 <= c.timestamp < 2**63 for c in found)


if __name__ == "__main__":
    main(test_one_input)
